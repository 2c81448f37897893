"""``interpret``: which roles an operator's words are about ("decode is stuck" → decode), and
``probe_scope``: which roles to probe for them (a PD role brings its peer and the router), and
``alert_probe_roles``: which roles an alert's probe covers (the router's bring its workers)."""

from __future__ import annotations

import re

from opsbot.inventory import Cluster

# Words people use for each role; a role's own instance names are matched too.
ROLE_WORDS: dict[str, tuple[str, ...]] = {
    "prefill": ("prefill", "prefills", "ttft", "first token", "time to first", "prompt processing", "bootstrap"),
    "decode": ("decode", "decoding", "decoder", "generation", "generating", "tokens per second", "tpot", "itl", "streaming"),
    "router": ("router", "gateway", "smg", "load balancer", "lb", "5xx", "502", "503", "routing"),
}


def interpret(text: str, names: list[str] | None = None) -> list[str]:
    """Role kinds (and instance names from ``names``) the words mention; [] means all roles."""
    words = " ".join(re.findall(r"[a-z0-9-]+", text.lower()))
    found: list[str] = []
    for name in names or []:
        if re.search(rf"(?<![\w-]){re.escape(name.lower())}(?![\w-])", words) and name not in found:
            found.append(name)
    for role, cues in ROLE_WORDS.items():
        if role in found:
            continue
        if any(re.search(rf"(?<![\w-]){re.escape(cue)}(?![\w-])", words) for cue in cues):
            found.append(role)
    return found


# A PD role is never alone: "decode is stuck" is often a saturated prefill or a dead router behind it.
PD_ROLES = ("prefill", "decode")
PD_CONTEXT = ("prefill", "decode", "router")


def probe_scope(named: list[str], kinds: dict[str, str]) -> list[str]:
    """The roles to probe for the ones the words named (``kinds``: instance name → role kind).

    When a prefill or decode (kind or instance) is named, the other PD kind and the router are
    probed too, after the named ones, so the diagnosis can see the cause behind the symptom; a
    router alone stays alone. [] (nothing named) stays [] = all roles.
    """
    named_kinds = {kinds.get(n, n) for n in named}
    if not named_kinds & set(PD_ROLES):
        return list(named)
    present = set(kinds.values())
    return list(named) + [k for k in PD_CONTEXT if k in present and k not in named_kinds]


def alert_probe_roles(role: str, cluster: Cluster) -> list[str] | None:
    """What to probe for an alert on ``role`` (a kind or an instance name); None means every role.

    The router's alerts (a worker unreachable, none healthy, 5xx) are about the workers behind it, so
    they probe every role: a router-only probe of a decode that died of OOM names nothing. Any other
    role's alert probes that role (an unknown one raises when the probe selects it)."""
    kinds = {r.key: r.role for r in cluster.roles}
    return None if kinds.get(role, role) == "router" else [role]


def roles_for_words(text: str, cluster: Cluster) -> list[str] | None:
    """What to probe for an operator's words in this cluster; None means every role."""
    named = interpret(text, [r.key for r in cluster.roles])
    return probe_scope(named, {r.key: r.role for r in cluster.roles}) or None
