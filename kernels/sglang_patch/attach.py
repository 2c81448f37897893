"""Attach the patch to SGLang's modules as they are imported (a sys.meta_path hook), never editing files.

`install(index_keys)` checks the installed SGLang against targets.TARGETS first and raises
PatchRefused on any difference; then modules already imported are patched at once and the rest
when they are first imported, in this process. The launcher makes spawned children do the same.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Callable

from kernels.sglang_patch import ENV_INDEX_KEYS, INDEX_KEYS, METRIC_NAME, PATCH_VERSION, SGLANG_VERSION
from kernels.sglang_patch.targets import CONFIGURATOR, INDEXER, POOL, check_installed
from kernels.sglang_patch.upstream_topk import ENV_TOPK, OURS, SGLANG, SGLANG_TOPK_V2_ENV, choose


class PatchRefused(RuntimeError):
    """The installed SGLang is not the one the patch was written for (or index_keys is unknown)."""


def _patch_pool(module: ModuleType) -> None:
    from kernels.sglang_patch import bf16_indexer

    module.get_dsv4_indexer_bytes_per_token = bf16_indexer.bytes_per_token(module.get_dsv4_indexer_bytes_per_token)
    module.DeepSeekV4IndexerPool.set_index_fused = bf16_indexer.set_index_fused
    export_metric("bf16")


def _patch_configurator(module: ModuleType) -> None:
    from kernels.sglang_patch import bf16_indexer

    # pool_configurator imported the function by name: its copy sizes the pools' memory budget (when
    # the pool module was patched first, that name is already the patched function)
    if not getattr(module.get_dsv4_indexer_bytes_per_token, "__opsbot_patch__", False):
        module.get_dsv4_indexer_bytes_per_token = bf16_indexer.bytes_per_token(module.get_dsv4_indexer_bytes_per_token)


def _patch_indexer(module: ModuleType) -> None:
    from kernels.sglang_patch import bf16_indexer

    mixin = module.C4IndexerBackendMixin
    mixin.forward_c4_indexer = bf16_indexer.forward_c4_indexer(mixin.forward_c4_indexer)


def _module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    _module(POOL): _patch_pool,
    _module(CONFIGURATOR): _patch_configurator,
    _module(INDEXER): _patch_indexer,
}
PATCHED: set[str] = set()


def _apply(name: str, module: ModuleType) -> None:
    if name not in PATCHED:
        PATCHES[name](module)
        PATCHED.add(name)


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then patches the fresh module before anyone else sees it."""

    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self.inner, self.name = inner, name

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _apply(self.name, module)

    def __getattr__(self, attr):  # get_source, get_filename... for inspect and tracebacks
        return getattr(self.inner, attr)


class _PatchingFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in PATCHES or name in PATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, name)
        return spec


def install(index_keys: str) -> str:
    """Check, then attach for `index_keys`; returns the installed SGLang version. fp8 attaches nothing."""
    if index_keys not in INDEX_KEYS:
        raise PatchRefused(f"index_keys must be one of {', '.join(INDEX_KEYS)}; got {index_keys!r}")
    if index_keys == "fp8":
        return SGLANG_VERSION
    problems = check_installed()
    if problems:
        raise PatchRefused("; ".join(problems))
    if not any(isinstance(f, _PatchingFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchingFinder())
    for name in PATCHES:
        if name in sys.modules:
            _apply(name, sys.modules[name])
    os.environ[ENV_INDEX_KEYS] = index_keys
    settle_topk()
    return SGLANG_VERSION


_TOPK: list[tuple[str, str]] = []


def settle_topk() -> tuple[str, str]:
    """(whose top-k, why not SGLang's) for this server: decided once, by the first process (the
    launcher), and inherited through ENV_TOPK by every process SGLang spawns. With ours, SGLang's
    own v2 top-k planning is switched off for all of them (upstream_topk says why)."""
    if not _TOPK:
        inherited = os.environ.get(ENV_TOPK)
        chosen, why = (inherited, "") if inherited in (SGLANG, OURS) else choose()
        os.environ[ENV_TOPK] = chosen
        if chosen == OURS:
            os.environ[SGLANG_TOPK_V2_ENV] = "false"
        _TOPK.append((chosen, why))
    return _TOPK[0]


_EXPORTED: list[object] = []


def export_metric(index_keys: str) -> None:
    """`opsbot_dsv4_patch_info{version,index_keys,sglang} 1` in SGLang's Prometheus multiprocess
    directory, which its `/metrics` collects (sglang/srt/utils/common.py::add_prometheus_middleware,
    0.5.23). Only in a process that already has PROMETHEUS_MULTIPROC_DIR (the schedulers, under
    --enable-metrics): importing prometheus_client earlier would fix its value class before SGLang
    sets the directory."""
    if _EXPORTED or "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        return
    from prometheus_client import Gauge

    gauge = Gauge(METRIC_NAME, "opsbot DeepSeek-V4 indexer patch attached to this SGLang (1)",
                  ["version", "index_keys", "sglang"], multiprocess_mode="max")
    gauge.labels(version=PATCH_VERSION, index_keys=index_keys, sglang=SGLANG_VERSION).set(1)
    _EXPORTED.append(gauge)
