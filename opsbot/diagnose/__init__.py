"""diagnose (stage: diagnose): runbooks (YAML + CEL) matched against facts, giving findings."""

from opsbot.contracts.findings import Diagnosis, Finding, Remedy, Undetermined
from opsbot.diagnose.evaluate import default_runbooks, diagnose
from opsbot.diagnose.runbook import RunbookSet, load_runbooks

__all__ = [
    "Diagnosis", "Finding", "Remedy", "RunbookSet", "Undetermined",
    "default_runbooks", "diagnose", "load_runbooks",
]
