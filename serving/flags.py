"""The command-line flags that the pinned SGLang and sglang-router releases accept.

The lists in ``sglang_flags.txt`` / ``router_flags.txt`` were read from the wheels' source with
``ast`` (never by importing sglang): ``python -m serving.flags WHEEL_DIR`` rewrites them, and a
test checks them against freshly downloaded wheels.
"""

from __future__ import annotations

import ast
import sys
import zipfile
from functools import cache
from pathlib import Path

SGLANG_PIN = "sglang==0.5.23"
ROUTER_PIN = "sglang-router==0.3.2"
SMG_PIN = "smg==1.13.0"
HERE = Path(__file__).parent
FLAG_FILES = {
    "sglang": HERE / "sglang_flags.txt",
    "router": HERE / "router_flags.txt",  # sglang-router 0.3.2
    "smg": HERE / "smg_flags.txt",
}


def _literal_flags(tree: ast.AST) -> set[str]:
    """Flags named in ``add_argument(...)`` calls; an f-string prefix (``--{prefix}x``) counts as empty."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "add_argument":
            continue
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                out.add(arg.value)
            elif isinstance(arg, ast.JoinedStr):
                text = "".join(str(v.value) for v in arg.values if isinstance(v, ast.Constant))
                if text.startswith("--"):
                    out.add(text)
    return out


def _arg_call_flags(name: str, meta: ast.expr) -> set[str]:
    """Flags of one declarative field ``name: A[T, "help"]`` or ``A[T, Arg(...)]``."""
    if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
        return {"--" + name.replace("_", "-")}
    if not (isinstance(meta, ast.Call) and getattr(meta.func, "id", None) == "Arg"):
        return set()
    kw = {k.arg: k.value for k in meta.keywords}
    no_cli = kw.get("no_cli")
    if isinstance(no_cli, ast.Constant) and no_cli.value is True:
        return set()
    cli = kw.get("cli_name")
    flags = {str(cli.value) if isinstance(cli, ast.Constant) else "--" + name.replace("_", "-")}
    aliases = kw.get("aliases")
    if isinstance(aliases, ast.List):
        flags |= {str(e.value) for e in aliases.elts if isinstance(e, ast.Constant)}
    return flags


def _field_flags(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        ann = node.annotation
        if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) == "A"):
            continue
        parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else []
        if len(parts) >= 2:
            out |= _arg_call_flags(node.target.id, parts[1])
    return out


def sglang_flags_from_wheel(wheel: Path) -> set[str]:
    """Every flag ``sglang serve`` accepts: declarative fields plus hand-registered arguments."""
    flags: set[str] = set()
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name == "sglang/srt/server_args.py" or (
                name.startswith("sglang/srt/arg_groups/") and name.endswith(".py")
            ):
                tree = ast.parse(zf.read(name).decode("utf-8"), filename=name)
                flags |= _field_flags(tree) | _literal_flags(tree)
    return flags


def _router_flags(wheel: Path, package: str) -> set[str]:
    flags: set[str] = set()
    with zipfile.ZipFile(wheel) as zf:
        for name in (f"{package}/router_args.py", f"{package}/launch_router.py"):
            if name in zf.namelist():
                flags |= _literal_flags(ast.parse(zf.read(name).decode("utf-8"), filename=name))
    return flags


def router_flags_from_wheel(wheel: Path) -> set[str]:
    """Every flag ``python -m sglang_router.launch_router`` (sglang-router 0.3.2) accepts."""
    return _router_flags(wheel, "sglang_router")


def smg_flags_from_wheel(wheel: Path) -> set[str]:
    """Every flag ``smg launch`` accepts: smg/cli.py hands them to smg/launch_router.py's parser."""
    return _router_flags(wheel, "smg")


@cache
def known_flags(which: str) -> frozenset[str]:
    """The checked-in flag list for ``"sglang"``, ``"router"`` (sglang-router) or ``"smg"``."""
    return frozenset(line.strip() for line in FLAG_FILES[which].read_text().splitlines() if line.startswith("--"))


def write_lists(wheel_dir: Path) -> None:
    header = "# extracted with ast by `python -m serving.flags` from {}\n"
    for which, pattern, extract in (("sglang", "sglang-0.5.23-*.whl", sglang_flags_from_wheel),
                                    ("router", "sglang_router-0.3.2-*.whl", router_flags_from_wheel),
                                    ("smg", "smg-1.13.0-*.whl", smg_flags_from_wheel)):
        wheel = next(wheel_dir.glob(pattern))
        FLAG_FILES[which].write_text(header.format(wheel.name) + "\n".join(sorted(extract(wheel))) + "\n")


if __name__ == "__main__":
    write_lists(Path(sys.argv[1]))
