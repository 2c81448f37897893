"""``opsbot fidelity record`` and ``check`` as an operator runs them, against the emulator's real HTTP servers
(in-process: a prefill, and a decode with two DP-attention ranks) on a local node: a healthy check matches,
a corrupted decode is named output-corruption, a baseline of another model is refused and never compared."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.lab.emulator.control import Control, write_control
from opsbot.lab.emulator.flags import parse_server
from opsbot.lab.emulator.launch_server import App, QuietHTTPServer, make_handler
from opsbot.lab.emulator.scheduler import Scheduler
from opsbot.settings import get_settings

runner = CliRunner()


class Server:
    """One emulated SGLang server (its scheduler ranks ticking in a thread)."""

    def __init__(self, tmp: Path, mode: str, ranks: int, model: str = "/models/DeepSeek-V4-Flash"):
        self.control = tmp / f"{mode}.json"
        write_control(self.control, Control(load=False))
        argv = ["--model-path", model, "--tp", "2", "--disaggregation-mode", mode, "--enable-metrics"]
        argv += ["--enable-dp-attention", "--dp-size", str(ranks)] if ranks > 1 else []
        self.ranks: list[Scheduler] = []
        for r in range(ranks):
            self.ranks.append(Scheduler(mode, model, str(self.control), 2, dp_rank=r if ranks > 1 else None,
                                        dp_size=ranks, registry=self.ranks[0].reg if self.ranks else None))
        self.app = App(parse_server(argv), self.ranks[0], self.ranks)
        self.app.status = "Up"
        self.httpd = QuietHTTPServer(("127.0.0.1", 0), make_handler(self.app))
        self.stop = threading.Event()
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        threading.Thread(target=self._tick, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def _tick(self) -> None:
        while not self.stop.is_set():
            time.sleep(0.05)
            for r in self.ranks:
                r.tick(0.05)

    def put(self, state: str) -> None:
        write_control(self.control, Control(state, load=False))
        for r in self.ranks:
            r.poll_control()

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()


@pytest.fixture
def pair(tmp_path, monkeypatch) -> Iterator[tuple[Server, Server, Path]]:
    prefill, decode = Server(tmp_path, "prefill", 1), Server(tmp_path, "decode", 2)
    inventory = tmp_path / "inventory.yaml"
    role = {"node": "self", "http_via_ssh": False}
    inventory.write_text(yaml.safe_dump({"clusters": {"here": {
        "nodes": [{"name": "self", "address": "127.0.0.1", "transport": "local"}],
        "canary": False,
        "roles": [
            {"role": "prefill", "unit": "sglang-p.service", "health_url": f"{prefill.url}/health",
             "metrics_url": f"{prefill.url}/metrics", "bootstrap_port": 8998, **role},
            {"role": "decode", "unit": "sglang-d.service", "health_url": f"{decode.url}/health",
             "metrics_url": f"{decode.url}/metrics", "dp_size": 2, **role},
        ]}}}))
    monkeypatch.setenv("OPSBOT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("OPSBOT_METRICS_WINDOW_S", "0.3")
    get_settings.cache_clear()
    yield prefill, decode, inventory
    get_settings.cache_clear()
    prefill.close()
    decode.close()


def test_record_then_check_matches_and_a_corrupted_decode_is_named(pair) -> None:
    _prefill, decode, inventory = pair
    recorded = runner.invoke(app, ["fidelity", "record", "-i", str(inventory), "--repeats", "2"])
    assert recorded.exit_code == 0, recorded.output
    assert "8 prompts, 4 answers each" in recorded.output and "fidelity/here.json" in recorded.output
    check = runner.invoke(app, ["fidelity", "check", "-i", str(inventory), "--save", str(inventory.parent / "b.json")])
    assert "matches" in check.output and "diverged" not in check.output, check.output
    bundle = json.loads((inventory.parent / "b.json").read_text())
    assert len(bundle["fidelity"]["cases"]) == 16 and {c["dp_rank"] for c in bundle["fidelity"]["cases"]} == {0, 1}
    decode.put("output-corruption")
    broken = runner.invoke(app, ["fidelity", "check", "-i", str(inventory)])
    assert broken.exit_code == 1 and "diverged" in broken.output and "output-corruption" in broken.output, broken.output


def test_a_baseline_of_another_model_is_refused_never_compared(pair) -> None:
    _prefill, _decode, inventory = pair
    assert runner.invoke(app, ["fidelity", "record", "-i", str(inventory), "--repeats", "2"]).exit_code == 0
    path = inventory.parent / "fidelity" / "here.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data | {"model": "/models/Other"}))
    check = runner.invoke(app, ["fidelity", "check", "-i", str(inventory)])
    assert check.exit_code == 2, check.output
    assert "NOT COMPARED" in check.output and "recorded on model '/models/Other'" in " ".join(check.output.split())
    cases = check.output.split("NOT COMPARED")[0]  # the cases' table; the diagnosis after it has its own words
    assert "matches" not in cases and "diverged" not in cases and "output-corruption" not in check.output


def test_no_prefill_bootstrap_port_is_a_clear_error(pair, tmp_path) -> None:
    _prefill, _decode, inventory = pair
    data = yaml.safe_load(inventory.read_text())
    del data["clusters"]["here"]["roles"][0]["bootstrap_port"]
    inventory.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["fidelity", "record", "-i", str(inventory)])
    assert result.exit_code == 2 and "bootstrap_port" in result.output
