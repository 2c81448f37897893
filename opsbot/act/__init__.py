"""act (stage: act): guarded actions (plan, approve, cooldown, budget, lock, execute, verify); plan in, outcome out."""

from opsbot.act.plan import PlanRefused, plan_restart
from opsbot.contracts.plans import RestartPlan, Step
from opsbot.act.remedies import PlannedRemedies, plan_remedies
from opsbot.act.restart import (
    ActionOutcome,
    ApprovalRefused,
    RunContext,
    approve,
    dismiss,
    execute,
    expire_overdue,
    reconcile,
    request_restart,
)

__all__ = ["ActionOutcome", "ApprovalRefused", "PlanRefused", "PlannedRemedies", "RestartPlan", "RunContext", "Step", "approve",
           "dismiss", "execute", "expire_overdue", "plan_remedies", "plan_restart", "reconcile", "request_restart"]
