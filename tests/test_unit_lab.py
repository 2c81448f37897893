"""opsbot as a systemd service on a lab node: the built wheel installed into a venv on node1 (no network there:
pip from a wheelhouse made here), ``opsbot service render``'s unit and config installed as they would be in
production, started by the node's real systemd, and probing decode on node2 over SSH.

What it checks: the unit starts under its hardening as a dynamic (non-root) user; the alert token and the SSH key
arrive as systemd credentials (a right token is 200, a wrong one 401; the probe of node2 logs in with the key);
an alert's probe of node2 succeeds; the SQLite database is in the StateDirectory; a SIGKILL is followed by a
restart (Restart=on-failure). About a minute, most of it pip installing the wheels on the node.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest
import yaml

from tests.databases import free_port
from tests.realparts import need, need_binary

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[1]
CACHE = Path("/var/cache/opsbot/wheelhouse")
NODE = "node1"


def _wheelhouse(tmp: Path) -> tuple[Path, Path]:
    """This checkout's wheel, and a directory of every dependency as a wheel for this Python (cached by pyproject's list)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp / "dist"), str(REPO)], check=True, timeout=300, cwd=tmp)
    wheel = next((tmp / "dist").glob("opsbot-*.whl"))
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    key = hashlib.sha256(repr((sorted(deps), sys.version_info[:2])).encode()).hexdigest()[:16]
    house = CACHE / key
    if not (house / ".complete").exists():
        house.mkdir(parents=True, exist_ok=True)
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(house),
                              str(wheel), "pip"], capture_output=True, text=True, timeout=600)
        need(got.returncode == 0, f"cannot download opsbot's dependencies as wheels: {got.stderr[-500:]}")
        for own in house.glob("opsbot-*.whl"):
            own.unlink()
        (house / ".complete").touch()
    return wheel, house


def _scp(lab, sources: list[Path], target: str) -> None:
    spec = lab.plan().node(NODE)
    subprocess.run([need_binary("scp"), "-q", "-r", "-i", str(lab.key_file), "-P", str(spec.ssh_port),
                    "-o", f"UserKnownHostsFile={lab.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                    "-o", "BatchMode=yes", *map(str, sources), f"root@127.0.0.1:{target}"], check=True, timeout=120)


def _on_node(lab, *argv: str, timeout: float = 60) -> str:
    done = lab.ssh(NODE, list(argv), timeout)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stdout[-1500:]}{done.stderr[-1500:]}"
    return done.stdout


def _node2_inventory(lab) -> dict:
    """The lab's inventory cut to node2 and its decode, the key file where the unit's credential puts it."""
    data = lab.inventory.model_dump(mode="json", exclude_defaults=True)
    (name, cluster), = data["clusters"].items()
    node = next(n for n in cluster["nodes"] if n["name"] == "node2")
    node["key_file"] = "/run/credentials/opsbot.service/ssh_key"
    roles = [r for r in cluster["roles"] if r["node"] == "node2"]
    return {"clusters": {name: {"nodes": [node], "roles": roles, "canary": False}}}


def _journal(lab) -> str:
    return lab.ssh(NODE, ["journalctl", "-u", "opsbot.service", "-n", "60", "--no-pager"], 20).stdout


def _wait(url: str, lab, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer within {seconds} s:\n{_journal(lab)}")


def _alert(cluster: str) -> dict:
    return {"version": "4", "groupKey": '{}:{alertname="SGLangDecodeNoProgress"}', "status": "firing",
            "receiver": "opsbot", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://am", "truncatedAlerts": 0,
            "alerts": [{"status": "firing", "labels": {"alertname": "SGLangDecodeNoProgress", "cluster": cluster,
                                                       "role": "decode"},
                        "annotations": {}, "startsAt": "2026-12-01T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                        "generatorURL": "http://prom", "fingerprint": "0123456789abcdef"}]}


def _probes(metrics: str) -> dict[str, float]:
    found = re.findall(r'^opsbot_probes_total\{outcome="([^"]+)",trigger="alert"\} ([\d.e+]+)$', metrics, re.MULTILINE)
    return {outcome: float(value) for outcome, value in found}


def test_opsbot_runs_as_its_hardened_unit_on_a_lab_node_and_probes_the_other(lab, tmp_path):
    wheel, house = _wheelhouse(tmp_path)
    port = free_port()
    token = secrets.token_urlsafe(24)
    unit_dir = tmp_path / "unit"
    rendered = subprocess.run([sys.executable, "-m", "opsbot", "service", "render", str(unit_dir), "--bin",
                               "/opt/opsbot/bin/opsbot", "--secret", "alert_token", "--port", str(port)],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    staged = tmp_path / "stage"
    staged.mkdir()
    inventory = _node2_inventory(lab)
    (staged / "inventory.yaml").write_text(yaml.safe_dump(inventory))
    (staged / "alert_token").write_text(token)
    shutil.copy(lab.key_file, staged / "ssh_key")
    shutil.copy(wheel, staged)
    for name in ("opsbot.service", "opsbot.toml"):
        shutil.copy(unit_dir / name, staged)
    try:
        _on_node(lab, "mkdir", "-p", "/opt/wheelhouse", "/opt/stage")
        _scp(lab, sorted(house.glob("*.whl")), "/opt/wheelhouse/")
        _scp(lab, sorted(staged.iterdir()), "/opt/stage/")
        started = time.monotonic()
        _on_node(lab, "python3", "-m", "venv", "--without-pip", "/opt/opsbot")
        pip = next(house.glob("pip-*.whl")).name
        _on_node(lab, "/opt/opsbot/bin/python", f"/opt/wheelhouse/{pip}/pip", "install", "-q", "--no-index",
                 "--find-links", "/opt/wheelhouse", f"/opt/stage/{wheel.name}", timeout=400)
        installed = time.monotonic() - started
        for source, target, mode in (("opsbot.service", "/etc/systemd/system/opsbot.service", "0644"),
                                     ("opsbot.toml", "/etc/opsbot/opsbot.toml", "0644"),
                                     ("inventory.yaml", "/etc/opsbot/inventory.yaml", "0644"),
                                     ("alert_token", "/etc/opsbot/credentials/alert_token", "0600"),
                                     ("ssh_key", "/etc/opsbot/credentials/ssh_key", "0600")):
            _on_node(lab, "install", "-D", "-m", mode, f"/opt/stage/{source}", target)
        _on_node(lab, "systemctl", "daemon-reload")
        _on_node(lab, "systemctl", "start", "opsbot.service")
        base = f"http://127.0.0.1:{port}"
        _wait(f"{base}/healthz", lab)

        shown = _on_node(lab, "systemctl", "show", "opsbot.service", "-p", "MainPID", "-p", "DynamicUser", "-p",
                         "ProtectSystem", "-p", "NRestarts")
        props = dict(line.split("=", 1) for line in shown.split())
        assert props["DynamicUser"] == "yes" and props["ProtectSystem"] == "strict", props
        user = _on_node(lab, "ps", "-o", "user=", "-p", props["MainPID"]).strip()
        assert user not in ("", "root"), user

        cluster = next(iter(inventory["clusters"]))
        wrong = httpx.post(f"{base}/alerts", json=_alert(cluster), headers={"X-Opsbot-Alert-Token": "not-it"})
        assert wrong.status_code == 401, wrong.text
        right = httpx.post(f"{base}/alerts", json=_alert(cluster), headers={"X-Opsbot-Alert-Token": token})
        assert right.status_code == 200, right.text  # the credential reached opsbot
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _probes(httpx.get(f"{base}/metrics").text):
            time.sleep(0.5)
        probes = _probes(httpx.get(f"{base}/metrics").text)
        assert probes and "error" not in probes, f"{probes}\n{_journal(lab)}"  # node2 probed over SSH with the key
        assert "opsbot.db" in _on_node(lab, "ls", "/var/lib/private/opsbot")

        _on_node(lab, "systemctl", "kill", "--signal=SIGKILL", "opsbot.service")
        time.sleep(1)
        _wait(f"{base}/healthz", lab, 30)
        again = _on_node(lab, "systemctl", "show", "opsbot.service", "-p", "NRestarts").strip()
        assert again == "NRestarts=1", again
        print(f"\npip install of the wheel on the node: {installed:.1f} s; probes by outcome: {probes}")
    finally:
        lab.ssh(NODE, ["systemctl", "stop", "opsbot.service"], 30)
        lab.ssh(NODE, ["rm", "-rf", "/etc/systemd/system/opsbot.service", "/etc/opsbot", "/opt/opsbot",
                       "/opt/wheelhouse", "/opt/stage", "/var/lib/private/opsbot", "/var/lib/opsbot"], 30)
        lab.ssh(NODE, ["systemctl", "daemon-reload"], 30)
