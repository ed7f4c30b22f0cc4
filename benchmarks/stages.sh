# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # summary, failed, repo, hidden, hidden_as: the caller's
# Shared by the GPU record scripts (gpu_tp2.sh, gpu_real_weights.sh): source it, then call
# `check_stages` on the stages asked for and run each step through `step`.
#
# The caller sets: summary (the summary.md every step adds a row to), failed (0; a step that
# ends unexpectedly sets it to 1), repo (the checkout, shown as .) and hidden/hidden_as (a
# folder of this machine, shown as the name hidden_as), so that the rows name no local path.

# check_stages "KNOWN STAGES" STAGE...: exit 64 naming the known stages on an unknown one.
check_stages() {
  local known=$1 stage_name
  shift
  for stage_name in "$@"; do
    if [[ " $known " != *" $stage_name "* ]]; then
      echo "$0: unknown stage '$stage_name'; stages are ${known// /, }" >&2
      exit 64
    fi
  done
}

# step NAME EXPECTED SECONDS COMMAND...: run with a time limit; record its exit code in the
# summary, whatever it is, and go on. EXPECTED is a code or codes, e.g. 0 or 0|75.
step() {
  local name=$1 want=$2 seconds=$3 started rc
  shift 3
  started=$(date +%s)
  echo "== $(date -u +%FT%TZ) $name: $*"
  timeout --signal=TERM --kill-after=30 "$seconds" "$@"
  rc=$?
  local took=$(($(date +%s) - started))
  echo "== $name: exit $rc after $took s (expected $want)"
  local shown=${*//$hidden/$hidden_as}
  echo "| $name | $rc | ${want//|/ or } | $took | \`${shown//$repo/.}\` |" >> "$summary"
  if ! [[ $rc =~ ^($want)$ ]]; then
    failed=1
  fi
  return "$rc"
}
