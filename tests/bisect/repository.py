"""A git repository to bisect: a copy of perfgate whose embedded engine one commit slows down.

Commit 0 holds this checkout's `perfgate/` package (the embedded engine a bisect's servers
run when the commit's top is on their path) and a notes file; each later commit adds a line
to the notes, and one of them also makes the engine's verify sleep `SLOW_VERIFY_S` longer,
in the copy's own code. The tiny model's verify takes about 4 ms a cycle, so that commit's
verify_ms grows about 50-fold and its speculative tok/s falls about 20-fold.

The bisect's scenario has the widest timing tolerances the gate takes, so that a commit
without the slowdown is like the good end through as much of a shared machine's load swing
as they allow: tok/s and speedup down to 1/8 (beyond a fivefold swing), verify_ms up to
1.95 times (a tolerance is under 100%). The slowed verify stays far beyond that whatever the
load: the sleep is not slowed by it (a fivefold slower verify, 20 ms, against 204 ms).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..conftest import REPO, TINY_SCENARIO

SLOW_VERIFY_S = 0.2
VERIFY_CALL = "            self.verify_delay()\n            return logits, features_of(hidden)\n"
PLANTED = (
    "            self.verify_delay()\n"
    f"            time.sleep({SLOW_VERIFY_S})  # the planted slowdown\n"
    "            return logits, features_of(hidden)\n"
)
WORKER = Path("perfgate/engines/embedded/worker.py")
IDENTITY = {
    "GIT_AUTHOR_NAME": "perfgate tests",
    "GIT_AUTHOR_EMAIL": "tests@perfgate.invalid",
    "GIT_COMMITTER_NAME": "perfgate tests",
    "GIT_COMMITTER_EMAIL": "tests@perfgate.invalid",
}


def _bisect_scenario() -> str:
    """tests/conftest.py's tiny scenario, 16 new tokens instead of 24 and no baselines folder:
    cheap to measure at every commit; its timing tolerances widened (see above). It fails
    loudly if the tiny scenario moves."""
    text = TINY_SCENARIO
    for old, new in (
        ('baselines = "baselines"\n', ""),
        ("max_new_tokens = 24", "max_new_tokens = 16"),
        ("output_tok_s = 0.6\n", "output_tok_s = 0.875\n"),
        ("speedup = 0.6\n", "speedup = 0.875\n"),
        ("verify_ms = 0.6\n", "verify_ms = 0.95\n"),
    ):
        assert old in text, f"tests/conftest.py's TINY_SCENARIO no longer has {old!r}"
        text = text.replace(old, new)
    return text


# A scenario cheap to measure: one short prompt each of two kinds, three repeats; the widest
# timing tolerances.
BISECT_SCENARIO = _bisect_scenario()


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **IDENTITY}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


def make_repository(folder: Path, commits: int, slow_at: int | None) -> list[str]:
    """A repository of `commits` + 1 commits in `folder`; commit `slow_at` (if any) plants
    the slowdown. Returns the commit ids, oldest first."""
    folder.mkdir(parents=True)
    git(folder, "init", "-q", "-b", "main")
    shutil.copytree(
        REPO / "perfgate",
        folder / "perfgate",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    (folder / "notes.txt").write_text("base\n")
    git(folder, "add", "-A")
    git(folder, "commit", "-q", "-m", "base")
    for index in range(1, commits + 1):
        with (folder / "notes.txt").open("a") as notes:
            notes.write(f"change {index}\n")
        subject = f"change {index}"
        if index == slow_at:
            worker = folder / WORKER
            text = worker.read_text()
            assert text.count(VERIFY_CALL) == 1, f"{WORKER}: where verify ends has moved"
            worker.write_text(text.replace(VERIFY_CALL, PLANTED))
            subject += ": verify sleeps"
        git(folder, "commit", "-q", "-am", subject)
    return git(folder, "rev-list", "--reverse", "HEAD").split()
