"""service: the REST API, alert intake and scheduler (FastAPI)."""
