"""Shared fixtures: real databases (tests/databases.py) and the lab."""

from tests.databases import database_url, postgres_server  # noqa: F401
