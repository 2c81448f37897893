"""Runbook loading and linting: bad files are refused with file and line, the rest still run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.diagnose import diagnose, load_runbooks
from opsbot.diagnose.incidents import INCIDENT_IDS, NOT_BY_RUNBOOK
from opsbot.diagnose.lint import lint
from opsbot.parse.logs import LOG_FILTER
from opsbot.yamlsource import read_yaml
from tests.realparts import shared_file
from tests.scenarios.compose import bundle, healthy_roles

REPO_RUNBOOKS = Path(__file__).resolve().parents[1] / "runbooks"


@pytest.fixture
def books(tmp_path: Path) -> Path:
    """A private copy of the repository's runbooks to break."""
    return Path(shutil.copytree(REPO_RUNBOOKS, tmp_path / "runbooks"))


def _wedged_bundle():
    roles = healthy_roles()
    roles[1].counters["realtime_tokens{mode=decode}"] = (1000, 0)
    return bundle(roles)


def test_repository_runbooks_lint_clean():
    assert lint(REPO_RUNBOOKS) == []
    ids = set(load_runbooks(REPO_RUNBOOKS).ids())
    assert ids == INCIDENT_IDS - NOT_BY_RUNBOOK


def test_syntax_error_is_refused_with_file_and_line_and_others_still_run(books: Path):
    path = books / "role-down.yaml"
    lines = path.read_text().splitlines()
    lines.insert(3, "roles: [prefill, decode")  # unclosed flow sequence on line 4
    path.write_text("\n".join(lines) + "\n")
    rs = load_runbooks(books)
    assert "role-down" not in rs.ids()
    (problem,) = [p for p in rs.problems if p.file == str(path)]
    assert problem.line is not None and 4 <= problem.line <= 6, problem
    assert "YAML syntax error" in problem.message
    found = [f.incident for f in diagnose(_wedged_bundle(), rs).findings]
    assert found == ["decode-wedged"], "the other runbooks must still run"
    assert any("role-down.yaml" in p for p in diagnose(_wedged_bundle(), rs).problems)


def test_schema_error_names_field_and_line(books: Path):
    path = books / "cuda-oom.yaml"
    text = path.read_text().replace("severity: high", "severity: urgent\nowner: me")
    path.write_text(text)
    problems = {p.where: p for p in load_runbooks(books).problems if p.file == str(path)}
    assert problems["severity"].line == 3 and "critical" in problems["severity"].message
    assert problems["owner"].line == 4 and "unknown field" in problems["owner"].message


def test_cel_compile_error_names_the_when_line(books: Path):
    path = books / "decode-wedged.yaml"
    path.write_text(path.read_text().replace('unit.active_state == "active"', 'unit.active_state == "active" &&& x'))
    (p,) = [p for p in load_runbooks(books).problems if p.file == str(path)]
    assert p.where == "when" and p.line == 5 and "CEL does not compile" in p.message


def test_unknown_fact_names_are_refused(books: Path):
    path = books / "decode-wedged.yaml"
    path.write_text(path.read_text().replace("metrics.num_running_reqs > 0", "metrics.num_runing_reqs > 0 && logs.nope > 0 && foo.bar"))
    msgs = [p.message for p in load_runbooks(books).problems if p.file == str(path)]
    assert any("'num_runing_reqs' is not a metrics fact" in m for m in msgs), msgs
    assert any("'nope' is not a logs fact" in m for m in msgs), msgs
    assert any("no fact group 'foo'" in m for m in msgs), msgs


def test_incident_id_not_in_spec_is_refused(books: Path):
    (books / "made-up.yaml").write_text((books / "role-down.yaml").read_text().replace("id: role-down", "id: made-up"))
    (p,) = [p for p in load_runbooks(books).problems if p.file.endswith("made-up.yaml")]
    assert p.line == 1 and "not an incident id" in p.message


def test_lint_reports_a_class_without_runbook(books: Path):
    (books / "gpu-fault.yaml").unlink()
    assert [p.message for p in lint(books)] == ["no runbook for incident class 'gpu-fault'"]


def test_bad_regex_and_example_mismatch(books: Path):
    path = books / "patterns.yaml"
    text = path.read_text().replace("regex: 'Scheduler hit an exception'", "regex: 'Scheduler hit (an exception'")
    text = text.replace("regex: 'NVRM: Xid \\('", "regex: 'NVRM: Xid  \\('")
    path.write_text(text)
    msgs = {p.where: p for p in lint(books)}
    assert "bad regex" in msgs["patterns.scheduler_exception"].message
    assert msgs["patterns.xid.examples.0"].message == "the pattern does not match its own example"


def test_lint_cli_exit_status_and_file_line(books: Path):
    runner = CliRunner()
    ok = runner.invoke(app, ["runbooks", "lint", str(books)])
    assert ok.exit_code == 0, ok.output
    (books / "nccl-failure.yaml").write_text("id: nccl-failure\nwhen: [\n")
    bad = runner.invoke(app, ["runbooks", "lint", str(books)])
    assert bad.exit_code == 1
    assert re.search(r"nccl-failure\.yaml:\d+: YAML syntax error", bad.output), bad.output


def test_pattern_examples_survive_the_probes_journal_filter():
    """The collector keeps only lines matching LOG_FILTER; a pattern it filters out would never fire."""
    data, _ = read_yaml(REPO_RUNBOOKS / "patterns.yaml")
    keep = re.compile(LOG_FILTER)
    for name, p in data["patterns"].items():
        assert p["examples"], f"pattern {name} has no example line"
        for ex in p["examples"]:
            assert keep.search(ex), f"pattern {name}: the probe's journal filter drops {ex!r}"


def test_incident_ids_match_the_spec():
    spec = shared_file("spec/incidents.md")
    ids = set(re.findall(r"^\| `([a-z0-9-]+)` \|", spec.read_text(), re.M))
    assert ids == INCIDENT_IDS


def test_runbooks_that_explain_each_other_are_refused(books: Path):
    path = books / "role-down.yaml"
    path.write_text(path.read_text().replace("explains: [kv-transfer-failure@other", "explains: [config-crashloop, kv-transfer-failure@other"))
    assert [p.message for p in lint(books)] == ["config-crashloop and role-down explain each other: both would be dropped"]


def test_other_role_and_shared_role_explanations_do_not_clash_until_they_overlap(books: Path):
    """role-down explains kv-transfer-failure on the roles it does not share (a dead prefill's peers), and
    kv-transfer-failure explains role-down on its own role (the transfer engine killed it): no clash;
    ``@any`` on role-down would make them explain each other on the dead role."""
    assert lint(books) == []
    path = books / "role-down.yaml"
    path.write_text(path.read_text().replace("explains: [kv-transfer-failure@other", "explains: [kv-transfer-failure@any"))
    assert [p.message for p in lint(books)] == ["kv-transfer-failure and role-down explain each other: both would be dropped"]


def test_broken_template_names_its_evidence_line(books: Path):
    path = books / "cuda-oom.yaml"
    text = path.read_text()
    path.write_text(text.replace('  - "out-of-memory lines: {{ logs.cuda_oom }},', '  - "out-of-memory lines: {{ logs.cuda_oom ,'))
    (p,) = [p for p in load_runbooks(books).problems if p.file == str(path)]
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row.startswith('  - "out-of-memory lines'))
    assert p.where == "evidence.0" and p.line == line and p.message.startswith("template:")


def test_metric_facts_are_read_from_conditions_and_templates():
    from opsbot.diagnose import default_runbooks
    from opsbot.diagnose.runbook import template_paths

    wanted = default_runbooks().metric_facts
    assert {"num_queue_reqs", "realtime_tokens_prefill_compute"} <= wanted["prefill"]  # conditions
    assert "num_prefill_bootstrap_queue_reqs" in wanted["prefill"]  # only in an evidence template
    assert "smg_worker_health" in wanted["router"]  # unexplained (every role) names it too: not a router-only fact
    assert "num_prefill_bootstrap_queue_reqs" not in wanted["router"]
    assert "num_queue_reqs" in wanted["decode"]  # its own runbooks, and roles.prefill.metrics.num_queue_reqs too
    assert template_paths("{{ roles.prefill.metrics.num_queue_reqs }} {{ 'x' if 'metrics' in failed }} {{ m['a'] }}") == {
        "roles.prefill.metrics.num_queue_reqs", "failed", "m.a",
    }


def test_a_runbook_reading_a_whole_metric_group_parses_every_family(books: Path):
    path = books / "decode-wedged.yaml"
    path.write_text(path.read_text().replace('  - "tokens decoded', '  - "all: {{ roles.prefill.delta }}"\n  - "tokens decoded', 1))
    rs = load_runbooks(books)
    assert not rs.problems and rs.metric_facts["prefill"] is None and rs.metric_facts["decode"] is not None
    b = _wedged_bundle()
    assert [f.incident for f in diagnose(b, rs).findings] == ["decode-wedged"]


def test_the_cel_repl_is_deferred_yet_still_there_for_whoever_uses_it():
    """opsbot/diagnose/celengine.py binds ``cel.cli`` lazily: the engine works, the REPL loads on use."""
    code = ("import sys\nfrom opsbot.diagnose.celengine import cel\n"
            "assert cel.evaluate('1 + 2') == 3 and 'prompt_toolkit' not in sys.modules\n"
            "import cel.cli\nassert cel.cli.PromptSession and 'prompt_toolkit' in sys.modules\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_a_template_with_an_unknown_filter_is_refused_at_load_though_compiled_on_first_render(tmp_path):
    from opsbot.diagnose.runbook import Template

    with pytest.raises(jinja2.TemplateSyntaxError, match="nosuch"):
        Template("{{ x | nosuch }}")
    assert Template("{{ x | round(1) }} GiB").render({"x": 2.26}) == "2.3 GiB"
