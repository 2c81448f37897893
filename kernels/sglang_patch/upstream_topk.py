"""Whose top-k the patched indexer runs: SGLang's own wherever 0.5.23's code path would run it, ours
(`kernels.topk`) only where SGLang's cannot be loaded.

bf16 keys change the bytes the logits read, not the logits: they are fp32 either way, so the top-k
that upstream's `forward_c4_indexer` runs on DeepGEMM's fp32 logits (`run_topk_transform`,
`srt/layers/attention/dsv4/indexer.py:948-997` in 0.5.23: torch / FlashInfer / the JIT
`topk_transform_paged_v2` with the per-forward plan / the JIT `topk_transform_paged`, by
`dsa_topk_backend` and `SGLANG_OPT_USE_TOPK_V2`) takes ours unchanged. The JIT kernels
(`kernels/jit/csrc/deepseek_v4/topk_v{1,2}.cuh`) are compiled by SGLang at first use with nvcc and
apache-tvm-ffi (`kernels/jit/utils/compile/loader.py::load_jit`, `toolchain.py::cuda_home`).

The launcher decides once, before SGLang is imported, by reading the installed files (no SGLang import,
no compile): the two kernel sources and the three functions with the parameter names recorded here,
tvm_ffi importable, nvcc where SGLang would look for it, then a CUDA GPU visible to torch (the JIT
builds for the GPU it finds). Any problem means "ours", said on the
start line with the reason, and `SGLANG_OPT_USE_TOPK_V2=false` for the whole server so that
upstream's per-forward metadata does not plan for a kernel it cannot load
(`srt/layers/attention/dsv4/metadata.py:275`, `PagedIndexerMetadata.__post_init__`). A JIT build
that passes this check and still fails at first use fails the start (CUDA-graph capture) with
SGLang's own error, as it would unpatched: never a server running half on one top-k.

Imports neither sglang nor, unless everything else is there, torch.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
from pathlib import Path

from kernels.sglang_patch.targets import find_def, params_of, sglang_root

TOPK_MODULE = "sglang/kernels/ops/attention/dsv4/topk.py"
KERNEL_SOURCES = ("sglang/kernels/jit/csrc/deepseek_v4/topk_v1.cuh", "sglang/kernels/jit/csrc/deepseek_v4/topk_v2.cuh")
# What the patched forward calls, as upstream's run_topk_transform calls it (0.5.23 topk.py:110, :150, :209)
CALLS: dict[str, tuple[str, ...]] = {
    "topk_transform_paged": ("scores", "seq_lens", "page_tables", "out_page_indices", "page_size", "out_raw_indices"),
    "plan_topk_v2": ("seq_lens", "static_threshold", "out"),
    "topk_transform_paged_v2": ("scores", "seq_lens", "page_tables", "out_page_indices", "page_size", "metadata",
                                "out_raw_indices"),
}
# Set by the launcher (and inherited by the processes SGLang spawns): SGLANG or OURS.
ENV_TOPK = "OPSBOT_DSV4_TOPK"
SGLANG, OURS = "sglang", "opsbot"
# sglang/srt/environ.py:1486 (0.5.23): SGLANG_OPT_USE_TOPK_V2 = EnvBool(True)
SGLANG_TOPK_V2_ENV = "SGLANG_OPT_USE_TOPK_V2"


def nvcc_path(env: dict[str, str]) -> Path:
    """The nvcc SGLang's JIT would run: $CUDA_HOME or $CUDA_PATH, else the one on PATH, else /usr/local/cuda
    (0.5.23 kernels/jit/utils/compile/toolchain.py::cuda_home and device_compiler_path)."""
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if home is None:
        found = shutil.which("nvcc", path=env.get("PATH"))
        home = str(Path(found).parent.parent) if found else "/usr/local/cuda"
    return Path(home) / "bin" / "nvcc"


def source_problems(root: Path) -> list[str]:
    """What is missing or changed among the top-k files of the SGLang installed under `root`."""
    problems = [f"{src} is missing" for src in KERNEL_SOURCES if not (root / src).is_file()]
    module = root / TOPK_MODULE
    if not module.is_file():
        return [f"{TOPK_MODULE} is missing", *problems]
    tree = ast.parse(module.read_text())
    for name, params in CALLS.items():
        node = find_def(tree, name)
        if node is None:
            problems.append(f"{TOPK_MODULE}::{name} is missing")
        elif params_of(node) != params:
            problems.append(f"{TOPK_MODULE}::{name}{params_of(node)} differs from {params}")
    return problems


def toolchain_problems(env: dict[str, str]) -> list[str]:
    problems = []
    if importlib.util.find_spec("tvm_ffi") is None:
        problems.append("tvm_ffi (apache-tvm-ffi) is not installed")
    nvcc = nvcc_path(env)
    if not nvcc.is_file():
        problems.append(f"no nvcc at {nvcc}")
    return problems


def gpu_problems() -> list[str]:
    """SGLang's JIT reads the GPU's architecture to build (`is_arch_support_pdl`, the v2 occupancy probe)."""
    try:
        import torch
    except ImportError:
        return ["torch is not installed"]
    return [] if torch.cuda.is_available() else ["no CUDA GPU is visible"]


def choose(env: dict[str, str] | None = None) -> tuple[str, str]:
    """(SGLANG, "") when SGLang's own top-k can be loaded here, else (OURS, why not)."""
    env = dict(os.environ if env is None else env)
    root = sglang_root()
    problems = (["sglang is not installed"] if root is None else source_problems(root)) + toolchain_problems(env)
    problems = problems or gpu_problems()  # torch (seconds to import) only when all else is there
    if problems:
        return OURS, "sglang's top-k cannot be loaded: " + "; ".join(problems)
    return SGLANG, ""
