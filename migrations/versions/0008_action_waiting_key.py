"""actions: the key of a restart plan waiting for approval, unique while it waits

One plan per (cluster, role, incident class) waits at a time, across instances: the database refuses
a second row with the same key, and the key is cleared when the plan leaves ``planned``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 04:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('actions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('waiting_key', sa.String(length=200), nullable=True))
        batch_op.create_unique_constraint(batch_op.f('uq_actions_waiting_key'), ['waiting_key'])


def downgrade() -> None:
    with op.batch_alter_table('actions', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('uq_actions_waiting_key'), type_='unique')
        batch_op.drop_column('waiting_key')
