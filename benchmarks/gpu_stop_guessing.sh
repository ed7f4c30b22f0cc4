#!/usr/bin/env bash
# "Stop guessing" on one GPU: what the probe costs, a steps sweep, a profile of verify.
#
#   benchmarks/gpu_stop_guessing.sh OUTDIR           # CUDA: scenario embedded-large-gpu (~5-8 min)
#   benchmarks/gpu_stop_guessing.sh --smoke OUTDIR   # CPU: the shipped tiny models (~1 min)
#
# Runs, on the embedded engine's large bf16 configuration (perfgate/llama-large with its
# EAGLE-3 head, their trained weights and real acceptance: run `perfgate embedded train --size
# large --device cuda` once first; see perfgate.toml):
#   1. benchmarks/probe_overhead.py: 10 pairs of blocks in one engine process, the probe's
#      wrappers on and off alternating, the probe as a gate run has it (on a GPU it times one
#      decode cycle in 4); then 10 pairs with every cycle timed (PERFGATE_PROBE_EVERY=1), its
#      table in run.log only;
#   2. perfgate sweep: steps 1..10 (chains), every point measured (--no-early-stop; the
#      table says where the early-stop rule would have ended the branch);
#   3. perfgate profile: 3 decode cycles under torch.profiler, work per phase and category
#      (again with --disable-cuda-graph if the trace misses the CUDA graphs' kernels).
# OUTDIR gets 8 files at most: run.log, probe-overhead.{md,json}, sweep.{md,json},
# profile/{profile.md,profile.json,trace.json.gz}. The history database and the work of the
# probe benchmark go to a temporary folder (removed when all went well), the sweep's and the
# profile's servers' logs to .perfgate/runs/ beside the config. Needs perfgate's dependencies
# importable (an existing PYTHONPATH is kept); PYTHON picks the interpreter (default python3).
# Paths of this machine in the files (the checkout, the interpreter, OUTDIR, the work folder)
# are written as ., python3, OUT and WORK. Exit code: 0 when every stage wrote its files, 1
# otherwise.
set -uo pipefail

# shellcheck source=record.sh source-path=SCRIPTDIR
source "$(dirname "$0")/record.sh"
record_args 1 1 "" "$@"
work=$(mktemp -d "${TMPDIR:-/tmp}/stop-guessing.XXXXXX")
record_start "$out"
use_checkout
mkdir -p "$out/profile"

scenario=embedded-large-gpu
if [[ $smoke -eq 1 ]]; then
  # The same scenario's shape on the CPU: the trained tiny models, short requests.
  config=$work/perfgate.toml
  {
    printf '[perfgate]\ndefault_scenarios = ["%s"]\n\n' "$scenario"
    smoke_scenario "$scenario"
    cat << 'EOF'
startup_timeout_s = 60
extra_args = ["--num-threads", "1"]
spec_extra_args = ["--debug-simulate-accept-rate", "0.7"]
equivalence = "report"
EOF
  } > "$config"
  # A block of the probe benchmark is one repeat of the prompts: its pairs are what the
  # ratio and its interval are made of, and a second repeat per block only spent CPU time.
  steps=1-2 pairs=5 repeats=1 budget_overhead=60 budget_sweep=60 limit=120 every_limit=60
  # The CPU's clock times every cycle already (probe-overhead.json's every is 1), so the
  # second measurement repeats the first: the fewest pairs it takes (probe_overhead.py's 2).
  every_pairs=2
else
  # Each stage's limit keeps the whole run under 9.5 minutes even if a stage hangs; an
  # H200 needs about 11 s per server of this scenario, so the budgets leave room to spare.
  config=$repo/perfgate.toml
  steps=1-10 pairs=10 repeats=5 budget_overhead=100 budget_sweep=140 limit=160 every_limit=120
  every_pairs=$pairs
fi

echo "== $(date -u +%FT%TZ) stop guessing: $scenario, config $config, work $work"
describe_machine

# stage NAME SECONDS COMMAND...: run with a time limit, log its exit code and duration.
stage() {
  local name=$1 seconds=$2 started rc
  shift 2
  started=$(date +%s)
  echo "== $name"
  timeout --signal=TERM --kill-after=30 "$seconds" "$@"
  rc=$?
  echo "== $name: exit $rc after $(($(date +%s) - started)) s"
  return "$rc"
}

stage "probe overhead" "$limit" "$python" "$repo/benchmarks/probe_overhead.py" \
  --config "$config" --scenario "$scenario" --pairs "$pairs" --repeats "$repeats" \
  --budget-s "$budget_overhead" --out "$out" --workdir "$work/probe-overhead"

PERFGATE_PROBE_EVERY=1 stage "probe overhead, every cycle timed" "$every_limit" "$python" \
  "$repo/benchmarks/probe_overhead.py" --config "$config" --scenario "$scenario" \
  --pairs "$every_pairs" --repeats "$repeats" --budget-s $((every_limit - 40)) \
  --out "$work/probe-every-cycle" --workdir "$work/probe-every-cycle-work"

# Exit 1 is expected here: simulated acceptance makes the speculative outputs differ.
stage "sweep" "$limit" "$python" -m perfgate sweep --config "$config" --scenario "$scenario" \
  --name stop-guessing-steps --steps "$steps" --no-early-stop --budget-s "$budget_sweep" \
  --db "sqlite:///$work/history.db" --profile stop-guessing \
  --json "$out/sweep.json" --markdown "$out/sweep.md"

profile() {
  stage "profile${*:+ $*}" 80 "$python" -m perfgate profile --config "$config" \
    --scenario "$scenario" --cycles 3 --repeats 2 --out "$work/profile" "$@"
}
# The trace covers the verify phase if its kernels (or, on a CPU, its ops) are in it and add
# up to at least half of the cycle time the probe measured.
covers_verify() {
  "$python" - "$work/profile/profile.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
verify = report["phases"].get("verify", {})
ok = verify.get("count", 0) > 0 and (report.get("coverage") or 0) >= 0.5
print(f"verify work: {verify.get('count', 0)} events, coverage {report.get('coverage')}")
sys.exit(0 if ok else 1)
EOF
}
if profile && covers_verify; then
  :
elif [[ $smoke -eq 0 ]]; then
  echo "== the trace misses the verify kernels (CUDA graph replays?); profiling eagerly"
  rm -rf "$work/profile"
  profile --disable-cuda-graph
fi
cp "$work/profile/profile.md" "$work/profile/profile.json" "$work/profile/trace.json.gz" \
  "$out/profile/" 2> /dev/null

status=0
for file in probe-overhead.md probe-overhead.json sweep.md sweep.json \
  profile/profile.md profile/profile.json profile/trace.json.gz; do
  if [[ -s "$out/$file" ]]; then
    echo "wrote $out/$file ($(wc -c < "$out/$file") bytes)"
  else
    echo "MISSING $out/$file"
    status=1
  fi
done
if [[ $status -eq 0 ]]; then
  rm -rf "$work"
else
  echo "servers' logs and probe files kept in $work"
fi
echo "== $(date -u +%FT%TZ) done, exit $status"
record_finish "$status" "$work=WORK" "$out=OUT"
