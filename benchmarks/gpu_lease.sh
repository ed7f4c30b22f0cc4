#!/usr/bin/env bash
# One device call's worth of the trained GPU records, taken up again call after call while
# the machine is held: the large models' weights, then the plan's record, then the gate proof.
#
#   benchmarks/gpu_lease.sh OUTDIR
#
# In the order a call runs them, each only where the call has time left for it (LIMIT_S,
# default 585: a device call's 600 s less the copy back):
#   1. benchmarks/gpu_gate_proof.sh OUTDIR/gate train: the weights, once per machine (about
#      340 s on an H100 or H200; a later call finds them and goes on at once);
#   2. benchmarks/plan_accuracy.py --scenario embedded-large-gpu --sweep-steps 1-10, its work
#      folder OUTDIR/plan/resume, its record OUTDIR/plan/plan-gpu.md, its output appended to
#      OUTDIR/plan/run.log: where PLAN_S (420) s are left and it has not ended with exit 0;
#      with fewer than 700 s left before the sweep is measured, the sweep alone (`--only
#      sweep`: ten launches took 214-476 s on H100 hosts), and the next call plans; a command
#      that ended in an earlier call is not run again (plan_accuracy.py's --work);
#   3. benchmarks/gpu_gate_proof.sh OUTDIR/gate launch approve [machine] verdicts record,
#      within the time left (its CALL_S and CALL_END_S), where 100 s are left: `machine` where
#      this machine is not the one the series began on (STATE/series-machine).
# NEED_H200 (1): on any other card, exit 69 before anything runs; NEED_H200=0 runs on any.
# PLAN=0 or GATE=0 leaves that part out. STATE (.cache/gpu-lease of the checkout): the gate
# proof's state; WHEELS, VERDICTS, APPROVE_FORCE are passed on to gpu_gate_proof.sh as it
# reads them. NCCL_NVLS_ENABLE=0 unless set. On a device, copy OUTDIR back whole: the weights
# and STATE stay on the machine, for the next call while it is held.
# Exit code: 0 when every part that ran ended with 0, else the first failing part's; 64 on
# bad usage, 69 with no GPU or not an H200 (NEED_H200=1). "call again" in a part's output
# says that it stopped at the call's end with work left.
set -u -o pipefail

# shellcheck source=record.sh source-path=SCRIPTDIR
source "$(dirname "$0")/record.sh"
if [[ $# -ne 1 || $1 == -* ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 64
fi
out=$1
limit=${LIMIT_S:-585}
left() { echo $((limit - SECONDS)); }

cards=$(nvidia-smi -L 2> /dev/null) || cards=""
if [[ -z $cards ]]; then
  echo "$0: no GPU here (nvidia-smi -L lists none): run it on a device" >&2
  exit 69
fi
if [[ ${NEED_H200:-1} == 1 && $cards != *H200* ]]; then
  echo "$0: this card is not an H200 (${cards%%$'\n'*}); nothing run. NEED_H200=0 runs on any card" >&2
  exit 69
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
use_checkout
state=${STATE:-$repo/.cache/gpu-lease}
mkdir -p "$state" "$out/gate" "$out/plan"
state=$(cd "$state" && pwd) out=$(cd "$out" && pwd)
export STATE=$state
cd "$repo" || exit 1
{
  echo "$cards"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
} | tee "$out/gpu.txt"

status=0
gate() { # the gate proof's stages within what is left of the call
  local l code
  l=$(left)
  CALL_S=$((l - 45)) CALL_END_S=$((l - 5)) bash benchmarks/gpu_gate_proof.sh "$out/gate" "$@"
  code=$?
  echo "== gate $* exit $code at ${SECONDS}s"
  ((status == 0)) && status=$code
}

gate train
plan=$out/plan resume=$out/plan/resume
if [[ ${PLAN:-1} == 1 && ! -f $plan/done && $(left) -ge ${PLAN_S:-420} ]]; then
  use_wheels "$state" # those the training installed
  only=()
  [[ ! -f $resume/sweep-1.done.json && $(left) -lt 700 ]] && only=(--only sweep)
  timeout $(($(left) - 20)) "$python" benchmarks/plan_accuracy.py --scenario embedded-large-gpu \
    --sweep-steps 1-10 --plain-max-age-h 24 --work "$resume" --out "$plan/plan-gpu.md" \
    "${only[@]}" 2>&1 | tee -a "$plan/run.log"
  code=${PIPESTATUS[0]}
  echo "== plan exit $code at ${SECONDS}s${only[*]:+ (the sweep alone: call again to plan)}" |
    tee -a "$plan/run.log"
  [[ $code == 0 && ${#only[@]} == 0 ]] && touch "$plan/done"
  ((status == 0)) && status=$code
fi

if [[ ${GATE:-1} == 1 ]] && (($(left) > 100)); then
  here=$(this_machine)
  [[ -f $state/series-machine ]] || echo "$here" > "$state/series-machine"
  stages=(launch approve)
  [[ $(cat "$state/series-machine") != "$here" ]] && stages+=(machine)
  gate "${stages[@]}" verdicts record
fi
echo "== call done at ${SECONDS}s, exit $status"
exit "$status"
