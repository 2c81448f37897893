"""``opsbot init`` against the lab's nodes: host keys shown and pinned on confirmation, the SGLang, router and
exporter units found by their ExecStart over real SSH and systemd, and an inventory that matches the lab's own."""

from __future__ import annotations

import subprocess
import sys

import asyncssh
import pytest

from opsbot.inventory import load_inventory

pytestmark = pytest.mark.lab


def test_init_finds_the_lab_deployment_and_pins_what_was_confirmed(lab, tmp_path):
    expected = lab.inventory
    (cluster_name, cluster), = expected.clusters.items()
    hosts = [f"127.0.0.1:{n.port}" for n in cluster.nodes]
    out = tmp_path / "inventory.yaml"
    done = subprocess.run([sys.executable, "-m", "opsbot", "init", *hosts, "--key-file", str(lab.key_file),
                           "--cluster", cluster_name, "--out", str(out)], input="y\n" * len(hosts),
                          capture_output=True, text=True, timeout=120, env={
                              "OPSBOT_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    assert done.returncode == 0, done.stdout + done.stderr
    for node in cluster.nodes:  # each key was shown before it was pinned
        assert asyncssh.import_public_key(node.host_key).get_fingerprint("sha256") in done.stdout
    found = load_inventory(out).clusters[cluster_name]
    assert sorted(n.host_key for n in found.nodes) == sorted(n.host_key for n in cluster.nodes)
    by_port = {n.port: n.name for n in cluster.nodes}
    names = {n.name: by_port[n.port] for n in found.nodes}  # init names nodes by their hostname
    got = {(r.role, names[r.node], r.unit, r.metrics_url, r.health_url) for r in found.roles}
    want = {(r.role, r.node, r.unit, r.metrics_url, r.health_url) for r in cluster.roles}
    assert got == want, done.stdout
    assert "gpu_exporter" not in out.read_text() and "# GPU exporter" in out.read_text()
