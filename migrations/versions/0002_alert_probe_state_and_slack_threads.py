"""alert probe failures and claims; Slack alert threads get their own table

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('probe_error', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('probe_attempts', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('probe_failed_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('claimed_by', sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=True))

    op.create_table('slack_threads',
    sa.Column('group_key', sa.String(length=1000), nullable=False),
    sa.Column('channel', sa.String(length=64), nullable=False),
    sa.Column('ts', sa.String(length=32), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('group_key', name=op.f('pk_slack_threads'))
    )


def downgrade() -> None:
    op.drop_table('slack_threads')
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.drop_column('claimed_at')
        batch_op.drop_column('claimed_by')
        batch_op.drop_column('probe_failed_at')
        batch_op.drop_column('probe_attempts')
        batch_op.drop_column('probe_error')
