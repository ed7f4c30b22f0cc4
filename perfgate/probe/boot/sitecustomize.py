"""Put on a server's PYTHONPATH by perfgate's launcher: activates the probe in every process.

Python imports `sitecustomize` at start-up, in the server and in every process it spawns
(SGLang's schedulers and TP ranks too), so the probe reaches them all. Any other
`sitecustomize` further down the path still runs afterwards, and this file runs once per
process even when that one runs "the other sitecustomize" back.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _import_perfgate() -> None:
    # The server may run in another environment than perfgate (SGLang pins its own stack):
    # load the perfgate package from where the launcher says it is, without adding that
    # folder (a whole site-packages, perhaps) to sys.path.
    if importlib.machinery.PathFinder.find_spec("perfgate") is not None:
        return
    home = os.environ.get("PERFGATE_PROBE_HOME", "")
    spec = importlib.machinery.PathFinder.find_spec("perfgate", [home])
    if spec is None or spec.loader is None:
        raise ImportError(f"perfgate is not importable, nor found in PERFGATE_PROBE_HOME={home!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["perfgate"] = module
    spec.loader.exec_module(module)


_RAN = "_perfgate_probe_boot_ran"


def _boot() -> None:
    if not os.environ.get("PERFGATE_PROBE_DIR"):
        return
    try:
        _import_perfgate()
        from perfgate.probe.runtime import activate

        activate()
    except Exception as error:  # the server must run even if the probe cannot
        print(f"perfgate probe: not active: {error!r}", file=sys.stderr)


def _run_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    # Only the entries after this one: two such files that each ran "the other" would
    # run each other until the recursion limit.
    entries = [os.path.abspath(p or ".") for p in sys.path]
    rest = sys.path[entries.index(here) + 1 :] if here in entries else []
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if not getattr(sys, _RAN, False):
    setattr(sys, _RAN, True)
    _boot()
    _run_next_sitecustomize()
