"""API tokens (record stage): only their SHA-256 is kept; scopes nest, tokens expire and are revoked."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import timedelta
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from opsbot.inventory import NAME_RE
from opsbot.store.audit import audit_row
from opsbot.store.gateway import Gateway
from opsbot.store.models import (
    ApiToken,
    now,
)

T = TypeVar("T")


SCOPES = ("read", "probe", "act")


class TokenScopes(list[str]):
    """A checked token's scopes (a list), the token's ``name`` (who the caller is) and, for a revoked
    or expired token, why it is ``refused`` (its scopes are then empty)."""

    def __init__(self, name: str, scopes: Iterable[str], refused: str | None = None) -> None:
        super().__init__(scopes)
        self.name = name
        self.refused = refused


def implied_scopes(scopes: Iterable[str]) -> list[str]:
    """Scopes nest as users expect: ``act`` includes ``probe``, which includes ``read``."""
    held = [SCOPES.index(sc) for sc in scopes if sc in SCOPES]
    return sorted(SCOPES[: max(held) + 1]) if held else []


class TokenRecords(Gateway):
    """API tokens. Mixed into ``Store`` (it needs ``write`` and ``read``)."""

    # -- API tokens --------------------------------------------------------------------------

    def create_token(self, name: str, scopes: list[str], expires_in: timedelta | None = None) -> str:
        """A new bearer token; only its SHA-256 is stored, the secret is returned once."""
        if not NAME_RE.fullmatch(name):
            raise ValueError(f"token name {name[:80]!r}: lower-case letters, digits and '-', at most 63, e.g. grafana "
                             "(as inventory names: a name is shown in lists and reports, never read as markup)")
        bad = [sc for sc in scopes if sc not in SCOPES]
        if bad or not scopes:
            raise ValueError(f"scopes {bad or '(none)'}: choose from {', '.join(SCOPES)}")
        if expires_in is not None and expires_in <= timedelta(0):
            raise ValueError("a token's lifetime must be positive, e.g. 30d")
        secret = "opsbot_" + secrets.token_urlsafe(32)
        expires_at = now() + expires_in if expires_in is not None else None

        def _add(s: Session) -> None:
            s.add(ApiToken(name=name, token_hash=_sha256(secret), scopes=sorted(set(scopes)), expires_at=expires_at))
            s.add(audit_row("cli", "cli", "token created", {"name": name, "scopes": scopes,
                                                              "expires_at": expires_at and expires_at.isoformat()}))

        try:
            self.write(_add, "create token")
        except IntegrityError as exc:
            raise ValueError(f"a token named {name!r} exists; choose another name") from exc
        return secret

    def check_token(self, secret: str) -> TokenScopes | None:
        """The token's scopes with the ones they include (act > probe > read) and its ``name``, or None
        when unknown; a revoked or expired token comes back with ``refused`` saying which. Records use."""
        digest = _sha256(secret)
        at = now()

        def _check(s: Session) -> TokenScopes | None:
            row = s.scalar(select(ApiToken).where(ApiToken.token_hash == digest))
            if row is None or not secrets.compare_digest(row.token_hash, digest):
                return None
            if row.revoked_at is not None:
                return TokenScopes(row.name, [], refused=f"token {row.name!r} was revoked at {row.revoked_at:%Y-%m-%d %H:%M} UTC")
            if row.expires_at is not None and row.expires_at <= at:
                return TokenScopes(row.name, [], refused=f"token {row.name!r} expired at {row.expires_at:%Y-%m-%d %H:%M} UTC")
            row.last_used_at = at
            return TokenScopes(row.name, implied_scopes(row.scopes))

        return self.write(_check, "check token")

    def revoke_token(self, key: str | int, actor: str = "cli") -> ApiToken:
        """Revoke a token by name (a ``str``) or by id (an ``int``), never one for the other; KeyError when
        there is none, ValueError if already revoked."""

        def _revoke(s: Session) -> ApiToken:
            row = s.get(ApiToken, key) if isinstance(key, int) else s.scalar(select(ApiToken).where(ApiToken.name == key))
            if row is None:
                what = f"id {key}" if isinstance(key, int) else f"named {key!r}"
                raise KeyError(f"no token {what} (opsbot tokens list)")
            if row.revoked_at is not None:
                raise ValueError(f"token {row.name!r} was already revoked at {row.revoked_at:%Y-%m-%d %H:%M} UTC")
            row.revoked_at = now()
            s.add(audit_row(actor, "cli", "token revoked", {"name": row.name, "id": row.id}))
            return row

        return self.write(_revoke, "revoke token")

    def tokens(self) -> list[ApiToken]:
        return list(self.read(lambda s: s.scalars(select(ApiToken).order_by(ApiToken.id)).all()))


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
