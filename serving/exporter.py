"""GPU exporter for Prometheus (port 9101): per-GPU utilization, memory, temperature, power, ECC and Xid.

Reads NVML (nvidia-ml-py) on each scrape; Xid events come from an NVML event set polled without
blocking at scrape time. Runs as ``python3 gpu_exporter.py --port 9101`` on a GPU node (copied there
by ``opsbot deploy``; needs only nvidia-ml-py and prometheus-client) and exits with a clear message
where NVML is absent.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections import Counter
from collections.abc import Iterator

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

try:
    import pynvml
except ImportError:  # pragma: no cover - exercised on nodes without nvidia-ml-py
    pynvml = None

PREFIX = "opsbot_gpu"
LABELS = ["gpu", "uuid", "name"]


class NvmlUnavailable(RuntimeError):
    pass


def init_nvml() -> None:
    """Initialise NVML or raise ``NvmlUnavailable`` saying why and what to do."""
    if pynvml is None:
        raise NvmlUnavailable("nvidia-ml-py is not installed: pip install nvidia-ml-py prometheus-client")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(
            f"NVML is not available ({exc}): this node has no NVIDIA driver or GPU "
            "(libnvidia-ml.so.1 not loadable); run the exporter on a GPU node"
        ) from exc


def _try(fn, *args):
    """An NVML reading, or None where the GPU does not support it."""
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def _memory(handle):
    """Memory info v2 (used excludes driver-reserved memory, as nvidia-smi shows); v1 where v2 is missing.

    Seen on an H200 (driver 580): v1 ``used`` is about 615 MiB above nvidia-smi's figure.
    """
    try:
        return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    except (pynvml.NVMLError, AttributeError, TypeError):
        return _try(pynvml.nvmlDeviceGetMemoryInfo, handle)


class GpuCollector(Collector):
    """Reads every GPU on each scrape; drains pending Xid events into per-GPU counters."""

    def __init__(self) -> None:
        self.count = pynvml.nvmlDeviceGetCount()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.count)]
        self.labels = [
            [str(i), pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetName(h)] for i, h in enumerate(self.handles)
        ]
        self.xids: Counter[tuple[int, int]] = Counter()
        self.lock = threading.Lock()
        self.events, self.xid_supported = self._event_set()

    def _event_set(self):
        try:
            es = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError:
            return None, [False] * self.count
        supported = []
        for h in self.handles:
            try:
                pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
                supported.append(True)
            except pynvml.NVMLError:
                supported.append(False)
        return es, supported

    def _drain_xids(self) -> None:
        if self.events is None:
            return
        uuids = {lab[1]: i for i, lab in enumerate(self.labels)}
        while True:
            try:
                ev = pynvml.nvmlEventSetWait_v2(self.events, 0)
            except pynvml.NVMLError:  # NVML_ERROR_TIMEOUT: nothing pending
                return
            idx = uuids.get(_try(pynvml.nvmlDeviceGetUUID, ev.device), -1)
            self.xids[(idx, int(ev.eventData))] += 1

    def collect(self) -> Iterator:
        util = GaugeMetricFamily(f"{PREFIX}_utilization_percent", "GPU utilization over the last sample period", labels=LABELS)
        used = GaugeMetricFamily(f"{PREFIX}_memory_used_bytes", "GPU memory used", labels=LABELS)
        total = GaugeMetricFamily(f"{PREFIX}_memory_total_bytes", "GPU memory total", labels=LABELS)
        temp = GaugeMetricFamily(f"{PREFIX}_temperature_celsius", "GPU core temperature", labels=LABELS)
        power = GaugeMetricFamily(f"{PREFIX}_power_watts", "GPU power draw", labels=LABELS)
        ecc = CounterMetricFamily(f"{PREFIX}_ecc_errors", "ECC errors since the driver loaded (volatile)", labels=[*LABELS, "type"])
        xid = CounterMetricFamily(f"{PREFIX}_xid_events", "Xid critical error events seen by this exporter", labels=[*LABELS, "xid"])
        xid_ok = GaugeMetricFamily(f"{PREFIX}_xid_events_supported", "1 if NVML delivers Xid events for this GPU", labels=LABELS)
        with self.lock:
            self._drain_xids()
            for i, (h, lab) in enumerate(zip(self.handles, self.labels)):
                rates = _try(pynvml.nvmlDeviceGetUtilizationRates, h)
                if rates is not None:
                    util.add_metric(lab, rates.gpu)
                mem = _memory(h)
                if mem is not None:
                    used.add_metric(lab, mem.used)
                    total.add_metric(lab, mem.total)
                t = _try(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)
                if t is not None:
                    temp.add_metric(lab, t)
                mw = _try(pynvml.nvmlDeviceGetPowerUsage, h)
                if mw is not None:
                    power.add_metric(lab, mw / 1000.0)
                for kind, code in (("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                                   ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
                    n = _try(pynvml.nvmlDeviceGetTotalEccErrors, h, code, pynvml.NVML_VOLATILE_ECC)
                    if n is not None:
                        ecc.add_metric([*lab, kind], n)
                xid_ok.add_metric(lab, 1.0 if self.xid_supported[i] else 0.0)
                for (idx, code), n in self.xids.items():
                    if idx == i:
                        xid.add_metric([*lab, str(code)], n)
        count = GaugeMetricFamily(f"{PREFIX}_count", "GPUs NVML reports", value=self.count)
        yield from (count, util, used, total, temp, power, ecc, xid, xid_ok)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=9101)
    ap.add_argument("--address", default="0.0.0.0")
    args = ap.parse_args(argv)
    try:
        init_nvml()
    except NvmlUnavailable as exc:
        print(f"gpu_exporter: {exc}", file=sys.stderr)
        return 2
    REGISTRY.register(GpuCollector())
    start_http_server(args.port, addr=args.address)
    print(f"gpu_exporter: serving http://{args.address}:{args.port}/metrics", file=sys.stderr, flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
