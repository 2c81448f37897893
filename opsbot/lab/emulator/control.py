"""The control file that puts a role's emulator into a state; read at start, watched while running."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

# state -> (role kinds it applies to, what the emulator does)
STATES: dict[str, tuple[tuple[str, ...], str]] = {
    "healthy": (("prefill", "decode", "router"), "serves and makes progress under light load"),
    "wedged": (("prefill", "decode"), "running requests, realtime tokens flat, /health 503 after its timeout"),
    "crash": (("prefill", "decode", "router"), "exits at start-up with a traceback (default: DSV4 --hicache-size)"),
    "prefill-saturated": (("prefill", "decode"), "prefill queue in the tens, decode KVTransferError AbortReq cascade"),
    "kv-transfer-fail": (("decode",), "decode KV transfers fail (prefill looks dead to it), prefill queue normal"),
    "oom": (("prefill", "decode"), "CUDA out of memory traceback a few seconds after start, then exit"),
    "retract-storm": (("decode",), "token usage ~0.99, KV cache pool full, requests retracted"),
    "watchdog": (("prefill", "decode"), "a forward batch hangs, the scheduler watchdog fires, the server exits"),
    "nccl-timeout": (("prefill", "decode"), "NCCL collective times out, the scheduler subprocess dies, exit"),
    "no-healthy-workers": (("router",), "router marks every worker unhealthy; /readiness 503"),
    "breaker-open": (("router",), "router holds its workers' breakers open while their engines answer; re-registering "
                                  "a worker (DELETE then POST /workers) or restarting the router closes them"),
    "breaker-open-locked": (("router",), "as breaker-open, and the worker API refuses (401, no control-plane key)"),
    "pd-desync": (("prefill", "decode"), "after one side restarted: bootstrap/handshake failures on both"),
    "gpu-fault": (("prefill", "decode"), "nvidia-smi drops one of the role's GPUs; the role hangs"),
    "recall-loss": (("decode",), "prompts longer than --beyond tokens (default 4096 with fp8 index keys, the whole "
                                 "context with bf16 ones) get a wrong answer at every depth"),
    "recall-edges": (("decode",), "needles on the first or last line of a prompt are answered wrongly (positional)"),
    "recall-blind": (("decode",), "every needle is answered wrongly at every length (a broken prompt or tokenizer)"),
    "garbage": (("router",), "answers completions with 200 and a body that is not a completion"),
    "slow": (("router",), "holds completions without answering (clients hit their deadlines)"),
    "rank-wedged": (("prefill", "decode"), "under DP attention one rank (--rank, default the last) holds its requests "
                                           "and makes no tokens while its siblings serve; /health (rank 0) answers"),
    "output-corruption": (("decode",), "after the KV transfer some requests decode wrong tokens (a corrupted cache); "
                                       "nothing crashes, every counter moves"),
}

# states that also put the peer role into the same state (the other half of the incident)
CASCADES: dict[str, str] = {"prefill-saturated": "decode", "pd-desync": "decode"}

DEFAULT_CRASH_MESSAGE = (
    "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."
)


# this emulator process, as it marks an ``until_restart`` state it has taken up
PROCESS = f"{os.getpid()}-{os.urandom(4).hex()}"


@dataclass
class Control:
    state: str = "healthy"
    message: str | None = None
    load: bool = True  # generate light load of its own
    until_restart: bool = False  # the state clears at the next start of the role, as a restart would fix it
    held_by: str | None = None  # the process that took up an ``until_restart`` state
    beyond: int | None = None  # recall-loss: prompts longer than this many tokens lose their needles
    rank: int | None = None  # rank-wedged: the DP rank that stops (None: the last)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def read_control(path: str | os.PathLike[str] | None) -> Control:
    """The control file's content; a missing or broken file means healthy (and says so on stderr)."""
    if not path:
        return Control()
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return Control()
    except (OSError, ValueError) as e:
        print(f"[sglang-emulator] ignoring unreadable control file {path}: {e}", flush=True)
        return Control()
    state = data.get("state", "healthy")
    if state not in STATES:
        print(f"[sglang-emulator] unknown state {state!r} in {path}; staying healthy", flush=True)
        state = "healthy"
    return Control(state=state, message=data.get("message"), load=bool(data.get("load", True)),
                   until_restart=bool(data.get("until_restart", False)), held_by=data.get("held_by"),

                   beyond=data.get("beyond") if isinstance(data.get("beyond"), int) else None,
                   rank=data.get("rank") if isinstance(data.get("rank"), int) else None)


def take_up_control(path: str | os.PathLike[str] | None, *, starting: bool = False,
                    automatic: bool = False) -> Control:
    """The control this process runs with: an ``until_restart`` state is marked as taken up by it,
    and when ``starting`` finds one taken up by an earlier process, the state is cleared (healthy), as a
    restart fixes it; unless this start is systemd's ``automatic`` restart after the state killed the
    server (a crash, the scheduler watchdog, an NCCL timeout): a crash loop does not fix it, a restart does."""
    control = read_control(path)
    if not path or not control.until_restart or control.held_by == PROCESS:
        return control
    if starting and control.held_by is not None and not automatic:
        control = Control()
    else:
        control.held_by = PROCESS
    write_control(path, control)
    return control


def write_control(path: str | os.PathLike[str], control: Control) -> None:
    """Replace the control file atomically, so a watcher never reads half of it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".control-")
    with os.fdopen(fd, "w") as f:
        f.write(control.to_json())
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)


def control_path() -> str:
    """Where this process's control file lives (from the unit's environment)."""
    state_dir = os.environ.get("SGLANG_EMULATOR_STATE_DIR", "/var/lib/opsbot-lab")
    role = os.environ.get("SGLANG_EMULATOR_ROLE", "server")
    return os.path.join(state_dir, "control", f"{role}.json")
