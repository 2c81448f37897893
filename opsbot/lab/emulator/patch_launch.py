"""``python3 -m sglang_emulator.patch_launch --index-keys bf16 MODULE ARGS``: the lab's stand-in for the patch launcher.

The real launcher (``kernels/sglang_patch/launch.py``, same command line) imports SGLang, checks
every function it replaces against the hashes it was written for, attaches, prints one line to
stderr and runs MODULE. The emulator has no SGLang to patch, so this one emulates the attach: it
prints the same line and runs MODULE (``sglang_emulator.launch_server``) in this process. With
``SGLANG_EMULATOR_PATCH_REFUSE=REASON`` in the environment it prints the refusal line instead and
exits 3, as the real launcher does on an SGLang it does not know: the role never starts
half-patched. The line format is ``serving/patch.py``'s (a test parses what this prints with it).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from .scheduler import VERSION

PATCH_NAME = "opsbot-dsv4-patch"
EMULATED_VERSION = "emulated"
REFUSAL_EXIT_CODE = 3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m sglang_emulator.patch_launch")
    parser.add_argument("--index-keys", choices=("bf16", "fp8"), required=True)
    parser.add_argument("module")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args(sys.argv[1:] if argv is None else argv)
    refuse = os.environ.get("SGLANG_EMULATOR_PATCH_REFUSE")
    if refuse:
        print(f"{PATCH_NAME} refused: {' '.join(refuse.split())}", file=sys.stderr, flush=True)
        sys.exit(REFUSAL_EXIT_CODE)
    print(f"{PATCH_NAME} {EMULATED_VERSION} attached: index_keys={opts.index_keys} sglang={VERSION}",
          file=sys.stderr, flush=True)
    os.environ["SGLANG_EMULATOR_INDEX_KEYS"] = opts.index_keys  # the emulated model's recall follows it
    sys.argv = [opts.module, *opts.args]
    runpy.run_module(opts.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
