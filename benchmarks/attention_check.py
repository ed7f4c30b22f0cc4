"""The triton attention backend against SDPA on a GPU, in bfloat16.

    python benchmarks/attention_check.py            # on a CUDA machine, ~1 minute

The CPU tests run the kernel in float32 under Triton's interpreter; this checks the compiled
kernel on the large configuration's shapes (16 heads of 128, batch 8): the largest difference
from SDPA for a decode (1 query) and a verify (4 queries) at several cache lengths, and, for
perfgate/llama-large with seeded weights, compiled, how far the logits of a decode and a verify
step move and how many of their greedy tokens differ between the two backends. Prints a
Markdown table; exit 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from perfgate.engines.embedded.compiling import compile_layers
from perfgate.engines.embedded.loading import load_target
from perfgate.engines.embedded.model import (
    causal_view,
    fuse_projections,
    kv_bucket,
    use_attention_backend,
)
from perfgate.engines.embedded.triton_attention import attend


def kernel_rows() -> list[str]:
    rows = []
    generator = torch.Generator(device="cuda").manual_seed(0)
    for queries in (1, 4):
        for position in (10, 200, 700):
            slots = kv_bucket(position + queries, 1024)
            shape = (8, 16, 1024, 128)
            k, v = (torch.randn(shape, generator=generator, device="cuda").bfloat16() for _ in "kv")
            q = torch.randn(8, 16, queries, 128, generator=generator, device="cuda").bfloat16()
            ends = position + torch.arange(queries, device="cuda")
            seen = torch.arange(slots, device="cuda").view(1, 1, 1, -1) <= ends.view(1, 1, -1, 1)
            mask = torch.full((8, 1, queries, slots), float("-inf"), device="cuda").bfloat16()
            mask.masked_fill_(seen, 0.0)
            ref = F.scaled_dot_product_attention(
                q, k[:, :, :slots], v[:, :, :slots], attn_mask=mask
            )
            got = attend(q, k, v, mask)
            diff = (got.float() - ref.transpose(1, 2).float()).abs().max().item()
            rows.append(f"| kernel | {queries} | {position} | {diff:.2e} | |")
    return rows


def model_rows() -> list[str]:
    model = load_target(
        "perfgate/llama-large", torch.device("cuda"), torch.bfloat16, load_format="dummy"
    )
    model.setup_cache(8, 1024)
    fuse_projections(model)
    compile_layers(model)
    prompt = torch.randint(0, 256, (8, 200), device="cuda")
    rows = []
    with torch.inference_mode():
        positions = torch.arange(200, device="cuda").expand(8, 200)
        model(prompt, positions, causal_view(positions, kv_bucket(200, 1024)))  # fill the cache
        for tokens in (1, 4):
            ids = torch.randint(0, 256, (8, tokens), device="cuda")
            at = 200 + torch.arange(tokens, device="cuda").expand(8, tokens)
            logits = {}
            for backend in ("torch_native", "triton"):
                use_attention_backend(model, backend)
                out, _ = model(ids, at, causal_view(at, kv_bucket(200 + tokens, 1024)))
                logits[backend] = out.float()
            diff = (logits["triton"] - logits["torch_native"]).abs().max().item()
            changed = (logits["triton"].argmax(-1) != logits["torch_native"].argmax(-1)).sum()
            rows.append(
                f"| model, compiled | {tokens} | 200 | {diff:.2e} | {changed} of {8 * tokens} |"
            )
    return rows


def main() -> int:
    print("| what | queries | position | max abs difference | greedy tokens changed |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for row in kernel_rows() + model_rows():
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
