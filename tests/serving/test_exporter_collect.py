"""The exporter's collector over a stand-in NVML library: Xid events drained into counters, gaps tolerated."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from serving import exporter


class NVMLError(Exception):
    pass


def fake_nvml(events: list[tuple[str, int]], power_ok: bool = True):
    """Just enough of pynvml's surface for two GPUs; GPU 1 cannot register Xid events."""
    pending = list(events)

    def wait(es, timeout_ms):
        assert timeout_ms == 0  # never block a scrape
        if not pending:
            raise NVMLError("Timeout")
        uuid, xid = pending.pop(0)
        return SimpleNamespace(device=uuid, eventData=xid)

    def register(handle, kind, es):
        if handle == "GPU-b":
            raise NVMLError("Not Supported")

    def power(handle):
        if not power_ok:
            raise NVMLError("Not Supported")
        return 500_000

    return SimpleNamespace(
        NVMLError=NVMLError, NVML_TEMPERATURE_GPU=0, NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0, nvmlEventTypeXidCriticalError=8, nvmlMemory_v2=2,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: ["GPU-a", "GPU-b"][i],
        nvmlDeviceGetUUID=lambda h: h,
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlEventSetCreate=lambda: "es",
        nvmlDeviceRegisterEvents=register,
        nvmlEventSetWait_v2=wait,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=37),
        nvmlDeviceGetMemoryInfo=lambda h, version=None: SimpleNamespace(used=9 * 2**30, total=140 * 2**30),
        nvmlDeviceGetTemperature=lambda h, kind: 41,
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: 3 if kind == 0 else 0,
    )


def scrape(collector) -> dict:
    reg = CollectorRegistry()
    reg.register(collector)
    text = generate_latest(reg).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_xid_events_are_counted_per_gpu_and_code(monkeypatch):
    monkeypatch.setattr(exporter, "pynvml", fake_nvml([("GPU-a", 79), ("GPU-a", 79), ("GPU-a", 48)]))
    c = exporter.GpuCollector()
    got = scrape(c)
    lab = (("gpu", "0"), ("name", "NVIDIA H200"), ("uuid", "GPU-a"))
    assert got[("opsbot_gpu_xid_events_total", tuple(sorted((*lab, ("xid", "79")))))] == 2
    assert got[("opsbot_gpu_xid_events_total", tuple(sorted((*lab, ("xid", "48")))))] == 1
    assert got[("opsbot_gpu_xid_events_supported", lab)] == 1
    assert got[("opsbot_gpu_xid_events_supported", (("gpu", "1"), ("name", "NVIDIA H200"), ("uuid", "GPU-b")))] == 0
    assert got[("opsbot_gpu_ecc_errors_total", tuple(sorted((*lab, ("type", "corrected")))))] == 3
    assert got[("opsbot_gpu_memory_used_bytes", lab)] == 9 * 2**30
    # counters persist across scrapes once the events are drained
    assert scrape(c)[("opsbot_gpu_xid_events_total", tuple(sorted((*lab, ("xid", "79")))))] == 2


def test_a_reading_the_gpu_lacks_is_left_out_not_fatal(monkeypatch):
    monkeypatch.setattr(exporter, "pynvml", fake_nvml([], power_ok=False))
    got = scrape(exporter.GpuCollector())
    assert not any(name == "opsbot_gpu_power_watts" for name, _ in got)
    assert sum(1 for name, _ in got if name == "opsbot_gpu_temperature_celsius") == 2


def test_missing_library_gives_the_install_hint(monkeypatch):
    monkeypatch.setattr(exporter, "pynvml", None)
    with pytest.raises(exporter.NvmlUnavailable, match="pip install nvidia-ml-py"):
        exporter.init_nvml()
