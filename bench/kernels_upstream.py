"""sglang 0.5.23's own DeepSeek-V4 top-k kernels (JIT-compiled CUDA, `sglang/kernels/ops/attention/dsv4/topk.py`:
`topk_transform_paged` = topk_v1.cuh, `topk_transform_paged_v2` = topk_v2.cuh) beside `kernels.topk.topk`,
on the same fp32 logits, in one run: same selected slots, and CUDA-graph µs.

    python -m bench.kernels_upstream [--json PATH]

Needs a GPU, nvcc and apache-tvm-ffi (SGLang compiles these kernels at first use); the modules are
imported with SGLang's CUDA detection held off (compare.cuda_detection_held_off says why).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from bench.kernels import timed_graph
from kernels.layout import PAGE, V4_FLASH_TOPK
from kernels.sglang_patch.compare import cuda_detection_held_off
from kernels.topk import topk

CASES = ((1, 4096), (1, 65536), (64, 4096), (64, 16384), (64, 65536), (128, 16384))


def same_sets(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.sort(dim=1).values, b.sort(dim=1).values)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    with cuda_detection_held_off():
        from sglang.kernels.ops.attention.dsv4 import topk as up
    rows = []
    for batch, entries in CASES:
        g = torch.Generator(device="cuda").manual_seed(batch + entries)
        pages = entries // PAGE
        table = torch.randperm(batch * pages, generator=g, device="cuda").to(torch.int32).reshape(batch, pages)
        logits = torch.randn(batch, entries, generator=g, device="cuda")
        lens = torch.full((batch,), entries, dtype=torch.int32, device="cuda")
        ours = topk(logits, lens, V4_FLASH_TOPK, block_table=table)
        r = {"B": batch, "L": entries, "k": V4_FLASH_TOPK,
             "ours_us": timed_graph(lambda: topk(logits, lens, V4_FLASH_TOPK, block_table=table))}
        for name, run in (
            ("upstream_v1", lambda out: up.topk_transform_paged(logits, lens, table, out, PAGE)),
            ("upstream_v2", lambda out, plan=None: up.topk_transform_paged_v2(
                logits, lens, table, out, PAGE, up.plan_topk_v2(lens) if plan is None else plan)),
        ):
            try:
                out = torch.full((batch, V4_FLASH_TOPK), -1, dtype=torch.int32, device="cuda")
                run(out)
                torch.cuda.synchronize()
                r[f"{name}_same_slots"] = same_sets(out, ours)
                if name == "upstream_v2":
                    plan = up.plan_topk_v2(lens)
                    r[f"{name}_us"] = timed_graph(lambda: run(out, plan))
                else:
                    r[f"{name}_us"] = timed_graph(lambda: run(out))
            except Exception as e:  # a JIT build that fails here is reported, not hidden
                r[f"{name}_error"] = f"{type(e).__name__}: {str(e)[-300:]}"
        print(json.dumps(r), flush=True)
        rows.append(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
