"""store (stage: record): SQLAlchemy models and queries; SQLite by default, PostgreSQL by URL."""

from opsbot.store.database import SchemaTooNew, StoreBusy, StoreError
from opsbot.store.store import AlertIn, HistoryItem, LockHeld, Store, TokenScopes

__all__ = ["AlertIn", "HistoryItem", "LockHeld", "SchemaTooNew", "Store", "StoreBusy", "StoreError", "TokenScopes", "open_store"]


def open_store(url: str | None = None) -> Store:
    """The Store for ``url`` or the configured database (OPSBOT_DATABASE_URL, else SQLite in the data dir)."""
    from opsbot.settings import get_settings

    return Store(url or get_settings().db_url())
