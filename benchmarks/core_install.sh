#!/usr/bin/env bash
# What `pip install perfgate` costs without the embedded engine's extra, and with it.
#
#   benchmarks/core_install.sh OUT.md
#
# Builds perfgate's wheel from this checkout's files (copied first, so the build leaves nothing
# in it), then installs it twice into fresh virtual environments, as pip resolves it from the
# configured index: `WHEEL` (the core) and `WHEEL[embedded]` (with torch and safetensors, in
# whichever build of torch the index gives: on PyPI, its CUDA build). Writes the seconds, the
# size on disk and the packages of each to OUT.md. pip's cache is left as it is: warm, the
# seconds are mostly unpacking. PYTHON picks the interpreter (default python3); it needs
# setuptools >= 68 (the build runs without isolation).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUT.md" >&2
  exit 64
fi
out=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/core-install.XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir "$work/source"
git -C "$repo" ls-files -z --cached --others --exclude-standard \
  | (cd "$repo" && xargs -0 cp --parents -t "$work/source" 2> /dev/null || true)
"$python" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$work/wheels" \
  "$work/source"
wheel=$(echo "$work"/wheels/perfgate-*.whl)

install() { # install NAME REQUIREMENT: a fresh venv, REQUIREMENT installed; one table row
  local name=$1 requirement=$2 venv=$work/$1 started took
  "$python" -m venv "$venv"
  started=$(date +%s%N)
  "$venv/bin/python" -m pip install --quiet "$requirement" > "$work/$name.log" 2>&1 \
    || { cat "$work/$name.log" >&2; exit 1; }
  took=$((($(date +%s%N) - started) / 100000000)) # tenths of a second
  local size packages torch
  size=$(du -sm "$venv" | cut -f1)
  packages=$("$venv/bin/python" -m pip list --format freeze 2> /dev/null | wc -l)
  torch=$("$venv/bin/python" -m pip list --format freeze 2> /dev/null | grep -i '^torch==' || echo none)
  printf "| \`pip install %s\` | %d.%d | %s | %s | %s |\n" "$name" $((took / 10)) $((took % 10)) \
    "$size" "$packages" "$torch"
  rm -rf "$venv"
}

{
  echo "# \`pip install perfgate\`: the core, and with the embedded engine"
  echo
  echo "$(date -u +%FT%TZ), $(nproc) cores, $("$python" --version), pip's cache warm."
  echo "Fresh virtual environments; packages counted with pip and setuptools."
  echo
  echo "| install | seconds | MB on disk | packages | torch |"
  echo "| --- | ---: | ---: | ---: | --- |"
  install perfgate "$wheel"
  install "'perfgate[embedded]'" "${wheel}[embedded]"
} > "$out"
cat "$out"
