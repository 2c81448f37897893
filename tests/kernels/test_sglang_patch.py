"""The SGLang patch against the pinned sglang 0.5.23 wheel: targets read with ast, the launcher's two
lines, spawned children attached, and (patch-ci extra) the patch attached to the real modules on a CPU."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from kernels.sglang_patch import PATCH_LINE_RE, REFUSAL_EXIT_CODE, REFUSAL_LINE_RE, SGLANG_VERSION
from kernels.sglang_patch import bf16_indexer
from kernels.sglang_patch.targets import TARGETS, check_sources, wheel_sources
from tests.realparts import need

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("OPSBOT_WHEEL_CACHE", Path.home() / ".cache" / "opsbot" / "wheels"))
SHIMS = Path(__file__).parent / "cpu_shims"
PATCH_CI_DEPS = ("transformers", "orjson", "msgspec", "zmq", "tvm_ffi", "compressed_tensors", "gguf", "openai")


@pytest.fixture(scope="module")
def wheel() -> Path:
    """sglang 0.5.23 from PyPI, downloaded once into the cache (pip download --no-deps, pip's own cache)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    found = next(CACHE.glob(f"sglang-{SGLANG_VERSION}-*.whl"), None)
    if found is None:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(CACHE), f"sglang=={SGLANG_VERSION}"],
            capture_output=True, text=True, timeout=600,
        )
        found = next(CACHE.glob(f"sglang-{SGLANG_VERSION}-*.whl"), None)
        need(found is not None, f"cannot download sglang=={SGLANG_VERSION} (no network to PyPI?): {done.stderr[-300:]}")
    return found


def fake_site(root: Path, version: str, sources: dict[str, str]) -> Path:
    """A site dir holding an sglang dist-info of `version` and only the given files."""
    meta = root / f"sglang-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    for path, text in sources.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def launch(args: list[str], site: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{site}", **env}
    for name in ("OPSBOT_DSV4_INDEX_KEYS", "OPSBOT_DSV4_TOPK", "SGLANG_OPT_USE_TOPK_V2"):
        if not environ.get(name):  # not inherited from the shell running the tests
            environ.pop(name, None)
    return subprocess.run([sys.executable, "-m", "kernels.sglang_patch.launch", *args], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=180)


def test_every_target_is_in_the_pinned_wheel_with_its_signature_and_hash(wheel):
    assert check_sources(wheel_sources(wheel)) == []
    # the replacements take exactly the parameters of what they replace
    replaced = {t.qualname: t.params for t in TARGETS if t.role == "replaced"}
    ours = {
        "C4IndexerBackendMixin.forward_c4_indexer": bf16_indexer.forward_c4_indexer(lambda *a, **k: None),
        "DeepSeekV4IndexerPool.set_index_fused": bf16_indexer.set_index_fused,
        "get_dsv4_indexer_bytes_per_token": bf16_indexer.bytes_per_token(lambda d, f: 0),
    }
    assert set(ours) == set(replaced)
    for name, fn in ours.items():
        assert tuple(inspect.signature(fn, follow_wrapped=False).parameters) == replaced[name]


def test_a_changed_body_signature_or_missing_function_is_refused(wheel):
    read = wheel_sources(wheel)
    fwd = next(t for t in TARGETS if t.qualname.endswith("forward_c4_indexer"))
    body = dict(read)
    body[fwd.path] = read[fwd.path].replace("if forward_batch.forward_mode.is_idle():", "if forward_batch is None:", 1)
    assert check_sources(body) == [f"{fwd.module}.{fwd.qualname} source hash differs ({_hash_of(body, fwd)})"]
    sig = dict(read)
    sig[fwd.path] = read[fwd.path].replace("        q_lora_quant=None,\n    ) -> None:\n        if forward_batch",
                                           "        q_lora_quant=None,\n        extra=None,\n    ) -> None:\n        if forward_batch", 1)
    assert [p for p in check_sources(sig) if "differs from" in p]
    gone = dict(read)
    gone[fwd.path] = read[fwd.path].replace("def forward_c4_indexer(", "def forward_c4_indexer_v2(", 1)
    assert check_sources(gone) == [f"{fwd.module}.{fwd.qualname} is missing"]
    less = {p: t for p, t in read.items() if not p.endswith("pool_configurator.py")}
    assert "sglang/srt/model_executor/pool_configurator.py is missing" in check_sources(less)


def _hash_of(read: dict[str, str], target) -> str:
    import ast

    from kernels.sglang_patch.targets import find_def, source_hash

    return source_hash(read[target.path], find_def(ast.parse(read[target.path]), target.qualname))[:12]


def test_launcher_refuses_another_sglang_with_one_line_and_a_nonzero_exit(wheel, tmp_path):
    site = fake_site(tmp_path, "0.5.22", wheel_sources(wheel))
    done = launch(["--index-keys", "bf16", "platform"], site)
    assert done.returncode == REFUSAL_EXIT_CODE
    assert done.stderr.splitlines() == [
        f"opsbot-dsv4-patch refused: sglang 0.5.22 is installed; this patch is written for sglang {SGLANG_VERSION} only"]
    assert done.stdout == ""  # the server never started
    assert re.match(REFUSAL_LINE_RE, done.stderr.splitlines()[0]).group("reason").startswith("sglang 0.5.22")


def test_launcher_refuses_an_edited_function(wheel, tmp_path):
    read = wheel_sources(wheel)
    pool = next(t for t in TARGETS if t.qualname == "DeepSeekV4IndexerPool.set_index_fused")
    read[pool.path] = read[pool.path].replace('type="indexer",', 'type="indexer",  # edited on the node', 1)
    done = launch(["--index-keys", "bf16", "platform"], fake_site(tmp_path, SGLANG_VERSION, read))
    assert done.returncode == REFUSAL_EXIT_CODE
    [line] = done.stderr.splitlines()
    assert line.startswith("opsbot-dsv4-patch refused: ")
    assert "DeepSeekV4IndexerPool.set_index_fused source hash differs" in line


def test_launcher_prints_the_patch_line_and_spawned_children_attach(wheel, tmp_path):
    site = fake_site(tmp_path, SGLANG_VERSION, wheel_sources(wheel))
    done = launch(["--index-keys", "bf16", "tests.kernels.spawn_probe"], site)
    assert done.returncode == 0, done.stderr
    # whose top-k, and the line's exact text, is test_upstream_topk's (this site has no top-k files: ours)
    assert done.stderr.splitlines()[0].startswith(
        f"opsbot-dsv4-patch 0.1.0 attached: index_keys=bf16 sglang={SGLANG_VERSION} topk=opsbot (")
    assert done.stdout.strip() == "child hooked: True topk=opsbot v2=false"
    m = re.match(PATCH_LINE_RE, done.stderr.splitlines()[0])
    assert m and m.group("index_keys", "version", "sglang", "topk") == ("bf16", "0.1.0", SGLANG_VERSION, "opsbot")
    plain = launch(["--index-keys", "fp8", "tests.kernels.spawn_probe"], site)  # upstream: nothing attached
    assert plain.returncode == 0 and plain.stdout.strip() == "child hooked: False topk= v2="
    assert "opsbot-dsv4-patch" not in plain.stderr


def test_bf16_bytes_and_rope_hadamard_glue():
    per_token = bf16_indexer.bytes_per_token(lambda d, fp4: d + d // 128 * 4)  # upstream's formula
    assert per_token(128, False) == 256 and per_token(128, True) == 132  # fp4 layout left to upstream
    from kernels.sglang_patch.compare import freqs_table, rope_hadamard_ref

    g = torch.Generator().manual_seed(0)
    q = torch.randn(5, 64, 128, generator=g)
    freqs, pos = freqs_table(100, "cpu"), torch.tensor([0, 1, 7, 50, 99])
    got = bf16_indexer.rope_hadamard_bf16(q, freqs, pos, 64)
    want = rope_hadamard_ref(q, freqs, pos)
    assert got.dtype == torch.bfloat16 and torch.allclose(got.float(), want, rtol=1e-2, atol=1e-2)
    assert torch.allclose(got[0].float(), (q[0] @ bf16_indexer.hadamard(128, "cpu")), rtol=1e-2, atol=1e-2)  # pos 0


def test_patch_attaches_to_the_real_modules_on_a_cpu(wheel, tmp_path):
    """sglang 0.5.23's indexer, memory-pool and pool-configurator modules imported on a CPU with the
    patch attached; the patched pool, store and forward_c4_indexer run against upstream's own torch
    path (kernels.sglang_patch.compare at 2 rows x 640 entries, Triton interpreter)."""
    missing = [m for m in PATCH_CI_DEPS if importlib.util.find_spec(m) is None]
    if missing and os.environ.get("OPSBOT_PATCH_CI") != "1":
        pytest.skip(f"needs the patch-ci extra ({', '.join(missing)} missing): run `make test-patch`")
    assert not missing, f"the patch-ci extra is not installed: {missing}"
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site, [n for n in z.namelist() if n.startswith(("sglang/", f"sglang-{SGLANG_VERSION}.dist-info/"))])
    path = [str(ROOT), str(site)]
    probe = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})
    if probe.returncode != 0:  # PyPI's torchvision next to CPU torch: see cpu_shims/torchvision/__init__.py
        path.append(str(SHIMS))
    done = subprocess.run(
        [sys.executable, "-m", "kernels.sglang_patch.compare", "--rows", "2", "--entries", "640"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path), "TRITON_INTERPRET": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [result] = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert result["forward_equals_select"] is True  # the patched forward_c4_indexer took the bf16 path
    assert result["pool_bytes_per_page"] == 64 * 256 and result["pool_dtype"] == "torch.uint8"
    assert result["configurator_bytes_per_token"] == 256  # the memory budget counts bf16 keys too
    assert result["overlap_patched_bf16"] >= 0.99 and result["logits_relerr_patched_bf16"] < 0.01
    assert result["logits_relerr_upstream_fp8"] > result["logits_relerr_patched_bf16"]


def test_select_bf16_in_row_chunks_gives_the_same_slots():
    from kernels.layout import new_bf16_cache
    from kernels.store import store_bf16

    g = torch.Generator().manual_seed(2)
    cache = new_bf16_cache(24)
    store_bf16(torch.randn(24 * 64, 128, generator=g), cache, torch.arange(24 * 64, dtype=torch.int32))
    table = torch.randperm(24, generator=g)[:20].reshape(5, 4).to(torch.int32)
    lens = torch.tensor([256, 1, 600, 513, 100], dtype=torch.int32).clamp(max=256)
    q = torch.randn(5, 64, 128, generator=g).to(torch.bfloat16)
    w = torch.randn(5, 64, generator=g) / 64
    whole, chunked = (torch.empty(5, 512, dtype=torch.int32) for _ in range(2))
    bf16_indexer.select_bf16(q, w, cache, table, lens, whole, 256)
    bf16_indexer.select_bf16(q, w, cache, table, lens, chunked, 256, budget_bytes=2 * 256 * 4)  # 2 rows a chunk
    assert torch.equal(whole, chunked)
    assert (whole[1, 1:] == -1).all() and whole[1, 0] == table[1, 0] * 64  # one visible entry: its slot
