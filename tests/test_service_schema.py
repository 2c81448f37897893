"""Schemathesis against opsbot's OpenAPI spec: no input makes the API answer 500."""

from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from schemathesis.checks import not_a_server_error

from opsbot.service.app import create_app
from tests.servicekit import flow_for, lab_settings, replay

_TMP = Path(tempfile.mkdtemp(prefix="opsbot-schema-"))
_SETTINGS = lab_settings(_TMP, f"sqlite:///{_TMP / 'opsbot.db'}", alert_token="am-secret", probe_wait_s=0.2)
_FLOW = flow_for(_SETTINGS, replay("decode-hang-health-200"))
TOKEN = _FLOW.store.create_token("fuzzer", ["read", "probe", "act"])
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(_SETTINGS, flow=_FLOW))


@schema.parametrize()
@hsettings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_makes_a_server_error(case):
    for headers in ({"Authorization": f"Bearer {TOKEN}"}, {"X-Opsbot-Alert-Token": "am-secret"}, {}):
        response = case.call(headers=headers)
        case.validate_response(response, checks=[not_a_server_error])
