#!/usr/bin/env bash
# A rank killed mid-run on the GPU: perfgate ends within 10 s with exit 69 naming it, nothing is
# left, and the GPUs' memory is back to where it was before the launch, with the timings.
#
#   benchmarks/gpu_rank_failure.sh OUTDIR [ROUNDS]           # CUDA (default 3 rounds)
#   benchmarks/gpu_rank_failure.sh --smoke OUTDIR [ROUNDS]   # CPU: the same cases, tiny models
#
# Runs benchmarks/rank_failures.py on the embedded engine's large configuration
# (perfgate/llama-large and its EAGLE-3 head, seeded weights: --load-format dummy, so no
# trained weights are needed; bf16, CUDA graphs), 256 new tokens a prompt so that a repeat
# lasts long enough to be killed inside. The embedded engine puts rank r on cuda:r, so the
# cases depend on the GPUs torch sees:
#   one GPU   tp1-repeat-sigkill: the server process (rank 0 of 1) SIGKILLed from outside
#             during repeat 2 of the plain server, its GPU memory released by the kernel;
#   two GPUs  that, and at TP2: rank 1 SIGKILLed from outside during a repeat, rank 0 (the
#             server) likewise, rank 1 ending itself by SIGKILL during a repeat and by exit
#             code 134 between two repeats (--debug-rank-exit), with NCCL's all-reduces
#             waiting on the dead rank.
# Each case is judged as rank_failures.py judges it: exit 69 within 10 s of the death, the
# rank, its exit status (and its last line, where it ends itself) named, no process left in a
# process group of the run or carrying its environment tag, and every GPU back within 512 MiB
# of its memory before the launch when perfgate has exited; the memory's return within 64 MiB
# is timed from the death. OUTDIR gets results.md, results.json and run.log, and failed/
# with perfgate's output of any case that failed.
#
# Needs perfgate's dependencies importable (an existing PYTHONPATH is kept: a folder of
# SQLAlchemy, alembic, Mako and greenlet, as benchmarks/results/tp2-h200x2.md used, or the
# staged SGLang install of benchmarks/sglang_live.sh, which holds them) and PYTHON (default
# python3) with a CUDA torch; perfgate's pytest plugin is named in PYTEST_PLUGINS where
# perfgate is not installed (record.sh). NCCL_NVLS_ENABLE stays 0. On one H200 a round took
# 30-41 s (5 rounds in 151.5 s: benchmarks/results/rank-failures-h200.md); on the CPU
# (--smoke, 1 round) 30 s on 2 cores.
# Exit code: that of rank_failures.py (0 when every case ended as required, 1 otherwise).
set -u -o pipefail

# shellcheck source=record.sh source-path=SCRIPTDIR
source "$(dirname "$0")/record.sh"
record_args 1 2 "[ROUNDS]" "$@"
rounds=${args[0]:-3}
record_start "$out"
use_checkout
cd "$repo" || exit 1

if [[ $smoke -eq 1 ]]; then
  gpus=0
  flags=(--device cpu --max-new-tokens 8)
else
  gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())') || gpus=0
  if [[ $gpus -lt 1 ]]; then
    echo "no GPU is visible to $python's torch; run with --smoke on a CPU" >&2
    exit 69
  fi
  flags=(--device cuda --model perfgate/llama-large --draft perfgate/eagle3-llama-large
    --extra-arg=--load-format --extra-arg=dummy --max-new-tokens 256
    --sigkill-max-new-tokens 256)
fi
cases=tp1-repeat-sigkill
if [[ $gpus -ge 2 || $smoke -eq 1 ]]; then
  cases+=,tp2-repeat-sigkill,tp2-repeat-sigkill0,tp2-repeat-kill,tp2-between-exit
fi
if [[ $smoke -eq 0 ]]; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv || true
fi
"$python" benchmarks/rank_failures.py --out "$out" --rounds "$rounds" --cases "$cases" \
  "${flags[@]}"
record_finish $?
