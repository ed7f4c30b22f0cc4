"""Baseline files a reviewer could miss are refused at load, in one line naming the field (64):
samples that are not finite positive numbers, files too deep, too large or not files at all,
and a file whose own scenario or profile is not the one its path says."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.baselines import dump_baseline, load_baseline, write_baseline
from perfgate.errors import ConfigError, ExitCode
from perfgate.session import GateSession
from perfgate.spec.options import GateOptions

from .conftest import run_perfgate, write_config
from .test_baselines import _approve


def _document() -> dict:  # type: ignore[type-arg]
    return json.loads(dump_baseline(_approve()))  # type: ignore[no-any-return]


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_baseline(path)
    assert caught.value.exit_code == ExitCode.BAD_INPUT
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize(
    "text", ["NaN", "Infinity", "-Infinity", "0", "0.0", "-3.5", "1e308"], ids=str
)
def test_a_sample_that_is_not_a_finite_positive_number_is_refused(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "tiny.json"
    document = _document()
    document["runs"][0]["samples"]["output_tok_s"] = ["@"]
    path.write_text(json.dumps(document).replace('"@"', text))
    message = _refused(path)
    assert message.startswith(f"{path}:runs[0].samples.output_tok_s: ")
    assert "finite number > 0" in message


@pytest.mark.parametrize("text", ["NaN", "Infinity", "1e308"], ids=str)
def test_a_phase_time_that_is_not_finite_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "tiny.json"
    document = _document()
    document["runs"][0]["phase_ms"]["spec"]["verify"] = ["@"]
    path.write_text(json.dumps(document).replace('"@"', text))
    assert _refused(path).startswith(f"{path}:runs[0].phase_ms.spec.verify: ")


def test_deeply_nested_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert "nested too deeply" in _refused(path)


def test_a_file_too_large_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    document = _document()
    document["runs"][0]["samples"]["output_tok_s"] = [100.0] * 2_000_000  # 14 MB
    path.write_text(json.dumps(document))
    message = _refused(path)
    assert message.startswith(f"{path}: is {path.stat().st_size} bytes")


def test_more_samples_per_run_than_a_baseline_holds_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    document = _document()
    document["runs"][0]["samples"]["output_tok_s"] = [100.0] * 501
    path.write_text(json.dumps(document))
    message = _refused(path)
    assert message.startswith(f"{path}:runs[0].samples.output_tok_s: holds 501 values")


def test_more_runs_than_a_baseline_holds_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    document = _document()
    document["runs"] = document["runs"] * 21
    document["keep"] = 21
    path.write_text(json.dumps(document))
    assert _refused(path).startswith(f"{path}:keep: ")


@pytest.mark.slow
def test_a_link_to_a_device_is_refused_not_read_forever(tmp_path: Path) -> None:
    write_config(tmp_path)
    path = tmp_path / "baselines" / "cpu" / "tiny.json"
    path.parent.mkdir(parents=True)
    os.symlink("/dev/zero", path)
    # Bounded: a loader that reads the device forever fails the test by its timeout.
    done = run_perfgate(
        "baseline", "show", "--scenario", "tiny", "--profile", "cpu", cwd=tmp_path, timeout=60
    )
    assert done.returncode == 64, done.stdout + done.stderr
    assert f"{path}: is not a regular file" in done.stderr


@pytest.mark.parametrize(
    ("field", "value"), [("scenario", "other"), ("profile", "h200x8")], ids=["scenario", "profile"]
)
def test_a_file_whose_identity_is_not_its_path_is_refused(
    tmp_path: Path, field: str, value: str
) -> None:
    config = write_config(tmp_path)
    path = tmp_path / "baselines" / "cpu" / "tiny.json"
    write_baseline(_approve(), path)
    document = json.loads(path.read_text())
    document[field] = value
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError) as caught:
        GateSession(GateOptions(config=str(config), profile="cpu"))
    message = str(caught.value)
    assert message.startswith(f"{path}:{field}: is {value!r}, but the file is the baseline of")


def test_a_baseline_the_loader_would_refuse_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "cpu" / "tiny.json"
    approved = _approve()
    run = replace(approved.runs[0], samples={**approved.runs[0].samples, "verify_ms": (0.0,)})
    with pytest.raises(ConfigError, match=r"runs\[0\]\.samples\.verify_ms: holds 0\.0"):
        write_baseline(replace(approved, runs=(run,)), path)
    assert not path.parent.exists() or list(path.parent.iterdir()) == []
