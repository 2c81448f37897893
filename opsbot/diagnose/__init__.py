"""diagnose: runbooks (YAML + CEL) matched against facts, giving findings."""
