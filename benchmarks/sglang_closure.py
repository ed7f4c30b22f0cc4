"""Which modules, files and distributions a Python program really loads: an import closure.

    python benchmarks/sglang_closure.py hook DIR           # write DIR/sitecustomize.py
    SGLANG_CLOSURE_LOG=LOGS PYTHONPATH=DIR:... python -m sglang.launch_server ...
    python benchmarks/sglang_closure.py report LOGS [--site SITE] [--json F] [--md F]

`hook` writes a `sitecustomize.py` that every Python process started with DIR on its
`PYTHONPATH` imports first (SGLang's scheduler and detokenizer processes too: they inherit
the environment). It puts a finder in front of `sys.meta_path` that asks the others and
appends `module<TAB>origin` of every module found to `LOGS/imports-<pid>.tsv` as it is
imported, so a process killed at the end of a run has written its list already. `report`
reads the lists and names, for every module, the installed distribution whose RECORD holds
its file: what a staged install must carry (the distributions under `--site`) and what the
machine's own image provides. SGLang imports many modules lazily, so the closure is the
launch's own, measured, not `Requires-Dist`.

On a machine without a GPU, `SGLANG_CLOSURE_STAND_INS=torchvision,torchaudio` makes those
packages empty stand-ins in every process (their PyPI builds need CUDA's libraries; the H200
image has its own), with `SGLANG_CLOSURE_STAND_IN_VERSION` as their `__version__`, so the
walk goes on to where SGLang's CPU path leaves its CUDA path (benchmarks/results/
sglang-staging.md). The stand-ins' packages are not in the closure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

LOG_VARIABLE = "SGLANG_CLOSURE_LOG"
STAND_INS_VARIABLE = "SGLANG_CLOSURE_STAND_INS"
STAND_IN_VERSION_VARIABLE = "SGLANG_CLOSURE_STAND_IN_VERSION"
HOOK = f'''"""Records every module this process imports (benchmarks/sglang_closure.py)."""
import importlib.machinery
import importlib.util
import os
import sys
import types

_LOG = os.environ.get("{LOG_VARIABLE}")


class _ImportRecorder:
    """Finds nothing itself: asks the finders after it and writes down what they found."""

    def find_spec(self, name, path=None, target=None):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                with open(os.path.join(_LOG, f"imports-{{os.getpid()}}.tsv"), "a") as log:
                    log.write(f"{{name}}\\t{{spec.origin or ''}}\\n")
                return spec
        return None


class _StandIn:
    """For a walk on a machine without the GPU builds: an empty module, each attribute a class
    whose attributes are strings, for the packages named in {STAND_INS_VARIABLE}."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        class Meta(type):
            def __getattr__(cls, attribute):
                if attribute.startswith("__"):
                    raise AttributeError(attribute)
                return f"{{cls.__name__}}.{{attribute}}"

        class Module(types.ModuleType):
            def __getattr__(self, attribute):
                if attribute.startswith("__"):
                    raise AttributeError(attribute)
                value = Meta(attribute, (), {{"__init__": lambda *a, **k: None}})
                setattr(self, attribute, value)
                return value

        module = Module(spec.name)
        module.__path__ = []
        module.__version__ = os.environ.get("{STAND_IN_VERSION_VARIABLE}", "0.0")
        return module

    def exec_module(self, module):
        pass


_STAND_INS = [n for n in os.environ.get("{STAND_INS_VARIABLE}", "").split(",") if n]
if _STAND_INS:
    sys.meta_path.insert(0, _StandIn(_STAND_INS))
if _LOG:
    os.makedirs(_LOG, exist_ok=True)
    sys.meta_path.insert(0, _ImportRecorder())


def _run_next_sitecustomize():
    # As perfgate's probe does: a sitecustomize further down the path still runs.
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_run_next_sitecustomize()
'''


def write_hook(folder: Path) -> Path:
    """Write folder/sitecustomize.py; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sitecustomize.py"
    path.write_text(HOOK)
    return path


def read_logs(logs: Path) -> dict[str, str]:
    """Every module any process imported -> its origin (a file, or '' for a namespace)."""
    modules: dict[str, str] = {}
    for log in sorted(logs.glob("imports-*.tsv")):
        for line in log.read_text(errors="replace").splitlines():
            name, _, origin = line.partition("\t")
            modules.setdefault(name, origin)
    return modules


@dataclass
class Distribution:
    name: str
    version: str
    where: str  # "site" (staged), "image" (the machine's own)
    bytes: int = 0  # the files of its RECORD, installed
    modules: list[str] = field(default_factory=list)


def _owners(site: Path | None, path: list[str] | None = None) -> dict[str, Distribution]:
    """Every installed file of the distributions on the path (sys.path, with site first) ->
    its owner (the first distribution of a name, as imports find it). Sizes are RECORD's."""
    owners: dict[str, Distribution] = {}
    search = [str(site)] if site is not None else []
    seen: set[str] = set()
    for dist in metadata.distributions(path=[*search, *(sys.path if path is None else path)]):
        name = dist.metadata["Name"] or "?"
        if name.lower() in seen:
            continue
        seen.add(name.lower())
        base = Path(str(dist.locate_file("")))
        where = "site" if site is not None and base.resolve() == site.resolve() else "image"
        entry = Distribution(name, dist.version, where)
        for file in dist.files or ():
            owners.setdefault(os.path.normpath(base / file), entry)
            entry.bytes += file.size or 0
    return owners


@dataclass
class Closure:
    distributions: list[Distribution]
    stdlib_modules: int
    builtin_or_namespace: int
    unowned: list[str]  # "module origin" of files no distribution's RECORD lists
    extensions: list[str]  # the compiled modules' files


def closure(modules: dict[str, str], site: Path | None, path: list[str] | None = None) -> Closure:
    """The distributions the modules come from, the standard library's, and the rest (the
    distributions looked for on `path`, default sys.path, with site first)."""
    owners = _owners(site, path)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    found: dict[str, Distribution] = {}
    standard, builtin, unowned = 0, 0, []
    for name, origin in sorted(modules.items()):
        if origin in ("", "built-in", "frozen"):
            builtin += 1
            continue
        owner = owners.get(os.path.normpath(origin))
        if owner is not None:
            found.setdefault(owner.name, owner).modules.append(name)
        elif Path(origin).is_relative_to(stdlib):
            standard += 1
        else:
            unowned.append(f"{name} {origin}")
    return Closure(
        sorted(found.values(), key=lambda d: (d.where, d.name.lower())),
        standard,
        builtin,
        unowned,
        sorted(o for o in modules.values() if o.endswith(".so")),
    )


def render(found: Closure) -> str:
    """The closure as a markdown table: staged distributions first."""
    lines = [
        "| distribution | version | from | modules imported | installed MB |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for d in found.distributions:
        lines.append(
            f"| {d.name} | {d.version} | {d.where} | {len(d.modules)} | {d.bytes / 1e6:.1f} |"
        )
    staged = [d for d in found.distributions if d.where == "site"]
    lines += [
        "",
        f"Staged distributions imported: {len(staged)}, "
        f"{sum(d.bytes for d in staged) / 1e6:.1f} MB installed; from the image: "
        f"{len(found.distributions) - len(staged)}; standard-library modules: "
        f"{found.stdlib_modules}; files owned by no distribution: {len(found.unowned)}"
        " (listed in the JSON).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    hook = actions.add_parser("hook", help="write DIR/sitecustomize.py")
    hook.add_argument("folder", type=Path)
    report = actions.add_parser("report", help="the closure of the logs in LOGS")
    report.add_argument("logs", type=Path)
    report.add_argument("--site", type=Path, default=None, help="the staged install's folder")
    report.add_argument("--json", type=Path, default=None)
    report.add_argument("--md", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.action == "hook":
        print(write_hook(args.folder))
        return 0
    modules = read_logs(args.logs)
    if not modules:
        print(f"{args.logs}: no imports-*.tsv with any module", file=sys.stderr)
        return 1
    found = closure(modules, args.site)
    if args.json:
        args.json.write_text(json.dumps(asdict(found), indent=1) + "\n")
    text = render(found)
    if args.md:
        args.md.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
