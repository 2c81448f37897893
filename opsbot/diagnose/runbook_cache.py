"""The compiled runbook set, kept between runs: a one-shot ``opsbot diagnose`` skips YAML, validation and CEL.

``load_runbooks`` builds the set (issue 28: a sixth of ``diagnose``'s start, bench/README.md). For the
runbooks opsbot ships (``default_runbooks``), the result is pickled in the user's cache folder
(``$XDG_CACHE_HOME/opsbot/runbooks``, else ``~/.cache/opsbot/runbooks``) under a key that hashes every
file it was made from: the runbook folder's YAML files (names and bytes, and the folder as named, which
the set's messages quote) and the opsbot source that turns them into a set, with the versions of
opsbot, Python and the libraries whose work the set holds (pydantic's validation, PyYAML's reading,
jinja2's generated Python; CEL programs and RE2 patterns are compiled again when a set is read). A changed file gives another key, so the set is rebuilt; a cache file that
cannot be read or unpickled, or is not a set, is rebuilt too. Never a stale set, at worst a slow start.

A pickle runs code when loaded, so a cache file is read only when the current user owns it and no one
else may write it or its folder; files are written whole (a temporary file renamed into place).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import jinja2
import pydantic

from opsbot import __version__
from opsbot.diagnose.runbook import RunbookSet, load_runbooks

_OPSBOT = Path(__file__).resolve().parents[1]
# the code that decides what a runbook folder compiles to: loader, conditions, facts, patterns, contracts
_SOURCES = ("diagnose", "parse", "contracts", "yamlsource.py", "__init__.py")


def cache_dir() -> Path:
    """Where compiled sets are kept: ``$XDG_CACHE_HOME/opsbot/runbooks``, else ``~/.cache/opsbot/runbooks``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opsbot" / "runbooks"


def _source_files() -> list[Path]:
    files: list[Path] = []
    for name in _SOURCES:
        path = _OPSBOT / name
        files += sorted(path.glob("*.py")) if path.is_dir() else [path]
    return files


def set_key(directory: Path) -> str:
    """A hash of everything the set built from ``directory`` depends on."""
    versions = f"{__version__}\0{sys.version}\0{pydantic.VERSION}\0{metadata.version('PyYAML')}\0{jinja2.__version__}"
    h = hashlib.sha256(f"{versions}\0{directory}\0".encode())
    for path in [*sorted(directory.glob("*.yaml")), *_source_files()]:
        h.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _trusted(path: Path) -> bool:
    """Whether ``path`` and its folder belong to this user and no one else may write them."""
    for p in (path.parent, path):
        st = p.stat()
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
    return True


def _read(path: Path) -> RunbookSet | None:
    """The set kept in ``path``, or None when there is none usable (missing, foreign, damaged, other code)."""
    try:
        if not _trusted(path):
            return None
        rs = pickle.loads(path.read_bytes())  # noqa: S301 - our own file, checked by _trusted
    except Exception:  # any damage (truncated, renamed classes, another version's objects) means a rebuild
        return None
    return rs if isinstance(rs, RunbookSet) else None


def _write(path: Path, rs: RunbookSet) -> None:
    """Keep ``rs`` in ``path`` (atomically) and drop the sets kept for earlier contents of the same folder."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)  # ours alone, whatever umask made it: _read trusts no other
    rs.metric_facts, rs.cel_reads  # noqa: B018 - cached properties, kept with the set
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(rs, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    for old in path.parent.glob(f"{path.name.split('-')[0]}-*.pickle"):
        if old != path:
            old.unlink(missing_ok=True)


def cached_runbooks(directory: Path) -> RunbookSet:
    """``load_runbooks(directory)``, from the cache when nothing it depends on has changed."""
    try:
        key = set_key(directory) if directory.is_dir() else None
        home = cache_dir()
    except (OSError, RuntimeError, metadata.PackageNotFoundError):  # RuntimeError: no home folder (a service's user)
        key = None
    if key is None:  # no folder, or a file that cannot be read: load_runbooks says what is wrong
        return load_runbooks(directory)
    folder = hashlib.sha256(str(directory).encode()).hexdigest()[:16]
    path = home / f"{folder}-{key[:32]}.pickle"
    rs = _read(path)
    if rs is None:
        rs = load_runbooks(directory)
        try:
            _write(path, rs)
        except OSError:
            pass  # a read-only home: every start compiles the set, as before the cache
    return rs
