"""Run under the launcher: does a child started with multiprocessing's spawn method carry the hook?"""

import multiprocessing
import sys


def child(queue) -> None:
    from kernels.sglang_patch.attach import _PatchingFinder

    queue.put(any(isinstance(f, _PatchingFinder) for f in sys.meta_path))


if __name__ == "__main__":
    from tests.kernels.spawn_probe import child as importable_child  # pickled by module name, not __main__

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=importable_child, args=(queue,))
    proc.start()
    print(f"child hooked: {queue.get(timeout=120)}")
    proc.join()
