"""Each person's choice, per kind, of hearing of it by email.

No row is the default, email on; a row is written only for a kind turned off, and removed when
it is turned on again. Fan-out (``emit.py``) reads them when an event is emitted: a kind turned
off is no email from then on, a mandatory kind is sent whatever the row says.

The kinds offered are those a person can receive, judged from who they are today:

- tenant kinds to an admin of some tenant (every tenant kind goes to its admins);
- to a member of some tenant, the tenant kinds told to a cluster's creator as well
  (``TOLD_TO_CREATORS``): a member may create clusters. The other person told of a tenant
  event, a quota request's requester, can only have been an admin (requesting quota takes the
  ``manage`` action), so an admin's list covers it; a viewer creates and requests nothing;
- platform kinds to a platform admin: the user's own standing (``User.platform_admin``, as
  recipients reads it), not the token in use;
- person kinds to everyone (a kubeconfig's holder, an endpoint's registrant), except those
  never sent by email (``test``: a webhook's test-send).

A kind not offered to a person cannot be set by them (422): the list and the changes it takes
are the same kinds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.principal import Principal
from app.database.concurrency import upsert
from app.kit.errors import Forbidden, ValidationFailed
from app.notifications import kinds
from app.notifications.kinds import KINDS, Kind
from app.notifications.models import KIND_MAX, NotificationPreference

TOLD_TO_CREATORS = frozenset({kinds.CLUSTER_READY, kinds.CLUSTER_FAILED, kinds.CLUSTER_STUCK})
NEVER_EMAILED = frozenset({kinds.TEST})
ACTION = "notification_preference.change"
FIELD = "preferences"


@dataclass(frozen=True)
class Choice:
    kind: Kind
    email: bool


def offered(roles: Iterable[str], platform_admin: bool) -> list[Kind]:
    """The kinds a person with these tenant roles (and standing) can receive, in the order
    of ``KINDS``."""
    held = set(roles)
    return [kind for kind in KINDS.values() if kind.name not in NEVER_EMAILED and (
        kind.audience == "person"
        or (kind.audience == "platform" and platform_admin)
        or (kind.audience == "tenant" and _tenant_kind_offered(kind.name, held)))]


def _tenant_kind_offered(name: str, roles: set[str]) -> bool:
    return "admin" in roles or ("member" in roles and name in TOLD_TO_CREATORS)


def offered_to(principal: Principal) -> list[Kind]:
    return offered(principal.roles.values(), principal.user_is_platform_admin)


def choices(db: Session, principal: Principal) -> list[Choice]:
    """Each kind offered to the caller and whether it is emailed (a mandatory one always)."""
    off = _turned_off(db, principal.user_id)
    return [Choice(kind, kind.mandatory or kind.name not in off)
            for kind in offered_to(principal)]


def change(db: Session, principal: Principal, wanted: Mapping[str, bool]) -> list[Choice]:
    """Sets email on or off for the kinds named (the others as they were); audited once with
    each kind changed before and after. Refused as a whole, nothing changed: a kind unknown,
    not offered to the caller, or mandatory and asked off."""
    if not principal.can_write():
        raise Forbidden("this API token is read-only")
    _check(wanted, {kind.name for kind in offered_to(principal)})
    now = {choice.kind.name: choice.email for choice in choices(db, principal)}
    changed = {name: email for name, email in wanted.items() if now[name] != email}
    if changed:
        _store(db, principal.user_id, changed)
        audit.record(db, action=ACTION, actor_id=principal.user_id,
                     actor_label=principal.label, target_type="user",
                     target_id=principal.user_id, target_label=principal.email,
                     before={name: now[name] for name in sorted(changed)},
                     after={name: changed[name] for name in sorted(changed)})
    return choices(db, principal)


def _check(wanted: Mapping[str, bool], offered_names: set[str]) -> None:
    for name, email in wanted.items():
        if name not in KINDS or name in NEVER_EMAILED:
            shown = name if len(name) <= KIND_MAX else name[:KIND_MAX] + "…"
            raise ValidationFailed.on_field(FIELD, f"no notification kind {shown!r}; the kinds "
                                                   f"are {', '.join(sorted(offered_names))}")
        if name not in offered_names:
            raise ValidationFailed.on_field(FIELD, f"{name!r} is not a kind you receive: "
                                                   "nothing to turn on or off")
        if KINDS[name].mandatory and not email:
            raise ValidationFailed.on_field(
                FIELD, f"{name!r} ({KINDS[name].title}) is mandatory: it cannot be turned off")


def _store(db: Session, user_id: int, changed: Mapping[str, bool]) -> None:
    """Off: a row; on: no row (the default). Writers at once both succeed, the later wins."""
    off = [{"user_id": user_id, "kind": name, "email": False}
           for name, email in sorted(changed.items()) if not email]
    upsert(db, NotificationPreference, off, keys=["user_id", "kind"])
    on = [name for name, email in changed.items() if email]
    if on:
        db.execute(delete(NotificationPreference).where(
            NotificationPreference.user_id == user_id, NotificationPreference.kind.in_(on))
            .execution_options(synchronize_session=False))


def _turned_off(db: Session, user_id: int) -> set[str]:
    return set(db.scalars(select(NotificationPreference.kind).where(
        NotificationPreference.user_id == user_id,
        NotificationPreference.email.is_(False))))
