#!/usr/bin/env bash
# The GPU configuration with trained weights on one GPU: training, bandwidth, speedup, the gate.
#
#   benchmarks/gpu_real_weights.sh OUTDIR [STAGE...]          # CUDA; stages (default: all):
#                                                            #   train bandwidth sweep gate
#   benchmarks/gpu_real_weights.sh --smoke OUTDIR [STAGE...]  # CPU: tiny models (~3 min)
#
# Stages:
#   train      `perfgate embedded train --size large --device cuda`: trains perfgate/llama-large
#              and its EAGLE-3 head once, into the machine's model cache (a second call finds
#              them and exits at once); training.json (time, losses, accept lengths) to OUTDIR;
#   bandwidth  benchmarks/decode_bandwidth.py: the plain decode step's weight bytes over its
#              time at batch 8, with separate, stacked and compiled layers, against the matrix
#              products alone and a device copy (bandwidth.md, bandwidth.json); it also decides
#              COMPILE=auto: --enable-torch-compile stays on where the compiled step is at
#              least 5% faster than the stacked one, else the stages below run without it;
#   sweep      benchmarks/gpu_engine.py with the draft's real acceptance at steps SWEEP_STEPS
#              (1-6): tok/s plain and EAGLE-3, accept length, phase shares (sweep.md, .json);
#   launch     NOISE_RUNS (10) fresh launches, `perfgate run --no-gate --refresh-plain` of
#              scenario SCENARIO (default embedded-large-gpu; embedded-large-tp8 on eight
#              GPUs), equivalence gated under the every-token rule; a
#              series of launches may span calls: it runs from the first launch after the
#              last judge stage;
#   judge      the series' between-launch and within-run spread (benchmarks/launch_noise.py:
#              noise.md), the first approval of its runs (`perfgate baseline update`), and one
#              run judged against it (exit 0 expected; its report: report.html);
#   gate       launch, then judge.
# State kept between calls (the history, baselines, the compile decision) lives in
# .cache/gpu-real-weights/ of the checkout (STATE to move it); the weights in the model cache
# (PERFGATE_MODEL_CACHE). Every step's command, exit code and duration go to summary.md,
# whatever happens. OUTDIR gets at most 8 files. The device tool runs one command for at most
# 10 minutes: run `train`, then `bandwidth sweep`, then `gate` in separate calls (or `launch`
# with NOISE_RUNS=5 in two calls, then `judge`, where ten launches outlast one). APPROVE_FORCE=1
# passes --force to the approval, for a copy of the checkout whose git lags its files (its runs
# are recorded as made on a dirty tree). Exit code: 0 when every step ended as expected, 1
# otherwise.
set -u -o pipefail

# shellcheck source=stages.sh source-path=SCRIPTDIR
source "$(dirname "$0")/stages.sh"
# shellcheck source=record.sh source-path=SCRIPTDIR
source "$(dirname "$0")/record.sh"
record_args 1 "" "[train] [bandwidth] [sweep] [gate | launch judge]" "$@"
[[ ${#args[@]} -eq 0 ]] && args=(train bandwidth sweep gate)
stages=()
for stage_name in "${args[@]}"; do # gate is launch, then judge
  if [[ $stage_name == gate ]]; then stages+=(launch judge); else stages+=("$stage_name"); fi
done
check_stages "train bandwidth sweep gate launch judge" "${stages[@]}"
record_start "$out"
use_checkout
state=${STATE:-$repo/.cache/gpu-real-weights}
mkdir -p "$state"
cd "$repo" || exit 1

scenario=${SCENARIO:-embedded-large-gpu}
config=$repo/perfgate.toml
steps=${SWEEP_STEPS:-1-6}
runs=${NOISE_RUNS:-10}
train_limit=560 bandwidth_limit=150 sweep_limit=420 run_limit=240 judged=0
train_args=(--size large --device cuda)
bandwidth_args=()
sweep_args=(--steps "$steps" --repeats 3 --accept-rate -1 --budget-s 300)
if [[ $smoke -eq 1 ]]; then
  # The same stages on the CPU with the tiny models; training at a thousandth of its steps
  # (one step of each phase: each phase runs and writes its losses; tests/embedded/test_train.py
  # checks what training learns), on one thread, as the smoke's servers run (--num-threads 1):
  # two threads on a shared 2-core CPU spent twice the CPU time for the same steps.
  scenario=embedded-cpu-smoke
  config=$state/perfgate.toml
  {
    smoke_scenario "$scenario"
    cat << 'EOF'
startup_timeout_s = 120
extra_args = ["--num-threads", "1", "--enable-torch-compile"]
# Timings on a shared 2-core CPU move with its load (a judged run under a neighbour's load read
# tok/s -31%): the smoke gates what does not, acceptance and equivalence.
gated = ["accept_length"]
EOF
  } > "$config"
  train_args=(--size tiny --device cpu --scale 0.001 --threads 1 --skip-quality
    --out "$state/tiny")
  # The verify forward of one token (--verify-tokens 1): the decode step's shape, so the
  # compiled layers serve it from the decode step's code, where a forward of 4 tokens compiled
  # them a second time (a cold compile on the CPU: ~15 s of g++); the table keeps every row.
  # The compiled servers' own test: tests/embedded/test_fusion.py. On one thread, as training
  # and the servers: two on the shared CPU timed a step at 20-110 ms where one took 2-3 ms.
  # One block of one replay after the warm-up call (which compiles): a shared CPU's timings
  # say nothing either way (the compile rule is overruled below), and each further call of
  # the six steps and the copy only spent CPU time.
  bandwidth_args=(--device cpu --model perfgate/llama-tiny --replays 1 --blocks 1 --warmups 1
    --verify-tokens 1 --threads 1)
  # Inductor compiles in this process, not in a pool of workers each importing torch first.
  export TORCHINDUCTOR_COMPILE_THREADS=1
  # One point of the sweep: each point is a server of its own, and
  # tests/embedded/test_gpu_engine_script.py runs a sweep of several.
  sweep_args=(--device cpu --steps 2 --repeats 1 --accept-rate -1 --max-new-tokens 16)
  # The limits here only guard against a hang: a loaded CPU may take several times as long.
  runs=${NOISE_RUNS:-3} train_limit=1500 bandwidth_limit=1500 sweep_limit=1500 run_limit=1500
  judged=0 # acceptance on the CPU in float32 does not move from run to run
fi
db="sqlite:///$state/history.db"
hidden=$state hidden_as=STATE
summary=$out/summary.md
failed=0

{
  echo "# Trained weights on the GPU configuration: $(date -u +%FT%TZ)"
  echo
  echo "Stages: ${stages[*]}; scenario $scenario of ${config/#$repo/.}."
  echo
  echo '```'
  describe_machine
  echo '```'
  echo
  echo "| step | exit | expected | seconds | command |"
  echo "| --- | ---: | ---: | ---: | --- |"
} > "$summary"

compile_flag() { # the compile decision of the bandwidth stage: on unless it said off
  [[ "$(cat "$state/compile" 2> /dev/null)" != off ]]
}

stage_train() {
  step "train" 0 "$train_limit" "$python" -m perfgate embedded train "${train_args[@]}"
  "$python" - "${train_args[@]}" > "$out/training.json" <<'EOF'
import json, sys
from pathlib import Path
from perfgate.engines.embedded.recipes import RECIPES, recipe_cache_dir
args = sys.argv[1:]
out = Path(args[args.index("--out") + 1]) if "--out" in args else None
size = args[args.index("--size") + 1]
folder = (out or recipe_cache_dir(size)) / RECIPES[size].target
print((folder / "training.json").read_text())
EOF
}

stage_bandwidth() {
  step "bandwidth" 0 "$bandwidth_limit" "$python" benchmarks/decode_bandwidth.py \
    --out "$state/bandwidth" "${bandwidth_args[@]}"
  cp "$state/bandwidth/results.md" "$out/bandwidth.md" 2> /dev/null
  cp "$state/bandwidth/results.json" "$out/bandwidth.json" 2> /dev/null
  "$python" - "$state/bandwidth/results.json" > "$state/compile" <<'EOF'
import json, sys
steps = json.load(open(sys.argv[1]))["steps"]
fused, compiled = steps["fused"]["decode_ms"], steps["fused + compiled"]["decode_ms"]
print("on" if compiled < 0.95 * fused else "off")
EOF
  if [[ $smoke -eq 1 ]]; then
    # A shared CPU's timings move with its load, so the rule above picked either way from one
    # smoke to the next, and a compiled server pair on it takes minutes against seconds eager:
    # the smoke's later stages run eager whatever it measured. (The compiled servers' own
    # test: tests/embedded/test_fusion.py.)
    echo "compile: $(cat "$state/compile") by the rule; off for the smoke" | tee -a "$summary"
    echo off > "$state/compile"
  else
    echo "compile: $(cat "$state/compile")" | tee -a "$summary"
  fi
}

stage_sweep() {
  local extra=()
  compile_flag && extra=(--compile)
  step "sweep" 0 "$sweep_limit" "$python" benchmarks/gpu_engine.py --out "$state/sweep" \
    "${sweep_args[@]}" "${extra[@]}"
  cp "$state/sweep/results.md" "$out/sweep.md" 2> /dev/null
  cp "$state/sweep/results.json" "$out/sweep.json" 2> /dev/null
}

gate_paths() { # the scenario's config (less --enable-torch-compile where compiling does not pay)
  local used=$config
  if ! compile_flag; then
    used=$state/perfgate-eager.toml
    sed 's/"--enable-torch-compile"//; s/, *\]/]/; s/\[ *, */[/' "$config" > "$used"
  fi
  paths=(--config "$used" --db "$db" --baselines "$state/baselines")
}

stage_launch() {
  local paths refresh=()
  gate_paths
  [[ ${REFRESH_PLAIN:-0} == 1 ]] && refresh=(--refresh-plain)
  # The series starts at the first launch since the last judge stage: calls may add to it.
  [[ -f $state/series-after ]] || last_run_id "$state/history.db" > "$state/series-after"
  step "doctor" 0 120 "$python" -m perfgate doctor --scenario "$scenario" "${paths[@]}"
  for n in $(seq "$runs"); do
    step "launch $n of $runs" 0 "$run_limit" "$python" -m perfgate run --scenario "$scenario" \
      "${paths[@]}" --no-gate "${refresh[@]}" --report ''
  done
}

stage_judge() {
  local paths first
  gate_paths
  first=$(cat "$state/series-after" 2> /dev/null || echo 0)
  step "noise table" 0 60 "$python" benchmarks/launch_noise.py "$state/history.db" "$scenario" \
    --after "$first" --out "$out/noise.md"
  mapfile -t ids < <(run_ids "$state/history.db" "$scenario" "$first")
  local approve=()
  for id in "${ids[@]}"; do approve+=(--run "$id"); done
  [[ ${APPROVE_FORCE:-0} == 1 ]] && approve+=(--force) # runs of a copy whose git lags its tree
  step "approve ${#ids[@]} runs" 0 60 "$python" -m perfgate baseline update "${approve[@]}" \
    "${paths[@]}" --approved-by "gpu_real_weights.sh" --reason "fresh launches on this machine"
  step "judged against them" "$judged" "$run_limit" "$python" -m perfgate run --scenario "$scenario" \
    "${paths[@]}" --report "$out/report.html"
  rm -f "$state/series-after"
  cp "$state/history.db" "$out/history.db"
}

for stage_name in "${stages[@]}"; do
  echo "== $(date -u +%FT%TZ) stage $stage_name"
  case $stage_name in
    train) stage_train ;;
    bandwidth) stage_bandwidth ;;
    sweep) stage_sweep ;;
    launch) stage_launch ;;
    judge) stage_judge ;;
  esac
done
echo "== $(date -u +%FT%TZ) done, exit $failed"
exit $failed
