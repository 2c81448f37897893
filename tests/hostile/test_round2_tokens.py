"""Issue 23 item 10: token names are inventory names (no newline or tab forging rows in ``tokens list``,
no 200 characters failing on PostgreSQL, no ``slack:U...`` posing as a Slack approver), and an id is
revoked only with ``--id``; checked through the CLI against the running service on both databases."""

from __future__ import annotations

import httpx
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.settings import get_settings
from opsbot.store import Store
from opsbot.store.models import ApiToken
from tests.hostile.uvicornkit import uvicorn_served
from tests.servicekit import flow_for, lab_settings, replay


def _cli(settings, *argv: str):
    env = {"OPSBOT_DATA_DIR": str(settings.data_dir), "OPSBOT_DATABASE_URL": settings.db_url()}
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(app, list(argv), env=env)
    finally:
        get_settings.cache_clear()


BAD_NAMES = ["ci\nforged\tact\tnever", "a\tb", "x" * 200, "slack:U0ALICE", "Grafana", "_lead", "", "am ",
             "ok[/]", "<!channel>"]


async def test_token_names_and_ids(tmp_path, database_url):
    settings = lab_settings(tmp_path, database_url)
    for name in BAD_NAMES:
        res = _cli(settings, "tokens", "create", name, "--scope", "act")
        assert res.exit_code == 2, (name, res.output)
        assert isinstance(res.exception, SystemExit) and "token name" in res.output, (name, res.output)
    with Store(settings.db_url()) as store:
        assert store.tokens() == []
    grafana = _cli(settings, "tokens", "create", "grafana", "--scope", "read").stdout.strip().splitlines()[0]
    one = _cli(settings, "tokens", "create", "1", "--scope", "read").stdout.strip().splitlines()[0]
    with Store(settings.db_url()) as store:
        ids = {t.name: t.id for t in store.tokens()}
    assert ids["grafana"] != ids["1"]
    flow = flow_for(settings, replay("near-idle-decode"))
    try:
        with uvicorn_served(settings, flow) as url:
            async with httpx.AsyncClient(base_url=url, timeout=20) as client:
                async def status(secret: str) -> int:
                    return (await client.get("/reports", headers={"Authorization": f"Bearer {secret}"})).status_code

                assert _cli(settings, "tokens", "revoke", "1").exit_code == 0  # the token named "1"
                assert await status(one) == 401 and await status(grafana) == 200
                assert _cli(settings, "tokens", "revoke", "--id", str(ids["grafana"])).exit_code == 0
                assert await status(grafana) == 401
                missing = _cli(settings, "tokens", "revoke", "--id", "999999")
                assert missing.exit_code == 2 and "no token id 999999" in missing.output
                both = _cli(settings, "tokens", "revoke", "grafana", "--id", "1")
                assert both.exit_code == 2 and "not both" in both.output
        # a name kept from before names were checked is shown quoted: it forges no row
        flow.store.write(lambda s: s.add(ApiToken(name="old\tact\tnever\n9\tforged", token_hash="0" * 64,
                                                  scopes=["read"])))
        rows = _cli(settings, "tokens", "list").stdout.splitlines()
        assert len(rows) == 3 and all(len(r.split("\t")) == 5 for r in rows), rows
    finally:
        flow.store.close()
