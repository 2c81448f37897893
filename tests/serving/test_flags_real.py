"""Every flag the renderer emits exists in the pinned SGLang, smg and sglang-router wheels (read with ast)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from serving.flags import (ROUTER_PIN, SGLANG_PIN, SMG_PIN, known_flags, router_flags_from_wheel,
                           sglang_flags_from_wheel, smg_flags_from_wheel)
from serving.render import emitted_flags, router_flags, server_flags
from serving.spec import load_spec
from tests.realparts import need
from tests.serving.conftest import EXAMPLE, LAB_SPEC

CACHE = Path(os.environ.get("OPSBOT_WHEEL_CACHE", Path.home() / ".cache" / "opsbot" / "wheels"))


PATTERNS = {SGLANG_PIN: "sglang-0.5.23-*.whl", ROUTER_PIN: "sglang_router-0.3.2-*.whl", SMG_PIN: "smg-1.13.0-*.whl"}


@pytest.fixture(scope="module")
def wheels() -> tuple[Path, Path, Path]:
    """The pinned wheels (sglang, sglang-router, smg), downloaded once into the cache (pip download --no-deps)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    found = lambda: [next(CACHE.glob(pattern), None) for pattern in PATTERNS.values()]  # noqa: E731
    if None in found():
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(CACHE), *PATTERNS],
            capture_output=True, text=True, timeout=600,
        )
        need(None not in found(),
             f"cannot download {', '.join(PATTERNS)} (no network to PyPI?): {done.stderr.strip()[-300:]}")
    sg, rt, smg = found()
    return sg, rt, smg


@pytest.mark.parametrize("path", [EXAMPLE, LAB_SPEC])
@pytest.mark.parametrize("kind", ["smg", "sgl-router"])
def test_every_emitted_flag_exists_in_the_real_wheels(wheels, path, kind):
    sg, rt, smg = wheels
    real_server = sglang_flags_from_wheel(sg)
    real_router = smg_flags_from_wheel(smg) if kind == "smg" else router_flags_from_wheel(rt)
    spec = load_spec(path)
    spec = spec.model_copy(update={"router": spec.router.model_copy(update={"kind": kind})})
    for role in ("prefill", "decode"):
        missing = emitted_flags(server_flags(spec, role)) - real_server
        assert not missing, f"{role} flags not in {sg.name}: {missing}"
    missing = emitted_flags(router_flags(spec)) - real_router
    assert not missing, f"router flags not in the {kind} wheel: {missing}"


def test_checked_in_flag_lists_match_the_wheels(wheels):
    """serving/*_flags.txt (what `deploy check` uses offline) is exactly what the wheels define."""
    sg, rt, smg = wheels
    assert known_flags("sglang") == sglang_flags_from_wheel(sg)
    assert known_flags("router") == router_flags_from_wheel(rt)
    assert known_flags("smg") == smg_flags_from_wheel(smg)


def test_smg_is_one_console_script_without_mini_lb(wheels):
    """smg 1.13: `smg` (smg.cli:main) whose `launch` runs smg.launch_router, title smg::router, no --mini-lb."""
    import zipfile

    smg = wheels[2]
    with zipfile.ZipFile(smg) as zf:
        entry = next(n for n in zf.namelist() if n.endswith("entry_points.txt"))
        assert "smg=smg.cli:main" in zf.read(entry).decode().replace(" ", "")
        assert 'setproctitle("smg::router")' in zf.read("smg/launch_router.py").decode()
        assert '"launch"' in zf.read("smg/cli.py").decode()
    flags = smg_flags_from_wheel(smg)
    assert "--mini-lb" not in flags and {"--worker-wedge-secs", "--prometheus-host", "--pd-disaggregation"} <= flags


def test_extraction_sees_the_facts_sglang_md_names(wheels):
    sg, rt, _ = wheels
    server = sglang_flags_from_wheel(sg)
    assert {"--hicache-ratio", "--hicache-size", "--max-queued-requests", "--disaggregation-bootstrap-port",
            "--tp-size", "--tensor-parallel-size", "--model"} <= server
    assert "--tp" not in server  # only an argparse abbreviation; the renderer writes --tp-size
    router = router_flags_from_wheel(rt)
    assert {"--pd-disaggregation", "--prefill", "--decode", "--max-concurrent-requests", "--queue-size",
            "--queue-timeout-secs", "--prometheus-port"} <= router
