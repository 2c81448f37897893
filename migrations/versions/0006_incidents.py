"""incidents: one row per incident from its first alert to its resolution, with its Slack message

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 21:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('incidents',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('open_key', sa.String(length=200), nullable=True),
    sa.Column('cluster', sa.String(length=64), nullable=False),
    sa.Column('incident', sa.String(length=64), nullable=False),
    sa.Column('severity', sa.String(length=16), nullable=False),
    sa.Column('roles', sa.JSON(), nullable=False),
    sa.Column('title', sa.Text(), nullable=True),
    sa.Column('summary', sa.Text(), nullable=True),
    sa.Column('confidence', sa.Float(), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('first_seen', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_seen', sa.DateTime(timezone=True), nullable=False),
    sa.Column('resolved_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('alerts', sa.JSON(), nullable=False),
    sa.Column('alertnames', sa.JSON(), nullable=False),
    sa.Column('firing', sa.JSON(), nullable=False),
    sa.Column('probes', sa.JSON(), nullable=False),
    sa.Column('actions', sa.JSON(), nullable=False),
    sa.Column('timeline', sa.JSON(), nullable=False),
    sa.Column('slack_channel', sa.String(length=64), nullable=True),
    sa.Column('slack_ts', sa.String(length=32), nullable=True),
    sa.Column('slack_state', sa.String(length=16), nullable=True),
    sa.Column('slack_claimed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('slack_error', sa.Text(), nullable=True),
    sa.Column('slack_attempts', sa.Integer(), nullable=False),
    sa.Column('slack_version', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_incidents')),
    sa.UniqueConstraint('open_key', name=op.f('uq_incidents_open_key'))
    )
    with op.batch_alter_table('incidents', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_incidents_cluster'), ['cluster'], unique=False)
        batch_op.create_index(batch_op.f('ix_incidents_incident'), ['incident'], unique=False)
        batch_op.create_index(batch_op.f('ix_incidents_state'), ['state'], unique=False)
        batch_op.create_index(batch_op.f('ix_incidents_first_seen'), ['first_seen'], unique=False)


def downgrade() -> None:
    op.drop_table('incidents')
