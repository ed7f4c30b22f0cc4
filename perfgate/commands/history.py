"""`perfgate history`: the recorded runs — list them, show one, export them as JSON, import."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from perfgate.commands import add_command
from perfgate.commands.common import run_count, run_id
from perfgate.errors import ConfigError
from perfgate.files import check_output_file, write_atomically
from perfgate.gate.verdict import Status
from perfgate.results import PROBE_OVER_ENGINE
from perfgate.settings import HISTORY_OPTIONS, Settings, add_options

if TYPE_CHECKING:
    from perfgate.results import RunRecord
    from perfgate.store import RunFilter

STATUSES = [status.value for status in Status]


def register(commands: Any) -> None:
    parser = add_command(commands, "history")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="one line per run, newest last")
    _add_filters(listing)
    listing.add_argument("--limit", type=run_count, default=20, help="the newest N runs (0: all)")
    listing.add_argument("--json", action="store_true", help="a JSON array of the full runs")
    listing.set_defaults(handler=handle_list)

    show = actions.add_parser("show", help="everything recorded about one run")
    _add_database(show)
    show.add_argument("run", type=run_id, metavar="ID", help="run id (see `perfgate history list`)")
    show.add_argument("--json", action="store_true", help="the run as one JSON object")
    show.set_defaults(handler=handle_show)

    export = actions.add_parser(
        "export",
        help="write the selected runs, with all their data, as JSON",
        description="Write the selected runs oldest first, each with all its data: JSON lines "
        "(one run per line, the default) or, with --json, one JSON array.",
    )
    _add_filters(export)
    export.add_argument("--json", action="store_true", help="one JSON array, not JSON lines")
    export.add_argument("--out", metavar="PATH", help="file to write (default: stdout)")
    export.set_defaults(handler=handle_export)

    load = actions.add_parser(
        "import",
        help="record the runs of a file: one `history export` wrote, or one a run kept",
        description="Record the runs of FILE (JSON lines or a JSON array, as `perfgate history "
        "export` writes them; a run whose record failed is kept so in .perfgate/unrecorded/) "
        "in one transaction. A run the history holds already is not recorded again.",
    )
    _add_database(load)
    load.add_argument("file", metavar="FILE")
    load.set_defaults(handler=handle_import)


def run(settings: Settings, args: argparse.Namespace) -> int:
    return int(args.handler(settings, args))


def _add_database(parser: argparse.ArgumentParser) -> None:
    add_options(parser.add_argument, HISTORY_OPTIONS)


def _add_filters(parser: argparse.ArgumentParser) -> None:
    _add_database(parser)
    # Filters, not the shared --scenario/--profile that choose what to run.
    parser.add_argument("--scenario", dest="only_scenario", metavar="NAME")
    parser.add_argument(
        "--profile", dest="only_profile", metavar="NAME", help="runner profile, e.g. cpu or h200x8"
    )
    parser.add_argument("--branch", metavar="NAME")
    parser.add_argument("--pr", metavar="NUMBER", help="pull request")
    parser.add_argument("--status", choices=STATUSES, help="the run's overall status")


def _filter(args: argparse.Namespace) -> RunFilter:
    from perfgate.store import RunFilter

    return RunFilter(args.only_scenario, args.only_profile, args.branch, args.pr, args.status)


def handle_list(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.store import history, list_runs
    from perfgate.store.run_dicts import run_to_dict

    with history(settings.history_url, existing=True) as sessions, sessions() as session:
        runs = list_runs(session, limit=args.limit or None, where=_filter(args))
    if args.json:
        print(json.dumps([run_to_dict(run) for run in runs], indent=2))
        return 0
    print(f"{'run':>5}  {'started (UTC)':<17} {'scenario':<24} {'status':<12} {'spec tok/s':>10}")
    for run in runs:
        m = run.measurement
        stamp = m.started_at.strftime("%Y-%m-%d %H:%M")
        tok_s = m.spec.samples.get("output_tok_s")
        value = f"{statistics.median(tok_s):.1f}" if tok_s else "-"
        print(f"{run.id:>5}  {stamp:<17} {m.scenario:<24} {run.status.value:<12} {value:>10}")
    return 0


def handle_show(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.store import history, load_run
    from perfgate.store.run_dicts import run_to_dict

    with history(settings.history_url, existing=True) as sessions, sessions() as session:
        run = load_run(session, args.run)
    if args.json:
        print(json.dumps(run_to_dict(run), indent=2))
    else:
        print("\n".join(render_run(run)))
    return 0


def handle_export(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.store import history, iter_runs
    from perfgate.store.run_dicts import run_to_dict

    out_path = None if args.out is None else check_output_file(args.out, "--out")
    count = 0
    with (
        history(settings.history_url, existing=True) as sessions,
        sessions() as session,
        _output(out_path) as out,
    ):
        for count, run in enumerate(iter_runs(session, _filter(args)), start=1):
            _write_run(out, run_to_dict(run), count == 1, args.json)
        if args.json:
            out.write("[]\n" if count == 0 else "\n]\n")
    if args.out:
        print(f"wrote {args.out}: {count} run(s)")
    return 0


def handle_import(settings: Settings, args: argparse.Namespace) -> int:
    from perfgate.store import history
    from perfgate.store.imports import import_runs

    records = load_runs_file(Path(args.file))
    with history(settings.history_url, writing=True) as sessions, sessions.begin() as session:
        imported = import_runs(session, records)
    new = [f"#{run.id}" for run in imported if run.new]
    held = [f"#{run.id}" for run in imported if not run.new]
    line = f"imported {len(new)} run(s)" + (f" as {', '.join(new)}" if new else "")
    if held:
        line += f"; {len(held)} already in the history ({', '.join(held)})"
    print(line)
    return 0


def load_runs_file(path: Path) -> list[RunRecord]:
    """The runs of a file `perfgate history export` wrote (JSON lines or a JSON array)."""
    from perfgate.store.run_dicts import run_from_dict

    fix = "import a file `perfgate history export` wrote, or one kept in .perfgate/unrecorded/"
    if not path.is_file():  # a pipe or a device would be read for ever
        raise ConfigError(
            "is not a file (a folder, a pipe, a device or nothing)", file=path, fix=fix
        )
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot be read ({error})", file=path, fix=fix) from None
    try:
        if text.lstrip().startswith("["):
            items = [(f"run {i}", item) for i, item in enumerate(json.loads(text), start=1)]
        else:
            lines = enumerate(text.splitlines(), start=1)
            items = [(f"line {n}", json.loads(line)) for n, line in lines if line.strip()]
    except json.JSONDecodeError as error:
        raise ConfigError(f"is not valid JSON ({error})", file=path, fix=fix) from None
    records = []
    for where, item in items:
        try:
            records.append(run_from_dict(item))
        except KeyError as error:
            problem = f"{where}: not a run as perfgate exports it (no field {error.args[0]!r})"
            raise ConfigError(problem, file=path, fix=fix) from None
        except (TypeError, ValueError, AttributeError) as error:
            problem = f"{where}: not a run as perfgate exports it ({error})"
            raise ConfigError(problem, file=path, fix=fix) from None
    return records


def _write_run(out: IO[str], data: dict[str, Any], first: bool, as_array: bool) -> None:
    if not as_array:
        out.write(json.dumps(data) + "\n")
    else:
        out.write(("[\n" if first else ",\n") + json.dumps(data))


@contextmanager
def _output(path: Path | None) -> Iterator[IO[str]]:
    """stdout, or a file that appears only when complete (written aside, then renamed)."""
    if path is None:
        yield sys.stdout
        return
    with write_atomically(path) as out:
        yield out


def render_run(run: RunRecord) -> list[str]:
    """A run as text: where it came from, its samples and phases, equivalence, verdicts."""
    m, c = run.measurement, run.context
    lines = [
        f"run #{run.id}: {m.scenario} on {m.profile} ({m.engine}), {run.status.value}",
        f"  started {m.started_at:%Y-%m-%d %H:%M:%S} UTC, finished {m.finished_at:%H:%M:%S}",
        f"  commit {c.commit or '-'}{' (dirty)' if c.dirty else ''}, branch {c.branch or '-'}, "
        f"PR {c.pr or '-'}, CI {c.ci_url or '-'}",
        f"  equivalence: {m.equivalence_line()}",
        "  fingerprint:",
        *(f"    {key} = {value}" for key, value in sorted(m.fingerprint.items())),
        "  samples (median of repeats; all repeats):",
        *_render_samples(run),
        "  phases (median ms over the cycles of each repeat):",
        *_render_phases(run),
        *_render_engine_metrics(run),
    ]
    lines.append("  verdicts:" if run.verdicts else "  verdicts: none (not gated)")
    lines += [f"    {v.metric:<16} {v.status.value:<12} {v.message}" for v in run.verdicts]
    return lines


def _render_samples(run: RunRecord) -> list[str]:
    m = run.measurement
    lines = []
    for mode, samples in (("spec", m.samples()), ("plain", dict(m.plain.samples))):
        for name, values in sorted(samples.items()):
            shown = ", ".join(f"{v:.4g}" for v in values)
            lines.append(f"    {mode:<5} {name:<16} {_median(values):>10}  [{shown}]")
    return lines


def _render_phases(run: RunRecord) -> list[str]:
    lines = []
    for result in (run.measurement.spec, run.measurement.plain):
        by_phase: dict[str, list[float]] = {}
        for phase in result.phases:
            by_phase.setdefault(phase.phase, []).append(phase.median_ms)
        for name, medians in by_phase.items():
            shown = ", ".join(f"{ms:.3f}" for ms in medians)
            lines.append(f"    {result.mode:<5} {name:<16} [{shown}]")
    return lines


def _render_engine_metrics(run: RunRecord) -> list[str]:
    """What the engine's own counters said over the repeats (`engine_metrics = true`): the
    probe's milliseconds over the engine's device timer per phase first, then each counter's
    growth. Nothing where the run read no counters."""
    lines = []
    for result in (run.measurement.spec, run.measurement.plain):
        found = result.engine_metrics
        ratios = sorted(k for k in found if k.startswith(PROBE_OVER_ENGINE))
        for key in ratios:
            phase = key.removeprefix(PROBE_OVER_ENGINE)
            lines.append(
                f"    {result.mode:<5} {phase:<16} {found[key]:>10.4g}  "
                "(the probe's ms over the engine's device timer)"
            )
        lines += [
            f"    {result.mode:<5} {key} = {found[key]:.6g}"
            for key in sorted(found)
            if key not in ratios
        ]
    if not lines:
        return []
    return ["  engine's own counters over the repeats (engine_metrics):", *lines]


def _median(values: Any) -> str:
    return f"{statistics.median(values):.4g}" if values else "-"
