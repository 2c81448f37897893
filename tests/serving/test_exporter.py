"""GPU exporter: refuses clearly without NVML; its H200 scrape parses and agrees with nvidia-smi."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serving.metricnames import EXPORTER_NAMES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
EXPORTER = Path(__file__).resolve().parents[2] / "serving" / "exporter.py"


def nvml_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        return True
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(nvml_present(), reason="this machine has NVML; the refusal is tested where it has none")
def test_exits_with_a_clear_message_without_nvml():
    done = subprocess.run([sys.executable, str(EXPORTER), "--port", "0"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "NVML is not available" in done.stderr and "run the exporter on a GPU node" in done.stderr


def samples(path: Path) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(path.read_text()):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_h200_scrape_fixture_parses_and_matches_nvidia_smi():
    """Scraped on the H200 through the device tool while nvidia-smi read the same GPU (8 GiB held, matmul load)."""
    got = samples(FIXTURES / "exporter-h200.prom")
    assert set(got) >= EXPORTER_NAMES - {"opsbot_gpu_xid_events_total"}  # no Xid happened: no series
    with (FIXTURES / "nvidia-smi-h200.csv").open() as f:
        (row,) = [{k.strip(): v.strip() for k, v in r.items()} for r in csv.DictReader(f)]
    (used,) = got["opsbot_gpu_memory_used_bytes"]
    (total,) = got["opsbot_gpu_memory_total_bytes"]
    assert used.labels["uuid"] == row["uuid"] and used.labels["name"] == row["name"] == "NVIDIA H200"
    assert abs(used.value / 2**20 - float(row["memory.used [MiB]"].split()[0])) <= 1
    assert total.value / 2**20 == float(row["memory.total [MiB]"].split()[0])
    (power,) = got["opsbot_gpu_power_watts"]
    assert power.value == pytest.approx(float(row["power.draw [W]"].split()[0]), abs=15)
    (temp,) = got["opsbot_gpu_temperature_celsius"]
    assert abs(temp.value - float(row["temperature.gpu"])) <= 2
    assert {s.labels["type"]: s.value for s in got["opsbot_gpu_ecc_errors_total"]} == {"corrected": 0, "uncorrected": 0}
    assert got["opsbot_gpu_xid_events_supported"][0].value == 1
    assert got["opsbot_gpu_count"][0].value == 1
