"""The corpus split by thread date (issue 24): holdout/ takes every thread opened on or after the cut-off and
the marked pre-cutoff fill, and nothing else; its threads are cited nowhere else in the corpus. holdout2/ (written
by ``holdout2.py``) and holdout3/ (written by ``holdout3.py``, not read yet) hold to the same rules and cite no
thread of the parts before them. Reads labels only, never diagnoses a bundle."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from tests.scenarios import split
from tests.scenarios.holdout import FILL

ROOT = Path(__file__).parent / "scenarios"


def _labels(part: str) -> list[tuple[Path, dict]]:
    return [(p, json.loads(p.read_text(encoding="utf-8"))["label"]) for p in sorted((ROOT / part).glob("*.json"))]


def test_part_sends_threads_opened_on_or_after_the_cutoff_to_holdout():
    url = "https://github.com/sgl-project/sglang/issues/1"
    assert split.part(url, "2026-06-01") == split.HOLDOUT
    assert split.part(url, "2026-09-30") == split.HOLDOUT
    assert split.part(url, "2026-05-31") == split.part(url) != split.HOLDOUT  # before it: the hash decides, as ever


def test_write_puts_a_marked_fill_in_holdout_whatever_its_date(tmp_path, monkeypatch):
    monkeypatch.setattr(split, "HOLDOUT", tmp_path / "holdout")
    label = {"expected": "healthy", "source": "https://github.com/sgl-project/sglang/issues/1", "opened": "2026-05-01",
             "holdout_reason": FILL}
    [path] = split.write({"x": lambda: {"label": label}})
    assert path.parent == tmp_path / "holdout"


@pytest.mark.parametrize("part", ["dev", "test"])
def test_dated_bundles_of_dev_and_test_predate_the_cutoff(part):
    late = [p.name for p, lab in _labels(part) if "opened" in lab and date.fromisoformat(lab["opened"]) >= split.CUTOFF]
    assert not late, f"{part}/ holds threads opened after the cut-off: {late}"
    assert not [p.name for p, lab in _labels(part) if "holdout_reason" in lab]


@pytest.mark.parametrize("part", ["holdout", "holdout2", "holdout3"])
def test_holdout_is_dated_threads_after_the_cutoff_or_the_marked_fill(part):
    bundles = _labels(part)
    assert len(bundles) >= 30
    for path, lab in bundles:
        opened = date.fromisoformat(lab["opened"])
        if lab.get("holdout_reason") == FILL:
            assert opened < split.CUTOFF and FILL in lab["note"], path.name
        else:
            assert opened >= split.CUTOFF, path.name


@pytest.mark.parametrize(("part", "others"), [("holdout", ("dev", "test")), ("holdout2", ("dev", "test", "holdout")),
                                               ("holdout3", ("dev", "test", "holdout", "holdout2"))])
def test_holdout_threads_are_cited_nowhere_else(part, others):
    holdout = {lab["source"] for _, lab in _labels(part)}
    elsewhere = {lab["source"] for other in others for _, lab in _labels(other)}
    assert not holdout & elsewhere


@pytest.mark.parametrize("part", ["dev", "test", "holdout", "holdout2", "holdout3"])
def test_each_part_has_the_unclaimed_failures_and_near_misses(part):
    labels = [lab for _, lab in _labels(part)]
    assert sum(lab["expected"] == "any-finding" for lab in labels) >= 8
    assert sum(lab["expected"] == "healthy" and "opened" in lab for lab in labels) >= 6
    for lab in labels:
        if lab["expected"] == "any-finding":
            assert "healthy" not in lab["must_not"] and lab["source"].startswith("https://github.com/")
