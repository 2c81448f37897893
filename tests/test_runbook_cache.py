"""The compiled runbook set kept between runs: the same set as a fresh load, rebuilt whenever a file changes."""

from __future__ import annotations

import os
import pickle
import re
import shutil
from pathlib import Path

import pytest

from opsbot.bundle import parse_bundle
from opsbot.diagnose import diagnose, load_runbooks
from opsbot.diagnose import runbook_cache
from opsbot.diagnose.runbook_cache import cache_dir, cached_runbooks
from tests.scenarios.compose import bundle, healthy_roles

REPO_RUNBOOKS = Path(__file__).resolve().parents[1] / "runbooks"
DEV = Path(__file__).resolve().parent / "scenarios" / "dev"


@pytest.fixture
def books(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the repository's runbooks, and a private cache folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return Path(shutil.copytree(REPO_RUNBOOKS, tmp_path / "runbooks"))


def _kept() -> list[Path]:
    return sorted(cache_dir().glob("*.pickle"))


def _wedged():
    roles = healthy_roles()
    roles[1].counters["realtime_tokens{mode=decode}"] = (1000, 0)
    return bundle(roles)


def _only_from_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(directory: Path) -> None:
        raise AssertionError(f"{directory} compiled again, not read from the cache")

    monkeypatch.setattr(runbook_cache, "load_runbooks", refused)


def test_the_kept_set_diagnoses_the_dev_corpus_as_a_fresh_load(books: Path, monkeypatch: pytest.MonkeyPatch):
    """Findings, texts rendered from the kept Python of the templates, and what each condition read."""
    fresh = cached_runbooks(books)
    [kept] = _kept()
    assert kept.stat().st_mode & 0o077 == 0
    _only_from_cache(monkeypatch)
    from_cache = cached_runbooks(books)
    assert from_cache is not fresh
    bundles = [_wedged(), bundle(healthy_roles())]
    bundles += [parse_bundle(p.read_text(encoding="utf-8"), str(p)) for p in sorted(DEV.glob("*.json"))]
    for b in bundles:
        assert diagnose(b, from_cache).model_dump() == diagnose(b, fresh).model_dump(), b.id


def test_an_edited_runbook_is_seen_at_once(books: Path):
    def title() -> str:
        return next(r.spec.title for r in cached_runbooks(books).runbooks if r.id == "cuda-oom")

    assert title() != "edited"
    path = books / "cuda-oom.yaml"
    path.write_text(re.sub(r"^title: .*$", "title: edited", path.read_text(), count=1, flags=re.M))
    assert title() == "edited"
    assert len(_kept()) == 1  # the set kept for the old text is gone


def test_a_broken_runbook_is_refused_from_the_cache_too(books: Path):
    (books / "cuda-oom.yaml").write_text("id: cuda-oom\nwhen: [\n")
    fresh = cached_runbooks(books)
    again = cached_runbooks(books)
    assert [str(p) for p in again.problems] == [str(p) for p in fresh.problems] != []
    assert "cuda-oom" not in again.ids()


def test_a_damaged_or_foreign_cache_file_is_rebuilt(books: Path):
    ids = cached_runbooks(books).ids()
    [kept] = _kept()
    kept.write_bytes(b"not a pickle")
    assert cached_runbooks(books).ids() == ids
    kept.write_bytes(pickle.dumps(load_runbooks(books / "missing")))  # a set, but not this folder's
    os.chmod(kept, 0o666)  # someone else may write it: never unpickled
    assert cached_runbooks(books).ids() == ids


def test_an_unwritable_cache_folder_still_loads(books: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(books / "patterns.yaml"))  # a file: no folder can be made under it
    assert cached_runbooks(books).ids() == load_runbooks(books).ids()


def test_a_cache_folder_others_may_write_is_made_private(books: Path, monkeypatch: pytest.MonkeyPatch):
    cache_dir().mkdir(parents=True)
    os.chmod(cache_dir(), 0o775)  # as a umask of 002 leaves it
    ids = cached_runbooks(books).ids()
    assert cache_dir().stat().st_mode & 0o077 == 0
    _only_from_cache(monkeypatch)
    assert cached_runbooks(books).ids() == ids


def test_no_home_folder_still_loads(books: Path, monkeypatch: pytest.MonkeyPatch):
    def no_home(cls: type[Path]) -> Path:
        raise RuntimeError("Could not determine home directory.")  # what pathlib says

    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(Path, "home", classmethod(no_home))
    assert cached_runbooks(books).ids() == load_runbooks(books).ids()
