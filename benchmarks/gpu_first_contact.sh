#!/usr/bin/env bash
# First contact on a GPU machine: every GPU scenario perfgate.toml ships runs to exit 0.
#
#   benchmarks/gpu_first_contact.sh OUTDIR
#
# For each shipped scenario that runs on a GPU with the embedded engine (SGLang scenarios need
# model weights from a hub, or SGLang staged with benchmarks/sglang_live.sh, so they are listed
# and left out): `perfgate doctor`, then
#   1. `perfgate run`: no reviewed baseline on this machine, so the run records itself as the
#      local reference (exit 0 expected);
#   2. `perfgate run --no-gate` twice more, as docs/baselines.md asks before a first approval;
#   3. `perfgate baseline update --run ID --run ID --run ID`: the first approval of those three
#      runs, into a baselines folder of its own;
#   4. `perfgate run`: judged against that reviewed baseline (exit 0 expected);
#   5. `CI=true perfgate run`: the same, as CI runs it, where only a reviewed baseline judges.
# The history and the baselines go to a work folder; OUTDIR gets run.log, the approved
# baseline files and the last report. Needs perfgate importable with its entry points (pip
# install it, or PYTHONPATH to a --target install); PYTHON picks the interpreter. Exit code 0
# when every step of every scenario ended as expected, 1 otherwise.
set -uo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 64
fi
# shellcheck source=record.sh source-path=SCRIPTDIR
source "$(dirname "$0")/record.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/first-contact.XXXXXX")
record_start "$1" # perfgate as installed: not the checkout's (no use_checkout)
cd "$repo" || exit 1

# shellcheck disable=SC2329  # called by name, as the command `expect` runs
perfgate() { "$python" -m perfgate "$@"; }
db="sqlite:///$work/history.db"
paths=(--db "$db" --baselines "$work/baselines")
failed=0

expect() {  # expect CODE DESCRIPTION COMMAND...: run it, say whether it ended with CODE
  local want=$1 what=$2
  shift 2
  echo "== $(date -u +%FT%TZ) $what: $*"
  "$@"
  local got=$?
  if [[ $got -eq $want ]]; then
    echo "== $what: exit $got, as expected"
  else
    echo "== $what: exit $got, expected $want"
    failed=1
  fi
}

describe_machine
mapfile -t scenarios < <("$python" - <<'EOF'
import torch
from perfgate.config import load_config
gpus = torch.cuda.device_count()
for s in load_config("perfgate.toml").scenarios.values():
    if s.engine == "embedded" and (s.device or "").startswith("cuda") and s.tp > gpus:
        print(f"# {s.name}: tp = {s.tp} needs {s.tp} GPUs, this machine shows {gpus}: left out")
    elif s.engine == "embedded" and (s.device or "").startswith("cuda"):
        print(s.name)
    elif s.engine == "sglang" and s.model.startswith(".perfgate/export/"):
        print(f"# {s.name}: SGLang with perfgate's exported models: benchmarks/sglang_live.sh")
    elif s.engine == "sglang":
        print(f"# {s.name}: SGLang with {s.model}, whose weights come from a hub: left out")
EOF
)
for line in "${scenarios[@]}"; do
  if [[ $line == \#* ]]; then
    echo "$line"
    continue
  fi
  s=$line
  expect 0 "$s: doctor" perfgate doctor --scenario "$s" "${paths[@]}"
  expect 0 "$s: first run" perfgate run --scenario "$s" "${paths[@]}" --report "$work/report.html"
  for n in 2 3; do
    expect 0 "$s: run $n, recorded only" perfgate run --no-gate --scenario "$s" "${paths[@]}" \
      --report "$work/report.html"
  done
  mapfile -t ids < <(run_ids "$work/history.db" "$s" 0 3)
  runs=()
  for id in "${ids[@]}"; do runs+=(--run "$id"); done
  expect 0 "$s: approve runs ${ids[*]}" perfgate baseline update "${runs[@]}" "${paths[@]}" \
    --approved-by "first contact" --reason "the first runs of $s on this machine"
  expect 0 "$s: judged against it" perfgate run --scenario "$s" "${paths[@]}" \
    --report "$work/report.html"
  expect 0 "$s: as CI runs it" env CI=true "$python" -m perfgate run --scenario "$s" \
    "${paths[@]}" --report "$out/report.html"
done
cp -r "$work/baselines" "$out/" 2> /dev/null
"$python" -m perfgate history list --db "$db"
echo "== $(date -u +%FT%TZ) done, exit $failed"
exit $failed
