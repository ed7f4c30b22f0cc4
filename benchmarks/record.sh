# shellcheck shell=bash
# shellcheck disable=SC2034  # repo, python, out, tee_pid: set here for the caller
# The setup the GPU record scripts (gpu_*.sh, sglang_live.sh) share: source it once their
# arguments are read.
#
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
#   smoke_scenario NAME       a scenario table of the shipped tiny models on the CPU, the shape
#                             every --smoke config starts from; its caller adds the keys its
#                             stages need (a TOML table names each key once)
#   record_finish STATUS [PATH=NAME...]
#                             run.log whole, this machine's paths in OUTDIR's files replaced
#                             by names (the checkout by ., the interpreter by python3, each
#                             PATH by its NAME: benchmarks/portable_paths.py), exit STATUS

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
  "$python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "GPUs", torch.cuda.device_count())'
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
