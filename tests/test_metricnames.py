"""opsbot's one list of the metric families it reads, against SGLang's catalogue (serving/metric_names.txt)."""

from __future__ import annotations

import pytest

from opsbot.parse.metricnames import COUNTERS, GAUGES, QUEUE_REQS, REALTIME_TOKENS, ROUTER_REQUESTS, exposed
from serving.metricnames import known_metric_names

_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count")


def test_exposed_names():
    assert exposed(QUEUE_REQS) == "sglang:num_queue_reqs"
    assert exposed(REALTIME_TOKENS, "_total") == "sglang:realtime_tokens_total"
    assert exposed(ROUTER_REQUESTS, "_total") == "smg_router_requests_total"


def test_a_family_opsbot_does_not_read_is_refused():
    with pytest.raises(KeyError, match="num_queue_requests"):
        exposed("num_queue_requests")


@pytest.mark.parametrize("fact", sorted(f for f in GAUGES | COUNTERS if not f.startswith(("smg_", "sgl_router_"))))
def test_every_server_family_opsbot_reads_is_in_the_catalogue(fact):
    assert any(exposed(fact, end) in known_metric_names() for end in _SUFFIXES), f"{fact} is not an SGLang metric"
