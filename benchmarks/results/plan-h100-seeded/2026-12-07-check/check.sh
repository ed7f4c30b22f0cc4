#!/usr/bin/env bash
# On a card that is not an H200: this checkout's code on a GPU, seeded weights (no training):
# `perfgate plan` at steps 10 with two confirmations (launch path, chunked forecast).
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
repo=$PWD
: "${OUT:=$repo/.cache/out/check}"
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpu.txt"
site=$repo/.cache/site
python3 -c 'import sqlalchemy, alembic, mako, pytest_benchmark' 2> /dev/null ||
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$repo"/.cache/gate-wheels/*.whl
export PYTHONPATH="$repo:$site" PYTEST_PLUGINS=perfgate.plugin
git -C "$repo" rev-parse --short HEAD 2> /dev/null | tee "$OUT/commit.txt"
/usr/bin/time -f '%e s wall' timeout 500 python3 -m perfgate plan --config benchmarks/plan-gpu-seeded.toml \
  --scenario embedded-large-gpu-seeded --steps 10 --confirm 2 --db "sqlite:///$OUT/history.db" \
  --markdown "$OUT/plan.md" --json "$OUT/plan.json" 2>&1 | tee "$OUT/run.log"
echo "== plan exit ${PIPESTATUS[0]} at ${SECONDS}s"
