"""action_captures: the evidence captured of a role before its restart (stacks, state, last lines)

Revision ID: 0009_capture
Revises: 0009_hostile
Create Date: 2026-12-03 07:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009_capture'
down_revision: str | None = '0009_hostile'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'action_captures',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('action_id', sa.String(length=32), nullable=False),
        sa.Column('role', sa.String(length=64), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('ok', sa.Boolean(), nullable=False),
        sa.Column('summary', sa.Text(), nullable=False),
        sa.Column('size_bytes', sa.Integer(), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(['action_id'], ['actions.id'], name=op.f('fk_action_captures_action_id_actions'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_action_captures')),
    )
    op.create_index(op.f('ix_action_captures_action_id'), 'action_captures', ['action_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_action_captures_action_id'), table_name='action_captures')
    op.drop_table('action_captures')
