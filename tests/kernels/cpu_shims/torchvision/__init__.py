"""CPU-test import shim for torchvision, used only by tests/kernels/test_sglang_patch.py's subprocess
that imports SGLang 0.5.23 on a machine without a GPU, and only when the real torchvision cannot load.

Why: SGLang's `sglang.srt.configs` package imports vision-model configs that import torchvision at
module level; PyPI's torchvision wheels link CUDA torch (libc10_cuda.so), so next to the CPU torch
they fail at import, and the CPU build lives on an index CI cannot reach. These modules give the
names those imports bind (InterpolationMode, a version) and nothing the indexer or memory pool
runs goes through them.
"""

__version__ = "0.28.0"


def __getattr__(name):
    return type(name, (), {})
