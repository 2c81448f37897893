"""Rendering: the serve scripts really exec the launcher with the flags, units verify, files parse."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opsbot.inventory import load_inventory
from serving.render import inventory, render, router_flags, server_flags, write
from serving.spec import load_spec
from tests.realparts import need_binary
from tests.serving.conftest import LAB_SPEC

ECHO_ARGV = [sys.executable, "-c", "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('ECHO_VALUE')]))"]
ECHO_PYTHONPATH = [sys.executable, "-c",
                   "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('PYTHONPATH')]))"]


def run_script(data: bytes, tmp: Path) -> tuple[list[str], str | None]:
    script = tmp / "serve.sh"
    script.write_bytes(data)
    done = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=30, check=True)
    argv, env = json.loads(done.stdout)
    return argv, env


def render_inventory(spec):
    return inventory(spec).clusters[spec.name].roles


def file_of(rendering, node: str, suffix: str) -> bytes:
    (f,) = [f for f in rendering.node_files[node] if f.path.endswith(suffix)]
    return f.data


def test_serve_script_execs_launcher_with_every_flag(example, tmp_path):
    spec = example.model_copy(update={"launcher": ECHO_ARGV, "numa_pinning": False,
                                      "model": example.model.model_copy(update={"index_keys": "fp8"})})
    argv, _ = run_script(file_of(render(spec), "gpu-node-1", "/prefill.sh"), tmp_path)
    assert argv == [tok for group in server_flags(spec, "prefill") for tok in group]
    assert argv[argv.index("--disaggregation-mode") + 1] == "prefill"
    assert argv[argv.index("--hicache-ratio") + 1] == "2.0"
    assert "--hicache-size" not in argv


def test_bf16_keys_start_the_server_through_the_patch_launcher(example, tmp_path):
    """index_keys: bf16 → PATCH_LAUNCHER sglang.launch_server FLAGS, the patch's files first on PYTHONPATH."""
    spec = example.model_copy(update={"patch_launcher": ECHO_PYTHONPATH, "numa_pinning": False})
    rendering = render(spec)
    argv, pythonpath = run_script(file_of(rendering, "gpu-node-1", "/decode.sh"), tmp_path)
    assert argv == ["--index-keys", "bf16", "sglang.launch_server",
                    *(tok for group in server_flags(spec, "decode") for tok in group)]
    assert pythonpath == "/opt/sglang/dsv4/patch"
    patch = [f for f in rendering.node_files["gpu-node-1"] if f.role == "patch"]
    assert patch and all(f.path.startswith("/opt/sglang/dsv4/patch/kernels/") for f in patch)
    fp8 = example.model_copy(update={"model": example.model.model_copy(update={"index_keys": "fp8"})})
    assert not [f for f in render(fp8).node_files["gpu-node-1"] if f.role == "patch"]
    assert "python3 -m sglang.launch_server" in file_of(render(fp8), "gpu-node-1", "/decode.sh").decode()


def test_router_is_smg_by_default_and_sgl_router_on_request(example):
    smg = file_of(render(example), "gpu-node-1", "/router.sh").decode()
    assert "exec smg launch \\\n    --pd-disaggregation" in smg and "--mini-lb" not in smg
    old = example.model_copy(update={"router": example.router.model_copy(update={"kind": "sgl-router"})})
    assert "exec python3 -m sglang_router.launch_router" in file_of(render(old), "gpu-node-1", "/router.sh").decode()


def test_prometheus_host_follows_the_router_host_family(example):
    """smg binds --prometheus-host to the unspecified address of --host's family: probe on that loopback."""
    v6 = example.model_copy(update={"router": example.router.model_copy(update={"host": "::"})})
    (router,) = [r for r in render_inventory(v6) if r.role == "router"]
    assert router.metrics_url == "http://[::1]:29000/metrics" and router.health_url == "http://[::1]:8000/health"
    (router,) = [r for r in render_inventory(example) if r.role == "router"]
    assert router.metrics_url == "http://127.0.0.1:29000/metrics"


def test_serve_script_pins_numa(example):
    body = file_of(render(example), "gpu-node-1", "/decode.sh").decode()
    assert "exec numactl --cpunodebind=1 --membind=1 python3 -m kernels.sglang_patch.launch --index-keys bf16 sglang.launch_server" in body


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=40),
       value=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40))
def test_any_text_reaches_the_launcher_unchanged(example, tmp_path, name, value):
    """Shell quoting: whatever a spec holds arrives as one argv element, never as shell syntax."""
    spec = example.model_copy(update={
        "launcher": ECHO_ARGV, "numa_pinning": False,
        "model": example.model.model_copy(update={"served_name": name, "index_keys": "fp8"}),
        "prefill": example.prefill.model_copy(update={"args": {"--tokenizer-path": value},
                                                      "environment": {"ECHO_VALUE": value}}),
    })
    argv, env = run_script(file_of(render(spec), "gpu-node-1", "/prefill.sh"), tmp_path)
    assert argv[argv.index("--served-model-name") + 1] == name
    assert argv[argv.index("--tokenizer-path") + 1] == value
    assert env == value


def test_units_have_crash_loop_limits_and_pass_systemd_analyze(example, tmp_path):
    rendering = render(example)
    unit = file_of(rendering, "gpu-node-1", "/sglang-dsv4-decode.service").decode()
    for line in ("Restart=on-failure", "RestartSec=10", "StartLimitBurst=5", "StartLimitIntervalSec=600",
                 "TimeoutStartSec=1800", 'Environment="CUDA_VISIBLE_DEVICES=4,5,6,7"',
                 "ExecStart=/opt/sglang/dsv4/decode.sh"):
        assert line in unit.splitlines()
    analyze = need_binary("systemd-analyze")
    # install for real under tmp_path so verify finds every ExecStart program
    spec = example.model_copy(update={
        "install_dir": str(tmp_path / "opt"), "numa_pinning": False,
        "exporter": example.exporter.model_copy(update={"python": sys.executable}),
    })
    units = []
    for f in render(spec).node_files["gpu-node-1"]:
        dest = tmp_path / "units" / Path(f.path).name if f.path.endswith(".service") else Path(f.path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(f.data)
        dest.chmod(f.mode)
        units += [dest] if f.path.endswith(".service") else []
    assert len(units) == 4
    done = subprocess.run([analyze, "verify", *map(str, units)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


def test_router_unit_points_at_both_roles(example):
    flags = router_flags(example)
    assert flags[:3] == [["--pd-disaggregation"], ["--prefill", "http://127.0.0.1:30000", "8998"],
                         ["--decode", "http://127.0.0.1:30001"]]
    body = file_of(render(example), "gpu-node-1", "/router.sh").decode()
    assert "exec smg launch" in body
    unit = file_of(render(example), "gpu-node-1", "/sglang-router.service").decode()
    assert "After=network-online.target sglang-dsv4-prefill.service sglang-dsv4-decode.service" in unit


def test_router_on_another_node_uses_node_addresses():
    lab = load_spec(LAB_SPEC)
    flags = dict((g[0], g[1:]) for g in router_flags(lab))
    assert flags["--prefill"] == ["http://127.0.0.1:30000", "30004"]  # same node as the router
    assert flags["--decode"] == [f"http://{lab.node('node2').address}:{lab.decode.port}"]
    other = lab.model_copy(update={"nodes": [lab.nodes[0], lab.nodes[1].model_copy(update={"address": "10.1.2.3"})]})
    assert dict((g[0], g[1:]) for g in router_flags(other))["--decode"] == ["http://10.1.2.3:30001"]


def test_inventory_loads_and_lists_the_roles(example, tmp_path):
    write(render(example), tmp_path)
    inv = load_inventory(tmp_path / "opsbot" / "inventory.yaml")
    _, cluster = inv.cluster(None)
    assert {(r.role, r.unit) for r in cluster.roles} == {
        ("prefill", "sglang-dsv4-prefill.service"), ("decode", "sglang-dsv4-decode.service"),
        ("router", "sglang-router.service")}
    decode = cluster.select(["decode"])[0]
    assert decode.gpus == [4, 5, 6, 7] and decode.numa_node == 1
    assert decode.metrics_url == "http://127.0.0.1:30001/metrics"


def test_prometheus_config_passes_promtool(example, tmp_path):
    promtool = need_binary("promtool")
    write(render(example), tmp_path)
    cfg = tmp_path / "prometheus" / "prometheus.yml"
    done = subprocess.run([promtool, "check", "config", str(cfg)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = {j["job_name"]: j for j in yaml.safe_load(cfg.read_text())["scrape_configs"]}
    assert jobs["sglang-router"]["static_configs"][0]["targets"] == ["10.0.0.11:29000"]
    assert jobs["gpu-exporter"]["static_configs"][0]["targets"] == ["10.0.0.11:9101"]


def test_alertmanager_config_passes_amtool(example, tmp_path):
    amtool = need_binary("amtool")
    write(render(example), tmp_path)
    cfg = tmp_path / "alertmanager" / "alertmanager.yml"
    done = subprocess.run([amtool, "check-config", str(cfg)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    hook = yaml.safe_load(cfg.read_text())["receivers"][0]["webhook_configs"][0]
    assert hook["url"].endswith("/alerts")
    assert hook["http_config"]["authorization"]["credentials_file"] == "/etc/alertmanager/opsbot-token"


def test_grafana_provisioning_targets_the_folder(example, tmp_path):
    write(render(example.model_copy(update={"grafana": example.grafana.model_copy(update={"folder_uid": "team-a"})})),
          tmp_path)
    prov = yaml.safe_load((tmp_path / "grafana/provisioning/dashboards/sglang-pd.yaml").read_text())
    assert prov["providers"][0]["folderUid"] == "team-a"
