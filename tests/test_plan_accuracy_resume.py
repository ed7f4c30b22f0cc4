"""benchmarks/plan_accuracy.py --work: a command that ended in an earlier call (of a lent
machine, whose calls last ten minutes) is not run again, wherever its tables go now."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def test_an_ended_command_is_taken_from_the_work_folder_not_run_again(tmp_path: Path) -> None:
    accuracy = importlib.import_module("plan_accuracy")
    runs = tmp_path / "runs.txt"
    count = f"open({str(runs)!r}, 'a').write('ran\\n'); print('table')"

    def command(out: str) -> list[str]:  # as a sweep's: its tables go to this call's folder
        return [sys.executable, "-c", count, "--json", f"{out}/s.json", "--markdown", "m"]

    done = tmp_path / "work" / "sweep-1.done.json"
    done.parent.mkdir()
    first = accuracy.run(command("OUT1"), tmp_path / "first.log", done)
    again = accuracy.run(command("OUT2"), tmp_path / "again.log", done)
    assert runs.read_text() == "ran\n"  # the second call took it from the work folder
    assert (again.code, again.stdout, again.wall_s) == (0, "table\n", first.wall_s)
    other = [sys.executable, "-c", count, "--steps", "2"]  # another command: it runs
    accuracy.run(other, tmp_path / "other.log", done)
    assert runs.read_text() == "ran\nran\n"
