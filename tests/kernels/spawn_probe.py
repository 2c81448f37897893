"""Run under the launcher: does a child started with multiprocessing's spawn method carry the hook,
and which top-k (and SGLang's v2 top-k switch) does it inherit?"""

import multiprocessing
import os
import sys


def child(queue) -> None:
    from kernels.sglang_patch.attach import _PatchingFinder

    hooked = any(isinstance(f, _PatchingFinder) for f in sys.meta_path)
    queue.put(f"{hooked} topk={os.environ.get('OPSBOT_DSV4_TOPK', '')} v2={os.environ.get('SGLANG_OPT_USE_TOPK_V2', '')}")


if __name__ == "__main__":
    from tests.kernels.spawn_probe import child as importable_child  # pickled by module name, not __main__

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=importable_child, args=(queue,))
    proc.start()
    print(f"child hooked: {queue.get(timeout=120)}")
    proc.join()
