"""Stand-in for opsbot's GPU exporter (serving/exporter.py) on a lab node: the same ``opsbot_gpu_*``
families and labels, read from the emulated GPUs the stand-in ``nvidia-smi`` reads (part of the
emulator: standard library only, it runs on the node's bare python3).

A faulted GPU (lab state ``gpu-fault``) drops out of the list, as it does from nvidia-smi, and
counts an Xid 79 ("GPU has fallen off the bus") against its index at every scrape while it is
gone, as the real exporter counts the events NVML's event set delivers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .exposition import Registry
from .gpu import TOTAL_MIB, GpuRow, rows, state_dir

MIB = 1024 * 1024
XID_FALLEN_OFF_BUS = "79"


def registry_of(gpu_rows: list[GpuRow], node_gpus: int, xids: Counter[int]) -> Registry:
    """The exposition of one scrape: a family per figure, one series per GPU present; ``xids``
    (GPU index -> events so far) gains one for each GPU that is missing now."""
    reg = Registry()
    for name, kind, help_ in (
        ("opsbot_gpu_count", "gauge", "GPUs NVML reports"),
        ("opsbot_gpu_utilization_percent", "gauge", "GPU utilization over the last sample period"),
        ("opsbot_gpu_memory_used_bytes", "gauge", "GPU memory used"),
        ("opsbot_gpu_memory_total_bytes", "gauge", "GPU memory total"),
        ("opsbot_gpu_temperature_celsius", "gauge", "GPU core temperature"),
        ("opsbot_gpu_power_watts", "gauge", "GPU power draw"),
        ("opsbot_gpu_xid_events", "counter", "Xid critical error events seen by this exporter"),
    ):
        reg.family(name, kind, help_)
    reg.set("opsbot_gpu_count", len(gpu_rows))
    present = {r.index for r in gpu_rows}
    for r in gpu_rows:
        labels = {"gpu": str(r.index), "uuid": r.uuid, "name": r.name}
        reg.set("opsbot_gpu_utilization_percent", r.utilization, labels)
        reg.set("opsbot_gpu_memory_used_bytes", r.memory_used * MIB, labels)
        reg.set("opsbot_gpu_memory_total_bytes", r.memory_total * MIB, labels)
        reg.set("opsbot_gpu_temperature_celsius", r.temperature, labels)
        reg.set("opsbot_gpu_power_watts", r.power_draw, labels)
    for missing in set(range(node_gpus)) - present:
        xids[missing] += 1
    for gpu, n in sorted(xids.items()):
        reg.inc("opsbot_gpu_xid_events", n, {"gpu": str(gpu), "uuid": "", "name": "", "xid": XID_FALLEN_OFF_BUS})
    return reg


def _node_gpus() -> int:
    try:
        return int(json.loads((state_dir() / "node.json").read_text()).get("gpus", 4))
    except (OSError, ValueError):
        return 4


class _Handler(BaseHTTPRequestHandler):
    xids: Counter[int] = Counter()  # this process's Xid events so far, by GPU index

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404)
            return
        body = registry_of(rows(), _node_gpus(), self.xids).render().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="opsbot lab GPU exporter stand-in")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9101)
    args = ap.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), _Handler)
    print(f"opsbot lab GPU exporter stand-in on {args.host}:{args.port} ({TOTAL_MIB} MiB GPUs)", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
