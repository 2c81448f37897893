"""The built wheel works outside the checkout, and ``opsbot --help`` stays light.

The wheel test builds opsbot's wheel, installs it into a fresh virtualenv and runs the commands an
operator runs first, from a directory that is not the checkout. Third-party dependencies are reused
from the running environment through a path entry (installing them again would take minutes); the
opsbot, serving and kernels packages come from the wheel alone, which the test checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
import tomllib
from pathlib import Path

import httpx
import pytest

from opsbot.store.database import head_revision
from tests.sshd import free_port

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("fastapi", "matplotlib", "alembic", "slack_sdk", "slack_bolt", "asyncssh", "sqlalchemy", "uvicorn",
         "prompt_toolkit")  # the last: the CEL package's REPL, deferred by opsbot/diagnose/celengine.py


def test_every_package_on_disk_is_in_the_wheel():
    """pyproject lists packages by hand (for the runbooks/migrations mapping): a new one must be added."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for top in ("opsbot", "serving", "kernels")
               for p in (REPO / top).rglob("__init__.py")}
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


@pytest.mark.parametrize("args", [["--help"], ["diagnose", "tests/scenarios/dev/decode-wedged.json"]], ids=["help", "diagnose"])
def test_a_command_imports_only_what_it_uses(args):
    """The start-up goal (bench/cli_start.py): neither --help nor diagnose loads the service, store or charts."""
    # help builds no model; diagnose reads no YAML once its runbooks are compiled (opsbot/diagnose/runbook_cache.py)
    heavy = HEAVY + (("pydantic", "asyncio", "opsbot.bundle") if args == ["--help"] else ("yaml",))
    code = ("import sys\nfrom opsbot.cli import app\ntry:\n    app(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    for _ in range(2):  # the first diagnose compiles the runbooks
        out = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert ("Usage" if args == ["--help"] else "decode-wedged") in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A virtualenv with the freshly built wheel installed; the path of its ``bin``."""
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(root / "dist"), str(REPO)], check=True, timeout=300, cwd=root)
    wheel = next((root / "dist").glob("opsbot-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=300, cwd=root)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # dependencies from this environment; a path added by a .pth file is not itself scanned for .pth
    # files, so the checkout's editable-install hook stays out and opsbot resolves to the wheel
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def _run(bin_dir: Path, cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSBOT_") and k != "PYTHONPATH"}
    env |= {"OPSBOT_DATA_DIR": str(cwd / "data"), "COLUMNS": "200"}
    return subprocess.run([str(bin_dir / "opsbot"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.integration
def test_the_wheel_works_outside_the_checkout(wheel_venv, tmp_path):
    where = subprocess.run([str(wheel_venv / "python"), "-c", "import opsbot, serving; print(opsbot.__file__); "
                            "print(serving.__file__)"], cwd=tmp_path, capture_output=True, text=True, check=True)
    for line in where.stdout.split():
        assert Path(line).is_relative_to(wheel_venv.parent), f"{line} is not from the wheel"

    up = _run(wheel_venv, tmp_path, "db", "upgrade")
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip().endswith(f"schema (empty) -> {head_revision()}")

    bundle = REPO / "tests" / "scenarios" / "dev" / "decode-wedged.json"
    d = _run(wheel_venv, tmp_path, "diagnose", str(bundle), "--json")
    assert d.returncode == 1, d.stderr  # findings
    assert "decode-wedged" in [f["incident"] for f in json.loads(d.stdout)["findings"]]
    again = _run(wheel_venv, tmp_path, "diagnose", str(bundle), "--json")  # the runbooks compiled by the first run
    assert (again.returncode, again.stdout) == (d.returncode, d.stdout)

    weekly = _run(wheel_venv, tmp_path, "report", "weekly", "--format", "html", "--out", str(tmp_path / "out"))
    assert weekly.returncode == 0, weekly.stderr
    html = next((tmp_path / "out").glob("weekly-*.html")).read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and "</html>" in html

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSBOT_") and k != "PYTHONPATH"}
    env |= {"OPSBOT_DATA_DIR": str(tmp_path / "data")}
    serve = subprocess.Popen([str(wheel_venv / "opsbot"), "serve", "--port", str(port)], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        answer = None
        while answer is None and time.monotonic() < deadline and serve.poll() is None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
            except httpx.TransportError:
                time.sleep(0.3)
        assert answer is not None, f"opsbot serve never answered: {serve.stdout.read() if serve.poll() is not None else ''}"
        assert answer.status_code == 200
    finally:
        serve.terminate()
        serve.wait(timeout=30)
