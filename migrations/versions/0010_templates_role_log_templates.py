"""role_log_templates, role_log_history: what each role printed while healthy

Per cluster and role, the templates of the log lines seen in probes whose verdict on that role was healthy
(opsbot/parse/templates.py), capped per role, and how many healthy probes taught them. A role that is not
healthy names its lines whose templates were never seen on it while healthy (issue 24).

Revision ID: 0010_templates
Revises: 0009_notifier
Create Date: 2026-12-03 10:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0010_templates'
down_revision: str | None = '0009_notifier'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'role_log_templates',
        sa.Column('cluster', sa.String(length=64), nullable=False),
        sa.Column('role', sa.String(length=64), nullable=False),
        sa.Column('key', sa.String(length=32), nullable=False),
        sa.Column('template', sa.String(length=256), nullable=False),
        sa.Column('first_seen', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_seen', sa.DateTime(timezone=True), nullable=False),
        sa.Column('healthy_probes', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('cluster', 'role', 'key', name=op.f('pk_role_log_templates')),
    )
    op.create_table(
        'role_log_history',
        sa.Column('cluster', sa.String(length=64), nullable=False),
        sa.Column('role', sa.String(length=64), nullable=False),
        sa.Column('healthy_probes', sa.Integer(), nullable=False),
        sa.Column('first_healthy_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_healthy_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('cluster', 'role', name=op.f('pk_role_log_history')),
    )


def downgrade() -> None:
    op.drop_table('role_log_history')
    op.drop_table('role_log_templates')
