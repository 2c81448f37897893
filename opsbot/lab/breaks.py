"""``opsbot lab break CLASS``: each incident class the lab can show, as the emulator states (or unit
stop) that produce it (pure data; ``Lab.break_class`` carries it out). For training and game days.

``until_restart`` marks the classes a restart fixes in production: the state clears at the role's
next start, so a guarded restart really recovers the role, while systemd's own automatic restarts after
the state killed the server (watchdog, NCCL) keep it: a crash loop until someone restarts.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsbot.lab.emulator.control import STATES


@dataclass(frozen=True)
class Break:
    role: str  # prefill | decode | router
    state: str  # an emulator state, or "stopped" (the unit is stopped)
    what: str
    until_restart: bool = False


STOPPED = "stopped"

_ALL: dict[str, Break] = {
    "decode-wedged": Break("decode", "wedged", "decode holds requests and makes no tokens", until_restart=True),
    "prefill-wedged": Break("prefill", "wedged", "prefill holds requests and computes no prompt tokens",
                            until_restart=True),
    "prefill-queue-saturation": Break("prefill", "prefill-saturated",
                                      "prefill queue in the tens; decode sees AbortReq transfer cascades"),
    "kv-transfer-failure": Break("decode", "kv-transfer-fail", "decode's KV transfers fail; prefill queue normal",
                                 until_restart=True),
    "config-crashloop": Break("prefill", "crash", "prefill dies at start-up on a bad flag; systemd restarts it"),
    "role-down": Break("decode", STOPPED, "decode's unit is stopped (nothing restarts it)"),
    "cuda-oom": Break("decode", "oom", "decode dies of CUDA out of memory a few seconds after start"),
    "kv-cache-exhausted": Break("decode", "retract-storm", "decode's KV cache is full; requests are retracted"),
    "scheduler-watchdog": Break("decode", "watchdog", "a decode forward batch hangs; the watchdog kills the server",
                                until_restart=True),
    "nccl-failure": Break("decode", "nccl-timeout", "an NCCL collective times out on decode; the server dies",
                          until_restart=True),
    "gpu-fault": Break("decode", "gpu-fault", "one of decode's GPUs falls off the bus; decode hangs"),
    "router-no-healthy-workers": Break("router", "no-healthy-workers",
                                       "the router marks every worker unhealthy; clients get 503"),
    "long-context-recall-regression": Break("decode", "recall-loss",
                                            "answers lose needles beyond a context length (recall probe)"),
    "dp-rank-wedged": Break("decode", "rank-wedged", "one of decode's DP-attention ranks holds its requests and makes "
                            "no tokens; its siblings serve and /health answers", until_restart=True),
    "output-corruption": Break("decode", "output-corruption", "decode's answers to some requests come from a "
                               "corrupted KV transfer: wrong tokens, nothing crashes", until_restart=True),
}

# the classes whose emulator state exists in this emulator (recall-loss comes with the recall probe)
BREAKS: dict[str, Break] = {c: b for c, b in _ALL.items() if b.state == STOPPED or b.state in STATES}


def breaking(incident: str) -> Break:
    if incident not in BREAKS:
        raise KeyError(f"the lab cannot break {incident!r}; it can break: {', '.join(BREAKS)}")
    return BREAKS[incident]
