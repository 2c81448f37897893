"""diagnose: runbooks (YAML + CEL) matched against facts, giving findings."""

from opsbot.contracts.findings import Diagnosis, Finding, Remedy, Undetermined
from opsbot.diagnose.evaluate import default_runbooks, diagnose
from opsbot.diagnose.interpret import interpret, probe_scope, roles_for_words
from opsbot.diagnose.runbook import RunbookSet, load_runbooks

__all__ = [
    "Diagnosis", "Finding", "Remedy", "RunbookSet", "Undetermined",
    "default_runbooks", "diagnose", "interpret", "load_runbooks", "probe_scope", "roles_for_words",
]
