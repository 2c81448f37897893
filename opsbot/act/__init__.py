"""act (stage: act): guarded actions (plan, approve, cooldown, budget, lock, execute, verify); plan in, outcome out."""

from opsbot.act.lifecycle import (
    ApprovalRefused,
    approve,
    dismiss,
    expire_overdue,
    finding_check,
    named_classes,
    supersede_unnamed,
)
from opsbot.act.plan import PlanRefused, plan_restart
from opsbot.contracts.plans import RestartPlan, Step
from opsbot.act.remedies import PlannedRemedies, plan_remedies
from opsbot.act.restart import (
    ActionOutcome,
    RunContext,
    execute,
    reconcile,
    request_restart,
)

__all__ = ["ActionOutcome", "ApprovalRefused", "PlanRefused", "PlannedRemedies", "RestartPlan", "RunContext", "Step", "approve",
           "dismiss", "execute", "expire_overdue", "finding_check", "named_classes", "plan_remedies", "plan_restart", "reconcile", "request_restart", "supersede_unnamed"]
