"""Loading perfgate.toml: every mistake names the file, the field and a fix."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.config import find_config, load_config
from perfgate.engines.embedded.loading import draft_config, target_config
from perfgate.engines.embedded.model_dirs import resolve_model
from perfgate.engines.embedded.parallel import check_split
from perfgate.errors import ConfigError, ExitCode

from .conftest import TINY_SCENARIO, write_config
from .in_process import perfgate_main


def test_loads_the_repository_config() -> None:
    config = load_config(Path(__file__).resolve().parent.parent / "perfgate.toml")
    assert config.default_scenarios == ("embedded-default",)
    default = config.scenarios["embedded-default"]
    assert (default.engine, default.steps, default.topk, default.draft_tokens) == (
        "embedded",
        3,
        1,
        4,
    )
    assert len(default.prompts) == 8
    tp8 = config.scenarios["llama33-70b-eagle3-tp8"]
    assert tp8.tp == 8 and tp8.env["NCCL_PROTO"] == "LL"
    # Every shipped scenario can pass: only the one with simulated acceptance (seeded weights)
    # reports its equivalence instead of gating it; the GPU scenario gates it.
    reported = [s.name for s in config.scenarios.values() if s.equivalence == "report"]
    assert reported == ["embedded-large-tp2"]
    assert config.scenarios["embedded-large-gpu"].spec_extra_args == ()


def test_the_eight_gpu_scenario_is_the_gpu_scenario_split_over_eight_ranks() -> None:
    config = load_config(Path(__file__).resolve().parent.parent / "perfgate.toml")
    one, eight = config.scenarios["embedded-large-gpu"], config.scenarios["embedded-large-tp8"]
    assert (one.tp, eight.tp) == (1, 8)
    # Trained weights and real acceptance: the same model, draft, prompts, gate and tolerances.
    assert replace(eight, name=one.name, tp=1, startup_timeout_s=one.startup_timeout_s) == one
    # Every attention and MLP block of the target and the draft splits evenly over 8 ranks.
    target = target_config(resolve_model(eight.model))
    draft = draft_config(resolve_model(str(eight.draft)))
    for sizes in (target, draft):
        check_split(eight.tp, sizes.n_head, sizes.ffn_dim, "--model-path")
        assert sizes.n_head // eight.tp == 2


def test_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path))
    assert config.baselines_dir == tmp_path / "baselines"
    assert config.history_url == f"sqlite:///{tmp_path / 'history.db'}"


def test_finds_the_config_from_a_subfolder(tmp_path: Path) -> None:
    write_config(tmp_path)
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert find_config(tmp_path / "a" / "b") == tmp_path / "perfgate.toml"


def test_reads_tool_perfgate_from_pyproject(tmp_path: Path) -> None:
    body = TINY_SCENARIO.replace("[perfgate]", "[tool.perfgate]").replace(
        "[scenarios.", "[tool.perfgate.scenarios."
    )
    (tmp_path / "pyproject.toml").write_text(body)
    assert "tiny" in load_config(find_config(tmp_path)).scenarios


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            ("steps = 3", "steps = 0"),
            "scenarios.tiny.steps: must be an integer from 1 to 2147483647, not 0",
        ),
        (
            ("steps = 3", 'steps = "3"'),
            "scenarios.tiny.steps: must be an integer from 1 to 2147483647, not '3'",
        ),
        (
            ("steps = 3", "steps = 99999999999999999999"),
            "scenarios.tiny.steps: must be an integer from 1 to 2147483647",
        ),
        (
            ("repeats = 3", "repeats = 3\ngated = []"),
            "scenarios.tiny.gated: lists no metric: the gate would judge nothing",
        ),
        (
            ("output_tok_s = 0.6", "output_tok_s = nan"),
            "scenarios.tiny.tolerances.output_tok_s: must be a finite number > 0, not nan",
        ),
        (
            ("startup_timeout_s = 60", "startup_timeout_s = inf"),
            "scenarios.tiny.startup_timeout_s: must be a finite number > 0, not inf",
        ),
        (
            ('engine = "embedded"', 'engine = "vllm"'),
            "scenarios.tiny.engine: unknown engine 'vllm'",
        ),
        (("repeats = 3", "repeats = 3\nrepeat = 2"), "scenarios.tiny: unknown key 'repeat'"),
        (
            ('prompts = ["Return', 'prompts = ["one", " "]\n#'),
            "scenarios.tiny.prompts: prompt 2 of 2 is empty",
        ),
        (
            ("[scenarios.tiny]", '[scenarios."../tiny"]'),
            "scenarios.../tiny: '../tiny' is not a name a baseline file can take",
        ),
        (
            ("output_tok_s = 0.6", "tok_s = 0.6"),
            "scenarios.tiny.tolerances: unknown metric 'tok_s'",
        ),
        (
            ("output_tok_s = 0.6", "output_tok_s = 5"),
            "output_tok_s: is 5.0, a fraction of 1 or more",
        ),
        (
            ('default_scenarios = ["tiny"]', 'default_scenarios = ["big"]'),
            "names unknown scenario 'big'",
        ),
        (
            ('default_scenarios = ["tiny"]', "default_scenarios = []"),
            "perfgate.default_scenarios: lists no scenario",
        ),
        (('model = "perfgate/llama-tiny"\n', ""), "scenarios.tiny.model: is required"),
        (('prompts = ["Return', 'prompts = "nonesuch"\n#'), "unknown prompt set 'nonesuch'"),
        (("[scenarios.tiny]", "[scenarios.tiny"), "is not valid TOML"),
        (
            ("repeats = 3", 'repeats = 3\nequivalence = "maybe"'),
            "scenarios.tiny.equivalence: is 'maybe'",
        ),
        (
            (
                "repeats = 3",
                'repeats = 3\nspec_extra_args = ["--debug-simulate-accept-rate", "0.7"]',
            ),
            "scenarios.tiny.equivalence: --debug-simulate-accept-rate makes the speculative "
            "outputs differ from plain decoding by design, so its equivalence can only fail; set "
            'equivalence = "report"',
        ),
        (
            ("repeats = 3", 'repeats = 3\nenv = { PERFGATE_PROBE_EVERY = "0" }'),
            "scenarios.tiny.env.PERFGATE_PROBE_EVERY: PERFGATE_PROBE_EVERY='0' is not a whole",
        ),
    ],
)
def test_mistakes_name_file_and_field(tmp_path: Path, edit: tuple[str, str], expected: str) -> None:
    path = write_config(tmp_path, TINY_SCENARIO.replace(*edit))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(str(path)), message
    assert expected in message
    assert "; " in message, "a fix follows the problem"
    assert caught.value.exit_code == ExitCode.BAD_INPUT


def test_a_config_that_is_not_utf8_names_the_file_and_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(b"[perfgate]\n# caf\xe9\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: is not UTF-8 text (byte 0xe9 at line 2, column 6); save it as UTF-8, as TOML "
        "requires (or remove that byte)"
    )


@pytest.mark.parametrize(
    "command",
    [("doctor",), ("servers", "--dry-run"), ("history", "list"), ("run", "--no-gate")],
)
def test_every_command_refuses_a_found_config_that_is_not_utf8(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    # Found from the current folder up, not named by --config: never taken for no config.
    path = write_config(tmp_path)
    path.write_bytes(path.read_bytes() + b"# \xff\n")
    done = perfgate_main(*command, cwd=tmp_path)
    assert done.returncode == ExitCode.BAD_INPUT, done.stdout + done.stderr
    assert f"{path}: is not UTF-8 text (byte 0xff at line " in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".perfgate").exists() and not (tmp_path / "history.db").exists()


def test_missing_file_and_unknown_scenario(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.toml")
    config = load_config(write_config(tmp_path))
    with pytest.raises(ConfigError, match="unknown scenario 'other'; choose one of: tiny"):
        config.select(["other"])


def test_prompts_file(tmp_path: Path) -> None:
    (tmp_path / "prompts.txt").write_text("first prompt\n\nsecond prompt\n")
    body = TINY_SCENARIO.replace(
        'prompts = ["Return the number of items", "Create a new instance of"]',
        'prompts_file = "prompts.txt"',
    )
    config = load_config(write_config(tmp_path, body))
    assert config.scenarios["tiny"].prompts == ("first prompt", "second prompt")


@pytest.mark.parametrize("name", ["NCCL_A$(touch X)", "1NCCL", "NCCL PROTO", "NCCL=LL", "ÉNV", ""])
def test_environment_names_are_refused_unless_a_shell_could_set_them(
    tmp_path: Path, name: str
) -> None:
    text = TINY_SCENARIO + f'\n[scenarios.tiny.env]\n{name!r} = "1"\n'.replace("'", '"')
    with pytest.raises(ConfigError) as raised:
        load_config(write_config(tmp_path, text))
    assert raised.value.exit_code == ExitCode.BAD_INPUT
    assert str(raised.value).startswith(
        f"{tmp_path / 'perfgate.toml'}:scenarios.tiny.env: {name!r} is not an environment "
        "variable name; "
    )


def test_sweep_environment_names_are_refused_too(tmp_path: Path) -> None:
    text = (
        TINY_SCENARIO
        + '\n[sweeps.s]\nscenario = "tiny"\nsteps = [1]\n[sweeps.s.env]\n"A;B" = ["1"]\n'
    )
    with pytest.raises(ConfigError, match=r"sweeps\.s\.env: 'A;B' is not an environment"):
        load_config(write_config(tmp_path, text))
