"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-30 14:43:11.921592
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('scopes', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('name', name=op.f('uq_api_tokens_name')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_api_tokens_token_hash'))
    )
    op.create_table('audit',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('surface', sa.String(length=16), nullable=False),
    sa.Column('what', sa.String(length=200), nullable=False),
    sa.Column('cluster', sa.String(length=64), nullable=True),
    sa.Column('role', sa.String(length=64), nullable=True),
    sa.Column('detail', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit'))
    )
    with op.batch_alter_table('audit', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audit_at'), ['at'], unique=False)

    op.create_table('decisions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('why', sa.Text(), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_decisions'))
    )
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_decisions_created_at'), ['created_at'], unique=False)

    op.create_table('job_runs',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('job', sa.String(length=64), nullable=False),
    sa.Column('period', sa.String(length=64), nullable=False),
    sa.Column('claimed_by', sa.String(length=128), nullable=False),
    sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('result', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_runs')),
    sa.UniqueConstraint('job', 'period', name='uq_job_runs_job_period')
    )
    op.create_table('notes',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_notes'))
    )
    with op.batch_alter_table('notes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_notes_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_notes_kind'), ['kind'], unique=False)

    op.create_table('probes',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('cluster', sa.String(length=64), nullable=False),
    sa.Column('roles', sa.JSON(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('trigger_kind', sa.String(length=16), nullable=False),
    sa.Column('trigger_user', sa.String(length=128), nullable=True),
    sa.Column('top_incident', sa.String(length=64), nullable=True),
    sa.Column('ok_axes', sa.JSON(), nullable=False),
    sa.Column('bundle', sa.LargeBinary(), nullable=False),
    sa.Column('stored_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_probes'))
    )
    with op.batch_alter_table('probes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_probes_cluster'), ['cluster'], unique=False)
        batch_op.create_index(batch_op.f('ix_probes_started_at'), ['started_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_probes_top_incident'), ['top_incident'], unique=False)

    op.create_table('reports',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('period', sa.String(length=64), nullable=False),
    sa.Column('format', sa.String(length=16), nullable=False),
    sa.Column('body', sa.Text(), nullable=False),
    sa.Column('meta', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_reports'))
    )
    with op.batch_alter_table('reports', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_reports_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_reports_kind'), ['kind'], unique=False)

    op.create_table('role_locks',
    sa.Column('cluster', sa.String(length=64), nullable=False),
    sa.Column('role', sa.String(length=64), nullable=False),
    sa.Column('action_id', sa.String(length=32), nullable=False),
    sa.Column('holder', sa.String(length=128), nullable=False),
    sa.Column('acquired_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('cluster', 'role', name=op.f('pk_role_locks'))
    )
    op.create_table('actions',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('cluster', sa.String(length=64), nullable=False),
    sa.Column('role', sa.String(length=64), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('plan', sa.JSON(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('requested_by', sa.String(length=128), nullable=False),
    sa.Column('surface', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('approved_by', sa.String(length=128), nullable=True),
    sa.Column('approved_surface', sa.String(length=16), nullable=True),
    sa.Column('approved_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('execution', sa.JSON(), nullable=True),
    sa.Column('verification', sa.JSON(), nullable=True),
    sa.Column('outcome', sa.Text(), nullable=True),
    sa.Column('evidence_probe_id', sa.String(length=64), nullable=True),
    sa.ForeignKeyConstraint(['evidence_probe_id'], ['probes.id'], name=op.f('fk_actions_evidence_probe_id_probes'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_actions'))
    )
    with op.batch_alter_table('actions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_actions_cluster'), ['cluster'], unique=False)
        batch_op.create_index('ix_actions_cluster_started', ['cluster', 'started_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_actions_role'), ['role'], unique=False)
        batch_op.create_index(batch_op.f('ix_actions_started_at'), ['started_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_actions_state'), ['state'], unique=False)

    op.create_table('alerts',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('dedup_key', sa.String(length=200), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('alertname', sa.String(length=200), nullable=True),
    sa.Column('cluster', sa.String(length=64), nullable=True),
    sa.Column('role', sa.String(length=64), nullable=True),
    sa.Column('group_key', sa.Text(), nullable=True),
    sa.Column('labels', sa.JSON(), nullable=False),
    sa.Column('annotations', sa.JSON(), nullable=False),
    sa.Column('starts_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('ends_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('probe_id', sa.String(length=64), nullable=True),
    sa.ForeignKeyConstraint(['probe_id'], ['probes.id'], name=op.f('fk_alerts_probe_id_probes'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_alerts')),
    sa.UniqueConstraint('dedup_key', name=op.f('uq_alerts_dedup_key'))
    )
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_alerts_fingerprint'), ['fingerprint'], unique=False)
        batch_op.create_index(batch_op.f('ix_alerts_group_key'), ['group_key'], unique=False)
        batch_op.create_index(batch_op.f('ix_alerts_received_at'), ['received_at'], unique=False)

    op.create_table('findings',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('probe_id', sa.String(length=64), nullable=False),
    sa.Column('cluster', sa.String(length=64), nullable=False),
    sa.Column('incident', sa.String(length=64), nullable=False),
    sa.Column('severity', sa.String(length=16), nullable=False),
    sa.Column('roles', sa.JSON(), nullable=False),
    sa.Column('title', sa.Text(), nullable=True),
    sa.Column('summary', sa.Text(), nullable=True),
    sa.Column('evidence', sa.JSON(), nullable=False),
    sa.Column('detail', sa.JSON(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['probe_id'], ['probes.id'], name=op.f('fk_findings_probe_id_probes'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_findings'))
    )
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_findings_at'), ['at'], unique=False)
        batch_op.create_index(batch_op.f('ix_findings_incident'), ['incident'], unique=False)
        batch_op.create_index(batch_op.f('ix_findings_probe_id'), ['probe_id'], unique=False)

    op.create_table('approvals',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('action_id', sa.String(length=32), nullable=False),
    sa.Column('approver', sa.String(length=128), nullable=False),
    sa.Column('surface', sa.String(length=16), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['action_id'], ['actions.id'], name=op.f('fk_approvals_action_id_actions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_approvals'))
    )
    with op.batch_alter_table('approvals', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_approvals_action_id'), ['action_id'], unique=False)

    _audit_append_only()


AUDIT_GUARD_SQLITE = """
CREATE TRIGGER audit_no_{op} BEFORE {OP} ON audit
BEGIN SELECT RAISE(ABORT, 'audit is append-only: {OP} is not allowed'); END
"""

AUDIT_GUARD_PG = """
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit is append-only: % is not allowed', TG_OP USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_no_update_delete BEFORE UPDATE OR DELETE ON audit
  FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
  FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
"""


def _audit_append_only() -> None:
    """The audit table refuses UPDATE and DELETE in the database itself, not only in the Store API."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(AUDIT_GUARD_PG)
    else:
        for o in ("update", "delete"):
            op.execute(AUDIT_GUARD_SQLITE.format(op=o, OP=o.upper()))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_no_update_delete ON audit")
        op.execute("DROP TRIGGER IF EXISTS audit_no_truncate ON audit")
        op.execute("DROP FUNCTION IF EXISTS audit_append_only()")
    else:
        op.execute("DROP TRIGGER IF EXISTS audit_no_update")
        op.execute("DROP TRIGGER IF EXISTS audit_no_delete")

    with op.batch_alter_table('approvals', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_approvals_action_id'))

    op.drop_table('approvals')
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_findings_probe_id'))
        batch_op.drop_index(batch_op.f('ix_findings_incident'))
        batch_op.drop_index(batch_op.f('ix_findings_at'))

    op.drop_table('findings')
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_alerts_received_at'))
        batch_op.drop_index(batch_op.f('ix_alerts_group_key'))
        batch_op.drop_index(batch_op.f('ix_alerts_fingerprint'))

    op.drop_table('alerts')
    with op.batch_alter_table('actions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_actions_state'))
        batch_op.drop_index(batch_op.f('ix_actions_started_at'))
        batch_op.drop_index(batch_op.f('ix_actions_role'))
        batch_op.drop_index('ix_actions_cluster_started')
        batch_op.drop_index(batch_op.f('ix_actions_cluster'))

    op.drop_table('actions')
    op.drop_table('role_locks')
    with op.batch_alter_table('reports', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_reports_kind'))
        batch_op.drop_index(batch_op.f('ix_reports_created_at'))

    op.drop_table('reports')
    with op.batch_alter_table('probes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_probes_top_incident'))
        batch_op.drop_index(batch_op.f('ix_probes_started_at'))
        batch_op.drop_index(batch_op.f('ix_probes_cluster'))

    op.drop_table('probes')
    with op.batch_alter_table('notes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_notes_kind'))
        batch_op.drop_index(batch_op.f('ix_notes_created_at'))

    op.drop_table('notes')
    op.drop_table('job_runs')
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_decisions_created_at'))

    op.drop_table('decisions')
    with op.batch_alter_table('audit', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audit_at'))

    op.drop_table('audit')
    op.drop_table('api_tokens')

