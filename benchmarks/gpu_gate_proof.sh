#!/usr/bin/env bash
# The gate on one H200: where the launch spread comes from, ten launches, then verdicts of
# unchanged code and of injected slowdowns of known size (tok/s -6%, verify +2%).
#
#   benchmarks/gpu_gate_proof.sh OUTDIR STAGE...            # CUDA, the GPU scenario
#   benchmarks/gpu_gate_proof.sh --smoke OUTDIR STAGE...    # CPU: tiny models, every stage
#
# Stages, in the order a GPU session runs them (device time from the H200 record,
# benchmarks/results/h200-real-weights.md; calls of at most 10 minutes):
#   train     the large models' weights, once per machine (294 s);
#   diagnose  benchmarks/launch_states.py: DIAG_LAUNCHES (8) fresh processes timing the decode
#             step on the GPU and as the server's loop runs it, each with where it ran and how
#             fast its host was, in turn as placed, pinned to the GPU's local CPUs, pinned to
#             one CPU, and with PYTHONHASHSEED=0 (about 15 s a launch);
#   launch    LAUNCHES (5 a call) fresh `perfgate run --no-gate` of SCENARIO, each watched by
#             benchmarks/server_placement.py (the CPUs and NUMA nodes of the servers' threads);
#             a series may span calls, up to SERIES (10) launches in all (about 52 s each);
#   approve   the series' noise (benchmarks/launch_noise.py: noise.md), its approval (`perfgate
#             baseline update --keep SERIES`), and the plan of a verdict against it with the
#             cycle slowdown that costs 6% of tok/s (benchmarks/gate_proof.py plan: plan.md);
#   verdicts  `perfgate run` of SCENARIO judged against that baseline, in turn unchanged,
#             with PERFGATE_DEBUG_SLOW_PHASE=cycle=F (tok/s -6%) and with verify=0.02, until
#             VERDICTS (5) of each are judged or the call's CALL_S (540) would be passed by the
#             next one; each verdict's exit, statuses, runs and runner time go to
#             verdicts.jsonl; resumes where the last call stopped;
#   record    proof.md from all of it (benchmarks/gate_proof.py record).
# Device time on one H200 (from the record: training 294 s, a launch 48-56 s) in calls of at
# most 10 minutes:
#   1. `train diagnose`                      about 8 min
#   2. `launch`                              5 launches, about 4.5 min
#   3. `launch approve`                      5 more and the approval, about 5 min
#   4+. `verdicts` (then `verdicts record`)  about 9 min a call
# The verdicts take what the plan (plan.md, after call 3) says: on the noise of the committed
# launches a verdict waits for 4-5 runs, so the fifteen verdicts take about 55 minutes, more
# than a session's device time; if `diagnose` finds the spread's source and removing it
# brings a verdict to one or two runs, the fifteen take 13-26 minutes. Calls 1-3 fit 15 minutes of
# device time and give the diagnosis, the ten launches' noise and the plan.
# Expected exits: unchanged code 0 (75 is counted, and is what the proof measures); an injected
# slowdown 1. State (the history, the baseline, the tables) lives in .cache/gpu-gate-proof/ of
# the checkout (STATE to move it); every step's command, exit code and duration go to
# OUTDIR/summary.md whatever happens, and OUTDIR gets proof.md, the tables, verdicts.jsonl and
# the history. APPROVE_FORCE=1 passes --force to the approval, for a copy of the checkout whose
# git lags its files. Exit code: 0 when every step ended as expected, 1 otherwise.
set -u -o pipefail

smoke=0
if [[ "${1:-}" == "--smoke" ]]; then
  smoke=1
  shift
fi
if [[ $# -lt 2 ]]; then
  echo "usage: $0 [--smoke] OUTDIR STAGE... (train diagnose launch approve verdicts record)" >&2
  exit 64
fi
out=$1
shift
# shellcheck source=stages.sh source-path=SCRIPTDIR
source "$(dirname "$0")/stages.sh"
check_stages "train diagnose launch approve verdicts record" "$@"
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
state=${STATE:-$repo/.cache/gpu-gate-proof}
mkdir -p "$out" "$state"
out=$(cd "$out" && pwd)
state=$(cd "$state" && pwd)
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export PYTHONUNBUFFERED=1
exec > >(tee -a "$out/run.log") 2>&1
cd "$repo" || exit 1

scenario=${SCENARIO:-embedded-large-gpu}
config=$repo/perfgate.toml
series=${SERIES:-10} per_call=${LAUNCHES:-5} verdicts=${VERDICTS:-5} call_s=${CALL_S:-540}
train_args=(--size large --device cuda)
diag_args=(--launches "${DIAG_LAUNCHES:-8}")
run_limit=600 verify_slowdown=0.02
if [[ $smoke -eq 1 ]]; then
  # Every stage on the CPU with the tiny models; slowdowns large enough for a loaded CPU.
  scenario=embedded-cpu-smoke
  config=$state/perfgate.toml
  cat > "$config" << EOF
[scenarios.$scenario]
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
max_runs = 1
startup_timeout_s = 120
extra_args = ["--num-threads", "1"]
gated = ["output_tok_s", "verify_ms", "accept_length", "speedup", "decode_tok_s"]
[scenarios.$scenario.tolerances]
output_tok_s = 0.6
speedup = 0.6
accept_length = 0.05
verify_ms = 0.6
decode_tok_s = 0.6
EOF
  diag_args=(--launches 2 --device cpu --model perfgate/llama-tiny --replays 2 --blocks 2)
  series=${SERIES:-3} per_call=${LAUNCHES:-3} verdicts=${VERDICTS:-1} verify_slowdown=9
fi
db=$state/history.db
paths=(--config "$config" --db "sqlite:///$db" --baselines "$state/baselines")
hidden=$state hidden_as=STATE
summary=$out/summary.md
failed=0
[[ -f $summary ]] || {
  echo "# The gate on an H200: summary"
  echo
  echo '```'
  nvidia-smi -L 2> /dev/null || echo "no nvidia-smi"
  "$python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "GPUs", torch.cuda.device_count())'
  echo '```'
  echo
  echo "| step | exit | expected | seconds | command |"
  echo "| --- | ---: | ---: | ---: | --- |"
} > "$summary"

launched() { # how many launches of the series were made
  if [[ -f $state/launch-runs.txt ]]; then wc -l < "$state/launch-runs.txt"; else echo 0; fi
}

last_run_id() {
  "$python" -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select coalesce(max(id), 0) from runs').fetchone()[0])" "$db" 2> /dev/null || echo 0
}

stage_train() {
  [[ $smoke -eq 1 ]] && return 0 # the tiny models ship with perfgate
  step "train" 0 560 "$python" -m perfgate embedded train "${train_args[@]}"
}

stage_diagnose() {
  step "diagnose" 0 400 "$python" benchmarks/launch_states.py --out "$state/diagnose" \
    "${diag_args[@]}" --variants as-placed,gpu-local,one-cpu,hash-seed
  cp "$state/diagnose/results.md" "$out/diagnose.md" 2> /dev/null
}

stage_launch() {
  [[ -f $state/baselines/approved ]] && return 0 # the series was approved: it is complete
  local done_runs n stop sampler
  done_runs=$(launched)
  for ((n = done_runs + 1; n <= series && n <= done_runs + per_call; n++)); do
    stop=$state/stop-$n
    rm -f "$stop"
    "$python" benchmarks/server_placement.py --out "$state/placement.jsonl" --label "$n" \
      --stop "$stop" --timeout-s "$run_limit" &
    sampler=$!
    step "launch $n of $series" 0 "$run_limit" "$python" -m perfgate run --scenario "$scenario" \
      "${paths[@]}" --no-gate --report ''
    touch "$stop"
    wait "$sampler"
    echo "$n $(last_run_id)" >> "$state/launch-runs.txt"
  done
}

stage_approve() {
  local ids approve=() fraction
  step "noise table" 0 60 "$python" benchmarks/launch_noise.py "$db" "$scenario" \
    --out "$state/noise.md"
  mapfile -t ids < <("$python" -c "import sqlite3,sys; [print(i) for (i,) in sqlite3.connect(sys.argv[1]).execute('select id from runs where scenario = ? order by id', (sys.argv[2],))]" "$db" "$scenario")
  for id in "${ids[@]}"; do approve+=(--run "$id"); done
  [[ ${APPROVE_FORCE:-0} == 1 ]] && approve+=(--force)
  step "approve ${#ids[@]} runs" 0 60 "$python" -m perfgate baseline update "${approve[@]}" \
    --keep "$series" "${paths[@]}" --approved-by gpu_gate_proof.sh \
    --reason "fresh launches on this machine"
  local file
  file=$(find "$state/baselines" -name "$scenario.json" | head -1)
  fraction=$("$python" benchmarks/gate_proof.py plan --db "$db" --baseline "$file" \
    --config "$config" --scenario "$scenario")
  echo "$fraction" > "$state/cycle-fraction"
  cp "$(dirname "$file")/plan.md" "$state/baselines/plan.md" 2> /dev/null
  echo "cycle slowdown for tok/s -6%: $fraction" | tee -a "$summary"
  touch "$state/baselines/approved"
  cp "$state/noise.md" "$out/noise.md"
}

judged_of() { # verdicts of a kind judged so far
  local count
  count=$(grep -c "\"kind\": \"$1\"" "$state/verdicts.jsonl" 2> /dev/null)
  echo "${count:-0}"
}

one_verdict() { # one verdict of kind $1, with the environment it needs
  local kind=$1 want=0 env=() started rc
  case $kind in
    tok_s_minus_6) env=("PERFGATE_DEBUG_SLOW_PHASE=cycle=$(cat "$state/cycle-fraction")") want=1 ;;
    verify_plus_2) env=("PERFGATE_DEBUG_SLOW_PHASE=verify=$verify_slowdown") want=1 ;;
    *) want="0|75" ;;
  esac
  [[ $smoke -eq 1 ]] && want="0|1|75" # a loaded 2-core CPU decides nothing about speed
  started=$(date +%s)
  step "verdict $kind" "$want" "$run_limit" env "${env[@]}" "$python" -m perfgate run \
    --scenario "$scenario" "${paths[@]}" --report ''
  rc=$?
  "$python" benchmarks/gate_proof.py verdict --db "$db" --kind "$kind" --exit "$rc" \
    --wall-s $(($(date +%s) - started)) --out "$state/verdicts.jsonl" > /dev/null
}

stage_verdicts() {
  local began kind longest=0 took started round
  began=$(date +%s)
  for ((round = 1; round <= verdicts; round++)); do
    for kind in unchanged tok_s_minus_6 verify_plus_2; do
      [[ $(judged_of "$kind") -ge $round ]] && continue
      if (($(date +%s) - began + longest > call_s)); then
        echo "== the next verdict may pass this call's $call_s s: stopping; call again to go on"
        return 0
      fi
      started=$(date +%s)
      one_verdict "$kind"
      took=$(($(date +%s) - started))
      ((took > longest)) && longest=$took
    done
  done
}

stage_record() {
  "$python" benchmarks/gate_proof.py record --state "$state" --out "$out/proof.md" > /dev/null
  cp "$state/verdicts.jsonl" "$out/" 2> /dev/null
  cp "$db" "$out/history.db" 2> /dev/null
}

for stage_name in "$@"; do
  echo "== $(date -u +%FT%TZ) stage $stage_name"
  case $stage_name in
    train) stage_train ;;
    diagnose) stage_diagnose ;;
    launch) stage_launch ;;
    approve) stage_approve ;;
    verdicts) stage_verdicts ;;
    record) stage_record ;;
  esac
done
echo "== $(date -u +%FT%TZ) done, exit $failed"
exit $failed
