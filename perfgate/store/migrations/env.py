"""Alembic's entry point for perfgate's history: migrate the connection perfgate hands over.

perfgate runs migrations itself (`perfgate.store.schema`), on a connection whose transaction
already holds the history's migration lock; this file only wires that connection in.
"""

from __future__ import annotations

from alembic import context

from perfgate.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("perfgate migrations run through `perfgate db upgrade`, not `alembic`")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying
)
with context.begin_transaction():
    context.run_migrations()
