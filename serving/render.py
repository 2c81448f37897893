"""Render everything a PD deployment needs from one ``DeploymentSpec`` (pure: no I/O but templates).

``render(spec)`` returns the files per node (absolute paths, as they go on the node) and the
cluster-wide files (Prometheus, Alertmanager, Grafana, opsbot's inventory); ``write`` puts them in a
directory for review.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import yaml

from opsbot.inventory import Cluster, Inventory, Node, Role
from serving import watch
from serving.alerts import alert_rules_yaml
from serving.dashboard import dashboard_json
from serving.patch import patch_files
from serving.spec import DeploymentSpec, ServerSpec

HERE = Path(__file__).parent
WAIT_HEALTHY = HERE / "node" / "wait_healthy.py"
EXPORTER = HERE / "exporter.py"


def _systemd_quote(value: str) -> str:
    """Quote one word for a systemd directive (``Environment="K=V"``); ``%`` is a specifier there."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("\n", "\\n") + '"'


_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,
)
_env.filters["shquote"] = lambda v: shlex.quote(str(v))
_env.filters["shjoin"] = lambda argv: shlex.join(str(a) for a in argv)
_env.filters["systemd_quote"] = _systemd_quote


@dataclass(frozen=True)
class RenderedFile:
    path: str
    data: bytes
    mode: int = 0o644
    role: str | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class Rendering:
    node_files: dict[str, list[RenderedFile]] = field(default_factory=dict)
    cluster_files: dict[str, bytes] = field(default_factory=dict)

    def files_of(self, node: str, role: str | None = None) -> list[RenderedFile]:
        return [f for f in self.node_files.get(node, []) if role is None or f.role == role]


def _flag_groups(args: dict) -> list[list[str]]:
    """``{'--x': 1, '--on': True, '--off': False}`` → ``[['--x', '1'], ['--on']]``."""
    out: list[list[str]] = []
    for flag, value in args.items():
        if value is None or value is False:
            continue
        if value is True:
            out.append([flag])
        elif isinstance(value, list):
            out.append([flag, *map(str, value)])
        else:
            out.append([flag, str(value)])
    return out


def server_flags(spec: DeploymentSpec, role: str) -> list[list[str]]:
    """The flags of one SGLang server, grouped per flag, managed ones first."""
    s = spec.servers()[role]
    managed: dict[str, object] = {
        "--model-path": spec.model.path,
        "--served-model-name": spec.model.served_name,
        "--host": s.host,
        "--port": s.port,
        "--tp-size": s.tp,
        "--mem-fraction-static": s.mem_fraction_static,
        "--context-length": s.context_length,
        "--disaggregation-mode": role,
        "--disaggregation-transfer-backend": s.transfer_backend,
        "--disaggregation-bootstrap-port": s.bootstrap_port,
        "--enable-hierarchical-cache": s.hicache_ratio is not None,
        "--hicache-ratio": s.hicache_ratio,
        "--enable-metrics": True,
    }
    return _flag_groups(managed) + _flag_groups(s.args)


def patched(spec: DeploymentSpec) -> bool:
    """Servers start through the bf16 index-key patch's launcher."""
    return spec.model.index_keys == "bf16"


def patch_root(spec: DeploymentSpec) -> str:
    """Where the patch's files go on a node (put first on the servers' PYTHONPATH)."""
    return f"{spec.install_dir}/patch"


def server_launcher(spec: DeploymentSpec) -> list[str]:
    """``launcher``, or ``patch_launcher --index-keys bf16 MODULE`` where ``launcher`` is ``PYTHON -m MODULE``
    (kernels/sglang_patch/launch.py's command line)."""
    if not patched(spec):
        return spec.launcher
    return [*spec.patch_launcher, "--index-keys", spec.model.index_keys, spec.launcher[spec.launcher.index("-m") + 1]]


def server_environment(spec: DeploymentSpec, s: ServerSpec) -> dict[str, str]:
    env = dict(s.environment)
    if patched(spec):
        env["PYTHONPATH"] = ":".join(p for p in (patch_root(spec), env.get("PYTHONPATH")) if p)
    return env


def loopback(host: str) -> str:
    """The loopback address of ``host``'s family, as a URL host."""
    return "[::1]" if ":" in host else "127.0.0.1"


def _url(spec: DeploymentSpec, s: ServerSpec) -> str:
    host = "127.0.0.1" if s.node == spec.router.node else spec.node(s.node).address
    return f"http://{host}:{s.port}"


def router_flags(spec: DeploymentSpec) -> list[list[str]]:
    r = spec.router
    bootstrap = r.prefill_bootstrap_port or spec.prefill.bootstrap_port
    managed = [
        ["--pd-disaggregation"],
        ["--prefill", _url(spec, spec.prefill), str(bootstrap)],
        ["--decode", _url(spec, spec.decode)],
        ["--host", r.host],
        ["--port", str(r.port)],
        ["--policy", r.policy],
        ["--prometheus-port", str(r.prometheus_port)],
        *([["--prometheus-host", r.prometheus_host]] if r.prometheus_host else []),
        ["--max-concurrent-requests", str(r.max_concurrent_requests)],
        ["--queue-size", str(r.queue_size)],
        ["--queue-timeout-secs", str(r.queue_timeout_secs)],
    ]
    return managed + _flag_groups(r.args)


def emitted_flags(groups: Iterable[list[str]]) -> set[str]:
    return {g[0] for g in groups}


def health_url(spec: DeploymentSpec, role: str) -> str:
    if role == "router":
        return f"http://{loopback(spec.router.host)}:{spec.router.port}/health"
    s = spec.servers()[role]
    return f"http://{loopback(s.host)}:{s.port}/health"


def _script(spec: DeploymentSpec, role: str, launcher: list[str], flags: list[list[str]],
            environment: dict[str, str], numa: int | None) -> str:
    return _env.get_template("serve.sh.j2").render(
        spec=spec, role=role, environment=environment, numa=numa,
        argv=launcher, launcher_len=len(launcher), flag_groups=flags,
    )


def _unit(spec: DeploymentSpec, description: str, exec_start: str, environment: dict[str, str],
          health: str | None, after: list[str], timeout_start_s: int, restart_s: int = 10) -> str:
    return _env.get_template("role.service.j2").render(
        spec=spec, description=description, exec_start=exec_start, environment=environment,
        health_url=health, python=spec.exporter.python, install_dir=spec.install_dir, after=after,
        timeout_start_s=timeout_start_s, restart_s=restart_s,
        start_limit_burst=5, start_limit_interval_s=max(600, 5 * (restart_s + 30)),
    )


def _role_files(spec: DeploymentSpec) -> dict[str, list[RenderedFile]]:
    files: dict[str, list[RenderedFile]] = {n.name: [] for n in spec.nodes}
    for role, s in spec.servers().items():
        script = f"{spec.install_dir}/{role}.sh"
        body = _script(spec, role, server_launcher(spec), server_flags(spec, role), server_environment(spec, s),
                       s.numa_node if spec.numa_pinning else None)
        unit = _unit(spec, f"SGLang {role} ({spec.name}, {spec.model.served_name})", script,
                     {"CUDA_VISIBLE_DEVICES": ",".join(map(str, s.gpus))}, health_url(spec, role), [],
                     spec.start_timeout_s)
        files[s.node] += [RenderedFile(script, body.encode(), 0o755, role),
                          RenderedFile(f"{spec.unit_dir}/{spec.unit_of(role)}", unit.encode(), 0o644, role)]
    r = spec.router
    script = f"{spec.install_dir}/router.sh"
    body = _script(spec, "router", r.argv(), router_flags(spec), r.environment, None)
    after = [spec.unit_of(k) for k in ("prefill", "decode") if spec.servers()[k].node == r.node]
    unit = _unit(spec, f"SGLang PD router ({spec.name})", script, {}, health_url(spec, "router"), after, 300)
    files[r.node] += [RenderedFile(script, body.encode(), 0o755, "router"),
                      RenderedFile(f"{spec.unit_dir}/{spec.unit_of('router')}", unit.encode(), 0o644, "router")]
    if patched(spec):
        for node in sorted({s.node for s in spec.servers().values()}):
            files[node] += [RenderedFile(f"{patch_root(spec)}/{f.relpath}", f.data, 0o644, "patch")
                            for f in patch_files()]
    for n in spec.nodes:
        files[n.name].append(RenderedFile(f"{spec.install_dir}/wait_healthy.py", WAIT_HEALTHY.read_bytes(), 0o755))
        if not spec.exporter.enabled:
            continue
        exporter = f"{spec.install_dir}/gpu_exporter.py"
        port = n.exporter_port or spec.exporter.port
        unit = _unit(spec, f"opsbot GPU exporter (:{port})",
                     f"{spec.exporter.python} {exporter} --port {port}", {}, None, [], 60)
        files[n.name].append(RenderedFile(exporter, EXPORTER.read_bytes(), 0o755, "exporter"))
        files[n.name].append(RenderedFile(f"{spec.unit_dir}/{spec.unit_of('exporter')}", unit.encode(), 0o644, "exporter"))
    return files


def inventory(spec: DeploymentSpec) -> Inventory:
    """The inventory opsbot itself uses to probe this deployment."""
    nodes = [Node(**n.model_dump(include=set(Node.model_fields))) for n in spec.nodes]
    roles = []
    for role, s in spec.servers().items():
        roles.append(Role(role=role, node=s.node, unit=spec.unit_of(role),
                          metrics_url=f"http://{loopback(s.host)}:{s.port}/metrics", health_url=health_url(spec, role),
                          gpus=s.gpus, numa_node=s.numa_node))
    r = spec.router
    roles.append(Role(role="router", node=r.node, unit=spec.unit_of("router"),
                      metrics_url=f"http://{loopback(r.metrics_host())}:{r.prometheus_port}/metrics",
                      health_url=health_url(spec, "router")))
    return Inventory(clusters={spec.name: Cluster(nodes=nodes, roles=roles)})


def _prometheus(spec: DeploymentSpec) -> str:
    jobs = spec.prometheus.jobs

    def target(node: str, port: int, role: str) -> dict:
        return {"address": f"{spec.node(node).address}:{port}", "node": node, "role": role}

    job_list = [
        {"name": jobs["prefill"], "targets": [target(spec.prefill.node, spec.prefill.port, "prefill")]},
        {"name": jobs["decode"], "targets": [target(spec.decode.node, spec.decode.port, "decode")]},
        {"name": jobs["router"], "targets": [target(spec.router.node, spec.router.prometheus_port, "router")]},
    ]
    if spec.exporter.enabled:
        job_list.append({"name": jobs["exporter"],
                         "targets": [target(n.name, n.exporter_port or spec.exporter.port, "exporter") for n in spec.nodes]})
    job_list.append({"name": watch.JOB, "targets": [{"address": watch.opsbot_target(spec), "node": "opsbot",
                                                     "role": "opsbot"}]})
    return _env.get_template("prometheus.yml.j2").render(spec=spec, jobs=job_list, watch_rules=watch.RULES_FILE)


def alertmanager_config(spec: DeploymentSpec) -> str:
    """Alertmanager's configuration: every SGLang PD alert to opsbot's webhook with its token."""
    return _env.get_template("alertmanager.yml.j2").render(spec=spec)


def render(spec: DeploymentSpec) -> Rendering:
    """Every file of the deployment. Call ``serving.rules.check`` first: this does not validate."""
    inv = inventory(spec).model_dump(mode="json", exclude_defaults=True)
    grafana_provider = {
        "apiVersion": 1,
        "providers": [{"name": f"sglang-{spec.name}", "folderUid": spec.grafana.folder_uid, "type": "file",
                       "options": {"path": "/var/lib/grafana/dashboards/sglang"}}],
    }
    return Rendering(
        node_files=_role_files(spec),
        cluster_files={
            "prometheus/prometheus.yml": _prometheus(spec).encode(),
            "prometheus/rules/sglang-pd.rules.yml": alert_rules_yaml(spec).encode(),
            f"prometheus/rules/{watch.RULES_FILE}": watch.watch_rules_yaml(spec).encode(),
            "alertmanager/alertmanager.yml": alertmanager_config(spec).encode(),
            "grafana/dashboards/sglang-pd.json": json.dumps(dashboard_json(spec), indent=2).encode(),
            "grafana/provisioning/dashboards/sglang-pd.yaml": yaml.safe_dump(grafana_provider, sort_keys=False).encode(),
            "opsbot/inventory.yaml": yaml.safe_dump(inv, sort_keys=False).encode(),
        },
    )


class OutsideOutput(ValueError):
    """A rendered file's path does not resolve under the output folder: nothing was written."""


def _under(out: Path, rel: str) -> Path:
    """``out / rel``, refused unless it resolves (symbolic links and '..' followed) under ``out``."""
    p = out / rel.lstrip("/")
    if not p.resolve().is_relative_to(out.resolve()) or p.resolve() == out.resolve():
        raise OutsideOutput(f"{rel!r} does not resolve under the output folder {out}: nothing written")
    return p


def write(rendering: Rendering, out: Path) -> list[Path]:
    """Write the rendering under ``out``: ``nodes/NODE/<absolute path>`` and the cluster files; every
    path is checked first, so a spec that points outside ``out`` writes nothing (``OutsideOutput``)."""
    files: list[tuple[Path, bytes, int | None]] = [(_under(out, f"nodes/{node}/{f.path.lstrip('/')}"), f.data, f.mode)
             for node, node_files in rendering.node_files.items() for f in node_files]
    files += [(_under(out, rel), data, None) for rel, data in rendering.cluster_files.items()]
    for p, data, mode in files:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        if mode is not None:
            p.chmod(mode)
    return [p for p, _data, _mode in files]
