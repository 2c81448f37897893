"""``python3 -m sglang_emulator.patch_launch MODULE ARGS``: the lab's stand-in for the bf16 patch's launcher.

The real launcher (``kernels/sglang_patch``) imports SGLang, checks every function it replaces
against the hashes it was written for, attaches, prints one line and runs MODULE. The emulator has
no SGLang to patch, so this one emulates the attach: it prints the same line and runs MODULE
(``sglang_emulator.launch_server``) in this process. With ``SGLANG_EMULATOR_PATCH_REFUSE=REASON``
in the environment it prints the refusal line instead and exits 1, as the real launcher does
on an SGLang it does not know: the role never starts half-patched. The line format is
``serving/patch.py``'s (a test parses what this prints with it).
"""

from __future__ import annotations

import os
import runpy
import sys

from . import logfmt
from .scheduler import VERSION

PATCH_NAME = "opsbot-dsv4-patch"
EMULATED_VERSION = "emulated"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        sys.stderr.write("usage: python3 -m sglang_emulator.patch_launch MODULE [ARGS...]\n")
        sys.exit(2)
    module, args = argv[0], argv[1:]
    refuse = os.environ.get("SGLANG_EMULATOR_PATCH_REFUSE")
    if refuse:
        logfmt.log(f"{PATCH_NAME} refused: {refuse}")
        sys.exit(1)
    logfmt.log(f"{PATCH_NAME} {EMULATED_VERSION} attached: index_keys=bf16 sglang={VERSION}")
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
