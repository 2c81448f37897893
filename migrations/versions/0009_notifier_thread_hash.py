"""slack threads keyed by the SHA-256 of the Alertmanager groupKey

A groupKey is as long as the route's matchers make it (over 1,000 characters failed the claim on
PostgreSQL); its hash is 64 characters whatever its length. Existing threads keep their rows, rekeyed.

Revision ID: 0009_notifier
Revises: 0009_capture
Create Date: 2026-12-03 07:00:00
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009_notifier'
down_revision: str | None = '0009_capture'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ('channel', 'ts', 'state', 'created_at', 'updated_at')
_TYPES = {'created_at': sa.DateTime(timezone=True), 'updated_at': sa.DateTime(timezone=True)}


def upgrade() -> None:
    threads = op.create_table(
        'slack_group_threads',
        sa.Column('group_hash', sa.String(length=64), nullable=False),
        sa.Column('channel', sa.String(length=64), nullable=False),
        sa.Column('ts', sa.String(length=32), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('group_hash', name=op.f('pk_slack_group_threads')),
    )
    old = sa.table('slack_threads', sa.column('group_key', sa.String), *(sa.column(c, _TYPES.get(c, sa.String())) for c in _COLUMNS))
    rows = op.get_bind().execute(sa.select(old)).mappings().all()
    if rows:
        op.bulk_insert(threads, [{'group_hash': hashlib.sha256(r['group_key'].encode('utf-8', 'surrogatepass')).hexdigest(),
                                  **{c: r[c] for c in _COLUMNS}} for r in rows])
    op.drop_table('slack_threads')


def downgrade() -> None:
    op.create_table(
        'slack_threads',
        sa.Column('group_key', sa.String(length=1000), nullable=False),
        sa.Column('channel', sa.String(length=64), nullable=False),
        sa.Column('ts', sa.String(length=32), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('group_key', name=op.f('pk_slack_threads')),
    )
    op.drop_table('slack_group_threads')  # a hash cannot be turned back into its groupKey: threads start anew
