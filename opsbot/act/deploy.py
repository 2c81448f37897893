"""A deploy's restarts behind act's guards (act): the role's restart lock, and an audit entry for each.

A deploy is the operator's own planned change, so it overrides some of the incident-restart guards;
which ones is said here (``DEPLOY_OVERRIDES``) and recorded in every audit entry it writes. It
never overrides the lock: a deploy during an incident restart of the same role is refused.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from opsbot.act.restart import holder_id
from opsbot.contracts import GuardRefused
from opsbot.settings import Settings
from opsbot.store import Store

DEPLOY_KEEPS = ("lock", "audit")
DEPLOY_OVERRIDES = ("approval", "cooldown", "budget", "evidence probe", "verification by probe")


class DeployGuard:
    """What ``serving.rollout.apply`` restarts through: ``async with guard(role, node): ...``."""

    def __init__(self, store: Store, cluster: str, *, actor: str, settings: Settings, surface: str = "deploy") -> None:
        self.store, self.cluster, self.actor, self.surface, self.settings = store, cluster, actor, surface, settings
        self.deploy_id = "deploy-" + uuid.uuid4().hex[:8]

    @asynccontextmanager
    async def __call__(self, role: str, node: str) -> AsyncIterator[None]:
        detail = {"deploy": self.deploy_id, "role": role, "node": node, "overrides": list(DEPLOY_OVERRIDES),
                  "keeps": list(DEPLOY_KEEPS)}
        held = await asyncio.to_thread(self.store.take_lock, self.cluster, role, self.deploy_id, holder_id(),
                                       timedelta(seconds=self.settings.lock_ttl_s))
        if held is not None:
            why = (f"lock: {role} is being restarted by action {held.action_id} ({held.holder}); the deploy does not "
                   f"restart it (the lock expires at {held.expires_at:%H:%M:%S} UTC at the latest)")
            await asyncio.to_thread(self.store.audit, self.actor, self.surface, "deploy restart refused",
                                    {**detail, "why": why}, cluster=self.cluster, role=role)
            raise GuardRefused(why)
        await asyncio.to_thread(self.store.audit, self.actor, self.surface, "deploy restart", detail,
                                cluster=self.cluster, role=role)
        try:
            yield
        finally:
            await asyncio.to_thread(self.store.release_lock, self.cluster, role, self.deploy_id)
