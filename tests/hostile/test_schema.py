"""Schemathesis over the whole OpenAPI spec with every check, against the served app (uvicorn,
SQLite file and PostgreSQL): no server error, and every answer is one the spec documents.

Bounded by ``--max-examples`` so a backend takes well under a minute; the seed is printed, so a
failure replays with ``st run ... --seed N``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.hostile.uvicornkit import uvicorn_served
from tests.realparts import need
from tests.servicekit import lab_settings, replay, flow_for

MAX_EXAMPLES = 20


def test_every_check_passes_over_the_whole_spec(tmp_path, database_url):
    st = shutil.which("st", path=str(Path(sys.executable).parent))
    need(st is not None, "schemathesis CLI (st) not installed: pip install -e '.[dev]'")
    settings = lab_settings(tmp_path, database_url, alert_token="am-secret", probe_wait_s=0.2)
    flow = flow_for(settings, replay("decode-hang-health-200"))
    token = flow.store.create_token("fuzzer", ["act"])
    with uvicorn_served(settings, flow) as url:
        run = subprocess.run(
            [st, "run", f"{url}/openapi.json", "--checks", "all", "--max-examples", str(MAX_EXAMPLES),
             "--header", f"Authorization: Bearer {token}", "--continue-on-failure", "--workers", "1",
             "--no-shrink", "--request-timeout", "20"],
            capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path,
        )
    flow.store.close()
    summary = run.stdout[-3000:]
    assert run.returncode == 0, f"schemathesis found problems:\n{run.stdout[-12000:]}\n{run.stderr[-2000:]}"
    assert "passed" in summary and "failure" not in summary.split("SUMMARY")[-1].lower(), summary
