"""report: status and weekly reports, rendered from one model."""
