"""Issue 13 item 5: a role port answering a redirect never makes opsbot fetch another URL.

A real HTTP server on loopback plays the role port (302 to a second server that records every
hit); the collectors keep the redirect as evidence and the health check is not counted ok.
"""

from __future__ import annotations

from opsbot.collect.axes import collect_health, collect_metrics
from opsbot.collect.transport import LocalTransport
from opsbot.inventory import Node, Role
from opsbot.settings import Settings
from tests.httpstub import serve


async def test_redirects_are_evidence_and_never_followed(tmp_path):
    settings = Settings(data_dir=tmp_path, metrics_window_s=0.0, http_timeout_s=2.0)
    with serve(lambda path: b"secret: the operator host's own page") as target:
        with serve(lambda path: (302, {"Location": f"{target}/internal"}, b"")) as port:
            role = Role(role="decode", node="n1", unit="sglang-decode.service", http_via_ssh=False,
                        health_url=f"{port}/health", metrics_url=f"{port}/metrics")
            transport = LocalTransport(Node(name="n1", address="localhost", transport="local"), settings)
            try:
                health = await collect_health(transport, role, settings)
                metrics = await collect_metrics(transport, role, settings)
            finally:
                await transport.close()
    assert target.hits == []  # nothing was fetched from opsbot's own host
    assert port.hits == ["/health", "/metrics"]
    assert health.status == 302 and health.model_extra["location"] == f"{target}/internal"
    assert "secret" not in health.body
    assert not metrics.ok and "redirect" in metrics.error and "not followed" in metrics.error
    assert metrics.samples == []
