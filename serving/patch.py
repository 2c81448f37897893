"""The bf16 index-key patch as the deployment sees it: what it supports, its files, its start-up line.

Pure. The patch itself lives in ``kernels/sglang_patch/`` (it attaches at process start through a
launcher, ``python3 -m kernels.sglang_patch.launch --index-keys bf16 sglang.launch_server ARGS``,
and refuses an SGLang whose patched functions differ from the ones it was written for). This module
reads the line the patched process prints at start with opsbot/parse/patch.py, the probe's parser,
so ``deploy apply``'s check and the probe read it the same way. opsbot does not import the node-side package; the names
and the format below equal its constants (``kernels/sglang_patch/__init__.py``), which a test checks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from opsbot.parse.patch import PATCH_NAME, PatchLine, parse_patch_line

__all__ = ["KNOWN_SGLANG", "PATCH_MODULE", "PATCH_NAME", "PatchFile", "PatchLine", "attached_line",
           "last_patch_line", "parse_patch_line", "patch_files", "refused_line"]

ROOT = Path(__file__).resolve().parents[1]
PATCH_DIR = ROOT / "kernels"
PATCH_MODULE = "kernels.sglang_patch.launch"
# SGLang releases whose patched functions the patch carries hashes for (kernels/sglang_patch)
KNOWN_SGLANG = ("0.5.23",)


def attached_line(version: str, index_keys: str, sglang: str) -> str:
    return f"{PATCH_NAME} {version} attached: index_keys={index_keys} sglang={sglang}"


def refused_line(reason: str) -> str:
    return f"{PATCH_NAME} refused: {reason}"


def last_patch_line(text: str) -> PatchLine | None:
    """The last patch line in a journal excerpt (a restarted process prints its own)."""
    found = None
    for line in text.splitlines():
        found = parse_patch_line(line) or found
    return found


@dataclass(frozen=True)
class PatchFile:
    relpath: str  # under the install root, e.g. kernels/sglang_patch/launch.py
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def patch_files(root: Path = PATCH_DIR) -> list[PatchFile]:
    """The Python files the node needs: the kernels package (ops and the sglang_patch launcher)."""
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts and "tests" not in p.parts)
    return [PatchFile(str(p.relative_to(root.parent)), p.read_bytes()) for p in files]
