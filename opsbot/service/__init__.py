"""service (stage: trigger): the REST API, alert intake and the weekly schedule, composed in app.py (FastAPI)."""
