"""act: guarded actions (plan, approve, cooldown, budget, lock, execute, verify)."""

from opsbot.act.plan import PlanRefused, RestartPlan, Step, plan_restart
from opsbot.act.restart import (
    ActionOutcome,
    ApprovalRefused,
    approve,
    execute,
    expire_overdue,
    reconcile,
    request_restart,
)

__all__ = ["ActionOutcome", "ApprovalRefused", "PlanRefused", "RestartPlan", "Step", "approve", "execute",
           "expire_overdue", "plan_restart", "reconcile", "request_restart"]
