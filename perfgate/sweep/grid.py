"""What a sweep measures: a grid of speculative settings under a matrix of environments. Pure.

A sweep takes one scenario and varies ``steps``, ``topk`` and ``draft_tokens`` under every
combination of the environment variables it lists (``NCCL_PROTO=LL,Simple`` ×
``NCCL_ALGO=Ring,Tree`` is four environment points). Within an environment point the grid
falls into *branches*: one per ``topk`` (and, for trees, per ``draft_tokens``), each running
its ``steps`` in ascending order, which is the order the early-stop rule reads them in
(perfgate.sweep.stop). With ``topk = 1`` a point's draft tokens are ``steps + 1``, as SGLang
requires; with ``topk > 1`` a tree whose ``steps * topk + 1`` is below its draft tokens
cannot fill them and is left out, as SGLang's ``bench_speculative.py`` leaves it out.

From the CLI (``--steps 1-10 --topk 1,2 --draft-tokens 4,8 --env NCCL_PROTO=LL,Simple``) or
from a ``[sweeps.NAME]`` table of the config (perfgate.spec.sweep).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfgate.env_names import is_env_name
from perfgate.errors import ConfigError
from perfgate.spec.sweep import SweepSpec, parse_int_list

# SweepSpec and parse_int_list live with the config's schema (perfgate.spec.sweep).
__all__ = [
    "MAX_POINTS",
    "EnvPoint",
    "Point",
    "SweepSpec",
    "branches",
    "env_points",
    "grid",
    "parse_env_flag",
    "parse_int_list",
]

MAX_POINTS = 1000  # a grid larger than this is a typo, not a plan

EnvPoint = tuple[tuple[str, str], ...]  # (variable, value) pairs, in the matrix's order


@dataclass(frozen=True)
class Point:
    """One speculative setting under one environment point."""

    env: EnvPoint
    steps: int
    topk: int
    draft_tokens: int

    @property
    def branch(self) -> tuple[EnvPoint, int, int | None]:
        """The points that differ from this one in steps only (a chain's draft tokens
        follow its steps)."""
        return (self.env, self.topk, self.draft_tokens if self.topk > 1 else None)

    def label(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env)
        text = f"steps={self.steps} topk={self.topk} draft_tokens={self.draft_tokens}"
        return f"{text} {env}" if env else text


def env_points(env: Mapping[str, Sequence[str]]) -> list[EnvPoint]:
    """Every combination of the environment matrix; one empty point without a matrix."""
    names = list(env)
    return [tuple(zip(names, values, strict=True)) for values in itertools.product(*env.values())]


def branches(spec: SweepSpec, env: EnvPoint) -> list[list[Point]]:
    """The branches of one environment point, each its steps in ascending order."""
    found = []
    for topk in spec.topk:
        if topk == 1:
            found.append([Point(env, s, 1, s + 1) for s in sorted(spec.steps)])
            continue
        for tokens in spec.draft_tokens:
            points = [Point(env, s, topk, tokens) for s in sorted(spec.steps)]
            points = [p for p in points if p.steps * topk + 1 >= tokens]
            if points:
                found.append(points)
    return found


def grid(spec: SweepSpec) -> list[tuple[EnvPoint, list[list[Point]]]]:
    """Per environment point, its branches; refuses a grid with nothing (or far too much) in it."""
    layout = [(env, branches(spec, env)) for env in env_points(spec.env)]
    count = sum(len(b) for _, found in layout for b in found)
    if count == 0:
        raise ConfigError(
            "the grid holds no setting",
            field=f"sweeps.{spec.name}",
            fix="a tree (topk > 1) needs draft tokens (--draft-tokens), each at most "
            "steps * topk + 1",
        )
    if count > MAX_POINTS:
        raise ConfigError(
            f"the grid holds {count} settings, more than {MAX_POINTS}",
            field=f"sweeps.{spec.name}",
            fix="sweep fewer values at once",
        )
    return layout


def parse_env_flag(text: str) -> tuple[str, tuple[str, ...]]:
    """Parse ``--env NAME=V1,V2`` into the variable and its values."""
    name, equals, values = text.partition("=")
    parsed = tuple(v for v in values.split(",") if v)
    if not equals or not is_env_name(name) or not parsed:
        raise ConfigError(
            f"{text!r} is not NAME=VALUE[,VALUE...]",
            field="--env",
            fix="write e.g. --env NCCL_PROTO=LL,Simple",
        )
    return name, parsed
