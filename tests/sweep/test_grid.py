"""The sweep's grid, its flags and its [sweeps.NAME] tables; every mistake names the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.config import load_config
from perfgate.errors import ConfigError
from perfgate.sweep.grid import (
    Point,
    SweepSpec,
    branches,
    env_points,
    grid,
    parse_env_flag,
    parse_int_list,
)

from ..conftest import TINY_SCENARIO, write_config


def test_chains_take_steps_plus_one_draft_tokens() -> None:
    spec = SweepSpec("s", "tiny", steps=(3, 1, 2))
    (chain,) = branches(spec, ())
    assert [(p.steps, p.topk, p.draft_tokens) for p in chain] == [(1, 1, 2), (2, 1, 3), (3, 1, 4)]


def test_trees_leave_out_what_they_cannot_fill() -> None:
    spec = SweepSpec("s", "tiny", steps=(1, 2, 3), topk=(1, 4), draft_tokens=(8, 12, 16))
    found = branches(spec, ())
    assert [p.branch for p in found[1]] == [((), 4, 8)] * 2  # steps 1 (1*4+1 = 5 < 8) is out
    assert [p.steps for p in found[1]] == [2, 3]
    assert [p.steps for p in found[2]] == [3]  # 12 tokens need 3 steps of topk 4; 16 more
    assert len(found) == 3


def test_the_environment_matrix_is_every_combination() -> None:
    points = env_points({"NCCL_PROTO": ("LL", "Simple"), "NCCL_ALGO": ("Ring", "Tree")})
    assert points == [
        (("NCCL_PROTO", "LL"), ("NCCL_ALGO", "Ring")),
        (("NCCL_PROTO", "LL"), ("NCCL_ALGO", "Tree")),
        (("NCCL_PROTO", "Simple"), ("NCCL_ALGO", "Ring")),
        (("NCCL_PROTO", "Simple"), ("NCCL_ALGO", "Tree")),
    ]
    assert env_points({}) == [()]
    spec = SweepSpec("s", "tiny", steps=(1, 2), env={"NCCL_PROTO": ("LL", "Simple")})
    assert [len(b[0]) for _, b in grid(spec)] == [2, 2]
    assert Point((("NCCL_PROTO", "LL"),), 2, 1, 3).label() == (
        "steps=2 topk=1 draft_tokens=3 NCCL_PROTO=LL"
    )


def test_an_empty_or_huge_grid_is_refused() -> None:
    with pytest.raises(ConfigError, match="no setting"):
        grid(SweepSpec("s", "tiny", steps=(1,), topk=(4,), draft_tokens=(64,)))
    with pytest.raises(ConfigError, match="more than"):
        grid(
            SweepSpec(
                "s",
                "tiny",
                steps=tuple(range(1, 101)),
                topk=(1, 2),
                draft_tokens=tuple(range(2, 12)),
            )
        )


@pytest.mark.parametrize(
    ("text", "values"), [("1-4", (1, 2, 3, 4)), ("1,2,4", (1, 2, 4)), ("1-3, 8, 2", (1, 2, 3, 8))]
)
def test_lists_and_ranges_parse(text: str, values: tuple[int, ...]) -> None:
    assert parse_int_list(text, "--steps") == values


@pytest.mark.parametrize("text", ["", "a", "0-3", "1-", "3,x", "1-1000000000", "1-600,601-1200"])
def test_bad_lists_name_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="--steps"):
        parse_int_list(text, "--steps")


def test_env_flags_parse_and_refuse() -> None:
    assert parse_env_flag("NCCL_PROTO=LL,Simple") == ("NCCL_PROTO", ("LL", "Simple"))
    for bad in ("NCCL_PROTO", "=LL", "NCCL PROTO=LL", "NCCL_PROTO="):
        with pytest.raises(ConfigError, match=r"--env: .*NAME=VALUE"):
            parse_env_flag(bad)


SWEEP = """
[sweeps.steps]
scenario = "tiny"
steps = "1-3"
topk = [1, 2]
draft_tokens = [4]
repeats = 2
early_stop = false
[sweeps.steps.env]
NCCL_PROTO = ["LL", "Simple"]
NCCL_ALGO = "Ring"
"""


def test_a_sweep_table_loads(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, TINY_SCENARIO + SWEEP))
    spec = config.sweeps["steps"]
    assert spec == SweepSpec(
        name="steps",
        scenario="tiny",
        steps=(1, 2, 3),
        topk=(1, 2),
        draft_tokens=(4,),
        env={"NCCL_PROTO": ("LL", "Simple"), "NCCL_ALGO": ("Ring",)},
        repeats=2,
        early_stop=False,
    )


def test_the_repository_config_has_its_sweeps() -> None:
    config = load_config(Path(__file__).resolve().parents[2] / "perfgate.toml")
    assert config.sweeps["large-steps"].steps == tuple(range(1, 11))
    assert config.sweeps["large-steps"].scenario == "embedded-large-gpu"
    assert "embedded-large-gpu" not in config.default_scenarios


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ('scenario = "nope"\nsteps = [1]', "sweeps.bad.scenario"),
        ('scenario = "tiny"', "sweeps.bad.steps"),
        ('scenario = "tiny"\nsteps = [0, 1]', "sweeps.bad.steps"),
        ('scenario = "tiny"\nsteps = "1-x"', "sweeps.bad.steps"),
        ('scenario = "tiny"\nsteps = [1]\nrepeats = 0', "sweeps.bad.repeats"),
        ('scenario = "tiny"\nsteps = [1]\nearly_stop = "yes"', "sweeps.bad.early_stop"),
        ('scenario = "tiny"\nsteps = [1]\nenv = {A = [1]}', "sweeps.bad.env.A"),
        ('scenario = "tiny"\nsteps = [1]\nstep = [2]', "sweeps.bad"),
    ],
)
def test_a_bad_sweep_table_names_its_field(tmp_path: Path, table: str, field: str) -> None:
    path = write_config(tmp_path, TINY_SCENARIO + "\n[sweeps.bad]\n" + table + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.field == field and caught.value.file == str(path)


def test_pyproject_holds_sweeps_too(tmp_path: Path) -> None:
    body = TINY_SCENARIO.replace("[perfgate]", "[tool.perfgate]").replace(
        "[scenarios.", "[tool.perfgate.scenarios."
    )
    body += '\n[tool.perfgate.sweeps.s]\nscenario = "tiny"\nsteps = [1, 2]\n'
    (tmp_path / "pyproject.toml").write_text(body)
    assert load_config(tmp_path / "pyproject.toml").sweeps["s"].steps == (1, 2)


def test_a_sweep_may_not_take_a_scenario_s_name(tmp_path: Path) -> None:
    path = write_config(
        tmp_path, TINY_SCENARIO + '\n[sweeps.tiny]\nscenario = "tiny"\nsteps = [1]\n'
    )
    with pytest.raises(ConfigError, match=r"sweeps\.tiny: has a scenario's name"):
        load_config(path)
