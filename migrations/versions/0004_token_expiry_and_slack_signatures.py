"""API tokens can expire and be revoked; Slack signatures seen lately (replays refused)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True))

    op.create_table('slack_signatures',
    sa.Column('signature', sa.String(length=80), nullable=False),
    sa.Column('seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('signature', name=op.f('pk_slack_signatures'))
    )
    with op.batch_alter_table('slack_signatures', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_slack_signatures_seen_at'), ['seen_at'], unique=False)


def downgrade() -> None:
    op.drop_table('slack_signatures')
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_column('revoked_at')
        batch_op.drop_column('expires_at')
