#!/usr/bin/env bash
# Where the GPU scenario's decode cycle waits on the host: `perfgate profile` of the large
# pair on one GPU in LAUNCHES (2) fresh launches, each phase's window as the probe times it
# beside its kernels' work in the trace (how busy the GPU was inside it), then the phases of
# every launch side by side (phase-windows.md).
#
#   benchmarks/gpu_phase_windows.sh OUTDIR
#
# The scenario is embedded-large-gpu as perfgate.toml ships it (CUDA graphs, compiled decoder
# layers, steps 3) but for its weights: seeded (--load-format dummy) with acceptance
# simulated at 0.7, so that no training is needed (a trained head is only another acceptance;
# the phases' kernels are the same). A launch takes 70-110 s on an H200. perfgate's own
# dependencies beyond the H200 image (SQLAlchemy, greenlet, alembic, Mako) come from the
# Python 3.12 wheels in WHEELS, as benchmarks/gpu_gate_proof.sh takes them. BASE names another
# scenario of perfgate.toml to seed instead (embedded-default: the same on the CPU, as its test
# runs it). Exit 0 when every launch was profiled, 1 otherwise.
set -u -o pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 64
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
# shellcheck source=record.sh source-path=SCRIPTDIR
source "$repo/benchmarks/record.sh"
mkdir -p "$1"
out=$(cd "$1" && pwd)
use_checkout
state=$out/state
mkdir -p "$state"
use_wheels "$state"
base=${BASE:-embedded-large-gpu}
scenario=$base-seeded
config=$state/perfgate.toml
seeded_config "$repo/perfgate.toml" "$config" "$base" "$scenario" || exit 1
{
  describe_machine
  git -C "$repo" log -1 --format='perfgate %h %s' 2> /dev/null
} > "$out/machine.txt" 2>&1
failed=0
for launch in $(seq "${LAUNCHES:-2}"); do
  echo "== $(date -u +%FT%TZ) launch $launch"
  timeout --kill-after=30 280 "$python" -m perfgate profile --config "$config" \
    --scenario "$scenario" --cycles 20 --phase draft_extend \
    --out "$out/launch-$launch" > "$out/launch-$launch.log" 2>&1 || failed=1
  tail -40 "$out/launch-$launch.log"
done
"$python" - "$out" << 'EOF' > "$out/phase-windows.md" || failed=1
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
runs = [json.loads(p.read_text()) for p in sorted(out.glob("launch-*/profile.json"))]
print(f"# Phase windows of the GPU scenario (seeded weights), {len(runs)} launch{'' if len(runs) == 1 else 'es'}\n")
print((out / "machine.txt").read_text().strip().replace("\n", "  \n"), "\n")
head = " | ".join(f"launch {i + 1}: window ms / work ms / busy" for i in range(len(runs)))
print(f"| phase | {head} |\n| --- |" + " --- |" * len(runs))
phases = [p for p in runs[0]["busy"]] if runs else []
for phase in phases:
    cells = []
    for run in runs:
        seen = run["busy"].get(phase)
        cells.append(f"{seen['window_ms']:.3f} / {run['phases'][phase]['total_ms_per_cycle']:.3f}"
                     f" / {seen['share']:.0%}" if seen else "-")
    print(f"| {phase} | {' | '.join(cells)} |")
for i, run in enumerate(runs):
    tok_s = ", ".join(f"{t:.0f}" for t in run["tok_s"])
    print(f"\nlaunch {i + 1}: repeats' tok/s {tok_s}; cycle ms profiled/unprofiled "
          f"{run['overhead']['cycle_ms_inside']:.3f}/{run['overhead']['cycle_ms_outside']:.3f};"
          f" trace covers {run['coverage'] or 0:.0%} of the profiled cycles")
EOF
cat "$out/phase-windows.md"
rm -rf "$state/site"
exit "$failed"
