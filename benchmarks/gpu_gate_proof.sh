#!/usr/bin/env bash
# The gate on one H200: where the launch spread comes from, its launches, then verdicts of
# unchanged code and of injected slowdowns of known size (tok/s -6%, verify +2%).
#
#   benchmarks/gpu_gate_proof.sh OUTDIR STAGE...            # CUDA, the GPU scenario
#   benchmarks/gpu_gate_proof.sh --smoke OUTDIR STAGE...    # CPU: tiny models, every stage
#
# Stages, in the order a GPU session runs them (device time from the H200 record,
# benchmarks/results/h200-real-weights.md):
#   train     the large models' weights, once per machine (294 s);
#   diagnose  benchmarks/launch_states.py: DIAG_LAUNCHES (8) fresh processes timing the decode
#             step on the GPU and as the server's loop runs it, and a batch's prefill as
#             served, as the host's enqueue, as the GPU's time alone and replayed from a CUDA
#             graph (the part of the launches' spread the H200 showed, the host's queueing:
#             results h200-gate-proof.md, 2026-12-06),
#             each with where it ran and how
#             fast its host was, in turn under each of DIAG_VARIANTS (default: as placed,
#             pinned to the quarter of the CPUs fastest at its start, without address
#             randomisation; launch_states.py names the others) (about 15 s a launch);
#   launch    fresh `perfgate run --no-gate` of SCENARIO, each watched by
#             benchmarks/server_placement.py (the CPUs and NUMA nodes of the servers' threads,
#             and the machine's host speed and steal time meanwhile, seen from a sidecar),
#             up to SERIES (10) launches in all, LAUNCHES (all) a call; a series may span calls
#             (49-56 s a launch, 75 s the first on a fresh machine);
#   approve   once the series is complete: its noise (benchmarks/launch_noise.py: noise.md), its
#             approval (`perfgate baseline update --keep SERIES`), and the plan of a verdict
#             against it with the cycle slowdown that costs 6% of tok/s (benchmarks/
#             gate_proof.py plan: plan.md);
#   machine   MACHINE_LAUNCHES (3) fresh `perfgate run --no-gate` on this machine, approved beside
#             the series' (its `baseline update` keeps them all), so that this machine's verdicts
#             are judged by its own runs (perfgate.reference.machine_reference: a machine of the
#             kind whose speed sits apart from the series' host's); once per machine; a call
#             that could not make them all judges no verdict (the pool would judge it); where
#             the baseline has no room for them (it keeps perfgate.baselines.MAX_RUNS, 20: the
#             series' and every approved machine's), it says so before any launch (exit 1);
#   verdicts  `perfgate run` of SCENARIO judged against that baseline, in turn unchanged,
#             with PERFGATE_DEBUG_SLOW_PHASE=cycle=F (tok/s -6%) and with verify=0.02, until
#             VERDICTS (5) of each are judged; each verdict's exit, statuses, runs and runner
#             time go to verdicts.jsonl; resumes where the last call stopped;
#   record    proof.md from all of it (benchmarks/gate_proof.py record).
# A call's steps keep within a device call's 10 minutes: none starts that may end after CALL_S
# (540) seconds of the call (a launch at the longest so far, a verdict at the longest so far or
# the plan's first look), none runs past CALL_END_S (590; a verdict stopped there is taken
# again by the next call); "call again to go on" says where a call stopped.
# CURE (as-placed, gpu-local, hash-seed, fastest-cpus or no-aslr; default as-placed) places
# every `perfgate run` of `launch` and `verdicts` as benchmarks/launch_states.py placed that
# variant's launches (its --run-as: the GPU's local CPUs, PYTHONHASHSEED=0, the quarter of the
# CPUs fastest at the run's start, or no address randomisation), which the servers inherit: when
# `diagnose` shows a variant whose launches do not scatter, the series is launched with it,
# and its noise is the spread after, against the committed record's ten launches (tok/s
# 2.63%, speedup 3.95% between launches: h200-real-weights.md, its first section) before. A
# series, its approval and its verdicts keep the CURE they began with (another exits 64).
# MAX_RUNS caps the runs of a verdict (a copy of the config in STATE whose scenario differs in
# max_runs alone, which shapes no figure: the runs' fingerprints are the shipped scenario's);
# a series keeps the cap it began with (another exits 64).
#
# Device time. The weights are trained on the machine (2.5 GB: they do not travel), and a
# lease holds a machine for 30 minutes at most and gives it back 30 s after a call: make the
# calls back to back. A series may span leases: since the head's attention trains on the math
# backend, two trainings on two H100 starts wrote the same bytes (benchmarks/results/
# h100-training-repeats.md), so a run's fingerprint, which names each model by its weights'
# digest, is the same on the next machine of that kind. Every call ends by copying STATE
# (all but the installed wheels) into OUTDIR/state.tgz; to go on in another lease, unpack it
# into .cache/gpu-gate-proof here, carry that folder, and start with `train`. `train`,
# `launch` and `verdicts` check the weights against the series' (STATE/weights.json, from the
# first check: benchmarks/gate_proof.py weights) and exit 64 where they differ.
#
# What fits a lease, with the scenario's prefill graphs (on an H100: a launch 38-40 s, 61 s
# the first; each verdict decided on its first run, 38-39 s; benchmarks/results/
# h200-gate-proof.md, 2026-12-06, third lease): the full proof, about 25 minutes with the
# start, in three or four calls back to back:
#   1. benchmarks/gpu_gate_proof.sh OUT train diagnose launch   (DIAG_LAUNCHES=3: 326 + 67 s,
#                                                                then launches to the call's end)
#   2. benchmarks/gpu_gate_proof.sh OUT launch approve verdicts  the other launches, the plan,
#                                                                verdicts to the call's end
#   3. benchmarks/gpu_gate_proof.sh OUT verdicts record          the rest of the fifteen
# On launches that scatter as the H200's did before prefill graphs (tok/s 2.63%), the
# tolerances `baseline update` derives (3.9% / 5.7%) take 9.2 runs a verdict
# (gate_quality_gpu.py), so fifteen verdicts take over an hour: QUICK=1 then approves 5
# launches and judges every verdict on its first run alone (MAX_RUNS=1), the must-show in
# one lease; its rates are gate_quality_gpu.py's "shipped, 5 approved, max_runs 1 (QUICK=1)"
# row, and on the launches measured `python benchmarks/gate_quality_gpu.py --history
# OUT/history.db`.
# Expected exits: unchanged code 0 (75 is counted, and is what the proof measures); an injected
# slowdown 1 (or 75 at one run a verdict). State (the history, the baseline, the tables) lives
# in .cache/gpu-gate-proof/ of the checkout (STATE to move it); every step's command, exit
# code and duration go to OUTDIR/summary.md whatever happens, and OUTDIR gets proof.md, the
# tables, verdicts.jsonl and the history. APPROVE_FORCE=1 passes --force to the approval, for
# a copy of the checkout whose git lags its files. perfgate's dependencies the H200 image
# lacks (SQLAlchemy, greenlet, alembic, Mako) come from wheels in WHEELS (by default the
# checkout's .whl/: record.sh's use_wheels), and perfgate itself from the checkout (its
# pytest plugin named by PYTEST_PLUGINS). Exit code: 0 when every step ended as expected, 1
# otherwise, 64 on bad settings or weights other than the series', 69 without those
# dependencies or weights.
set -u -o pipefail

# shellcheck source=stages.sh source-path=SCRIPTDIR
source "$(dirname "$0")/stages.sh"
# shellcheck source=record.sh source-path=SCRIPTDIR
source "$(dirname "$0")/record.sh"
record_args 2 "" "STAGE... (train diagnose launch approve machine verdicts record)" "$@"
set -- "${args[@]}"
check_stages "train diagnose launch approve machine verdicts record" "$@"
record_start "$out" append # one run.log over the calls of a proof
use_checkout
state=${STATE:-$repo/.cache/gpu-gate-proof}
mkdir -p "$state"
state=$(cd "$state" && pwd)
cd "$repo" || exit 1

scenario=${SCENARIO:-embedded-large-gpu}
config=$repo/perfgate.toml
quick=${QUICK:-0}
series=${SERIES:-10} per_call=${LAUNCHES:-10} verdicts=${VERDICTS:-5} max_runs=${MAX_RUNS:-}
if [[ $quick == 1 ]]; then # the must-show at the least device time: see the top
  series=${SERIES:-5} max_runs=${MAX_RUNS:-1}
fi
# No step starts that may end after call_s seconds of this call; none runs past call_end.
call_s=${CALL_S:-540} call_end=${CALL_END_S:-590}
cure=${CURE:-as-placed} device=cuda
case $cure in
  as-placed | gpu-local | hash-seed | fastest-cpus | no-aslr) ;;
  *)
    echo "$0: CURE=$cure: one of as-placed, gpu-local, hash-seed, fastest-cpus, no-aslr" >&2
    exit 64
    ;;
esac
train_args=(--size large --device cuda)
diag_args=(--launches "${DIAG_LAUNCHES:-8}")
run_limit=600 verify_slowdown=0.02
if [[ $smoke -eq 1 ]]; then
  # Every stage on the CPU with the tiny models; slowdowns large enough for a loaded CPU.
  scenario=embedded-cpu-smoke
  config=$state/perfgate.toml
  smoke_scenario "$scenario" > "$config"
  cat >> "$config" << EOF
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
  diag_args=(--launches 2 --device cpu --model perfgate/llama-tiny --replays 2 --blocks 2 --eager \
    --prefill-tokens 8 --prefills 2)
  series=${SERIES:-3} per_call=${LAUNCHES:-3} verdicts=${VERDICTS:-1} verify_slowdown=9
  device=cpu
fi
if [[ -f $state/cure && $(cat "$state/cure") != "$cure" ]]; then
  echo "$0: CURE=$cure, but the series in $state was launched with CURE=$(cat "$state/cure"):" \
    "a series, its approval and its verdicts keep one placement (STATE elsewhere for another)" >&2
  exit 64
fi
if [[ -n $max_runs ]]; then
  if ! [[ $max_runs =~ ^[1-9][0-9]*$ ]]; then
    echo "$0: MAX_RUNS=$max_runs: a whole number of runs, 1 or more" >&2
    exit 64
  fi
  if [[ -f $state/max-runs && $(cat "$state/max-runs") != "$max_runs" ]]; then
    echo "$0: MAX_RUNS=$max_runs, but the verdicts in $state take at most" \
      "$(cat "$state/max-runs") runs (STATE elsewhere for another)" >&2
    exit 64
  fi
fi

# perfgate's own dependencies beyond the H200 image's packages (record.sh's use_wheels).
use_wheels "$state"

if [[ -n $max_runs ]]; then
  # The scenario as shipped but for its max_runs, which shapes no figure (its digest stays).
  "$python" benchmarks/gate_proof.py config --config "$config" --scenario "$scenario" \
    --max-runs "$max_runs" --out "$state/perfgate-max-runs.toml" || exit $?
  config=$state/perfgate-max-runs.toml
  echo "$max_runs" > "$state/max-runs"
fi
# Every `perfgate run` of the series and the verdicts, placed as CURE says (as the OS
# places it: no wrapper, whose torch import would cost every run a few seconds).
placed=()
[[ $cure != as-placed ]] && placed=("$python" benchmarks/launch_states.py --run-as "$cure" \
  --device "$device" --)
db=$state/history.db
paths=(--config "$config" --db "sqlite:///$db" --baselines "$state/baselines")
hidden=$state hidden_as=STATE
summary=$out/summary.md
failed=0
[[ -f $summary ]] || {
  echo "# The gate on a GPU: summary"
  echo
  echo '```'
  describe_machine # record.sh's: no torch import where torch is a CPU build
  echo '```'
  echo
  echo "CURE=$cure (the placement of every perfgate run of the series and its verdicts);" \
    "QUICK=$quick, SERIES=$series, MAX_RUNS=${max_runs:-as shipped}, VERDICTS=$verdicts" \
    "of each kind; commit $(git -C "$repo" rev-parse --short HEAD 2> /dev/null || echo unknown)"
  echo
  echo "| step | exit | expected | seconds | command |"
  echo "| --- | ---: | ---: | ---: | --- |"
} > "$summary"

launched() { # how many launches of the series were made
  if [[ -f $state/launch-runs.txt ]]; then wc -l < "$state/launch-runs.txt"; else echo 0; fi
}

stage_train() {
  [[ $smoke -eq 1 ]] && return 0 # the tiny models ship with perfgate
  step "train" 0 560 "$python" -m perfgate embedded train "${train_args[@]}"
}

weights_checked=0
check_weights() { # the weights here are the series' (recorded by the first check), or exit 64
  ((weights_checked)) && return 0
  "$python" benchmarks/gate_proof.py weights --config "$config" --scenario "$scenario" \
    --state "$state" || finish $?
  weights_checked=1
}

finish() { # the state into OUTDIR (all but the installed wheels), whatever happens; exit $1
  tar czf "$out/state.tgz" -C "$state" --exclude=./site . 2> /dev/null ||
    echo "== could not copy $state into $out/state.tgz"
  echo "== $(date -u +%FT%TZ) done, exit $1"
  record_finish "$1" "$state=STATE" # OUTDIR's files read on other machines: no path of this one
}

stage_diagnose() {
  step "diagnose" 0 400 "$python" benchmarks/launch_states.py --out "$state/diagnose" \
    "${diag_args[@]}" --variants "${DIAG_VARIANTS:-as-placed,fastest-cpus,no-aslr}"
  cp "$state/diagnose/results.md" "$out/diagnose.md" 2> /dev/null
}

stage_launch() {
  [[ -f $state/baselines/approved ]] && return 0 # the series was approved: it is complete
  check_weights
  local done_runs n stop sampler started took longest=90 # a machine's first launch: 75 s
  done_runs=$(launched)
  echo "$cure" > "$state/cure"
  for ((n = done_runs + 1; n <= series && n <= done_runs + per_call; n++)); do
    if ((SECONDS + longest > call_s)); then
      echo "== launch $n of $series may pass this call's $call_s s: stopping; call again"
      return 0
    fi
    started=$SECONDS
    stop=$state/stop-$n
    rm -f "$stop"
    "$python" benchmarks/server_placement.py --out "$state/placement.jsonl" --label "$n" \
      --stop "$stop" --timeout-s "$run_limit" &
    sampler=$!
    step "launch $n of $series" 0 "$run_limit" "${placed[@]}" "$python" -m perfgate run \
      --scenario "$scenario" "${paths[@]}" --no-gate --report ''
    touch "$stop"
    wait "$sampler"
    echo "$n $(last_run_id "$db")" >> "$state/launch-runs.txt"
    took=$((SECONDS - started))
    ((took > longest)) && longest=$took
  done
}

stage_approve() {
  local ids approve=() fraction
  if [[ -f $state/baselines/approved ]]; then
    echo "== approve: the series was approved already"
    return 0
  fi
  if (($(launched) < series)); then
    echo "== approve: $(launched) of $series launches made; call \`launch approve\` again"
    return 0
  fi
  step "noise table" 0 60 "$python" benchmarks/launch_noise.py "$db" "$scenario" \
    --out "$state/noise.md"
  mapfile -t ids < <(run_ids "$db" "$scenario")
  for id in "${ids[@]}"; do approve+=(--run "$id"); done
  [[ ${APPROVE_FORCE:-0} == 1 ]] && approve+=(--force)
  step "approve ${#ids[@]} runs" 0 60 "$python" -m perfgate baseline update "${approve[@]}" \
    --keep "$series" "${paths[@]}" --approved-by gpu_gate_proof.sh \
    --reason "fresh launches on this machine"
  local file
  file=$(find "$state/baselines" -name "$scenario.json" | head -1)
  fraction=$("$python" benchmarks/gate_proof.py plan --db "$db" --baseline "$file" \
    --config "$config" --scenario "$scenario" --verify "$verify_slowdown" \
    --estimate-out "$state/verdict-s")
  echo "$fraction" > "$state/cycle-fraction"
  cp "$(dirname "$file")/plan.md" "$state/baselines/plan.md" 2> /dev/null
  echo "cycle slowdown for tok/s -6%: $fraction" | tee -a "$summary"
  touch "$state/baselines/approved"
  cp "$state/noise.md" "$out/noise.md"
}

machine_pending=0 # set by stage_machine where this machine's launches are not all made
machine_refused=0 # set by stage_machine where the baseline has no room for this machine's
approved_runs() { # the launches of the machines approved so far (machine-runs.txt's lines)
  local count=0 machine
  if [[ -f $state/machine-runs.txt ]]; then
    while read -r machine _; do
      [[ -f $state/machine-$machine.approved ]] && count=$((count + 1))
    done < "$state/machine-runs.txt"
  fi
  echo "$count"
}

stage_machine() {
  local here want=${MACHINE_LAUNCHES:-3} have n ids=() approve=() longest=90 started took
  if [[ ! -f $state/baselines/approved ]]; then
    echo "== machine: no approved series yet (stages launch, approve)"
    failed=1
    return 0
  fi
  here=$(this_machine)
  if [[ -z $here ]]; then
    echo "== machine: this machine names no GPUs, so no run of it names its machine: nothing to approve"
    return 0
  fi
  if [[ -f $state/machine-$here.approved ]]; then
    echo "== machine: $here's launches were approved already"
    return 0
  fi
  # A baseline keeps at most perfgate.baselines.MAX_RUNS runs: the series', every approved
  # machine's and this one's must fit, or its approval would be refused after its launches.
  local most approved room
  most=$("$python" -c 'from perfgate.baselines import MAX_RUNS; print(MAX_RUNS)') || finish 69
  approved=$(approved_runs)
  room=$((most - series - approved))
  if ((want > room)); then
    echo "== machine: a baseline keeps at most $most runs; the series' $series and the approved" \
      "machines' $approved leave room for $((room > 0 ? room : 0)), not $here's $want:" \
      "judge this machine in a series of its own (STATE elsewhere)"
    failed=1 machine_refused=1
    return 0
  fi
  check_weights
  have=$(awk -v m="$here" '$1 == m' "$state/machine-runs.txt" 2> /dev/null | wc -l)
  for ((n = have + 1; n <= want; n++)); do
    if ((SECONDS + longest > call_s)); then
      echo "== machine launch $n of $want may pass this call's $call_s s: stopping; call again"
      machine_pending=1 # no verdict in this call: it would not be judged by this machine's runs
      return 0
    fi
    started=$SECONDS
    step "machine launch $n of $want ($here)" 0 "$run_limit" "${placed[@]}" "$python" -m perfgate \
      run --scenario "$scenario" "${paths[@]}" --no-gate --report ''
    echo "$here $(last_run_id "$db")" >> "$state/machine-runs.txt"
    took=$((SECONDS - started))
    ((took > longest)) && longest=$took
  done
  mapfile -t ids < <(awk -v m="$here" '$1 == m {print $2}' "$state/machine-runs.txt")
  for id in "${ids[@]}"; do approve+=(--run "$id"); done
  [[ ${APPROVE_FORCE:-0} == 1 ]] && approve+=(--force)
  # Kept: the series and the launches of every machine approved so far and of this one (none
  # of them is pushed out); a machine whose launches were begun but never approved holds none.
  step "approve $here's ${#ids[@]} runs" 0 60 "$python" -m perfgate baseline update \
    "${approve[@]}" --keep "$((series + $(approved_runs) + ${#ids[@]}))" "${paths[@]}" \
    --approved-by gpu_gate_proof.sh --reason "this machine's own launches: it is judged by them" &&
    touch "$state/machine-$here.approved"
}

machine_unapproved() { # this machine's launches begun (stage machine) but not yet approved
  local here
  here=$(this_machine)
  [[ -n $here && ! -f $state/machine-$here.approved ]] &&
    awk -v m="$here" '$1 == m {found = 1} END {exit !found}' "$state/machine-runs.txt" 2> /dev/null
}

judged_of() { # verdicts of a kind judged so far
  local count
  count=$(grep -c "\"kind\": \"$1\"" "$state/verdicts.jsonl" 2> /dev/null)
  echo "${count:-0}"
}

one_verdict() { # one verdict of kind $1, with the environment it needs, within the call
  local kind=$1 want=0 env=() started rc
  case $kind in
    tok_s_minus_6) env=("PERFGATE_DEBUG_SLOW_PHASE=cycle=$(cat "$state/cycle-fraction")") want=1 ;;
    verify_plus_2) env=("PERFGATE_DEBUG_SLOW_PHASE=verify=$verify_slowdown") want=1 ;;
    *) want="0|75" ;;
  esac
  # One run a verdict (QUICK) leaves some losses undecided, as the simulation predicts.
  [[ $want == 1 && ${max_runs:-0} == 1 ]] && want="1|75"
  [[ $smoke -eq 1 ]] && want="0|1|75" # a loaded 2-core CPU decides nothing about speed
  started=$(date +%s)
  step "verdict $kind" "$want" "$((call_end - SECONDS))" env "${env[@]}" "${placed[@]}" \
    "$python" -m perfgate run --scenario "$scenario" "${paths[@]}" --report ''
  rc=$?
  if ((rc == 124 || rc == 137)); then # stopped at the call's end: not a verdict, taken again
    echo "== verdict $kind stopped at this call's end ($call_end s); call again to take it"
    return 1
  fi
  "$python" benchmarks/gate_proof.py verdict --db "$db" --kind "$kind" --exit "$rc" \
    --wall-s $(($(date +%s) - started)) --out "$state/verdicts.jsonl" > /dev/null
}

stage_verdicts() {
  local kind longest took started round
  if [[ ! -f $state/baselines/approved ]]; then
    echo "== verdicts: no approved series yet (stages launch, approve)"
    failed=1
    return 0
  fi
  # Also where a call without the stage follows one that began it: the pool, not the runs
  # this machine's stage was making, would judge the verdicts.
  if ((machine_refused)); then
    echo "== verdicts: this machine's launches cannot join the series' baseline (stage machine)"
    return 0
  fi
  if ((machine_pending)) || machine_unapproved; then
    echo "== verdicts: this machine's own launches are not all made (stage machine); call again"
    return 0
  fi
  check_weights
  # What a verdict's first look takes (the plan's runs at an approved run's seconds), until
  # this call has timed one.
  longest=$(cat "$state/verdict-s" 2> /dev/null || echo 60)
  for ((round = 1; round <= verdicts; round++)); do
    for kind in unchanged tok_s_minus_6 verify_plus_2; do
      [[ $(judged_of "$kind") -ge $round ]] && continue
      if ((SECONDS + longest > call_s)); then
        echo "== the next verdict may pass this call's $call_s s: stopping; call again to go on"
        return 0
      fi
      started=$SECONDS
      one_verdict "$kind" || return 0
      took=$((SECONDS - started))
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
    train) stage_train && check_weights ;;
    diagnose) stage_diagnose ;;
    launch) stage_launch ;;
    approve) stage_approve ;;
    machine) stage_machine ;;
    verdicts) stage_verdicts ;;
    record) stage_record ;;
  esac
done
finish $failed
