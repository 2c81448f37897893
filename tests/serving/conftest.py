from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from serving.spec import DeploymentSpec, load_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "serving" / "examples" / "dsv4-flash-1node.yaml"
LAB_SPEC = ROOT / "serving" / "examples" / "lab-2node.yaml"


@pytest.fixture
def example() -> DeploymentSpec:
    return load_spec(EXAMPLE)


@pytest.fixture
def spec_file(tmp_path):
    """Write the example spec with edits applied: ``spec_file(lambda d: ...)`` → path."""

    def make(edit=None, source: Path = EXAMPLE) -> Path:
        data = yaml.safe_load(source.read_text())
        if edit:
            edit(data)
        p = tmp_path / "spec.yaml"
        p.write_text(yaml.safe_dump(data, sort_keys=False))
        return p

    return make
