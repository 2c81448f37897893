"""report (stage: render): status and weekly reports, rendered from one model."""
