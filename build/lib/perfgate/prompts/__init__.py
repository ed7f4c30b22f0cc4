"""Prompt sets: named sets shipped with perfgate, or a user's file."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from perfgate.errors import ConfigError


def available_sets() -> list[str]:
    """Return the names of the prompt sets shipped with perfgate."""
    folder = resources.files(__package__)
    return sorted(
        p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")
    )


def load_prompt_set(
    name: str, *, file: str | Path | None = None, field: str | None = None
) -> tuple[str, ...]:
    """Load a shipped prompt set by name."""
    if name not in available_sets():
        raise ConfigError(
            f"unknown prompt set {name!r}",
            file=file,
            field=field,
            fix=f"use one of {', '.join(available_sets())}, a list, or prompts_file",
        )
    text = resources.files(__package__).joinpath(f"{name}.json").read_text("utf-8")
    return tuple(json.loads(text))


def load_prompt_file(path: Path) -> tuple[str, ...]:
    """Load prompts from a JSON list of strings, or a text file with one prompt per line."""
    try:
        text = path.read_text("utf-8")
    except OSError as error:
        raise ConfigError(
            f"cannot be read ({error.strerror})", file=path, fix="check the path"
        ) from None
    if path.suffix == ".json":
        try:
            prompts = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(
                f"is not valid JSON ({error})", file=path, fix="fix the syntax"
            ) from None
        if not isinstance(prompts, list) or not all(isinstance(p, str) and p for p in prompts):
            raise ConfigError(
                "must be a JSON list of non-empty strings", file=path, fix='write ["...", "..."]'
            )
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ConfigError("holds no prompt", file=path, fix="add at least one prompt")
    return tuple(prompts)
