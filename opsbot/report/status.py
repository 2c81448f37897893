"""The status report: pure composition from a ``History`` snapshot, plus ``build_status`` at the edge."""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from opsbot.bundle import Bundle
from opsbot.contracts import severity_rank
from opsbot.report.current import current_from_bundle, current_from_figures, with_role_gpus
from opsbot.report.model import (
    ActionEntry,
    CriticalContext,
    CurrentState,
    DecisionEntry,
    Incident,
    NoteEntry,
    RoleConfig,
    StatusReport,
)
from opsbot.settings import Settings
from opsbot.store import Store
from opsbot.store.periods import History
from serving.spec import DeploymentSpec, load_spec

DEFAULT_PERIOD = timedelta(days=7)
OPEN_ITEMS_WINDOW = timedelta(days=30)
_FRESH = timedelta(minutes=5)


def incidents_from(findings: Iterable[Any]) -> list[Incident]:
    """One entry per incident class: first and last seen, how many probes, the latest evidence."""
    by_class: dict[str, Incident] = {}
    for f in sorted(findings, key=lambda f: f.at):
        seen = by_class.get(f.incident)
        if seen is None:
            by_class[f.incident] = Incident(
                incident=f.incident, severity=f.severity, title=f.title, summary=f.summary, roles=list(f.roles),
                evidence=[str(e) for e in f.evidence], first_at=f.at, last_at=f.at, probe_id=f.probe_id)
            continue
        seen.probes += 1
        seen.last_at = f.at
        seen.summary, seen.evidence, seen.probe_id = f.summary or seen.summary, [str(e) for e in f.evidence], f.probe_id
        seen.roles = sorted(set(seen.roles) | set(f.roles))
    return sorted(by_class.values(), key=lambda i: (severity_rank(i.severity), -i.last_at.timestamp()))


def actions_from(actions: Iterable[Any]) -> list[ActionEntry]:
    return [ActionEntry(
        id=a.id, kind=a.kind, cluster=a.cluster, role=a.role, requested_by=a.requested_by, surface=a.surface,
        approved_by=a.approved_by, approved_surface=a.approved_surface, at=a.started_at or a.created_at,
        state=a.state, outcome=a.outcome) for a in actions]


def notes_from(notes: Iterable[Any], since: datetime) -> dict[str, list[NoteEntry]]:
    """Done since the period's start; in progress, blocked and next as last written (30 days), one per text."""
    out: dict[str, list[NoteEntry]] = {"done": [], "doing": [], "blocked": [], "next": []}
    seen: set[str] = set()
    for n in notes:  # newest first
        if n.kind == "done" and n.created_at < since:
            continue
        key = n.text.strip().lower()
        if key in seen:
            continue  # the newest entry for a text wins: "doing X" then "done X" shows X once, as done
        seen.add(key)
        out[n.kind].append(NoteEntry(kind=n.kind, text=n.text, actor=n.actor, at=n.created_at))
    return out


def context_from_spec(spec: DeploymentSpec, source: str | None) -> CriticalContext:
    """Model, TP, GPUs and NUMA per role, and the flags that matter, from a serving DeploymentSpec."""
    roles = []
    for name, server in (("prefill", spec.prefill), ("decode", spec.decode)):
        roles.append(RoleConfig(
            role=name, node=server.node, gpus=list(server.gpus), tp=server.tp, numa_node=server.numa_node,
            mem_fraction_static=server.mem_fraction_static, hicache_ratio=server.hicache_ratio,
            context_length=server.context_length, transfer_backend=server.transfer_backend,
            index_keys_spec=spec.model.index_keys))
    router = spec.router
    if router.max_concurrent_requests and router.max_concurrent_requests > 0:
        admission = (f"at the router: max {router.max_concurrent_requests} concurrent, queue {router.queue_size}, "
                     f"timeout {router.queue_timeout_secs} s")
    else:
        admission = "off: the router admits everything (SGLang ignores --max-queued-requests in PD mode)"
    return CriticalContext(source=source, deployment=spec.name, model=spec.model.served_name, roles=roles,
                           admission=admission, router_policy=router.policy,
                           prometheus_jobs=[spec.prometheus.jobs[r] for r in ("prefill", "decode") if r in spec.prometheus.jobs])


def with_observed_index_keys(context: CriticalContext, current: CurrentState) -> CriticalContext:
    """Each server's index keys as its current run printed them (the patch's start line), never the
    spec's or an environment variable's word alone; the spec's wish is added where the run differs."""
    seen = {fig.kind: fig.index_keys for fig in current.roles if fig.index_keys}
    roles = []
    for rc in context.roles:
        observed = seen.get(rc.role, "unknown")
        if rc.index_keys_spec and not observed.startswith(rc.index_keys_spec):
            observed += f" (the spec asks for {rc.index_keys_spec})"
        roles.append(rc.model_copy(update={"index_keys": observed}))
    return context.model_copy(update={"roles": roles})


def compose_status(*, now: datetime, since: datetime, history: History, current: CurrentState,
                   context: CriticalContext, goal: str | None) -> StatusReport:
    notes = notes_from(history.notes, since)
    return StatusReport(
        title=f"Status of {current.cluster or 'the deployment'}, {now:%Y-%m-%d %H:%M} UTC",
        generated_at=now, since=since, until=now, goal=goal, current=current,
        incidents=incidents_from(history.findings_in(since, now)), actions=actions_from(history.actions),
        done=notes["done"], doing=notes["doing"], blocked=notes["blocked"], next_steps=notes["next"],
        decisions=[DecisionEntry(text=d.text, why=d.why, actor=d.actor, at=d.created_at) for d in history.decisions],
        context=context,
    )


def load_context(settings: Settings, spec: DeploymentSpec | None) -> CriticalContext:
    """The spec given, else ``settings.spec`` loaded, else a context that says where to configure it."""
    if spec is not None:
        return context_from_spec(spec, None)
    if settings.spec is None:
        return CriticalContext(missing="no serving spec configured: set OPSBOT_SPEC to the deployment's spec YAML")
    try:
        return context_from_spec(load_spec(Path(settings.spec)), str(settings.spec))
    except Exception as exc:  # noqa: BLE001 - a broken spec must not stop the report; it says why
        return CriticalContext(source=str(settings.spec), missing=f"serving spec unreadable: {exc}")


def current_state(store: Store, bundle: Bundle | None, now: datetime, cluster: str | None, *,
                  incidents: list[str] | None = None, context: CriticalContext | None = None) -> CurrentState:
    """From the fresh bundle when given, else the latest stored probe, with its age; GPU memory counts
    each role's own GPUs when the serving spec names them."""
    role_gpus = {rc.role: rc.gpus for rc in context.roles} if context else None
    if bundle is not None:
        return current_from_bundle(bundle, now=now, fresh=True, incidents=incidents, role_gpus=role_gpus)
    row = store.latest_probe(cluster)
    if row is None:
        return CurrentState(cluster=cluster, missing="no probe stored yet: run `opsbot status --probe --save`")
    fresh, seen = now - row.started_at < _FRESH, [row.top_incident] if row.top_incident else []
    try:
        roles = store.probe_figures(row.id)
        if roles is None:  # saved before figures were kept: read from its bundle
            return current_from_bundle(store.load_bundle(row.id), now=now, fresh=fresh, incidents=seen,
                                       role_gpus=role_gpus)
    except (zlib.error, ValueError) as exc:  # a corrupt bundle or row: the report says so and goes on
        return CurrentState(cluster=cluster, missing=f"latest probe {row.id} is unreadable: {str(exc)[:200]}")
    if role_gpus:
        with contextlib.suppress(zlib.error, ValueError):  # unreadable: GPU memory stays over the inventory's GPUs
            roles = with_role_gpus(roles, store.load_bundle(row.id), role_gpus)
    return current_from_figures(row.id, row.cluster, row.started_at, roles, now=now, fresh=fresh, incidents=seen)


def build_status(store: Store, bundle: Bundle | None, settings: Settings, spec: DeploymentSpec | None = None, *,
                 now: datetime | None = None, incidents: list[str] | None = None) -> StatusReport:
    """Everything since the last saved status report (or the last 7 days), as one ``StatusReport``."""
    now = now or datetime.now(timezone.utc)
    since = store.last_report_at("status") or now - DEFAULT_PERIOD
    history = store.period_history(since, now, cluster=settings.cluster, notes_since=now - OPEN_ITEMS_WINDOW)
    context = load_context(settings, spec)
    current = current_state(store, bundle, now, settings.cluster, incidents=incidents, context=context)
    context = with_observed_index_keys(context, current)
    return compose_status(now=now, since=since, history=history, current=current, context=context, goal=settings.goal)
