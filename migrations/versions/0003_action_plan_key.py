"""actions get a plan key: the restart a probe's finding asks for is planned once, by any instance

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('actions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('plan_key', sa.String(length=200), nullable=True))
        batch_op.create_unique_constraint(batch_op.f('uq_actions_plan_key'), ['plan_key'])


def downgrade() -> None:
    with op.batch_alter_table('actions', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('uq_actions_plan_key'), type_='unique')
        batch_op.drop_column('plan_key')
