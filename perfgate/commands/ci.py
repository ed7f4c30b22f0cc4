"""`perfgate ci`: what the GitHub workflows' steps run, so each step is one line.

- `summary`: the session's verdicts as markdown, appended to the job summary
  (`--out "$GITHUB_STEP_SUMMARY"`) or written as the PR comment's body (`--comment`).
- `annotations`: workflow commands for what failed, within GitHub's per-step limits.
- `approve`: `perfgate baseline update` for runs named by id, or the newest run on main of
  each scenario, and the pull request's description (baseline-update.yml).

`summary` and `annotations` read the session's pointer file (.perfgate/last-session.json)
and the runs it names from the history; they report what they can and exit 0 even when the
session failed or left nothing: the gate's own step carries the verdict's exit code. Only a
`summary --out` it cannot write is exit 64, refused before anything is read.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfgate.baselines import baseline_path
from perfgate.ci.annotate import session_annotations
from perfgate.ci.approvals import ENVIRONMENT, reviewer
from perfgate.ci.issues import (
    LABEL,
    WatchKey,
    apply_plan,
    load_plan,
    repository_from_environment,
)
from perfgate.ci.markdown import (
    COMMENT_LIMIT_BYTES,
    SUMMARY_LIMIT_BYTES,
    Links,
    code,
    final_records,
    fit_blocks,
    link,
    render_markdown,
    scenario_section,
)
from perfgate.ci.pointer import POINTER, SessionPointer, load_pointer
from perfgate.ci.repo_settings import check_settings
from perfgate.commands import add_command
from perfgate.commands import baseline as baseline_command
from perfgate.commands.common import run_id
from perfgate.config import load_config
from perfgate.context import github_run
from perfgate.errors import ConfigError, ExitCode, PerfgateError
from perfgate.files import check_output_file, write_text_atomically
from perfgate.results import RunRecord
from perfgate.selection import Selection, selection_from
from perfgate.settings import Settings, add_options

LATEST = "latest"


def register(commands: Any) -> None:
    parser = add_command(commands, "ci")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    summary = actions.add_parser(
        "summary",
        help="the session's verdicts as markdown (job summary or PR comment)",
        description="Render the last gate session's verdicts, attribution and equivalence as "
        "markdown. With --out the text is appended (as $GITHUB_STEP_SUMMARY expects) and kept "
        f"under 1 MiB in all; --comment writes the PR comment's body instead (under "
        f"{COMMENT_LIMIT_BYTES} bytes, starting with the marker the workflow finds it by).",
    )
    _session_args(summary)
    summary.add_argument("--out", metavar="PATH", help="append to this file (default: print)")
    summary.add_argument("--comment", action="store_true", help="write the PR comment's body")
    summary.set_defaults(handler=handle_summary)

    annotations = actions.add_parser(
        "annotations", help="print workflow commands that annotate what failed"
    )
    _session_args(annotations)
    annotations.set_defaults(handler=handle_annotations)

    approve = actions.add_parser(
        "approve",
        help="approve runs into the baselines (by id, or the newest on main)",
        description="Run `perfgate baseline update` for the runs named, grouped by scenario. "
        f"--runs {LATEST} takes, for each selected scenario, the newest run recorded on "
        "--branch by a push (not a pull request) on this runner profile.",
    )
    approve.add_argument("--runs", required=True, metavar="IDS", help=f"run ids, or {LATEST!r}")
    add_options(approve.add_argument, ("scenario", "profile"))
    approve.add_argument("--branch", default="main", metavar="NAME")
    approve.add_argument("--approved-by", metavar="NAME", help="who approved the runs")
    approve.add_argument(
        "--approvals",
        metavar="JSON",
        help="instead of --approved-by: the run's approvals as GitHub lists them (the workflow "
        f"passes them); the {ENVIRONMENT} environment's reviewer is recorded, and an update "
        "approved only by a --requested-by is refused",
    )
    approve.add_argument(
        "--requested-by",
        action="append",
        default=[],
        metavar="NAME",
        help="who started the update (with --approvals; repeatable)",
    )
    approve.add_argument("--reason", required=True, metavar="TEXT")
    approve.add_argument("--body", metavar="PATH", help="write the pull request's description")
    add_options(approve.add_argument, ("config", "db", "baselines"))
    approve.set_defaults(handler=handle_approve)

    settings = actions.add_parser(
        "settings",
        help="check the repository settings the gate relies on, through `gh api`",
        description="Read the repository's settings that docs/runner-setup.md lists (the "
        f"{ENVIRONMENT} environment's reviewers, self-review and branches; the workflow "
        "token; fork approval; the branch's code owners' review and required checks; "
        "CODEOWNERS errors) through `gh api`, and say which one to change. Exit 64 if any "
        "must change, 69 if GitHub cannot be asked; what the token may not read is reported "
        "as not checked.",
    )
    settings.add_argument(
        "--repo", metavar="OWNER/NAME", help="the repository (default: $GITHUB_REPOSITORY)"
    )
    settings.add_argument("--branch", default="main", metavar="NAME")
    settings.add_argument("--json", action="store_true", help="print the checks as JSON")
    settings.set_defaults(handler=handle_settings)

    watch = actions.add_parser(
        "watch",
        help="the nightly watch: steps in a gated metric's trend, as issues to open or close",
        description="With --out: read the branch's trend runs (no pull request's) of each "
        "scenario on this runner profile from the history, find with the report's change-point "
        "detection each gated metric's standing step (the newest step worse than the "
        "tolerance, while the level stays there), and write the plan: per series, the issue "
        "to have open (the change, the commit range, the phase that moved, a `perfgate bisect` "
        "command) or the comment that closes it. With --apply: open, update or close the "
        "issues as a plan says, through `gh api` (GH_TOKEN; only the standard library is "
        "needed). Exit 0; 64 bad input; 69 if the history or GitHub cannot be reached.",
    )
    add_options(watch.add_argument, ("config", "scenario", "db", "profile"))
    watch.add_argument("--branch", default="main", metavar="NAME", help="default main")
    watch.add_argument("--out", metavar="PATH", help="write the plan here")
    watch.add_argument("--summary", metavar="PATH", help="also append the findings here")
    watch.add_argument(
        "--repo-url", metavar="URL", help="for links (default: from GitHub Actions' variables)"
    )
    watch.add_argument("--apply", metavar="PLAN", help="apply a plan instead")
    watch.add_argument(
        "--repo", metavar="OWNER/NAME", help="with --apply (default: $GITHUB_REPOSITORY)"
    )
    watch.add_argument("--label", default=LABEL, help=f"the issues' label (default {LABEL})")
    watch.set_defaults(handler=handle_watch)


def run(settings: Settings, args: argparse.Namespace) -> int:
    return int(args.handler(settings, args))


def handle_watch(settings: Settings, args: argparse.Namespace) -> int:
    if (args.apply is None) == (args.out is None):
        raise ConfigError(
            "give --out PATH (write a plan) or --apply PLAN (apply one)", field="--out"
        )
    if args.apply is not None:
        plan = load_plan(Path(args.apply))
        for line in apply_plan(plan, repository_from_environment(args.repo)):
            print(line)
        return 0
    out = check_output_file(args.out, "--out")
    if args.summary is not None:
        check_output_file(args.summary, "--summary", appends=True)
    from perfgate.ci.watch import trend_series, watch_plan
    from perfgate.reference import scenario_gating
    from perfgate.report.links import safe_url
    from perfgate.store import RunFilter, history, history_columns

    chosen = selection_from(settings, writes=False)  # the watch only reads the history
    profile = chosen.profile
    series = []
    with history(chosen.history_url, existing=True) as sessions, sessions() as session:
        for scenario in chosen.scenarios:
            where = RunFilter(scenario=scenario.name, profile=profile, branch=args.branch)
            tolerances, _ = scenario_gating(scenario)
            series += trend_series(
                history_columns(session, where), scenario.name, profile, tolerances
            )
    repository = safe_url(args.repo_url) if args.repo_url else github_run().repository_url
    plan = watch_plan(series, args.branch, repository, args.label)
    lines = watch_lines(plan, series)
    print("\n".join(lines))
    write_text_atomically(out, json.dumps(plan, indent=2) + "\n")
    if args.summary is not None:
        _write(args.summary, "## perfgate nightly watch\n\n" + "\n".join(lines) + "\n", True)
    return 0


def watch_lines(plan: Mapping[str, Any], series: list[Any]) -> list[str]:
    """One line per series: its standing step, none, or why it is not watched."""
    from perfgate.ci.watch import MIN_RUNS

    by_key = {WatchKey.from_json(e["key"]): e for e in plan["watched"]}
    lines = []
    for one in series:
        entry = by_key.get(one.key)
        if entry is None:
            lines.append(
                f"- {one.key}: not watched: {len(one.values)} trend runs, fewer than {MIN_RUNS}"
            )
        elif "issue" in entry:
            lines.append(f"- {one.key}: standing step: {entry['issue']['title']}")
        else:
            lines.append(f"- {one.key}: no standing step over {len(one.values)} trend runs")
    return lines or ["- no scenario to watch"]


def _session_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session", metavar="PATH", default=str(POINTER), help=f"the pointer file ({POINTER})"
    )
    pointer_db = {"help": "history (default: $PERFGATE_DB_URL, else the pointer's)"}
    add_options(parser.add_argument, ("config", "db"), overrides={"db": pointer_db})


def ci_links(environ: Mapping[str, str] | None = None) -> Links:
    """The run's page and commit, from the runner's variables."""
    github = github_run(environ)
    return Links(github.run_url, github.sha or None)


def load_session(
    path: Path, db: str | None = None
) -> tuple[SessionPointer | None, list[RunRecord], list[str]]:
    """The pointer, its scenarios' final runs, and notes on what could not be read.

    The runs are read from `db` (--db, else $PERFGATE_DB_URL: Settings applied it), else the
    pointer's history.
    """
    try:
        pointer = load_pointer(path)
    except ConfigError as error:
        return None, [], [str(error)]
    if pointer is None or not pointer.final_runs:
        return pointer, [], []
    if not (db or pointer.history):
        return pointer, [], []
    try:
        from perfgate.store import history, load_runs, resolve_history_url

        url = resolve_history_url(db, recorded=pointer.history)
        with history(url, existing=True) as sessions, sessions() as session:
            loaded = load_runs(session, list(pointer.final_runs.values()))
    except PerfgateError as error:
        return pointer, [], [f"the history could not be read: {error}"]
    by_id = {r.id: r for r in loaded if r.id is not None}
    return pointer, final_records(pointer, by_id), []


def handle_summary(settings: Settings, args: argparse.Namespace) -> int:
    if args.out is not None:  # appended to, as $GITHUB_STEP_SUMMARY is, unless a comment's body
        check_output_file(args.out, "--out", appends=not args.comment)
    pointer, finals, notes = load_session(Path(args.session), settings.db)
    links = ci_links()
    if args.comment:
        text = render_markdown(pointer, finals, links, COMMENT_LIMIT_BYTES, notes, comment=True)
        return _write(args.out, text, append=False)
    budget = SUMMARY_LIMIT_BYTES - _existing_size(args.out)
    return _write(args.out, render_markdown(pointer, finals, links, max(budget, 0), notes), True)


def _existing_size(path: str | None) -> int:
    try:
        return Path(path).stat().st_size if path else 0
    except OSError:
        return 0


def _write(path: str | None, text: str, append: bool) -> int:
    """Print `text`, append it to `path`, or (not `append`) write `path` whole."""
    if path is None:
        print(text, end="")
    elif append:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
    else:
        write_text_atomically(Path(path), text)
    return 0


def _baseline_files(pointer: SessionPointer | None, config_path: str | None) -> dict[str, str]:
    """Each scenario's baseline file, relative to here when it lies below (for annotations)."""
    if pointer is None or pointer.profile is None:
        return {}
    try:
        config = load_config(config_path)
    except ConfigError:
        return {}
    files = {}
    for scenario in pointer.final_runs:
        path = baseline_path(config.baselines_dir, pointer.profile, scenario).resolve()
        try:
            files[scenario] = str(path.relative_to(Path.cwd().resolve()))
        except ValueError:
            files[scenario] = str(path)
    return files


def handle_annotations(settings: Settings, args: argparse.Namespace) -> int:
    pointer, finals, notes = load_session(Path(args.session), settings.db)
    files = _baseline_files(pointer, settings.config)
    for annotation in session_annotations(pointer, finals, files):
        print(annotation.render())
    for note in notes:
        print(f"::warning title=perfgate::{note}")
    return 0


def _approval_targets(chosen: Selection, args: argparse.Namespace) -> list[RunRecord]:
    """The runs to approve: those named, or the newest pushed run of each scenario."""
    from perfgate.store import history, load_runs

    with history(chosen.history_url, existing=True) as sessions, sessions() as session:
        if args.runs.strip() != LATEST:
            return load_runs(session, _run_ids(args.runs))
        profile = chosen.profile
        return [_latest(session, s.name, profile, args.branch) for s in chosen.scenarios]


def _run_ids(text: str) -> list[int]:
    fix = f"give run ids (`12 13`) or {LATEST!r}"
    try:
        ids = [run_id(part) for part in text.replace(",", " ").split()]
    except argparse.ArgumentTypeError as error:
        raise ConfigError(str(error), field="--runs", fix=fix) from None
    if not ids:
        raise ConfigError(f"is {text!r}", field="--runs", fix=fix)
    return ids


def _latest(session: Any, scenario: str, profile: str, branch: str) -> RunRecord:
    from perfgate.store import RunFilter, list_runs

    where = RunFilter(scenario=scenario, profile=profile, branch=branch)
    pushed = [r for r in list_runs(session, where=where) if r.context.pr is None]
    if not pushed:
        raise ConfigError(
            f"no run of scenario {scenario!r} on profile {profile!r} was recorded by a push to "
            f"{branch!r}",
            field="--runs",
            fix="name the runs by id (`perfgate history list`), or let the gate run on the branch",
        )
    return pushed[-1]


def _approved_by(args: argparse.Namespace) -> str:
    """Who approved: --approved-by, or the reviewer the --approvals name (not a requester)."""
    if (args.approved_by is None) == (args.approvals is None):
        raise ConfigError(
            "give exactly one of --approved-by and --approvals",
            field="--approved-by",
            fix="--approved-by NAME by hand; --approvals JSON --requested-by NAME in the workflow",
        )
    if args.approvals is None:
        return str(args.approved_by)
    if not args.requested_by:
        raise ConfigError(
            "is needed with --approvals",
            field="--requested-by",
            fix="name who started the update, so that they cannot approve it alone",
        )
    return reviewer(args.approvals, args.requested_by)


def handle_approve(settings: Settings, args: argparse.Namespace) -> int:
    approved_by = _approved_by(args)
    body_path = None if args.body is None else check_output_file(args.body, "--body")
    records = _approval_targets(selection_from(settings, writes=False), args)
    if not records:
        raise ConfigError(
            f"names no recorded run ({args.runs})",
            field="--runs",
            fix="see `perfgate history list`",
        )
    groups: dict[tuple[str, str], list[int]] = {}
    for record in records:
        key = (record.measurement.profile, record.measurement.scenario)
        groups.setdefault(key, []).append(int(record.id or 0))
    for ids in groups.values():
        baseline_command.update_baseline(settings, ids, approved_by, args.reason)
    if body_path is not None:  # its folders made: .perfgate/ on a fresh checkout
        requested = ", ".join(dict.fromkeys(args.requested_by)) or None
        body = approval_body(records, approved_by, args.reason, requested)
        write_text_atomically(body_path, body)
    return 0


def approval_body(
    records: list[RunRecord], approved_by: str, reason: str, requested_by: str | None = None
) -> str:
    """The baseline pull request's description: who approved, why, and each approved run's
    verdicts. What people typed (names, reason, branch) and the CI address are shown as
    text (code spans), so none of it mentions, links, embeds an image or renders HTML."""
    requested = f", requested by {code(requested_by)}" if requested_by else ""
    head = (
        f"Baseline update approved by {code(approved_by)}{requested}: {code(reason)}\n\n"
        "Approved runs, with the verdicts each got against the baseline it replaces:\n"
    )
    blocks = []
    for record in records:
        c = record.context
        origin = f"commit {code((c.commit or '?')[:12])} on {code(c.branch)}" + (
            f", {link('CI run', c.ci_url)}" if c.ci_url else ""
        )
        blocks.append(f"{scenario_section(record)}- recorded from {origin}\n")
    return fit_blocks(head, blocks, COMMENT_LIMIT_BYTES)


def handle_settings(settings: Settings, args: argparse.Namespace) -> int:
    repo = args.repo or github_run().repository
    if not repo or repo.count("/") != 1:
        raise ConfigError(
            f"is {repo!r}" if repo else "is not given and GITHUB_REPOSITORY is unset",
            field="--repo",
            fix="name the repository as OWNER/NAME",
        )
    checks = check_settings(repo, args.branch)
    code = ExitCode.BAD_INPUT if any(c.status == "fail" for c in checks) else ExitCode.PASS
    if args.json:
        document = {"exit_code": int(code), "checks": [c.to_dict() for c in checks]}
        print(json.dumps(document, indent=2, sort_keys=True))
        return int(code)
    width = max(len(c.name) for c in checks)
    for check in checks:
        print(f"  {check.status.upper():<7} {check.name:<{width}}  {check.detail}")
    failed = sum(c.status == "fail" for c in checks)
    print(
        f"perfgate ci settings: {failed} to change, exit {int(code)}"
        if failed
        else "perfgate ci settings: ok"
    )
    return int(code)
