"""probes: each role's figures, computed once when the probe is saved

The status page and ``GET /probes/{id}`` read them instead of parsing the bundle's logs on every view
(issue 23: one crafted line made every page view slow). NULL for probes saved before this revision:
those are still read from their bundle.

Revision ID: 0009_hostile
Revises: 0008
Create Date: 2026-12-03 07:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009_hostile'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('probes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('figures', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('probes', schema=None) as batch_op:
        batch_op.drop_column('figures')
