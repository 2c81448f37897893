"""store (stage: record): SQLAlchemy models and queries; SQLite by default, PostgreSQL by URL."""

from opsbot.store.database import SchemaTooNew, StoreBusy, StoreError
from opsbot.store.incidents import Sighting
from opsbot.store.store import AlertIn, HistoryItem, LockHeld, Store, TokenScopes

__all__ = ["AlertIn", "HistoryItem", "LockHeld", "SchemaTooNew", "Sighting", "Store", "StoreBusy", "StoreError", "TokenScopes", "open_store"]


def open_store(url: str) -> Store:
    """The Store for ``url``: the composition root passes its settings' ``db_url()``."""
    return Store(url)
