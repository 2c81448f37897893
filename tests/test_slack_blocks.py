"""Block Kit rendering stays inside Slack's limits whatever the findings hold (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from opsbot.diagnose import Finding, Remedy
from opsbot.slack.blocks import decided_blocks, finding_blocks
from opsbot.slack.limits import BLOCKS_MAX, TEXT_MAX
from opsbot.slack.commands import parse_command

text = st.text(min_size=0, max_size=3500)
findings = st.lists(
    st.builds(
        Finding, incident=st.from_regex(r"[a-z-]{3,30}", fullmatch=True), title=text, severity=st.sampled_from(["critical", "warning"]),
        roles=st.lists(st.sampled_from(["prefill", "decode", "router"]), min_size=1, max_size=3), evidence=st.lists(text, max_size=8),
        summary=text, explain=st.just(""), remedies=st.lists(st.builds(Remedy, kind=st.just("restart"), role=st.just("decode"),
                                                                        approval=st.just("required"), text=text), max_size=3),
        confidence=st.floats(0, 1),
    ),
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(findings, st.dictionaries(st.sampled_from(["prefill", "decode", "router"]), st.from_regex(r"[0-9a-f]{12}", fullmatch=True)))
def test_finding_blocks_respect_slack_limits(fs, plans):
    blocks = finding_blocks("lab", "p1", fs, plans)
    assert 1 <= len(blocks) <= BLOCKS_MAX
    for b in blocks:
        if b["type"] == "section":
            assert len(b["text"]["text"]) <= TEXT_MAX
    after = decided_blocks(blocks, "approved by <@U1>")
    assert len(after) <= BLOCKS_MAX
    assert not [b for b in after if b["type"] == "actions"] and after[-1]["text"]["text"] == "approved by <@U1>"
    shown = [b for b in blocks if b["type"] == "actions"]
    expected = list(plans.values()) if fs else []  # plans only come from findings
    assert [b["elements"][0]["value"] for b in shown] == expected, "buttons are never cut off"


def test_buttons_carry_the_plan_and_a_confirm_dialog():
    f = Finding(incident="decode-wedged", title="Decode is stuck", severity="critical", roles=["decode"], evidence=["tokens: 0"],
                summary="s", explain="e", remedies=[Remedy(kind="restart", role="decode", approval="required", text="restart decode")],
                confidence=0.9)
    (actions,) = [b for b in finding_blocks("lab", "p1", [f], {"decode": "abc123"}) if b["type"] == "actions"]
    restart, dismiss = actions["elements"]
    assert restart["value"] == dismiss["value"] == "abc123" and "confirm" in restart and "confirm" not in dismiss


def test_commands_parse():
    assert parse_command("").verb == "help"
    assert parse_command("  restart Decode ").args == ["decode"]
    assert parse_command("probe prefill router").args == ["prefill", "router"]
    ask = parse_command("decode is stuck")
    assert ask.verb == "ask" and ask.text == "decode is stuck"
