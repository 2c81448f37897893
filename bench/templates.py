"""What the roles' log templates cost (opsbot/parse/templates.py, opsbot/store/templates.py); SQLite and PostgreSQL.

    PYTHONPATH=. .venv/bin/python bench/templates.py [--probes 100] [--runs 300]

Rows, medians (ms) over many runs:
  diagnose       CPU time of ``diagnose`` on one three-role bundle: offline (no history, what ``opsbot diagnose
                 FILE`` and ``opsbot eval`` do), with an empty history (templates computed), with a full one,
                 in alternating rounds (the machine is shared);
  save_probe     one probe saved with a healthy diagnosis made offline (nothing learned: the baseline) and with
                 its templates learned (the flow's), the same bundle shape, in steady state, in turn;
  flood          each probe of every role brings 400 templates never seen (a hostile or chatty log), the role's
                 2,000 already held: the upsert and the eviction of the least recently seen;
  role_history   the read before each diagnosis, three roles at the cap (6,000 keys).
PostgreSQL runs on a throw-away server (tests/databases.py; needs root and Debian's postgresql).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opsbot.bundle import Bundle  # noqa: E402
from opsbot.contracts import Diagnosis  # noqa: E402
from opsbot.diagnose import default_runbooks, diagnose  # noqa: E402
from opsbot.parse.templates import RoleHistory  # noqa: E402
from opsbot.store import Store  # noqa: E402
from opsbot.store.templates import TEMPLATES_PER_ROLE  # noqa: E402
from tests.databases import PostgresServer  # noqa: E402
from tests.scenarios.compose import bundle as composed  # noqa: E402
from tests.scenarios.compose import healthy_roles  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[1] / "tests/scenarios/dev/prefill-saturated.json"
ROLES = ["prefill", "decode", "router"]


def cpu_ms(fns: list[Callable[[], object]], runs: int) -> list[float]:
    """Median CPU ms of each of ``fns``, run in alternating rounds of 10 so that each sees the same load."""
    out: list[list[float]] = [[] for _ in fns]
    for _ in range(max(1, runs // 10)):
        for fn, times in zip(fns, out):
            for _ in range(10):
                c = time.process_time()
                fn()
                times.append((time.process_time() - c) * 1000)
    return [statistics.median(t) for t in out]


def fresh(b: Bundle) -> Bundle:
    return b.model_copy(update={"id": uuid.uuid4().hex[:16]})


def flooding(n: int) -> Bundle:
    """A healthy bundle whose every role printed 400 INFO lines of templates never seen before."""
    roles = healthy_roles()
    for r in roles:
        r.logs += [f"raw:[2026-11-29 09:59:40] INFO: flood {n} line " + "".join(chr(65 + (i // 26 ** k) % 26) for k in range(3))
                   + f" of {chr(65 + n % 26)}{chr(65 + n // 26 % 26)}" for i in range(400)]
    return composed(roles)


def save_ms(store: Store, *runs: list[tuple[Bundle, Diagnosis]]) -> list[float]:
    """Median wall ms of saving each list's probes, one of each list in turn (each sees the same load)."""
    out: list[list[float]] = [[] for _ in runs]
    for pairs in zip(*runs):
        for (b, d), times in zip(pairs, out):
            t = time.perf_counter()
            store.save_probe(b, d)
            times.append((time.perf_counter() - t) * 1000)
    return [statistics.median(t) for t in out]


def store_rows(url: str, probes: int) -> dict[str, float]:
    rs = default_runbooks()
    store = Store(url)
    healthy = composed(healthy_roles())
    offline = [(fresh(healthy), diagnose(healthy, rs)) for _ in range(probes)]
    learned = [(fresh(healthy), diagnose(healthy, rs, history={})) for _ in range(probes)]
    nothing, taught = save_ms(store, offline, learned)
    out = {"save_probe, nothing learned": nothing, "save_probe, templates learned": taught}
    flood = [(b, diagnose(b, rs, history={})) for b in (fresh(flooding(n)) for n in range(probes))]
    save_ms(store, flood[: TEMPLATES_PER_ROLE // 400])  # fill each role to the cap first
    out["save_probe, flood at the cap"] = save_ms(store, flood[TEMPLATES_PER_ROLE // 400:])[0]
    lat = []
    for _ in range(30):
        t = time.perf_counter()
        store.role_history("lab", ROLES)
        lat.append((time.perf_counter() - t) * 1000)
    out["role_history, 3 roles at the cap"] = statistics.median(lat)
    store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--probes", type=int, default=100)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--bundle", type=Path, default=DEFAULT)
    args = ap.parse_args()
    from opsbot.bundle import read_bundle

    b, rs = read_bundle(args.bundle), default_runbooks()
    keys = {r.key: RoleHistory(5, frozenset(str(i) for i in range(TEMPLATES_PER_ROLE))) for r in b.roles}
    table = Table(title=f"diagnose CPU ms, median of {args.runs} ({args.bundle.name})")
    for col in ("offline (no history)", "empty history", "full history"):
        table.add_column(col, justify="right")
    table.add_row(*(f"{ms:.2f}" for ms in cpu_ms([
        lambda: diagnose(b, rs), lambda: diagnose(b, rs, history={}), lambda: diagnose(b, rs, history=keys)], args.runs)))
    Console().print(table)
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as d:
        rows.append(("SQLite (WAL)", store_rows(f"sqlite:///{d}/opsbot.db", args.probes)))
    if PostgresServer.why_not() is None:
        pg = PostgresServer()
        try:
            pg.start()
            rows.append(("PostgreSQL 15", store_rows(pg.fresh_database(), args.probes)))
        finally:
            pg.stop()
    table = Table(title=f"store, wall ms, median of {args.probes} probes of three roles")
    table.add_column("backend")
    for col in rows[0][1]:
        table.add_column(col, justify="right")
    for name, r in rows:
        table.add_row(name, *(f"{v:.2f}" for v in r.values()))
    Console().print(table)


if __name__ == "__main__":
    main()
