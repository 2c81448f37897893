"""Whose top-k the patched indexer runs: SGLang's own where 0.5.23's code path would run it (read from
the pinned wheel's files), ours where it cannot be loaded, said on the launcher's start line and
inherited by spawned children; the dispatch mirrors upstream's run_topk_transform."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernels.sglang_patch import PATCH_LINE_RE, SGLANG_VERSION, bf16_indexer, patch_line
from kernels.sglang_patch.targets import wheel_sources
from kernels.sglang_patch.upstream_topk import (
    KERNEL_SOURCES,
    OURS,
    SGLANG,
    TOPK_MODULE,
    choose,
    nvcc_path,
    source_problems,
    toolchain_problems,
)
from tests.kernels import test_sglang_patch as pinned
from tests.kernels.test_sglang_patch import fake_site, launch

wheel = pinned.wheel  # the pinned sglang wheel, downloaded once (a module-scoped fixture)

TOPK_FILES = (TOPK_MODULE, *KERNEL_SOURCES)


def topk_sources(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as z:
        return {p: z.read(p).decode() for p in TOPK_FILES}


def fake_nvcc(tmp_path: Path) -> Path:
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    return tmp_path / "cuda"


def test_the_pinned_wheel_has_sglang_s_top_k_as_the_patch_calls_it(wheel, tmp_path):
    site = fake_site(tmp_path, SGLANG_VERSION, topk_sources(wheel))
    assert source_problems(site) == []


def test_a_missing_or_changed_top_k_is_named(wheel, tmp_path):
    read = topk_sources(wheel)
    changed = dict(read)
    changed[TOPK_MODULE] = read[TOPK_MODULE].replace("    metadata: torch.Tensor,\n", "    plan: torch.Tensor,\n", 1)
    assert changed[TOPK_MODULE] != read[TOPK_MODULE]
    [problem] = source_problems(fake_site(tmp_path / "a", SGLANG_VERSION, changed))
    assert problem.startswith(f"{TOPK_MODULE}::topk_transform_paged_v2(") and "differs from" in problem
    gone = {p: t for p, t in read.items() if not p.endswith("topk_v2.cuh")}
    assert source_problems(fake_site(tmp_path / "b", SGLANG_VERSION, gone)) == [f"{KERNEL_SOURCES[1]} is missing"]
    assert source_problems(fake_site(tmp_path / "c", SGLANG_VERSION, {})) == [
        f"{TOPK_MODULE} is missing", *(f"{s} is missing" for s in KERNEL_SOURCES)]


def test_nvcc_is_looked_for_where_sglang_s_jit_looks(tmp_path):
    home = fake_nvcc(tmp_path)
    assert nvcc_path({"CUDA_HOME": str(home)}) == home / "bin" / "nvcc"
    assert nvcc_path({"CUDA_PATH": str(home), "PATH": ""}) == home / "bin" / "nvcc"
    assert nvcc_path({"PATH": str(home / "bin")}) == home / "bin" / "nvcc"  # on PATH: its CUDA home
    assert nvcc_path({"PATH": str(tmp_path / "nowhere")}) == Path("/usr/local/cuda/bin/nvcc")
    assert not any("nvcc" in p for p in toolchain_problems({"CUDA_HOME": str(home)}))
    assert f"no nvcc at {tmp_path / 'none' / 'bin' / 'nvcc'}" in toolchain_problems({"CUDA_HOME": str(tmp_path / "none")})


def _site_with_topk(wheel: Path, tmp_path: Path, tvm_ffi: bool) -> Path:
    site = fake_site(tmp_path / "site", SGLANG_VERSION, {**wheel_sources(wheel), **topk_sources(wheel)})
    if tvm_ffi:  # the JIT's one Python need, present as far as an import lookup can tell
        (site / "tvm_ffi").mkdir()
        (site / "tvm_ffi" / "__init__.py").write_text("")
    return site


def test_launcher_falls_back_to_ours_and_says_so_on_its_start_line(wheel, tmp_path):
    site = _site_with_topk(wheel, tmp_path, tvm_ffi=True)
    missing = tmp_path / "no-cuda"
    done = launch(["--index-keys", "bf16", "tests.kernels.spawn_probe"], site, CUDA_HOME=str(missing),
                  OPSBOT_DSV4_TOPK="", SGLANG_OPT_USE_TOPK_V2="")
    assert done.returncode == 0, done.stderr
    line = done.stderr.splitlines()[0]
    why = f"sglang's top-k cannot be loaded: no nvcc at {missing / 'bin' / 'nvcc'}"
    assert line == patch_line("bf16", SGLANG_VERSION, OURS, why)
    m = re.match(PATCH_LINE_RE, line)
    assert m and m.group("topk", "topk_note") == (OURS, why)
    # the spawned scheduler stand-in runs ours too, and SGLang's v2 planning is off for it
    assert done.stdout.strip() == "child hooked: True topk=opsbot v2=false"


def test_sglang_s_top_k_is_kept_where_it_can_be_loaded(wheel, tmp_path, monkeypatch):
    site = _site_with_topk(wheel, tmp_path, tvm_ffi=True)
    monkeypatch.syspath_prepend(str(site))
    env = {"CUDA_HOME": str(fake_nvcc(tmp_path))}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the one thing a CPU runner lacks
    assert choose(env) == (SGLANG, "")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose(env) == (OURS, "sglang's top-k cannot be loaded: no CUDA GPU is visible")
    assert patch_line("bf16") == f"opsbot-dsv4-patch 0.1.0 attached: index_keys=bf16 sglang={SGLANG_VERSION} topk=sglang"


def test_an_inherited_choice_is_kept_and_ours_switches_sglang_s_v2_planning_off(wheel, tmp_path):
    site = _site_with_topk(wheel, tmp_path, tvm_ffi=True)
    done = launch(["--index-keys", "bf16", "tests.kernels.spawn_probe"], site, OPSBOT_DSV4_TOPK=SGLANG)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == patch_line("bf16")
    assert done.stdout.strip() == "child hooked: True topk=sglang v2="  # upstream's default (on) untouched


def test_launcher_without_sglang_s_top_k_module_falls_back(wheel, tmp_path):
    site = fake_site(tmp_path / "site", SGLANG_VERSION, wheel_sources(wheel))  # the patch's targets only
    done = launch(["--index-keys", "bf16", "platform"], site, CUDA_HOME=str(fake_nvcc(tmp_path)), OPSBOT_DSV4_TOPK="")
    assert done.returncode == 0, done.stderr
    m = re.match(PATCH_LINE_RE, done.stderr.splitlines()[0])
    assert m and m["topk"] == OURS and f"{TOPK_MODULE} is missing" in m["topk_note"]


# ---- the dispatch: upstream's run_topk_transform, with ours in the JIT kernels' place only ----------------


class Upstream:
    """Records which of SGLang's top-k functions the patched forward calls (stand-ins for the wheel's own)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, slice | None, object]] = []

    def _record(self, name: str, logits, lens, table, out, page, *rest) -> None:
        assert page == 64 and logits.shape[0] == lens.shape[0] == table.shape[0] == out.shape[0]
        assert logits.dtype == torch.float32 and logits.stride(1) == 1 and logits.stride(0) % 4 == 0
        self.calls.append((name, logits.shape[0], rest[0] if name.endswith("v2") else None))
        out.copy_(bf16_indexer.topk(logits, lens, out.shape[1], block_table=table))

    def topk_transform_paged_v2(self, *a):
        self._record("v2", *a)

    def topk_transform_paged(self, *a):
        self._record("v1", *a)

    def topk_transform_pytorch_vectorized(self, *a):
        self._record("torch", *a)

    def plan_topk_v2(self, lens):
        return ("plan of", lens.shape[0])


def backend(kind: str, v2: bool = True) -> SimpleNamespace:
    return SimpleNamespace(dsa_topk_backend=SimpleNamespace(
        is_torch=lambda: kind == "torch", is_flashinfer=lambda: kind == "flashinfer",
        should_use_topk_v2=lambda: kind == "sgl-kernel" and v2), flashinfer_topk_transform=None)


def inputs(rows: int = 5, width: int = 301):
    from kernels.layout import new_bf16_cache
    from kernels.store import store_bf16

    g = torch.Generator().manual_seed(3)
    cache = new_bf16_cache(30)
    store_bf16(torch.randn(30 * 64, 128, generator=g), cache, torch.arange(30 * 64, dtype=torch.int32))
    table = torch.randperm(30, generator=g)[: rows * 6].reshape(rows, 6).to(torch.int32)
    lens = torch.tensor([width, 1, 200, 299, 17][:rows], dtype=torch.int32)
    q = torch.randn(rows, 64, 128, generator=g).to(torch.bfloat16)
    return q, torch.randn(rows, 64, generator=g) / 64, cache, table, lens


@pytest.mark.parametrize("kind, v2, jit, called", [
    ("sgl-kernel", True, True, ["v2"]), ("sgl-kernel", False, True, ["v1"]), ("torch", True, True, ["torch"]),
    ("sgl-kernel", True, False, []), ("torch", True, False, ["torch"]),
])
def test_the_patched_top_k_is_upstream_s_choice_and_ours_only_for_the_jit_kernels(kind, v2, jit, called):
    q, w, cache, table, lens = inputs()
    up = Upstream()
    meta = SimpleNamespace(compressed_page_size=64, topk_metadata="forward plan")
    got, want = (torch.full((5, 512), -7, dtype=torch.int32) for _ in range(2))
    bf16_indexer.select_bf16(q, w, cache, table, lens, got, 301,
                             topk_for=bf16_indexer.sglang_topk(backend(kind, v2), up, meta, jit))
    bf16_indexer.select_bf16(q, w, cache, table, lens, want, 301)  # ours alone
    assert [c[0] for c in up.calls] == called
    assert torch.equal(got, want)
    if called == ["v2"]:
        assert up.calls[0][2] == "forward plan"  # all rows at once: the forward's own plan


def test_a_chunk_of_rows_plans_its_own_v2_top_k():
    q, w, cache, table, lens = inputs()
    up = Upstream()
    meta = SimpleNamespace(compressed_page_size=64, topk_metadata="forward plan")
    out = torch.full((5, 512), -7, dtype=torch.int32)
    bf16_indexer.select_bf16(q, w, cache, table, lens, out, 301, budget_bytes=2 * 304 * 4,
                             topk_for=bf16_indexer.sglang_topk(backend("sgl-kernel"), up, meta, True))
    assert up.calls == [("v2", 2, ("plan of", 2)), ("v2", 2, ("plan of", 2)), ("v2", 1, ("plan of", 1))]
