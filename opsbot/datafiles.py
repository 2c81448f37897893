"""Where the data folders kept at the repository top (runbooks/, migrations/) are at run time.

A wheel carries them inside the package as ``opsbot/_data/<name>`` (pyproject.toml maps the
top-level folders there at build time); a checkout or an editable install reads them in place.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The folder ``name`` (``runbooks`` or ``migrations``), from the installed wheel or the checkout."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"opsbot's {name}/ folder is missing: neither {_PACKAGE / '_data' / name} "
                            f"(wheel) nor {_PACKAGE.parent / name} (checkout) exists; reinstall opsbot")
