"""The patch line: one parser (serving/patch.py) for what the patched process prints, the emulator's included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serving.patch import (KNOWN_SGLANG, PatchLine, attached_line, last_patch_line, parse_patch_line, patch_files,
                           refused_line)

ROOT = Path(__file__).resolve().parents[2]
token = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="._-+"), min_size=1, max_size=20)


@given(version=token, keys=st.sampled_from(["bf16", "fp8"]), sglang=token,
       prefix=st.sampled_from(["", "[2026-12-01 12:00:00] ", "Dec 01 12:00:00 node1 prefill.sh[42]: "]))
def test_attached_line_round_trips_behind_any_log_prefix(version, keys, sglang, prefix):
    line = parse_patch_line(prefix + attached_line(version, keys, sglang))
    assert line is not None and line.attached
    assert (line.version, line.index_keys, line.sglang) == (version, keys, sglang)


@given(reason=st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=80).filter(str.strip))
def test_refusal_keeps_its_reason(reason):
    line = parse_patch_line("[2026-12-01 12:00:00] " + refused_line(reason))
    assert line is not None and not line.attached and line.reason == reason.strip()


@given(st.text(max_size=300))
def test_any_journal_text_parses_without_raising(text):
    found = last_patch_line(text)
    assert found is None or "opsbot-dsv4-patch" in text


def test_the_last_line_of_a_journal_wins():
    text = "\n".join([refused_line("sglang 0.5.22 is not 0.5.23"), "other", attached_line("0.1.0", "bf16", "0.5.23")])
    line = last_patch_line(text)
    assert line is not None and line.attached and line.sglang == "0.5.23"


def _emulated(env: dict[str, str]) -> subprocess.CompletedProcess:
    """The lab launcher, with a target module that exits at once (`json.tool` on `{}`)."""
    return subprocess.run([sys.executable, "-m", "opsbot.lab.emulator.patch_launch", "--index-keys", "bf16",
                           "json.tool"], cwd=ROOT, input="{}", capture_output=True, text=True, timeout=30,
                          env={**os.environ, **env})


def test_the_lab_launcher_prints_what_the_parser_reads():
    done = _emulated({})
    line = parse_patch_line(done.stderr)
    assert done.returncode == 0 and line is not None and line.attached and line.index_keys == "bf16"
    refused = _emulated({"SGLANG_EMULATOR_PATCH_REFUSE": "sglang 0.5.24: unknown functions"})
    line = parse_patch_line(refused.stderr)
    assert refused.returncode == 3 and line is not None and line.reason == "sglang 0.5.24: unknown functions"


def test_the_format_is_the_node_side_patch_s_own():
    """serving/patch.py and kernels/sglang_patch agree on name, format and the SGLang release."""
    patch = pytest.importorskip("kernels.sglang_patch", reason="kernels/sglang_patch is not on this branch yet")
    assert parse_patch_line(patch.patch_line("bf16")) == PatchLine(True, patch.PATCH_VERSION, "bf16",
                                                                    patch.SGLANG_VERSION)
    assert parse_patch_line(patch.refusal_line("sglang 0.5.24")) == PatchLine(False, reason="sglang 0.5.24")
    assert KNOWN_SGLANG == (patch.SGLANG_VERSION,)


def test_patch_files_are_the_kernels_package_with_their_hashes():
    files = patch_files()
    assert files and all(f.relpath.startswith("kernels/") and f.relpath.endswith(".py") for f in files)
    assert len({f.sha256 for f in files}) == len(files)
