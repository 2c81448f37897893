"""act: guarded actions (plan, approve, cooldown, budget, lock, execute, verify)."""
