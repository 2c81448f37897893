"""On the lab (its decode runs DP attention with two ranks): one rank wedged is named dp-rank-wedged by the
first probe after the break, from the rank's own series and its pinned canary, while /health stays green;
decode output corrupted after the KV transfer is named output-corruption by the first fidelity run."""

from __future__ import annotations

import asyncio

import pytest

from opsbot.collect.probe import probe
from opsbot.diagnose import default_runbooks, diagnose
from opsbot.settings import Settings

pytestmark = pytest.mark.lab


@pytest.fixture
def settings(tmp_path):
    return Settings(data_dir=tmp_path, ssh_connect_timeout_s=3.0, metrics_window_s=3.0, probe_deadline_s=15,
                    canary_deadline_s=5.0)


async def test_one_rank_wedged_is_named_by_the_first_probe(lab, settings):
    lab.reset()
    try:
        lab.break_class("dp-rank-wedged")
        await asyncio.sleep(1.0)  # the emulator reads its control file every tick
        bundle = await probe(lab.inventory, settings=settings)
        decode = bundle.role("decode")
        assert decode is not None and decode.health.status == 200  # /health reaches DP rank 0 only
        canaries = {r.dp_rank: r.canary for r in decode.ranks or []}
        assert canaries[0].ok and not canaries[1].ok and canaries[1].status is None, canaries
        findings = diagnose(bundle, default_runbooks()).findings
        assert findings and findings[0].incident == "dp-rank-wedged", [(f.incident, f.summary) for f in findings]
        assert "decode-wedged" not in {f.incident for f in findings}
        restart = next(r for r in findings[0].remedies if r.kind == "restart")
        assert "1 of them healthy" in restart.text
    finally:
        lab.reset()


async def test_output_corruption_is_named_by_the_first_fidelity_run_after_the_break(lab, tmp_path):
    from opsbot.bundle import Trigger
    from opsbot.flow import Flow
    from opsbot.store import Store

    s = lab.settings.model_copy(update={"data_dir": tmp_path, "database_url": f"sqlite:///{tmp_path}/opsbot.db",
                                        "metrics_window_s": 3.0, "canary_deadline_s": 8.0,
                                        "inventory": lab.inventory_path})
    flow = Flow(settings=s, store=Store(s.db_url()))
    lab.reset()
    try:
        baseline, _path = await flow.record_fidelity(None, repeats=2)
        assert baseline.answers == 4  # 2 repeats x the decode's 2 ranks
        healthy = await flow.run_fidelity(None, Trigger(kind="cli", text="fidelity"))
        assert healthy.bundle.fidelity is not None and healthy.bundle.fidelity.refused is None
        assert not any(c.diverged for c in healthy.bundle.fidelity.cases)
        assert "output-corruption" not in {f.incident for f in healthy.diagnosis.findings}
        assert flow.telemetry.fidelity.labels(healthy.bundle.cluster)._value.get() == 1.0
        lab.break_class("output-corruption")
        await asyncio.sleep(1.0)
        broken = await flow.run_fidelity(None, Trigger(kind="cli", text="fidelity"))
        findings = [f.incident for f in broken.diagnosis.findings]
        assert findings and findings[0] == "output-corruption", findings
        cases = broken.bundle.fidelity.cases
        assert {c.dp_rank for c in cases if c.diverged} == {0, 1} and all(c.first_divergence == 3 for c in cases if c.diverged)
        remedies = {(r.kind, r.role) for r in broken.diagnosis.findings[0].remedies}
        assert ("restart", "decode") in remedies and ("restart", "prefill") in remedies  # no deploy since the baseline
        assert flow.telemetry.fidelity.labels(broken.bundle.cluster)._value.get() == 0.0
    finally:
        lab.reset()
