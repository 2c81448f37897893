"""Alertmanager intake: store, deduplicate, group by (cluster, role), coalesce into probes.

The pipeline has named stages, like Alertmanager's own: ``accept`` (bounded: at most
``alert_queue_max`` accepted alerts wait for a probe, beyond that 503 so Alertmanager retries;
stored before answering, concurrent calls sharing one transaction: ``groupcommit``) → ``_dispatch``
(group by scope) → ``Coalescer`` (one probe per scope at a time) → ``_handle`` (probe, link the alerts to it, notify). An alert is *accepted* once stored;
its claim is a lease held while this instance lives (``lease.py``): if it dies, a live instance's
``recover`` (after every heartbeat) takes the alert over within seconds, exactly one instance per
alert. A probe that cannot run is recorded on its alerts; a scope the inventory does not know is
final, other failures are retried after ``alert_retry_s`` up to ``alert_probe_attempts`` times,
then the alert is given up on (history and status page show it).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from datetime import timedelta

from opsbot.bundle import Trigger
from opsbot.contracts.alerts import StoredAlert
from opsbot.flow import ProbeResult, Flow
from opsbot.inventory import Inventory, UnknownRole
from opsbot.service.alertmanager import ALL_ROLES, Alert, Webhook, alert_scope, label_fingerprint
from opsbot.service.coalesce import Coalescer
from opsbot.service.groupcommit import GroupCommit
from opsbot.store import AlertIn
from opsbot.store.database import unavailable
from opsbot.store.models import Alert as AlertRow
from opsbot.yamlsource import ConfigError

log = logging.getLogger(__name__)

Scope = tuple[str, str]


class Notifier(Protocol):
    async def finding(self, group_key: str, alerts: list[StoredAlert], result: ProbeResult | None, error: str | None) -> None: ...


class QueueFull(RuntimeError):
    """Too many accepted batches wait for a probe: Alertmanager should retry later."""


@dataclass
class Accepted:
    stored: int
    duplicates: int


class AlertIntake:
    def __init__(self, flow: Flow, notifier: Notifier | None = None) -> None:
        self.flow = flow
        self.notifier = notifier
        self.max_waiting = flow.settings.alert_queue_max
        self.waiting = 0  # alerts accepted (stored) whose probe has not finished yet
        self.coalescer: Coalescer[Scope, StoredAlert] = Coalescer(self._handle, flow.settings.coalesce_window_s)
        self.writes = GroupCommit(partial(flow.store.save_alerts, claimer=flow.instance), flow.db)

    # stage 1: accept --------------------------------------------------------------------------
    async def accept(self, hook: Webhook) -> Accepted:
        """Store every alert of the notification (duplicates once), then dispatch it; or QueueFull."""
        telemetry = self.flow.telemetry
        n = len(hook.alerts)
        if self.waiting and self.waiting + n > self.max_waiting:
            telemetry.alerts_rejected.labels("queue-full").inc()
            raise QueueFull(f"{self.waiting} accepted alerts are waiting for a probe (limit {self.max_waiting})")
        self._count(n)  # reserve before the first await, so concurrent calls cannot overfill
        try:
            default_cluster = self._default_cluster()
            rows = [_node_scope(_alert_in(hook, a, default_cluster), self.flow.inventory()) for a in hook.alerts]
            saved = await self.writes.save(rows)
        except BaseException:
            self._count(-n)
            raise
        fresh = [_stored(row, alert_id) for row, (alert_id, new) in zip(rows, saved, strict=True) if new]
        self._count(len(fresh) - n)
        telemetry.alerts_received.inc(n)
        telemetry.alerts_deduplicated.inc(n - len(fresh))
        self._dispatch(fresh)
        return Accepted(stored=len(fresh), duplicates=n - len(fresh))

    def _default_cluster(self) -> str:
        """The cluster of an alert without a ``cluster`` label; "" when the inventory has several and
        no default is set: such an alert is still stored, and its probe refused saying why."""
        try:
            return self.flow.cluster_name()
        except ConfigError:
            return ""

    def _count(self, delta: int) -> None:
        self.waiting += delta
        self.flow.telemetry.alerts_waiting.set(self.waiting)

    # stage 2: dispatch ------------------------------------------------------------------------
    async def recover(self) -> int:
        """Claim stored alerts no live instance is probing (a dead instance's, or a probe to retry), as
        many as the queue has room for, and dispatch them; run at start and after every heartbeat."""
        settings = self.flow.settings
        room = self.max_waiting - self.waiting
        if room <= 0:
            return 0
        rows = await self.flow.db(self.flow.store.claim_unprocessed, self.flow.instance,
                                     lease=timedelta(seconds=settings.instance_lease_s),
                                     retry_after=timedelta(seconds=settings.alert_retry_s), limit=room)
        self._count(len(rows))
        self._dispatch([_stored(r, r.id) for r in rows])
        return len(rows)

    def _dispatch(self, alerts: list[StoredAlert]) -> None:
        by_scope: dict[Scope, list[StoredAlert]] = defaultdict(list)
        for a in alerts:
            by_scope[(a.cluster, a.role)].append(a)
        for scope, items in by_scope.items():
            self.coalescer.submit(scope, items)

    # stage 3: probe and notify ----------------------------------------------------------------
    async def _handle(self, scope: Scope, alerts: list[StoredAlert]) -> None:
        """Probe and notify; while the database is away the alerts wait (still counted) and go round again."""
        away = False
        try:
            await self._probe_and_notify(scope, alerts)
        except Exception as exc:
            if not unavailable(exc):
                raise
            away = True
            log.warning("database unavailable while handling %d alerts on %s/%s (%s); trying again shortly",
                        len(alerts), *scope, str(exc).splitlines()[0])
        finally:
            if not away:
                self._count(-len(alerts))
        if away:
            await asyncio.sleep(max(1.0, self.flow.settings.coalesce_window_s))
            self.coalescer.submit(scope, alerts)

    async def _probe_and_notify(self, scope: Scope, alerts: list[StoredAlert]) -> None:
        cluster, role = scope
        resolved = [a for a in alerts if a.status == "resolved"]
        closed = await self.flow.incidents.resolved(cluster, resolved) if resolved else []
        trigger = Trigger(kind="alert", text=_names(alerts), alerts=sorted({a.fingerprint for a in alerts}))
        result: ProbeResult | None = None
        error: str | None = None
        try:
            roles = None if role == ALL_ROLES else self.flow.alert_roles(role, cluster)
            if any(a.labels.get("incident") == "output-corruption" and a.status == "firing" for a in alerts):
                # only the fidelity run shows it: ask the greedy prompts again beside the probe
                result = await self.flow.run_fidelity(cluster, trigger, alert_ids=[a.id for a in alerts])
            else:
                result = await self.flow.run_probe(cluster, roles, trigger, alert_ids=[a.id for a in alerts])
        except Exception as exc:  # bad labels (unknown role/cluster) are final: say so, do not retry forever
            if unavailable(exc):
                raise  # not the probe's fault: ``_handle`` tries again once the database is back
            log.warning("probe for alerts on %s/%s failed: %s", cluster, role, exc)
            error = str(exc)
            await self.flow.db(self.flow.store.alert_probe_failed, [a.id for a in alerts], error,
                                  max_attempts=self.flow.settings.alert_probe_attempts,
                                  final=isinstance(exc, (UnknownRole, ConfigError)))
        firing = [a for a in alerts if a.status == "firing"]
        opened = await self.flow.incidents.sighted(result, firing) if result is not None and firing else None
        if opened or closed:
            return  # the incident's own message says it (one message per incident)
        if self.notifier is not None:
            by_group: dict[str, list[StoredAlert]] = defaultdict(list)
            for a in alerts:
                by_group[a.group_key].append(a)
            for group_key, items in by_group.items():
                try:
                    await self.notifier.finding(group_key, items, result, error)
                except Exception:  # noqa: BLE001 - one group's failure never skips the later groups
                    log.exception("alert group %.80s: its Slack thread was not posted", group_key)

    async def drain(self) -> None:
        """Wait until every accepted alert has been handled (tests, benchmarks, shutdown)."""
        while self.waiting or self.coalescer.busy:
            await asyncio.sleep(0.02)
            await self.coalescer.drain()

    async def close(self) -> None:
        await self.coalescer.close()


def _alert_in(hook: Webhook, alert: Alert, default_cluster: str) -> AlertIn:
    cluster, role = alert_scope(alert, default_cluster)
    return AlertIn(
        fingerprint=alert.fingerprint or label_fingerprint(alert.labels),
        status=alert.status,
        labels=alert.labels,
        annotations=alert.annotations,
        starts_at=alert.startsAt,
        ends_at=alert.ends,
        group_key=hook.groupKey,
        cluster=cluster,
        role=role,
    )


def _node_scope(row: AlertIn, inventory: Inventory) -> AlertIn:
    """An alert about a node, not a role (a GPU exporter's: ``role="exporter"``, ``node="node2"``) probes
    every role, so the GPU axis of the node's roles is read; other unknown roles stay refused."""
    cluster = inventory.clusters.get(row.cluster or "")
    if cluster is None or row.role in (None, ALL_ROLES) or not row.labels.get("node"):
        return row
    if any(row.role in (r.key, r.role) for r in cluster.roles):
        return row
    if any(n.name == row.labels["node"] for n in cluster.nodes):
        row.role = ALL_ROLES
    return row


def _stored(row: AlertIn | AlertRow, alert_id: int) -> StoredAlert:
    return StoredAlert(
        id=alert_id,
        group_key=row.group_key or "",
        fingerprint=row.fingerprint,
        status=row.status,
        cluster=row.cluster or "",
        role=row.role or ALL_ROLES,
        labels=dict(row.labels or {}),
    )


def _names(alerts: list[StoredAlert]) -> str:
    return ", ".join(sorted({a.labels.get("alertname", "?") + f" ({a.status})" for a in alerts}))
