"""Every flag the renderer emits exists in the pinned SGLang and sglang-router wheels (read with ast)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from serving.flags import (ROUTER_PIN, SGLANG_PIN, known_flags, router_flags_from_wheel,
                           sglang_flags_from_wheel)
from serving.render import emitted_flags, router_flags, server_flags
from serving.spec import load_spec
from tests.realparts import need
from tests.serving.conftest import EXAMPLE, LAB_SPEC

CACHE = Path(os.environ.get("OPSBOT_WHEEL_CACHE", Path.home() / ".cache" / "opsbot" / "wheels"))


@pytest.fixture(scope="module")
def wheels() -> tuple[Path, Path]:
    """The pinned wheels, downloaded once into the cache (pip download --no-deps)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    found = lambda: (next(CACHE.glob("sglang-0.5.23-*.whl"), None), next(CACHE.glob("sglang_router-0.3.2-*.whl"), None))
    sg, rt = found()
    if sg is None or rt is None:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(CACHE), SGLANG_PIN, ROUTER_PIN],
            capture_output=True, text=True, timeout=600,
        )
        sg, rt = found()
        need(sg is not None and rt is not None,
             f"cannot download {SGLANG_PIN} / {ROUTER_PIN} (no network to PyPI?): {done.stderr.strip()[-300:]}")
    return sg, rt


@pytest.mark.parametrize("path", [EXAMPLE, LAB_SPEC])
def test_every_emitted_flag_exists_in_the_real_wheels(wheels, path):
    sg, rt = wheels
    real_server, real_router = sglang_flags_from_wheel(sg), router_flags_from_wheel(rt)
    spec = load_spec(path)
    for role in ("prefill", "decode"):
        missing = emitted_flags(server_flags(spec, role)) - real_server
        assert not missing, f"{role} flags not in {sg.name}: {missing}"
    missing = emitted_flags(router_flags(spec)) - real_router
    assert not missing, f"router flags not in {rt.name}: {missing}"


def test_checked_in_flag_lists_match_the_wheels(wheels):
    """serving/*_flags.txt (what `deploy check` uses offline) is exactly what the wheels define."""
    sg, rt = wheels
    assert known_flags("sglang") == sglang_flags_from_wheel(sg)
    assert known_flags("router") == router_flags_from_wheel(rt)


def test_extraction_sees_the_facts_sglang_md_names(wheels):
    sg, rt = wheels
    server = sglang_flags_from_wheel(sg)
    assert {"--hicache-ratio", "--hicache-size", "--max-queued-requests", "--disaggregation-bootstrap-port",
            "--tp-size", "--tensor-parallel-size", "--model"} <= server
    assert "--tp" not in server  # only an argparse abbreviation; the renderer writes --tp-size
    router = router_flags_from_wheel(rt)
    assert {"--pd-disaggregation", "--prefill", "--decode", "--max-concurrent-requests", "--queue-size",
            "--queue-timeout-secs", "--prometheus-port"} <= router
