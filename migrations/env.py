"""Alembic environment: run on the connection opsbot hands over, or on the configured URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from opsbot.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from opsbot.store.database import make_engine

    url = config.get_main_option("sqlalchemy.url")
    engine = make_engine(url) if url else create_engine("sqlite://")
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True,
                      transaction_per_migration=False)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
