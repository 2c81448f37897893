"""Capture corpus bundles from the lab: boot a lab of its own, put roles into each emulator
state, run a real probe, label the bundle with the class it must be diagnosed as, save it.

    python -m tests.scenarios.capture [--sglang-version 0.5.12] [NAME ...]   # root, systemd-nspawn, lab rootfs

Writes ``tests/scenarios/dev/<name>.json`` (lab bundles are the lab's, not the field's: always dev/) (``<name>-0.5.12.json`` when the emulator imitates
0.5.12's labels and wording); the lab is torn down at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from opsbot.bundle import Trigger
from opsbot.collect import fidelity
from opsbot.collect.probe import probe
from opsbot.collect.recall import RecallPlan, recall_bundle
from opsbot.diagnose import diagnose
from opsbot.lab.nodes import Lab, isolated_settings
from tests.scenarios.split import DEV

OUT = DEV
console = Console(stderr=True)


@dataclass(frozen=True)
class Capture:
    role: str
    state: str
    expected: str
    settle_s: float = 4.0  # time for the emulator to reach the state (and exit/restart, where it does)
    message: str | None = None
    also: tuple[str, ...] = ()
    must_not: tuple[str, ...] = ()
    note: str = ""
    recall: RecallPlan | None = None  # also run the recall grid (opsbot recall) before the probe
    beyond: int | None = None
    fidelity: bool = False  # record the fidelity baseline while healthy, then run `opsbot fidelity check`


CAPTURES: dict[str, Capture] = {
    "healthy": Capture("decode", "healthy", "healthy", 2.0, note="every role healthy under the emulator's own light load"),
    "decode-wedged": Capture("decode", "wedged", "decode-wedged", must_not=("prefill-wedged",)),
    "prefill-wedged": Capture("prefill", "wedged", "prefill-wedged", must_not=("decode-wedged",)),
    "crash-hicache-size": Capture("prefill", "crash", "config-crashloop", 8.0, must_not=("role-down",),
                                  note="default crash message: DeepSeek V4 HiCache ValueError for --hicache-size"),
    "crash-unexplained": Capture("decode", "crash", "role-down", 8.0, message="RuntimeError: engine core exited unexpectedly",
                                 also=("router-no-healthy-workers",), must_not=("config-crashloop",),
                                 note="a crash loop whose message names no flag: role-down, not config-crashloop"),
    "prefill-saturated": Capture("prefill", "prefill-saturated", "prefill-queue-saturation", 6.0,
                                 must_not=("kv-transfer-failure",), note="decode shows the AbortReq cascade"),
    "kv-transfer-fail": Capture("decode", "kv-transfer-fail", "kv-transfer-failure", 6.0),
    "pd-desync": Capture("prefill", "pd-desync", "kv-transfer-failure", 6.0, note="after one side restarted"),
    "oom": Capture("decode", "oom", "cuda-oom", 9.0, also=("router-no-healthy-workers",), must_not=("role-down",)),
    "retract-storm": Capture("decode", "retract-storm", "kv-cache-exhausted", 6.0, must_not=("decode-wedged",),
                             note="decode slowed to tens of tokens/s, not stopped (sglang#26248)"),
    "watchdog": Capture("decode", "watchdog", "scheduler-watchdog", 11.0, also=("router-no-healthy-workers",),
                        must_not=("decode-wedged", "role-down")),
    "nccl-timeout": Capture("prefill", "nccl-timeout", "nccl-failure", 11.0, also=("router-no-healthy-workers",),
                            must_not=("scheduler-watchdog", "prefill-wedged", "role-down")),
    "no-healthy-workers": Capture("router", "no-healthy-workers", "router-no-healthy-workers", 6.0),
    "gpu-fault": Capture("decode", "gpu-fault", "gpu-fault", 5.0, must_not=("decode-wedged",)),
    "recall-loss": Capture("decode", "recall-loss", "long-context-recall-regression", 1.0, recall=RecallPlan(),
                           beyond=4096, note="the default grid; needles lost past 4096 tokens at every depth"),
    "recall-blind": Capture("decode", "recall-blind", "healthy", 1.0, recall=RecallPlan(lengths=(1024, 2048, 4096)),
                            must_not=("long-context-recall-regression",),
                            note="lost at every length, the shortest included: a broken prompt, not this class"),
    "recall-edges": Capture("decode", "recall-edges", "healthy", 1.0, recall=RecallPlan(lengths=(1024, 2048, 4096)),
                            must_not=("long-context-recall-regression",),
                            note="lost only at depths 0 and 1: positional, not this class"),
    "dp-rank-wedged": Capture("decode", "rank-wedged", "dp-rank-wedged", 2.0, also=("kv-transfer-failure",),
                              must_not=("decode-wedged",),
                              note="decode runs two DP-attention ranks; the last holds its requests, the other serves; "
                                   "the router's canary went to the stuck rank and timed out, which kv-transfer-failure "
                                   "also reads"),
    "dp-ranks-healthy": Capture("decode", "healthy", "healthy", 2.0, must_not=("dp-rank-wedged",),
                                note="decode runs two DP-attention ranks, both serving; each pinned canary answers"),
    "output-corruption": Capture("decode", "output-corruption", "output-corruption", 2.0, fidelity=True,
                                 must_not=("long-context-recall-regression",),
                                 note="greedy answers of one prompt in three change from token 3 on, on both ranks"),
    "fidelity-healthy": Capture("decode", "healthy", "healthy", 2.0, fidelity=True, must_not=("output-corruption",),
                                note="the fidelity run against the baseline recorded a moment before: batch wobble only"),
}


def capture(lab: Lab, name: str, c: Capture, version: str) -> Path:
    lab.reset()
    baseline = asyncio.run(fidelity.record(lab.inventory, cluster=None, settings=lab.settings, repeats=2)) \
        if c.fidelity else None
    since = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    lab.inject(c.role, c.state, c.message, beyond=c.beyond)
    time.sleep(c.settle_s)
    trigger = Trigger(kind="cli", text=f"lab capture: {c.role} {c.state}", user="capture")
    # only the journal since the injection: earlier captures' lines must not leak into this one
    settings = lab.settings.model_copy(update={"log_since": since})
    if c.fidelity:
        bundle = asyncio.run(fidelity.fidelity_bundle(lab.inventory, cluster=None, settings=settings, trigger=trigger,
                                                      baseline=baseline))
    elif c.recall is not None:
        bundle = asyncio.run(recall_bundle(lab.inventory, cluster=None, plan=c.recall, settings=settings,
                                           trigger=trigger))
    else:
        bundle = asyncio.run(probe(lab.inventory, trigger=trigger, settings=settings))
    data = json.loads(bundle.to_json())
    if version != "0.5.23":
        name = f"{name}-{version}"
    data["id"] = f"lab-{name}"
    data["label"] = {
        "expected": c.expected, "also": list(c.also), "must_not": list(c.must_not),
        "source": f"opsbot lab (emulating SGLang {version}): `opsbot lab inject {c.role} {c.state}`"
        + (f" --message {c.message!r}" if c.message else "") + (f" --beyond {c.beyond}" if c.beyond else "")
        + (", then `opsbot recall`" if c.recall else "")
        + (" after `opsbot fidelity record`, then `opsbot fidelity check`" if c.fidelity else ""),
        "note": c.note,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    found = [f.incident for f in diagnose(bundle).findings]
    mark = "ok" if (found[:1] or ["healthy"])[0] == c.expected else "MISS"
    console.print(f"{mark:4} {name:20} expected {c.expected:26} got {found}")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"captures to run (default all): {', '.join(CAPTURES)}")
    ap.add_argument("--sglang-version", default="0.5.23", choices=("0.5.23", "0.5.12"))
    args = ap.parse_args()
    names = args.names or list(CAPTURES)
    with tempfile.TemporaryDirectory(prefix="opsbot-capture-") as tmp:
        settings = isolated_settings(Path(tmp)).model_copy(update={"lab_sglang_version": args.sglang_version})
        lab = Lab(settings)
        with console.status("booting a lab of two nodes ...") as status:
            lab.up(2, step=lambda s: status.update(s))
        try:
            for name in names:
                capture(lab, name, CAPTURES[name], args.sglang_version)
        finally:
            lab.down()


if __name__ == "__main__":
    main()
