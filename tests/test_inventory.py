"""The inventory refuses bad files with the file, the line and what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opsbot.inventory import Inventory, UnknownRole, load_inventory
from opsbot.yamlsource import ConfigError

GOOD = """\
clusters:
  lab:
    nodes:
      - name: node1
        address: 127.0.0.1
        port: 2201
        host_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIexample"
      - name: node2
        address: 127.0.0.1
        port: 2202
        known_hosts: /tmp/kh
    roles:
      - role: prefill
        node: node1
        unit: sglang-dsv4-prefill.service
        metrics_url: http://127.0.0.1:30000/metrics
        gpus: [0, 1, 2, 3]
      - role: decode
        node: node2
        unit: sglang-dsv4-decode.service
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "inventory.yaml"
    p.write_text(text)
    return p


def test_good_inventory_loads(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, GOOD))
    name, cluster = inv.cluster(None)
    assert name == "lab"
    assert [r.key for r in cluster.select(["decode"])] == ["decode"]
    assert cluster.node("node1").port == 2201


def test_unknown_role_names_the_known_ones(tmp_path: Path) -> None:
    _, cluster = load_inventory(write(tmp_path, GOOD)).cluster("lab")
    with pytest.raises(UnknownRole) as err:
        cluster.select(["decoder"])
    assert "decoder" in str(err.value) and "prefill" in str(err.value)


def test_error_names_file_line_and_fix(tmp_path: Path) -> None:
    bad = GOOD.replace("unit: sglang-dsv4-decode.service", "unit: 'decode; rm -rf /'")
    path = write(tmp_path, bad)
    with pytest.raises(ConfigError) as err:
        load_inventory(path)
    problem = err.value.problems[0]
    assert problem.file == str(path)
    assert problem.line == bad.splitlines().index("        unit: 'decode; rm -rf /'") + 1
    assert "systemd service name" in problem.message


def test_missing_host_key_is_refused_with_the_fix(tmp_path: Path) -> None:
    bad = GOOD.replace('        host_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIexample"\n', "")
    with pytest.raises(ConfigError) as err:
        load_inventory(write(tmp_path, bad))
    assert "host_key" in str(err.value) and "known_hosts" in str(err.value)


def test_role_on_unknown_node(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_inventory(write(tmp_path, GOOD.replace("node: node2", "node: node9")))
    assert "node9" in str(err.value)


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_inventory(write(tmp_path, GOOD + "  - [unclosed\n"))
    assert err.value.problems[0].line is not None
    assert "YAML syntax error" in str(err.value)


def test_unknown_field_says_remove(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_inventory(write(tmp_path, GOOD.replace("port: 2201", "port: 2201\n        prot: 22")))
    assert "unknown field" in str(err.value)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_text_is_refused_cleanly_or_loads(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    path = tmp_path_factory.mktemp("inv") / "inventory.yaml"
    path.write_text(text)
    try:
        assert isinstance(load_inventory(path), Inventory)
    except ConfigError as exc:
        assert exc.problems and all(p.file == str(path) for p in exc.problems)
