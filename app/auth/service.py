"""Sign-in rules: who a user is, and whether the IdP makes them a platform admin."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.audit import readable
from app.audit import service as audit
from app.auth import events, repository, tokens
from app.auth.models import USER_EMAIL_MAX, USER_NAME_MAX, USER_SUBJECT_MAX, User
from app.database.core import utcnow
from app.kit.errors import ValidationFailed


@dataclass(frozen=True)
class Identity:
    issuer: str
    subject: str
    email: str
    name: str
    groups: tuple[str, ...]
    # False only when the IdP says so: many IdPs leave the claim out for addresses they own.
    email_verified: bool = True


def identity_from_claims(issuer: str, claims: dict[str, Any], groups_claim: str) -> Identity:
    raw_groups = claims.get(groups_claim) or []
    groups = tuple(str(g) for g in raw_groups) if isinstance(raw_groups, list) else ()
    email = str(claims.get("email") or "")
    return Identity(
        issuer=issuer,
        subject=str(claims["sub"]),
        email=email,
        # A display name only: one longer than the column is cut, not a failed sign-in.
        name=str(claims.get("name") or email)[:USER_NAME_MAX],
        groups=groups,
        email_verified=str(claims.get("email_verified", True)).lower() != "false",
    )


def identity_problem(identity: Identity) -> str | None:
    """Why the portal cannot keep this identity as the IdP asserts it, or None when it can."""
    for claim, value, limit in (("email address", identity.email, USER_EMAIL_MAX),
                                ("subject", identity.subject, USER_SUBJECT_MAX)):
        if len(value) > limit:
            return (f"The identity provider's {claim} is longer than the portal can hold "
                    f"({limit} characters).")
    return None


def sign_in(db: Session, identity: Identity, admin_group: str) -> User:
    """Finds or creates the user, refreshes their profile and admin flag, and audits it."""
    user = repository.user_by_identity(db, identity.issuer, identity.subject)
    # An invitation (or `portal users make-admin`) is claimed by address: never by one the
    # IdP has not verified, or anyone could register it there and take the account.
    if user is None and identity.email and identity.email_verified:
        user = repository.unbound_user_by_email(db, identity.email)
    if user is None:
        user = User(email=identity.email)
        db.add(user)
    before = {"is_platform_admin": user.is_platform_admin} if user.id else None
    user.issuer = identity.issuer
    user.subject = identity.subject
    user.email = identity.email or user.email
    user.email_verified = bool(identity.email) and identity.email_verified
    user.name = identity.name
    user.groups = list(identity.groups)
    user.is_platform_admin = admin_group in identity.groups
    user.last_login_at = utcnow()
    db.flush()
    events.signed_in.fire(db, user, identity.groups)
    audit.record(
        db, action="auth.sign_in", actor_id=user.id, actor_label=user.email,
        target_type="user", target_id=user.id,
        target_label=readable.user_label(user.email, user.name), before=before,
        after={"is_platform_admin": user.is_platform_admin, "groups": list(identity.groups)},
    )
    return user


def user_for_email(
    db: Session, email: str, *, actor_id: int | None = None, actor_label: str = "cli"
) -> User:
    """The user with this email, created (unbound until first sign-in) if unknown."""
    user = repository.user_by_email(db, email)
    if user is None:
        user = User(email=email, name=email)
        db.add(user)
        db.flush()
        audit.record(db, action="user.create", actor_id=actor_id, actor_label=actor_label,
                     target_type="user", target_id=user.id, target_label=email,
                     after={"email": email})
    return user


def grant_platform_admin(db: Session, email: str, actor_label: str) -> User:
    user = user_for_email(db, email)
    before = {"admin_granted": user.admin_granted}
    user.admin_granted = True
    audit.record(db, action="user.make_admin", actor_id=None, actor_label=actor_label,
                 target_type="user", target_id=user.id,
                 target_label=readable.user_label(user.email, user.name), before=before,
                 after={"admin_granted": True})
    return user


def issue_api_token(
    db: Session,
    user: User,
    *,
    name: str,
    scopes: list[str],
    expires_at: datetime | None,
    actor_label: str,
) -> tuple[Any, str]:
    """Creates a token and returns its row (an ``ApiToken``'s columns) with its secret, which
    is never retrievable again."""
    unknown = sorted(set(scopes) - set(tokens.SCOPES))
    if unknown or not scopes:
        raise ValidationFailed.on_field(
            "scopes", f"scopes must be some of {', '.join(tokens.SCOPES)}; got {unknown or 'none'}"
        )
    if expires_at is not None and expires_at <= utcnow():
        raise ValidationFailed.on_field("expires_at", "the expiry must be in the future")
    secret = tokens.new_token_secret()
    # A statement, not an ORM object: the row answers as stored, and nothing in this
    # transaction reads the token back.
    token = repository.add_token(db, {
        "user_id": user.id, "name": name, "token_hash": tokens.hash_token(secret),
        "prefix": tokens.token_prefix(secret), "scopes": sorted(set(scopes)),
        "expires_at": expires_at})
    audit.record(
        db, action="api_token.create", actor_id=user.id, actor_label=actor_label,
        target_type="api_token", target_id=token.id, target_label=f"API token {name}",
        after={"name": name, "scopes": token.scopes, "expires_at": _iso(expires_at)},
    )
    return token, secret


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
