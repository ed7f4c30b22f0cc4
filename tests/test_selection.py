"""What every command measures, chosen once (perfgate.selection): the config, the scenarios on
--engine, the runner profile, the history and whether it takes writes. Each mistake is refused
with the field and the fix, the same for every command, before anything is launched."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.config import HISTORY_NAME_MAX
from perfgate.devices import PROFILE_FIELD
from perfgate.errors import ConfigError, ExitCode
from perfgate.hardware import GpuInfo
from perfgate.pipeline import GatePlan
from perfgate.selection import selection_from
from perfgate.spec.options import GateOptions

from .conftest import TINY_SCENARIO, write_config
from .in_process import perfgate_main

# tiny, and a copy of it named second.
TWO_SCENARIOS = TINY_SCENARIO + TINY_SCENARIO[TINY_SCENARIO.index("[scenarios.tiny]") :].replace(
    "scenarios.tiny", "scenarios.second"
)
H200 = GpuInfo(name="NVIDIA H200", driver="570.1", cuda="12.8", count=8)


def _options(config: Path, **fields: object) -> GateOptions:
    return GateOptions(config=str(config), **fields)  # type: ignore[arg-type]


def _unread() -> GpuInfo | None:
    raise AssertionError("the GPUs were read")


def test_the_selection_of_a_config(tmp_path: Path) -> None:
    config = write_config(tmp_path, TWO_SCENARIOS)
    chosen = selection_from(_options(config, scenarios=("second", "tiny")), writes=False)
    assert [s.name for s in chosen.scenarios] == ["second", "tiny"]  # in the order named
    assert chosen.scenario.name == "second" and chosen.root == tmp_path
    assert chosen.history_url == f"sqlite:///{tmp_path / 'history.db'}"
    assert chosen.baselines_dir == tmp_path / "baselines"
    defaults = selection_from(_options(config), writes=False)
    assert [s.name for s in defaults.scenarios] == ["tiny"]  # the config's default_scenarios


def test_an_unknown_scenario_names_the_ones_there_are(tmp_path: Path) -> None:
    config = write_config(tmp_path, TWO_SCENARIOS)
    with pytest.raises(ConfigError) as caught:
        selection_from(_options(config, scenarios=("tiny", "nope")), writes=False)
    assert str(caught.value) == f"{config}: unknown scenario 'nope'; choose one of: second, tiny"
    assert caught.value.exit_code == ExitCode.BAD_INPUT


def test_the_engine_applies_to_every_scenario_chosen(tmp_path: Path) -> None:
    config = write_config(tmp_path, TWO_SCENARIOS)
    chosen = selection_from(
        _options(config, scenarios=("tiny", "second"), engine="sglang"), writes=False
    )
    assert [(s.name, s.engine) for s in chosen.scenarios] == [
        ("tiny", "sglang"),
        ("second", "sglang"),
    ]
    plain = selection_from(_options(config), writes=False)
    assert plain.scenario.engine == "embedded"


def test_a_command_that_measures_one_scenario_must_name_it(tmp_path: Path) -> None:
    config = write_config(tmp_path, TWO_SCENARIOS)
    one = "bisect measures one scenario"
    for names in ((), ("tiny", "second")):
        with pytest.raises(ConfigError) as caught:
            selection_from(_options(config, scenarios=names), writes=False, one=one)
        assert str(caught.value) == f"--scenario: {one}; name it: --scenario NAME"
    chosen = selection_from(_options(config, scenarios=("second",)), writes=False, one=one)
    assert chosen.scenario.name == "second"


def test_a_command_may_pick_its_scenario_from_the_config(tmp_path: Path) -> None:
    config = write_config(tmp_path, TWO_SCENARIOS)
    chosen = selection_from(
        _options(config, scenarios=("tiny",), engine="sglang"),
        writes=False,
        names=lambda loaded: sorted(loaded.scenarios)[:1],
    )
    assert [(s.name, s.engine) for s in chosen.scenarios] == [("second", "sglang")]


def test_a_profile_the_history_cannot_hold_fails_before_the_gpus_are_read(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path)
    with pytest.raises(ConfigError) as caught:
        selection_from(
            _options(config, profile="p" * (HISTORY_NAME_MAX + 1)), writes=False, detect=_unread
        )
    assert caught.value.field == PROFILE_FIELD
    assert caught.value.fix is not None and caught.value.fix.startswith("shorten it to ")


@pytest.mark.parametrize("profile", ["../../x", "a/b", "..", "a\\b", "x\ny"])
def test_a_profile_that_is_no_file_name_is_refused_before_anything_is_written(
    tmp_path: Path, profile: str
) -> None:
    """baselines/PROFILE/SCENARIO.json must lie in baselines/: `--profile ../../x` wrote a
    baseline two folders above it."""
    config = write_config(tmp_path)
    with pytest.raises(ConfigError, match="is not a name a baseline file can take") as caught:
        selection_from(_options(config, profile=profile), writes=False, detect=_unread)
    assert caught.value.field == PROFILE_FIELD


def test_the_profile_is_named_from_the_gpus_when_asked_for(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    given = selection_from(_options(config, profile="laptop"), writes=False, detect=_unread)
    assert given.profile == "laptop"
    reads: list[int] = []

    def detect() -> GpuInfo:
        reads.append(1)
        return H200

    named = selection_from(_options(config), writes=False, detect=detect)
    assert reads == []  # a command that names no baseline or series reads no GPU
    assert named.profile == named.profile == "h200x8" and reads == [1]


def test_a_history_that_cannot_be_written_fails_only_a_command_that_records(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path)
    (tmp_path / "file").write_text("not a folder")
    url = f"sqlite:///{tmp_path / 'file' / 'history.db'}"
    with pytest.raises(ConfigError) as caught:
        selection_from(_options(config, db=url), writes=True)
    assert str(caught.value).startswith(
        f"{tmp_path / 'file'}: is a file, so the history {tmp_path / 'file' / 'history.db'} "
        "cannot be created under it; move that file away"
    )
    assert "--db or PERFGATE_DB_URL" in str(caught.value)
    assert selection_from(_options(config, db=url), writes=False).history_url == url
    with pytest.raises(ConfigError):  # perfgate run and the pytest plugin: the gate's plan
        GatePlan(_options(config, db=url, profile="laptop"), cwd=tmp_path)


def test_a_relative_db_is_taken_from_the_folder_given(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    chosen = selection_from(_options(config, db="sqlite:///h.db"), writes=False, cwd=tmp_path)
    assert chosen.history_url == f"sqlite:///{tmp_path / 'h.db'}"
    plan = GatePlan(_options(config, db="sqlite:///h.db", profile="laptop"), cwd=tmp_path)
    assert plan.history_url == chosen.history_url and plan.profile == "laptop"
    assert plan.baselines_dir == tmp_path / "baselines"


@pytest.mark.parametrize(
    "command",
    [
        ("sweep", "--steps", "2,3"),
        ("plan",),
        ("bisect", "--scenario", "tiny", "--good", "HEAD~1", "--bad", "HEAD"),
    ],
    ids=lambda command: command[0],
)
def test_every_command_that_records_refuses_a_history_it_cannot_write(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    write_config(tmp_path)
    (tmp_path / "file").write_text("not a folder")
    db = f"sqlite:///{tmp_path / 'file' / 'history.db'}"
    result = perfgate_main(*command, "--db", db, "--profile", "laptop", cwd=tmp_path)
    assert result.returncode == 64, result
    assert "is a file, so the history" in result.stderr
    assert not (tmp_path / ".perfgate").exists()  # nothing launched, no run folder made


@pytest.mark.parametrize(
    "command",
    [
        ("sweep", "--steps", "2,3"),
        ("plan",),
        ("bisect", "--good", "HEAD~1", "--bad", "HEAD"),
        ("profile",),
        ("servers", "--dry-run"),
        ("doctor",),
    ],
    ids=lambda command: command[0],
)
def test_every_command_refuses_an_unknown_scenario_alike(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    config = write_config(tmp_path)
    env = {"PERFGATE_PROFILE": "laptop"}
    result = perfgate_main(*command, "--scenario", "nope", cwd=tmp_path, env=env)
    assert result.returncode == 64, result
    assert f"{config}: unknown scenario 'nope'" in result.stdout + result.stderr
    assert "choose one of: tiny" in result.stdout + result.stderr
