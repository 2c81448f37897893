"""Variants of ``dev/`` threads for the kinds of miss "healthy is earned" is about (issue 24): a stale
gauge on 0.4.x, the watchdog line alone, the soft watchdog's harmless repeats, a run that served before
dying with its last lines gone, a GPU fault seen only in the driver's lines, time-only batch headers, and
failures that no runbook claims (``unexplained``, ``any-finding``). Each keeps its base's thread, so it
lands in its base's part (``dev/``; ``write`` refuses anything else). ``python -m tests.scenarios.allclear``
writes them.
"""

from __future__ import annotations

import re

from tests.scenarios.compose import RoleSpec
from tests.scenarios.field import SCENARIOS, variant
from tests.scenarios.split import DEV, part, write

MINE: list[str] = []


def _variant(base: str, suffix: str, note: str, edit, role: str | None = None, **kw) -> None:
    variant(base, suffix, note, edit, role, **kw)
    MINE.append(f"{base}-{suffix}")


# --- a wedged 0.4.x decode: gen_throughput keeps its last value, no request finishes, no batch line since ----

def _stale_gauge(spec: RoleSpec) -> None:
    spec.history, spec.logs = spec.logs, []  # its Decode batch lines stop 14 minutes before the probe


_variant("healthy-old-decode-slowing", "wedged-stale-gauge",
         "0.4.3: the decode scheduler stopped 14 minutes ago; gen_throughput still reads 184.38 (a gauge keeps its "
         "last value), no request finished and no Decode batch line since", _stale_gauge, "decode",
         expected="decode-wedged", also=(), must_not=("healthy", "unexplained"))


def _time_only(spec: RoleSpec) -> None:
    spec.logs = [re.sub(r"^raw:\[\d{4}-\d{2}-\d{2} ", "raw:[", line) for line in spec.logs]


_variant("healthy-old-decode-slowing", "time-only-header",
         "0.4.3 batch lines relayed with a time-only [HH:MM:SS TP0] header; requests progress, nothing is wrong",
         _time_only, "decode", must_not=("decode-wedged", "unexplained"))


# --- the soft watchdog: SGLang 0.5.23 utils/watchdog.py logs "<name> watchdog timeout (..., self.soft=True)" and
# goes on; the TokenizerManager's is always soft (managers/tokenizer_manager.py:855) -----------------------

def _soft_watchdog(spec: RoleSpec) -> None:
    line = "raw:[2026-04-05 20:01:51] TokenizerManager watchdog timeout (self.watchdog_timeout=60, self.soft=True)"
    spec.logs = [line, *spec.logs[:1], line, *spec.logs[1:], line]


_variant("healthy-mixed-prefill-decode-2026", "soft-watchdog-repeats",
         "the tokenizer's soft watchdog repeats its warning every minute while decode serves 1600 token/s: a note, "
         "not a finding, and never a restart", _soft_watchdog, "decode",
         must_not=("scheduler-watchdog", "unexplained", "decode-wedged"))


# --- the watchdog quoted without its detail ------------------------------------------------------------

def _thin_watchdog(spec: RoleSpec) -> None:
    spec.logs = ["raw:[2025-08-02 19:24:30 TP3] Watchdog timeout" if "Watchdog timeout" in line else line
                 for line in spec.logs]


_variant("watchdog-pyspy-missing", "thin-log", "the same hang, the thread quoting only 'Watchdog timeout'",
         _thin_watchdog, "decode")


# --- a run that served for hours, died, and whose last lines the journal no longer holds -----------------

def _lines_lost(spec: RoleSpec) -> None:
    spec.logs = [line for line in spec.logs if line.startswith("systemd:")]


_variant("nccl-watchdog-terminate-cpp", "lines-lost",
         "the same death after three hours of serving, its last lines lost to the journal's cap: only systemd's exit "
         "lines remain; not a start-up crash loop", _lines_lost, "decode", expected="role-down", also=(),
         must_not=("config-crashloop", "healthy"))


# --- failures that no runbook claims --------------------------------------------------------------------

def _asgi_exceptions(spec: RoleSpec) -> None:
    frames = [
        "raw:[2026-04-05 20:02:40] ERROR:    Exception in ASGI application",
        "raw:Traceback (most recent call last):",
        'raw:  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/entrypoints/openai/serving_chat.py", line 612,'
        " in _process_messages",
        "raw:    prompt_ids = self.tokenizer_manager.tokenizer.apply_chat_template(",
        'raw:  File "/usr/local/lib/python3.12/dist-packages/transformers/tokenization_utils_base.py", line 1640,'
        " in apply_chat_template",
        "raw:    rendered_chat = compiled_template.render(",
        "raw:jinja2.exceptions.UndefinedError: 'dict object' has no attribute 'content'",
    ]
    spec.logs = [*spec.logs, *frames, *frames]


_variant("healthy-mixed-prefill-decode-2026", "chat-template-exceptions",
         "every chat request with a tool message fails in the chat template while decode keeps serving the others: "
         "an exception no runbook classes, shown as it is, no restart advised", _asgi_exceptions, "decode",
         expected="unexplained", also=(), must_not=("healthy", "config-crashloop", "role-down"))


def _router_5xx(spec: RoleSpec) -> None:
    spec.logs = [*spec.logs,
                 "raw:2026-04-05T20:02:41.118Z ERROR sgl_model_gateway::routers::http::router: Upstream returned 500 for "
                 "/v1/chat/completions: {\"object\":\"error\",\"message\":\"Internal server error\",\"code\":500}",
                 "raw:2026-04-05T20:02:44.902Z ERROR sgl_model_gateway::routers::http::router: Upstream returned 500 for "
                 "/v1/chat/completions: {\"object\":\"error\",\"message\":\"Internal server error\",\"code\":500}"]


_variant("healthy-mixed-prefill-decode-2026", "router-upstream-500",
         "the router logs 500 answers from its workers at ERROR while tokens move: something fails that no class "
         "names", _router_5xx, "router", expected="any-finding", also=(), must_not=())


def main() -> None:
    names = {name: SCENARIOS[name] for name in MINE}
    wrong = [n for n, build in names.items() if part(build()["label"]["source"]) != DEV]
    if wrong:
        raise SystemExit(f"not dev/ threads: {wrong}")
    for path in write(names):
        print(path)


if __name__ == "__main__":
    main()
