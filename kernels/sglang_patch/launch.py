"""Launcher: `python -m kernels.sglang_patch.launch --index-keys bf16 sglang.launch_server ARGS...`.

Why a launcher and not only an import hook: the hook has to be installed before SGLang's modules
load, in the server process and in every scheduler process SGLang starts with multiprocessing's
spawn method. A spawned child imports its parent's `__main__` module by name, so the server is run
with `runpy.run_module(..., alter_sys=False)`: `__main__` stays this module, and each child, on
importing it, installs the same hook (the index_keys travel in ENV_INDEX_KEYS). No file of SGLang
or of the Python environment (.pth) is touched, and an unpatched `python -m sglang.launch_server`
on the same node stays upstream.

On success one line goes to stderr (PATCH_LINE_FORMAT, naming whose top-k runs: upstream_topk) before SGLang starts; when the installed
SGLang differs from the one the patch was written for, one line (REFUSAL_LINE_FORMAT) and exit
status REFUSAL_EXIT_CODE, before SGLang starts: the role fails at start instead of running half-patched.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from kernels.sglang_patch import ENV_INDEX_KEYS, INDEX_KEYS, REFUSAL_EXIT_CODE, patch_line, refusal_line
from kernels.sglang_patch.attach import PatchRefused, install, settle_topk


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m kernels.sglang_patch.launch")
    parser.add_argument("--index-keys", choices=INDEX_KEYS, required=True)
    parser.add_argument("module", help="the module to run as __main__, e.g. sglang.launch_server")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse(sys.argv[1:] if argv is None else argv)
    try:
        sglang = install(opts.index_keys)
    except PatchRefused as refused:
        print(refusal_line(str(refused)), file=sys.stderr, flush=True)
        return REFUSAL_EXIT_CODE
    os.environ[ENV_INDEX_KEYS] = opts.index_keys
    if opts.index_keys != "fp8":  # fp8 is upstream: nothing attached, nothing to claim
        topk, why = settle_topk()
        print(patch_line(opts.index_keys, sglang, topk, why), file=sys.stderr, flush=True)
    sys.argv = [opts.module, *opts.args]
    runpy.run_module(opts.module, run_name="__main__", alter_sys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
elif __name__ == "__mp_main__" and os.environ.get(ENV_INDEX_KEYS) == "bf16":
    # a process spawned by the patched server: attach before it unpickles anything of SGLang's
    try:
        install("bf16")
    except PatchRefused as refused:
        print(refusal_line(str(refused)), file=sys.stderr, flush=True)
        sys.exit(REFUSAL_EXIT_CODE)
