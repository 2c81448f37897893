"""Several instances on one database (record stage): who is alive, and scheduled jobs claimed once per period."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from opsbot.store.gateway import Gateway
from opsbot.store.models import (
    Instance,
    JobRun,
    now,
)


class CoordinationRecords(Gateway):
    """Instances' heartbeats and the period claims of scheduled jobs. Mixed into ``Store`` (it needs ``write`` and ``read``)."""

    # -- instances: who is alive, so that what a dead one claimed is taken over ------------------

    def heartbeat(self, instance: str, host: str, pid: int, *, forget_after: timedelta = timedelta(days=1)) -> None:
        """Say ``instance`` is alive (registering it the first time); rows silent for ``forget_after`` go."""
        at = now()

        def _beat(s: Session) -> None:
            row = s.get(Instance, instance)
            if row is None:
                s.add(Instance(id=instance, host=host, pid=pid, started_at=at, heartbeat_at=at))
            else:
                row.heartbeat_at = at
            s.execute(delete(Instance).where(Instance.heartbeat_at < at - forget_after))

        self.write(_beat, "heartbeat")

    def leave(self, instance: str) -> None:
        """A clean shutdown: the instance's row goes, so its claims are free at once."""
        self.write(lambda s: s.execute(delete(Instance).where(Instance.id == instance)), "leave")

    def instances(self, lease: timedelta) -> list[tuple[Instance, bool]]:
        """Every known instance and whether it is alive (a heartbeat within ``lease``)."""
        at = now()
        rows = self.read(lambda s: s.scalars(select(Instance).order_by(Instance.started_at)).all())
        return [(r, r.heartbeat_at >= at - lease) for r in rows]

    # -- scheduled jobs ----------------------------------------------------------------------

    def claim_period(self, job: str, period: str, claimer: str = "", *, lease: timedelta | None = None) -> bool:
        """True for exactly one caller per (job, period), across processes and hosts.

        With ``lease``, a claim its instance left unfinished and that is no longer held by a live
        instance (no heartbeat within ``lease``: it was killed mid-job) is taken over, by one caller;
        a claim younger than ``lease`` never is (its claimer may not have beaten yet).
        """
        claimer = claimer or f"pid-{uuid.uuid4().hex[:8]}"
        try:
            self.write(lambda s: s.add(JobRun(job=job, period=period, claimed_by=claimer)), "claim job")
            return True
        except IntegrityError:
            if lease is None:
                return False
        at = now()
        live = select(Instance.id).where(Instance.heartbeat_at >= at - lease)
        take = (update(JobRun).where(JobRun.job == job, JobRun.period == period, JobRun.finished_at.is_(None),
                                     JobRun.claimed_at < at - lease, JobRun.claimed_by != claimer,
                                     JobRun.claimed_by.not_in(live))
                .values(claimed_by=claimer, claimed_at=at))
        return bool(self.write(lambda s: s.execute(take).rowcount, "take over job"))  # type: ignore[attr-defined]

    def orphaned_periods(self, job: str, lease: timedelta) -> list[str]:
        """Periods of ``job`` claimed, unfinished, by instances that are no longer alive."""
        at = now()
        live = select(Instance.id).where(Instance.heartbeat_at >= at - lease)
        q = select(JobRun.period).where(JobRun.job == job, JobRun.finished_at.is_(None), JobRun.claimed_at < at - lease,
                                        JobRun.claimed_by.not_in(live))
        return list(self.read(lambda s: s.scalars(q).all()))

    def finish_period(self, job: str, period: str, result: str) -> None:
        self.write(lambda s: s.execute(
            update(JobRun).where(JobRun.job == job, JobRun.period == period).values(finished_at=now(), result=result)
        ))

    def latest_run(self, job: str) -> JobRun | None:
        """The newest claim of ``job`` (finished or not), e.g. the watchdog's last probe."""
        q = select(JobRun).where(JobRun.job == job).order_by(JobRun.claimed_at.desc(), JobRun.id.desc()).limit(1)
        return self.read(lambda s: s.scalars(q).first())
