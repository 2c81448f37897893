"""Settings of the lab (``opsbot lab``, the tests' and benchmarks' labs): where and how it runs.

Production settings (``opsbot.settings.Settings``) know nothing of the lab; ``LabSettings`` adds
the lab's fields to them, read from the same ``OPSBOT_*`` environment, for the commands that own a lab.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from opsbot.settings import Settings


class LabSettings(Settings):
    """Settings plus the lab's: its directory, cached root file system, machine names and ports."""

    lab_dir: Path | None = Field(None, description="lab state (node dirs, keys, pids); default: DATA_DIR/lab")
    lab_cache_dir: Path = Field(Path("/var/cache/opsbot"), description="cached debootstrap root file system")
    lab_prefix: str = Field("opsbot-lab", pattern=r"^[a-z][a-z0-9-]{0,30}$", description="machine-name prefix")
    lab_ssh_port_base: int = Field(2222, ge=1024, le=65000, description="node i's sshd listens on base + i - 1")
    lab_service_port_base: int = Field(
        30000, ge=1024, le=65000, description="emulator ports: prefill base, decode base+1, router base+2 ..."
    )
    lab_gpus_per_node: int = Field(4, ge=1, le=8, description="GPUs the stand-in nvidia-smi shows per node")
    lab_sglang_version: str = Field(
        "0.5.23", pattern=r"^0\.5\.(23|12)$", description="SGLang version the lab's emulator imitates (0.5.23, 0.5.12)"
    )
    lab_decode_dp_size: int = Field(
        2, ge=1, le=8, description="DP-attention ranks of the lab's first decode (--enable-dp-attention --dp-size); 1: none"
    )
    lab_health_check_timeout_s: int = Field(
        20, ge=1, description="SGLANG_HEALTH_CHECK_TIMEOUT in the lab units: a wedged role's /health 503s after it"
    )

    def lab_path(self) -> Path:
        return (self.lab_dir or self.data_dir / "lab").resolve()

    def monitoring_path(self) -> Path:
        """The monitoring this lab runs (``opsbot.lab.monitoring`` writes it)."""
        return self.monitoring_file or self.lab_path() / "monitoring" / "monitoring.json"
