# shellcheck shell=bash
# shellcheck disable=SC2034  # smoke, out, args, repo, python, tee_pid: set for the caller
# The setup the GPU record scripts (gpu_*.sh, sglang_live.sh) share: source it first.
#
#   record_args MIN MAX WORDS ARG...
#                             the arguments of a script that takes --smoke: that first
#                             (smoke: 1, else 0), then OUTDIR (out) and the script's own
#                             (args), MIN to MAX of them in all, OUTDIR counted (MAX empty: no
#                             limit); else "usage: SCRIPT [--smoke] OUTDIR WORDS" and exit 64
#   record_start OUTDIR [append]
#                             the checkout (repo), the interpreter (python: $PYTHON, default
#                             python3), OUTDIR made and absolute (out), and from then on the
#                             whole output teed into OUTDIR/run.log (tee_pid: the tee), after
#                             what earlier calls wrote there with `append`
#   use_checkout              perfgate from this checkout first on PYTHONPATH (an existing one
#                             kept after it), its pytest plugin named in PYTEST_PLUGINS where
#                             perfgate is not installed (no entry point registers it there, and
#                             `perfgate run` would find none of its fixtures), NVLink multicast
#                             off unless NCCL_NVLS_ENABLE is set (the shared hosts require it),
#                             Python's output unbuffered
#   describe_machine          the GPUs (nvidia-smi -L) and python, torch, CUDA, GPU count
#   use_wheels STATE          SQLAlchemy, greenlet, alembic and Mako, where the interpreter
#                             lacks them (a GPU image), from the Python 3.12 wheels in $WHEELS
#                             (default: the checkout's .whl/, which git ignores once
#                             .git/info/exclude names it), installed into STATE/site and put on
#                             PYTHONPATH (where an earlier call installed them there, those,
#                             without installing again); exit 69 naming what to download if
#                             there are none, or if installing them fails
#   seeded_config SOURCE CONFIG BASE NAME [FLAG...]
#                             CONFIG: SOURCE's perfgate.toml and scenario NAME, BASE with
#                             seeded weights (--load-format dummy) and acceptance simulated at
#                             0.7, each FLAG added to the extra_args of both its servers,
#                             equivalence reported (not gated): speed without training;
#                             with SEEDED_SMOKE=1 (the CPU tests of the scripts only), BASE's
#                             requests cut to smoke_scenario's: its prompts, max_new_tokens,
#                             repeats and warmup
#   smoke_scenario NAME       a scenario table of the shipped tiny models on the CPU, the shape
#                             every --smoke config starts from; its caller adds the keys its
#                             stages need (a TOML table names each key once)
#   this_machine              the machine a run here names (a digest of its GPUs' UUIDs), or
#                             "" without GPUs (perfgate on PYTHONPATH: use_checkout)
#   last_run_id DB            the newest run's id in the SQLite history file DB (0: none yet,
#                             or no history there)
#   run_ids DB SCENARIO [AFTER [LAST]]
#                             SCENARIO's run ids in DB, a line each, oldest first: those after
#                             id AFTER (default 0), the LAST of them alone where LAST is given
#   record_finish STATUS [PATH=NAME...]
#                             run.log whole, this machine's paths in OUTDIR's files replaced
#                             by names (the checkout by ., the interpreter by python3, each
#                             PATH by its NAME: benchmarks/portable_paths.py, a SQLite history
#                             too), exit STATUS

record_args() {
  local min=$1 max=$2 words=$3
  shift 3
  smoke=0
  if [[ ${1:-} == --smoke ]]; then
    smoke=1
    shift
  fi
  if [[ $# -lt $min || ( -n $max && $# -gt $max ) ]]; then
    echo "usage: $0 [--smoke] OUTDIR${words:+ $words}" >&2
    exit 64
  fi
  out=$1
  args=("${@:2}")
}

record_start() {
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  python=${PYTHON:-python3}
  mkdir -p "$1"
  out=$(cd "$1" && pwd)
  if [[ ${2:-} == append ]]; then
    exec > >(tee -a "$out/run.log") 2>&1
  else
    exec > >(tee "$out/run.log") 2>&1
  fi
  tee_pid=$!
}

use_checkout() {
  export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
  # pytest is started with -P (as `perfgate run` starts it): the entry point, or the name.
  if ! "$python" -P -c 'import importlib.metadata as m, sys
sys.exit(not m.entry_points(group="pytest11", name="perfgate"))' 2> /dev/null; then
    export PYTEST_PLUGINS=perfgate.plugin
  fi
  export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
  export PYTHONUNBUFFERED=1
}

describe_machine() {
  nvidia-smi -L 2> /dev/null || echo "no nvidia-smi"
  # A CPU build of torch (a version ending +cpu: no CUDA, no ROCm) sees no GPU: the same line
  # from its version.py, without importing torch (1.5 CPU s each CPU test of a script paid).
  "$python" -c 'import importlib.util, pathlib, sys
found = importlib.util.find_spec("torch")
version = {}
if found and found.submodule_search_locations:
    exec(pathlib.Path(found.submodule_search_locations[0], "version.py").read_text(), version)
if str(version.get("__version__", "")).endswith("+cpu"):
    print("python", sys.version.split()[0], "torch", version["__version__"], "cuda", version["cuda"], "GPUs", 0)
else:
    import torch
    print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "GPUs", torch.cuda.device_count())'
}

use_wheels() {
  local site=$1/site
  # What an earlier call installed there is used, not installed again.
  if [[ -d $site ]]; then export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"; fi
  if "$python" -c 'import sqlalchemy, alembic, mako' 2> /dev/null; then
    return 0
  fi
  local dir=${WHEELS:-$repo/.whl} wheels
  shopt -s nullglob
  wheels=("$dir"/*.whl)
  shopt -u nullglob
  if ((${#wheels[@]} == 0)); then
    echo "$0: $python cannot import sqlalchemy, alembic and mako, and $dir holds no" \
      "wheels: download SQLAlchemy, greenlet, alembic and Mako for Python 3.12 into it" \
      "(pip download --no-deps --only-binary=:all: --python-version 3.12 ...) and carry it" >&2
    exit 69
  fi
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "${wheels[@]}" || exit 69
  [[ :${PYTHONPATH:-}: == *":$site:"* ]] || export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
}

seeded_config() {
  local smoke=""
  [[ ${SEEDED_SMOKE:-0} == 1 ]] && smoke=$(smoke_scenario smoke)
  SEEDED_SMOKE_TABLE=$smoke "$python" - "$repo/benchmarks" "$@" << 'EOF'
import os, sys, tomllib
sys.path.insert(0, sys.argv.pop(1))
from sglang_live import _table  # the one scenario-table writer of the record scripts
source, target, base, name, *flags = sys.argv[1:]
text = open(source).read()
raw = tomllib.loads(text)["scenarios"][base]
raw = raw | {"extra_args": [*raw.get("extra_args", []), "--load-format", "dummy", *flags],
             "spec_extra_args": ["--debug-simulate-accept-rate", "0.7"],
             "equivalence": "report"}
if os.environ["SEEDED_SMOKE_TABLE"]:  # SEEDED_SMOKE=1: a CPU test's short requests
    smoke = tomllib.loads(os.environ["SEEDED_SMOKE_TABLE"])["scenarios"]["smoke"]
    raw |= {key: smoke[key] for key in ("prompts", "max_new_tokens", "repeats", "warmup")}
open(target, "w").write("\n".join([text.rstrip("\n"), "", *_table(name, raw)]))
EOF
}

smoke_scenario() {
  cat << EOF
[scenarios.$1]
engine = "embedded"
model = "perfgate/llama-tiny"
draft = "perfgate/eagle3-llama-tiny"
steps = 3
topk = 1
draft_tokens = 4
dtype = "float32"
device = "cpu"
prompts = ["Return the number of items in the", "Create a new instance of the class with"]
max_new_tokens = 16
repeats = 2
warmup = 1
EOF
}

this_machine() {
  "$python" -c 'from perfgate.devices import detect_gpus; g = detect_gpus(); print(g.machine if g else "")' 2> /dev/null
}

last_run_id() {
  "$python" -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("select coalesce(max(id), 0) from runs").fetchone()[0])' \
    "$1" 2> /dev/null || echo 0
}

run_ids() {
  "$python" -c 'import sqlite3, sys
db, scenario, after, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
query = "select id from runs where scenario = ? and id > ? order by id"
ids = [i for (i,) in sqlite3.connect(db).execute(query, (scenario, after))]
for i in ids[-last:] if last else ids:
    print(i)' "$1" "$2" "${3:-0}" "${4:-0}"
}

record_finish() {
  local status=$1 pair names=()
  shift
  for pair in "$@"; do names+=(--replace "$pair"); done
  exec 1>&- 2>&-
  wait "$tee_pid" # run.log is whole before its paths are replaced
  # The record is read on other machines: this one's paths become names (., python3, ...).
  find "$out" -type f -exec "$python" "$repo/benchmarks/portable_paths.py" "${names[@]}" {} +
  exit "$status"
}
