"""Run a workflow job's `run:` steps on this machine as the GitHub runner would.

Each step runs as `bash --noprofile --norc -eo pipefail SCRIPT` (the runner's default shell on
Linux) in the workspace, with the job's and the step's `env:`, the runner's variables, and
fresh `GITHUB_OUTPUT` and `GITHUB_STEP_SUMMARY` files per step; what a step appends to
`GITHUB_ENV` and `GITHUB_PATH` reaches the steps after it. `${{ }}` expressions are replaced
from a table the test gives, and `if:` conditions are looked up in another: an expression the
test does not know fails it, so the workflow cannot drift from its test unnoticed. A step
without `if:` runs only while every step before it succeeded (`success()`).

`uses:` steps are not run; `actions/upload-artifact` steps are checked: each of their paths
must match files, as the real action would upload them.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclass
class StepResult:
    name: str
    ran: bool
    returncode: int | None = None
    output: str = ""
    summary: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    uploaded: list[Path] = field(default_factory=list)


def substitute(text: str, expressions: Mapping[str, str]) -> str:
    """Replace every `${{ expr }}` with its test value; KeyError for an unknown one."""
    return EXPRESSION.sub(lambda m: expressions[m.group(1)], text)


def read_env_file(path: Path) -> dict[str, str]:
    """`NAME=value` lines and `NAME<<DELIMITER` blocks, as the runner reads GITHUB_ENV."""
    values, lines = {}, path.read_text().splitlines() if path.exists() else []
    index = 0
    while index < len(lines):
        line = lines[index]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, index + 1)
            values[name] = "\n".join(lines[index + 1 : end])
            index = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            values[name] = value
        index += 1
    return values


class JobRunner:
    def __init__(
        self,
        workspace: Path,
        temp: Path,
        environ: Mapping[str, str],
        expressions: Mapping[str, str],
        conditions: Mapping[str, bool],
    ) -> None:
        self.workspace = workspace
        self.temp = temp
        self.expressions = expressions
        self.conditions = conditions
        self.env = {**environ, "GITHUB_WORKSPACE": str(workspace), "RUNNER_TEMP": str(temp)}
        self.env_file = temp / "_runner_file_commands" / "env"
        self.path_file = temp / "_runner_file_commands" / "path"
        self.env_file.parent.mkdir(parents=True, exist_ok=True)
        self.env |= {"GITHUB_ENV": str(self.env_file), "GITHUB_PATH": str(self.path_file)}
        self.failed = False

    def condition(self, step: Mapping[str, Any]) -> bool:
        if "if" not in step:
            return not self.failed
        text = str(step["if"]).strip()
        match = EXPRESSION.fullmatch(text)
        return self.conditions[match.group(1) if match else text]

    def run_job(self, job: Mapping[str, Any]) -> list[StepResult]:
        """Every step in order; `self.failed` says whether the job failed."""
        job_env = {k: substitute(str(v), self.expressions) for k, v in job.get("env", {}).items()}
        return [self.run_step(index, step, job_env) for index, step in enumerate(job["steps"])]

    def run_step(
        self, index: int, step: Mapping[str, Any], job_env: Mapping[str, str]
    ) -> StepResult:
        name = step.get("name", f"step {index}")
        if not self.condition(step):
            return StepResult(name, ran=False)
        if "uses" in step:
            return self._uses(name, step)
        files = self.temp / "_runner_file_commands" / f"step{index}"
        files.mkdir(parents=True, exist_ok=True)
        output, summary = files / "output", files / "summary"
        env = {**self.env, **job_env}
        env |= {k: substitute(str(v), self.expressions) for k, v in step.get("env", {}).items()}
        env |= {"GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)}
        script = files / "script.sh"
        script.write_text(substitute(step["run"], self.expressions))
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=self.workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=60 * float(step.get("timeout-minutes", 10)),
            check=False,
        )
        self._apply_file_commands()
        failed = done.returncode != 0 and not step.get("continue-on-error", False)
        self.failed = self.failed or failed
        return StepResult(
            name,
            True,
            done.returncode,
            done.stdout + done.stderr,
            summary.read_text() if summary.exists() else "",
            read_env_file(output),
        )

    def _apply_file_commands(self) -> None:
        self.env |= read_env_file(self.env_file)
        added = self.path_file.read_text().splitlines() if self.path_file.exists() else []
        path = [p for p in reversed(added) if p] + [self.env["PATH"]]
        self.env["PATH"] = os.pathsep.join(path)
        self.path_file.write_text("")  # applied once, as the runner does after each step
        self.env_file.write_text("")

    def _uses(self, name: str, step: Mapping[str, Any]) -> StepResult:
        if not str(step["uses"]).startswith("actions/upload-artifact@"):
            return StepResult(name, ran=True, returncode=0)
        paths = substitute(str(step["with"]["path"]), self.expressions).split("\n")
        found = []
        for pattern in (p.strip() for p in paths if p.strip()):
            matched = [p for p in self.workspace.glob(pattern.rstrip("/")) if p.exists()]
            found += matched
        return StepResult(name, ran=True, returncode=0, uploaded=found)
