"""Item 7: tokens are revoked and expire through the CLI, and are refused (401, saying why) by the
running service; scopes nest (act includes probe includes read)."""

from __future__ import annotations

from datetime import datetime, timezone

import httpx
from sqlalchemy import update
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.cli.tokens import parse_lifetime
from opsbot.settings import get_settings
from opsbot.store import Store
from opsbot.store.models import ApiToken
from tests.hostile.uvicornkit import uvicorn_served
from tests.servicekit import lab_settings, replay, flow_for


def _cli(settings, *argv: str):
    env = {"OPSBOT_DATA_DIR": str(settings.data_dir), "OPSBOT_DATABASE_URL": settings.db_url()}
    get_settings.cache_clear()  # the CLI reads its settings once per process; this test's are its own
    try:
        return CliRunner().invoke(app, list(argv), env=env)
    finally:
        get_settings.cache_clear()


def test_lifetimes_are_read_or_refused():
    assert parse_lifetime("30d").days == 30 and parse_lifetime("12h").total_seconds() == 12 * 3600
    for bad in ("0d", "30", "d30", "30 days", "-1d", "1y"):
        try:
            parse_lifetime(bad)
        except ValueError as exc:
            assert "e.g. 30d" in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")


async def test_revoke_and_expiry_through_the_cli_against_the_service(tmp_path, database_url):
    settings = lab_settings(tmp_path, database_url)
    made = _cli(settings, "tokens", "create", "grafana", "--scope", "act", "--expires", "30d")
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip().splitlines()[0]
    with Store(settings.db_url()) as store:
        brief = store.create_token("brief", ["read"], parse_lifetime("1m"))
        (short,) = [t for t in store.tokens() if t.name == "brief"]
    flow = flow_for(settings, replay("near-idle-decode"))
    with uvicorn_served(settings, flow) as url:
        async with httpx.AsyncClient(base_url=url, timeout=20) as client:
            h = {"Authorization": f"Bearer {secret}"}
            probed = await client.post("/probe", json={"roles": ["decode"], "wait_s": 10}, headers=h)
            assert probed.status_code == 200, probed.text  # act includes probe
            assert (await client.get("/reports", headers=h)).status_code == 200  # and read
            listed = _cli(settings, "tokens", "list")
            line = next(ln for ln in listed.stdout.splitlines() if "\tgrafana\t" in ln)
            assert "expires 20" in line and "last used 20" in line and "last used never" not in line
            assert _cli(settings, "tokens", "revoke", "grafana").exit_code == 0
            gone = await client.get("/reports", headers=h)
            assert gone.status_code == 401 and "revoked" in gone.json()["detail"]
            again = _cli(settings, "tokens", "revoke", "grafana")
            assert again.exit_code == 2 and "already revoked" in again.output
            assert _cli(settings, "tokens", "revoke", "nobody").exit_code == 2
            assert "revoked" in next(ln for ln in _cli(settings, "tokens", "list").stdout.splitlines() if "grafana" in ln)
            # expiry: move the short token's end into the past, as time would
            flow.store.write(lambda s: s.execute(update(ApiToken).where(ApiToken.id == short.id)
                                                    .values(expires_at=datetime(2020, 1, 1, tzinfo=timezone.utc))))
            late = await client.get("/reports", headers={"Authorization": f"Bearer {brief}"})
            assert late.status_code == 401 and "expired" in late.json()["detail"]
            assert _cli(settings, "tokens", "revoke", "--id", str(short.id)).exit_code == 0  # by id, with --id
    bad = _cli(settings, "tokens", "create", "x", "--scope", "read", "--expires", "soon")
    assert bad.exit_code == 2 and "e.g. 30d" in bad.output
    flow.store.close()
