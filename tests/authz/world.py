"""The world the authorization matrix runs in: two tenants, every role, a platform admin."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy.orm import Session

from app.auth.models import User, WebSession
from app.auth.service import issue_api_token
from app.auth.sessions import hash_session_id
from app.db import utcnow
from app.quotas.models import QuotaRequest
from app.tenants.models import GroupMapping
from tests import factories
from tests.support.principals import bearer

PRINCIPALS = (
    "anonymous",
    "outsider",
    "acme_viewer",
    "acme_member",
    "globex_admin",
    "acme_admin",
    "platform_admin",
)


@dataclass
class Caller:
    user: User | None
    headers: dict[str, str] = field(default_factory=dict)
    cookie: str | None = None
    csrf: str = ""


@dataclass
class World:
    users: dict[str, User]
    gpu_class_id: int
    pending_request_id: int
    acme_member_id: int
    mapping_id: int
    callers: dict[str, Caller] = field(default_factory=dict)
    # A second token per user, for the revoke routes; ``current`` is the caller under test.
    spare_token_ids: dict[str, int] = field(default_factory=dict)
    current: str = "anonymous"


def _session_cookie(db: Session, user: User) -> tuple[str, str]:
    session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(16)
    now = utcnow()
    db.add(WebSession(id_hash=hash_session_id(session_id), user_id=user.id,
                      data={"uid": user.id, "csrf": csrf}, created_at=now, last_seen_at=now,
                      expires_at=now + timedelta(hours=1)))
    return session_id, csrf


def build_world(db: Session) -> World:
    acme, globex = factories.tenant(db, "acme"), factories.tenant(db, "globex")
    users = {name: factories.user(db, f"{name}@example.com") for name in PRINCIPALS[1:]}
    users["platform_admin"].is_platform_admin = True
    member = None
    for role in ("viewer", "member", "admin"):
        row = factories.membership(db, acme, users[f"acme_{role}"], role)
        member = row if role == "member" else member
    factories.membership(db, globex, users["globex_admin"], "admin")
    gpu = factories.gpu_class(db)
    factories.quota(db, acme, gpu, gpus=8)
    request = QuotaRequest(tenant_id=acme.id, gpu_class_id=gpu.id, gpus=2, reason="matrix")
    db.add(request)
    mapping = GroupMapping(tenant_id=acme.id, group_name="acme-staff", role="viewer")
    db.add(mapping)
    db.flush()
    assert member is not None
    world = World(users=users, gpu_class_id=gpu.id, pending_request_id=request.id,
                  acme_member_id=member.id, mapping_id=mapping.id)
    world.callers["anonymous"] = Caller(user=None)
    for name, user in users.items():
        cookie, csrf = _session_cookie(db, user)
        world.callers[name] = Caller(user=user, headers=bearer(db, user), cookie=cookie,
                                     csrf=csrf)
        spare, _secret = issue_api_token(db, user, name="spare", scopes=["read"],
                                         expires_at=None, actor_label="test")
        world.spare_token_ids[name] = spare.id
    db.flush()
    return world
