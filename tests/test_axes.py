"""Pure helpers of the collectors: node-side log output put in order, filtered and capped."""

from __future__ import annotations

import re

from opsbot.collect.axes import _filter_lines, _journal_failure
from opsbot.collect.transport import CommandResult
from opsbot.parse.logs import LOG_FILTER

PAT = re.compile(LOG_FILTER)


def _line(sec: int, msg: str) -> str:
    return f"2026-11-30T14:51:{sec:02d}+0000 vm python3[30]: [2026-11-30 14:51:{sec:02d} TP0] {msg}"


def test_grep_output_newest_first_is_put_back_in_order():
    raw = "\n".join(_line(s, "Decode batch, #running-req: 8") for s in (40, 39, 38)) + "\n"
    out, over = _filter_lines(raw, PAT, cap=10)
    assert [ln[17:19] for ln in out.splitlines()] == ["38", "39", "40"] and not over


def test_filter_keeps_newest_within_cap_and_drops_noise():
    raw = "\n".join([_line(1, "GET /health 200"), *(_line(s, "Decode out of memory.") for s in range(2, 8))])
    out, over = _filter_lines(raw, PAT, cap=3)
    assert over and [ln[17:19] for ln in out.splitlines()] == ["05", "06", "07"]
    assert "GET /health" not in out


def test_journal_exit_1_without_matches_is_not_a_failure():
    quiet = CommandResult(["journalctl"], 1, "-- No entries --\n", "", 5.0)
    assert _journal_failure(quiet) is None
    broken = CommandResult(["journalctl"], 1, "", "Failed to add match 'x': Invalid argument\n", 5.0)
    assert "Invalid argument" in _journal_failure(broken)


def test_secrets_are_redacted_and_figures_are_not():
    from opsbot.collect.axes import redact

    line = ("server_args=ServerArgs(model_path='/m', api_key='sk-live-123', admin_api_key=None, hf_token=\"hf_abc\") "
            "--api-key s3cr3t Authorization: Bearer eyJhbGciOi password=hunter2")
    out = redact(line)
    for secret in ("sk-live-123", "hf_abc", "s3cr3t", "eyJhbGciOi", "hunter2"):
        assert secret not in out
    assert "admin_api_key=None" in out and "model_path='/m'" in out
    batch = "Decode batch, #running-req: 8, #full token: 60065, full token usage: 0.06, #swa token: 44032"
    assert redact(batch) == batch


from hypothesis import example, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


_PRINTABLE = st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="'\",)")


@given(st.text(), st.text(alphabet=_PRINTABLE, min_size=1))
@example("", "NONE")  # only SGLang's literal None means "no key"; the pattern is case-blind otherwise
def test_redact_hides_any_api_key_value(prefix, secret):
    from opsbot.collect.axes import redact

    if secret.startswith("None"):
        return  # "api_key=None" says no key is set; it is kept
    out = redact(f"{prefix} api_key='{secret}'")
    assert "api_key='***'" in out and redact(out) == out
