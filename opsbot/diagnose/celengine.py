"""The CEL engine (PyPI ``common-expression-language``), imported without its interactive shell.

``import cel`` also imports the package's REPL (``cel/__init__.py`` runs ``from . import cli``,
and ``cel.cli`` imports typer and prompt_toolkit: ~150 ms at every start of ``opsbot diagnose``).
The REPL module is registered first through the standard library's ``importlib.util.LazyLoader``,
so it is loaded only if something uses it; the engine itself is the package's, unchanged.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _defer_repl() -> None:
    """Import ``cel`` with ``cel.cli`` already bound to a lazily loaded module.

    The package's ``from . import cli`` finds the attribute bound and imports nothing, and nothing
    reads the lazy module until someone uses the REPL.
    """
    if "cel" in sys.modules:
        return
    package = importlib.util.find_spec("cel")
    if package is None or package.loader is None or not package.submodule_search_locations:
        return
    repl = importlib.util.spec_from_file_location("cel.cli", Path(package.submodule_search_locations[0]) / "cli.py")
    if repl is None or repl.loader is None:
        return
    repl.loader = importlib.util.LazyLoader(repl.loader)
    lazy = importlib.util.module_from_spec(repl)
    repl.loader.exec_module(lazy)
    module = importlib.util.module_from_spec(package)
    module.cli = lazy  # type: ignore[attr-defined]
    sys.modules["cel"], sys.modules["cel.cli"] = module, lazy
    try:
        package.loader.exec_module(module)
    except BaseException:
        del sys.modules["cel"], sys.modules["cel.cli"]
        raise


_defer_repl()

import cel  # noqa: E402  (after the REPL is deferred)

__all__ = ["cel"]
