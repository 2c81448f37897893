"""Discovery's parsing (systemctl show, ExecStart, serve scripts) and ``opsbot init``'s refusals against a real sshd.

The lab test (tests/test_init_lab.py) runs ``opsbot init`` against the lab's nodes; here: property tests of the
parsers, what a host without SGLang units gives, and the command's bad input over a real OpenSSH server (a key
not confirmed pins nothing; a host whose systemctl cannot answer, as this machine's, writes nothing).
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsbot.discover import (
    UnitKind,
    classify,
    exec_argv,
    parse_show,
    roles_of,
    scan,
    script_argv,
)
from tests.sshd import start_sshd

WORD = st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters="-_./=:"), min_size=1, max_size=12)


def show_block(unit: str, argv: list[str], state: str = "active") -> str:
    return (f"Id={unit}\nExecStart={{ path={argv[0]} ; argv[]={shlex.join(argv)} ; ignore_errors=no ; "
            f"start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }}\nActiveState={state}\n")


@given(st.lists(WORD, min_size=1, max_size=12))
def test_exec_argv_reads_back_any_command_line(argv):
    assert exec_argv(show_block("x.service", argv).splitlines()[1].split("=", 1)[1]) == argv


@given(st.text(max_size=400))
def test_the_parsers_take_any_text_without_raising(text):
    parse_show(text)
    exec_argv(text)
    script_argv(text)
    scan(text)


@given(st.sampled_from(["prefill", "decode"]), st.integers(1, 65535), st.lists(WORD, max_size=5))
def test_a_server_is_classified_by_its_mode_and_port(mode, port, noise):
    argv = ["/usr/bin/python3", "-m", "sglang.launch_server", *noise, "--disaggregation-mode", mode, "--port", str(port)]
    found = classify("s.service", argv)
    assert found is not None and (found.kind.value, found.port) == (mode, port)


def test_lab_and_rendered_units_are_recognised():
    text = "\n".join([
        show_block("sglang-dsv4-prefill.service", ["/usr/bin/python3", "-m", "sglang_emulator.launch_server",
                                                   "--disaggregation-mode", "prefill", "--port", "30000"]),
        show_block("sglang-router.service", ["/usr/local/bin/smg", "launch", "--pd-disaggregation", "--port", "30002",
                                             "--prometheus-port", "30003", "--host", "0.0.0.0"]),
        show_block("opsbot-gpu-exporter.service", ["/usr/bin/python3", "-m", "serving.exporter", "--port", "9101"]),
        show_block("sglang-dsv4-decode.service", ["/opt/sglang/serve-decode.sh"]),
        show_block("plain.service", ["/usr/bin/python3", "-m", "sglang.launch_server", "--port", "31000"]),
        show_block("ssh.service", ["/usr/sbin/sshd", "-D"]),
    ])
    first = scan(text)
    assert first.scripts == {"sglang-dsv4-decode.service": "/opt/sglang/serve-decode.sh"}
    script = ("#!/bin/sh\nexport X=1\nexec numactl --cpunodebind=1 --membind=1 python3 -m sglang.launch_server \\\n"
              "    --model-path /models/x --disaggregation-mode decode \\\n    --port 30001 --host 10.0.0.2\n")
    found = scan(text, {"sglang-dsv4-decode.service": script}).found
    kinds = {f.unit: (f.kind, f.port) for f in found}
    assert kinds == {"sglang-dsv4-prefill.service": (UnitKind.PREFILL, 30000),
                     "sglang-router.service": (UnitKind.ROUTER, 30002),
                     "opsbot-gpu-exporter.service": (UnitKind.EXPORTER, 9101),
                     "sglang-dsv4-decode.service": (UnitKind.DECODE, 30001),
                     "plain.service": (UnitKind.SERVER, 31000)}
    roles = roles_of("n1", found, set())
    router = next(r for r in roles if r["role"] == "router")
    assert router["metrics_url"] == "http://127.0.0.1:30003/metrics" and router["health_url"] == "http://127.0.0.1:30002/readiness"
    decode = next(r for r in roles if r["role"] == "decode")
    assert decode["health_url"] == "http://10.0.0.2:30001/health"
    assert {r["role"] for r in roles} == {"prefill", "decode", "router"}  # the exporter and the plain server: listed only


def test_a_host_without_sglang_units_gives_no_roles():
    text = show_block("ssh.service", ["/usr/sbin/sshd", "-D"]) + "\n" + show_block("cron.service", ["/usr/sbin/cron", "-f"])
    result = scan(text)
    assert result.services == 2 and result.found == [] and roles_of("n", result.found, set()) == []


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def opsbot_init(tmp_path, *args: str, answer: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsbot", "init", *args], input=answer, capture_output=True,
                          text=True, timeout=60, env={"OPSBOT_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin",
                                                      "PYTHONPATH": ":".join(sys.path)})


def test_a_key_not_confirmed_pins_nothing_and_a_host_that_cannot_answer_writes_nothing(sshd, tmp_path):
    out = tmp_path / "inventory.yaml"
    host = f"127.0.0.1:{sshd.port}"
    declined = opsbot_init(tmp_path, host, "--key-file", str(sshd.client_key), "--out", str(out), answer="n\n")
    fingerprint = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", f"{sshd.client_key.parent / 'host.pub'}"],
                                 capture_output=True, text=True).stdout.split()[1]
    assert declined.returncode == 1 and fingerprint in declined.stdout and "not pinned" in declined.stdout
    assert not out.exists()
    failed = opsbot_init(tmp_path, host, "--key-file", str(sshd.client_key), "--out", str(out), answer="y\n")
    assert failed.returncode == 1 and "systemctl" in failed.stderr and "Traceback" not in failed.stderr
    assert not out.exists()
    out.write_text("kept")
    refused = opsbot_init(tmp_path, host, "--out", str(out), answer="y\n")
    assert refused.returncode == 2 and "--force" in refused.stderr and out.read_text() == "kept"
