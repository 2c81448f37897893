"""What the patch touches in SGLang, and the check that it is still what the patch was written for.

Each target is a function or method in the pinned wheel's source, with its parameter names and the
sha256 of its source text (decorators to last line, dedented, trailing blanks stripped; comments
count). "replaced" targets are swapped for the patch's own; "relied on" ones are called or read
by it. Any difference refuses the patch: version, a missing file or def, a changed signature or hash.
Nothing here imports SGLang: the files are read with ast, from an installed package or a wheel.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

from kernels.sglang_patch import SGLANG_VERSION

POOL = "sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
CONFIGURATOR = "sglang/srt/model_executor/pool_configurator.py"
INDEXER = "sglang/srt/layers/attention/dsv4/indexer.py"
COMPRESSOR = "sglang/srt/layers/attention/dsv4/compressor_v2.py"


@dataclass(frozen=True)
class Target:
    path: str  # inside the wheel / site-packages
    qualname: str  # "Class.method" or "function"
    params: tuple[str, ...]
    sha256: str
    role: str  # "replaced" or "relied on"

    @property
    def module(self) -> str:
        return self.path.removesuffix(".py").replace("/", ".")


# Recorded from sglang-0.5.23 (PyPI, cp311 and cp312 wheels carry the same sources):
# `python -m kernels.sglang_patch.targets WHEEL` prints these rows.
TARGETS: tuple[Target, ...] = (
    Target(POOL, "get_dsv4_indexer_bytes_per_token", ("index_head_dim", "use_fp4_indexer"),
           "ce6ffc404a1caed65527dcbafb003cfa669dc63949b24753642111e6e44d87bc", "replaced"),
    Target(POOL, "DeepSeekV4IndexerPool.set_index_fused", ("self", "layer_id", "loc", "cache_k"),
           "a08d7ff034f0de6d3e396384ac6d39266a1054ffbd8785b646f37d84321a774f", "replaced"),
    Target(POOL, "DeepSeekV4IndexerPool._create_buffer", ("self",), "befe061ff0d250d452120b28f9f8daae9ef90c886339c789b98f2196b0b942e6", "relied on"),
    Target(POOL, "DeepSeekV4IndexerPool.get_index_k_with_scale_buffer", ("self", "layer_id"),
           "50382f5deac377748c3701d6e3c4f9cd25e66b66732950feb31a4559a47c620a", "relied on"),
    Target(POOL, "DeepSeekV4TokenToKVPool.set_index_k_fused", ("self", "layer_id", "loc", "cache_k"),
           "684aaf352aba23ff00735dae91de32cc186b1dee2a2f5548fce8439a7bb74fe0", "relied on"),
    Target(CONFIGURATOR, "DSV4PoolConfigurator.__init__", ("self", "kvc"), "317b098a130850ccc0c30ea472872c4af35380828d6ff9e4cae06e2e16711446", "relied on"),
    Target(INDEXER, "C4IndexerBackendMixin.forward_c4_indexer",
           ("self", "x", "q_lora", "c4_indexer", "forward_batch", "alt_streams", "enable_multi_stream",
            "q_lora_ready", "skip_compressor", "q_lora_quant"),
           "1ffd2974e0bc9c5c8d96cfd5f82be9452d4b43314edafc8cd0461654e1d4b65b", "replaced"),
    Target(INDEXER, "C4Indexer.__init__",
           ("self", "config", "layer_id", "freqs_cis", "quant_config", "prefix", "alt_streams", "rotary_emb",
            "fp4_cos", "fp4_sin"),
           "d21bfc5870190f3bdc731c13f627ea14f87d5552474881783fb3f0121371e4f7", "relied on"),
    Target(INDEXER, "C4Indexer.compute_weights", ("self", "x", "skip_scale"), "e82a05de3f19227f18084c0728892db59336691048d6640bfb81fc39e72f473d", "relied on"),
    Target(COMPRESSOR, "CompressorBackendMixin.forward_unified",
           ("self", "x", "forward_batch", "layer_id", "compressor"), "d9154608495679f395dfe41f597c13b840abe501fd448c45b2cfdeb25270dd79", "relied on"),
)


def find_def(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The (possibly nested-in-class) function `qualname` at module level, or None."""
    body: list[ast.stmt] = tree.body
    *classes, name = qualname.split(".")
    for cls in classes:
        found = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if found is None:
            return None
        body = found.body
    return next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name), None)


def params_of(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    a = node.args
    return tuple(p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))


def source_hash(source: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """sha256 of the def's own text: decorators to its last line, dedented, trailing blanks stripped."""
    lines = source.splitlines()
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    text = textwrap.dedent("\n".join(line.rstrip() for line in lines[first - 1 : node.end_lineno]))
    return hashlib.sha256(text.encode()).hexdigest()


def check_sources(read: dict[str, str]) -> list[str]:
    """Problems with the given sources ({path: text}) against TARGETS; empty means the patch fits."""
    problems = []
    trees: dict[str, ast.Module] = {}
    for t in TARGETS:
        if t.path not in read:
            problems.append(f"{t.path} is missing")
            continue
        tree = trees.setdefault(t.path, ast.parse(read[t.path]))
        node = find_def(tree, t.qualname)
        if node is None:
            problems.append(f"{t.module}.{t.qualname} is missing")
        elif params_of(node) != t.params:
            problems.append(f"{t.module}.{t.qualname}{params_of(node)} differs from {t.params}")
        elif source_hash(read[t.path], node) != t.sha256:
            problems.append(f"{t.module}.{t.qualname} source hash differs ({source_hash(read[t.path], node)[:12]})")
    return problems


def wheel_sources(wheel: Path) -> dict[str, str]:
    """The targets' files as they are in a wheel."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        return {p: z.read(p).decode() for p in {t.path for t in TARGETS} if p in names}


def sglang_root() -> Path | None:
    """The directory holding the `sglang` package this interpreter would import (not importing it)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


def installed_sources() -> tuple[str | None, dict[str, str]]:
    """(installed sglang version or None, the targets' files) without importing sglang."""
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None, {}
    root = sglang_root()
    if root is None:
        return version, {}
    found = {}
    for path in {t.path for t in TARGETS}:
        if (root / path).is_file():
            found[path] = (root / path).read_text()
    return version, found


def check_installed() -> list[str]:
    """Why the patch must not attach to the SGLang this interpreter would import (empty: it may)."""
    version, read = installed_sources()
    if version is None:
        return ["sglang is not installed in this Python environment"]
    if version != SGLANG_VERSION:
        return [f"sglang {version} is installed; this patch is written for sglang {SGLANG_VERSION} only"]
    return check_sources(read)


def recorded_rows(wheel: Path) -> str:
    """The TARGETS rows' hashes as read from a wheel (to re-pin after reading a new SGLang by hand)."""
    read = wheel_sources(wheel)
    out = []
    for t in TARGETS:
        node = find_def(ast.parse(read[t.path]), t.qualname)
        out.append(f"{t.path}::{t.qualname} {params_of(node) if node else None} "
                   f"{source_hash(read[t.path], node) if node else '-'}")
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(recorded_rows(Path(sys.argv[1])))
