#!/usr/bin/env bash
# The overlap schedule on one GPU: fresh launches of the GPU scenario with the next work
# queued before each step's one sync (the embedded engine's default: a speculative cycle's
# draft extend, a plain server's next step) and after it (--disable-overlap-schedule, both
# servers), alternated in one call, then each variant's cycles and their spread between
# launches (benchmarks/launch_noise.py: overlap.md, serial.md).
#
#   benchmarks/gpu_overlap.sh OUTDIR
#
# The scenario is embedded-large-gpu with seeded weights and acceptance simulated at 0.7
# (record.sh's seeded_config: no training; the phases' kernels are the trained pair's). Each
# launch is a `perfgate run --no-gate` of both servers (65-105 s each on an H200 in
# h200-gate-proof.md). LAUNCHES (2) of each variant, in the order overlap, serial, serial,
# overlap, ...: four launches fit one 10-minute call of the device tool; a launch that has not
# ended within LAUNCH_S (120) seconds is stopped.
# BASE names another scenario to seed (embedded-default: the same on the CPU, as its test
# runs it). perfgate's dependencies beyond a GPU image come from the Python 3.12 wheels in
# WHEELS (record.sh's use_wheels). OUTDIR gets run.log, machine.txt, overlap.md, serial.md and
# history.db. Exit 0 when every launch ended 0 and both tables were written, 1 otherwise.
set -u -o pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 64
fi
# shellcheck source=record.sh source-path=SCRIPTDIR
source "$(dirname "$0")/record.sh"
record_start "$1"
use_checkout
state=$(mktemp -d "${TMPDIR:-/tmp}/gpu-overlap.XXXXXX")
use_wheels "$state"
base=${BASE:-embedded-large-gpu}
config=$state/perfgate.toml
seeded_config "$repo/perfgate.toml" "$state/overlap.toml" "$base" overlap || exit 1
seeded_config "$state/overlap.toml" "$config" "$base" serial --disable-overlap-schedule || exit 1
{
  describe_machine
  git -C "$repo" log -1 --format='perfgate %h %s' 2> /dev/null
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
db=sqlite:///$out/history.db
failed=0
launches=${LAUNCHES:-2}
for ((i = 0; i < 2 * launches; i++)); do
  # overlap, serial, serial, overlap, ...: neither variant always goes first
  if (((i % 4 == 0) || (i % 4 == 3))); then variant=overlap; else variant=serial; fi
  echo "== $(date -u +%FT%TZ) launch $((i / 2 + 1)) of $variant"
  start=$SECONDS
  timeout --kill-after=20 "${LAUNCH_S:-120}" "$python" -m perfgate run --config "$config" \
    --scenario "$variant" --no-gate --db "$db" --report '' > "$state/launch.log" 2>&1 ||
    failed=1
  tail -25 "$state/launch.log"
  echo "== $variant ended after $((SECONDS - start)) s"
done
for variant in overlap serial; do
  "$python" "$repo/benchmarks/launch_noise.py" "$out/history.db" "$variant" \
    --out "$out/$variant.md" || failed=1
done
rm -rf "$state"
record_finish "$failed" "$state=STATE" "$out=OUT"
