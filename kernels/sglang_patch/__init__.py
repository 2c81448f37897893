"""The node-side patch: SGLang 0.5.23's DeepSeek-V4 C4 indexer with bf16 index keys scored by kernels/.

Run through the launcher (`python -m kernels.sglang_patch.launch --index-keys bf16 sglang.launch_server ARGS`);
kernels/README.md says what it patches, why a launcher, and the two lines it prints.
"""

PATCH_NAME = "opsbot-dsv4-patch"
PATCH_VERSION = "0.1.0"
SGLANG_VERSION = "0.5.23"  # the only SGLang whose patched functions' hashes are recorded in targets.py
INDEX_KEYS = ("bf16", "fp8")  # fp8 = upstream, nothing attached
# The one line a patched process prints at start (stderr, so it lands in the unit's journal). topk is
# "sglang" (SGLang's own top-k kernels, as upstream runs them) or "opsbot (why sglang's cannot be loaded)".
PATCH_LINE_FORMAT = PATCH_NAME + " {version} attached: index_keys={index_keys} sglang={sglang} topk={topk}"
# The one line printed before a non-zero exit when the patch cannot attach.
REFUSAL_LINE_FORMAT = PATCH_NAME + " refused: {reason}"
REFUSAL_EXIT_CODE = 3
# For whoever reads the journal (probe, runbooks): the two lines above as regular expressions.
# This module imports neither torch nor sglang, so opsbot may import these constants.
PATCH_LINE_RE = (PATCH_NAME + r" (?P<version>\S+) attached: index_keys=(?P<index_keys>\w+) sglang=(?P<sglang>\S+)"
                 r"(?: topk=(?P<topk>\w+)(?: \((?P<topk_note>.*)\))?)?$")
REFUSAL_LINE_RE = PATCH_NAME + r" refused: (?P<reason>.+)$"
# Set by the launcher for the server and every process it spawns (SGLang starts its schedulers with spawn).
ENV_INDEX_KEYS = "OPSBOT_DSV4_INDEX_KEYS"
# A Prometheus gauge written into SGLang's multiprocess directory, so `/metrics` shows it under --enable-metrics.
METRIC_NAME = "opsbot_dsv4_patch_info"


def patch_line(index_keys: str, sglang: str = SGLANG_VERSION, topk: str = "sglang", note: str = "") -> str:
    chosen = f"{topk} ({' '.join(note.split())})" if note else topk
    return PATCH_LINE_FORMAT.format(version=PATCH_VERSION, index_keys=index_keys, sglang=sglang, topk=chosen)


def refusal_line(reason: str) -> str:
    return REFUSAL_LINE_FORMAT.format(reason=" ".join(reason.split()))
