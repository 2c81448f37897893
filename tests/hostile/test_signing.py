"""The raw-bytes checks in front of bolt (opsbot/slack/signing.py): any bytes and headers give an
answer, never an exception; only the real signature within the window passes."""

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given
from hypothesis import strategies as st

from opsbot.slack.signing import body_problem, signature_problem

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
NOW = 1_764_600_000


def _sign(body: bytes, ts: str) -> str:
    return "v0=" + hmac.new(SECRET.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()


@given(st.one_of(st.none(), st.text(max_size=30)), st.one_of(st.none(), st.text(max_size=80)), st.binary(max_size=200))
def test_any_headers_and_bytes_are_refused_without_raising(timestamp, signature, body):
    problem = signature_problem(SECRET, timestamp, signature, body, NOW)
    assert isinstance(problem, str) and problem


@given(st.binary(max_size=300), st.integers(-299, 299))
def test_the_real_signature_within_five_minutes_passes_and_one_flipped_byte_does_not(body, skew):
    ts = str(NOW + skew)
    assert signature_problem(SECRET, ts, _sign(body, ts), body, NOW) is None
    assert signature_problem(SECRET, ts, _sign(body, ts), body + b"x", NOW) == "X-Slack-Signature does not match the body"
    old = str(NOW - 301)
    assert "5 minutes" in signature_problem(SECRET, old, _sign(body, old), body, NOW)


@given(st.sampled_from(["application/json", "application/x-www-form-urlencoded", "", "text/plain; x"]),
       st.binary(max_size=300))
def test_body_checks_answer_any_bytes(content_type, body):
    problem = body_problem(content_type, body)
    assert problem is None or isinstance(problem, str)


def test_body_checks_name_what_is_wrong():
    assert body_problem("application/x-www-form-urlencoded", b"payload=\xff") == "the body is not UTF-8"
    assert body_problem("application/x-www-form-urlencoded", b"payload=%7B") == "the form field payload is not JSON"
    assert body_problem("application/json", b"[1]") == "the JSON body is not a JSON object"
    assert body_problem("application/json", b'{"type": "url_verification"}') is None
    assert body_problem("application/x-www-form-urlencoded", b"command=%2Fopsbot&text=status") is None
