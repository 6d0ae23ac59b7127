"""Issuing while the caller's access ends, against a real, separately committed database.

Member removal, role changes, suspension and unmapping an IdP group revoke the grants they
find; a kubeconfig being issued at that moment (its rights read before they committed) must
not escape them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.auth.principal import Principal
from app.database.core import Database
from app.kit.config import Settings
from app.kit.errors import ProblemError
from app.kubeconfigs import service
from app.kubeconfigs.models import KubeconfigGrant
from app.kubeconfigs.schemas import KubeconfigRequest
from app.kubeconfigs.service import VirtualClusters
from app.tenants import group_mappings
from app.tenants import service as tenants
from app.tenants.models import GroupMapping
from app.tenants.schemas import MemberUpdate, TenantUpdate
from tests.kubeconfigs.test_revocation import FakeClusters
from tests.support.tenancy import Tenancy, build_tenancy
from tests.support.virtual_clusters import ready_cluster

# How long the issue gets to finish while the revoking transaction is still open.
HEAD_START = 1.0


def _seed(database: Database) -> tuple[Tenancy, int, int]:
    """acme's member holds the role through the IdP group ``acme-ml`` too (for unmapping)."""
    with database.transaction() as db:
        tenancy = build_tenancy(db, nodes=1)
        ready_cluster(db, tenancy.acme)
        member = next(m for m in tenancy.memberships if m.user_id == tenancy.acme_member.id)
        member.source = "group"
        tenancy.acme_member.groups = ["acme-ml"]
        mapping = GroupMapping(tenant_id=tenancy.acme.id, group_name="acme-ml", role="member")
        db.add(mapping)
        db.flush()
        return tenancy, member.id, mapping.id


def _issue(database: Database, settings: Settings, user_id: int, roles: dict[int, str],
           role: str) -> Callable[[], object]:
    """An issue whose caller's roles were read before the revoking change committed."""
    def run() -> object:
        with database.transaction() as db:
            user = db.get(User, user_id)
            assert user is not None
            principal = Principal(user=user, via="token", roles=roles)
            clusters = VirtualClusters.from_settings(settings, FakeClusters())
            return service.issue_kubeconfig(db, principal, clusters, settings, "acme", "train",
                                            KubeconfigRequest(role=role, lifetime_seconds=3600))
    return run


def _live_grants(database: Database, user_id: int) -> list[KubeconfigGrant]:
    with database.session() as db:
        return list(db.scalars(select(KubeconfigGrant).where(
            KubeconfigGrant.user_id == user_id, KubeconfigGrant.revoked_at.is_(None))))


@pytest.mark.parametrize("change", ["remove", "demote", "suspend", "unmap"])
def test_a_kubeconfig_issued_while_access_ends_is_refused_or_revoked(
    own_pg_database: Database, settings: Settings, change: str
) -> None:
    tenancy, member_id, mapping_id = _seed(own_pg_database)
    admin = tenancy.principal(tenancy.acme_admin)
    platform_admin = tenancy.principal(tenancy.platform_admin)
    roles = {tenancy.acme.id: "member"}
    issue = _issue(own_pg_database, settings, tenancy.acme_member.id, roles, "edit")
    started = threading.Event()

    def revoking(db: Session) -> None:
        if change == "remove":
            tenants.remove_member(db, admin, "acme", member_id)
        elif change == "demote":
            tenants.change_role(db, admin, "acme", member_id, MemberUpdate(role="viewer"))
        elif change == "suspend":
            tenants.update_tenant(db, platform_admin, "acme", TenantUpdate(state="suspended"))
        else:
            group_mappings.remove_mapping(db, platform_admin, "acme", mapping_id)
        started.set()

    with ThreadPoolExecutor(max_workers=1) as pool:
        with own_pg_database.transaction() as db:
            revoking(db)
            issued: Future[object] = pool.submit(issue)
            time.sleep(HEAD_START)
        # It waited for the change, then found the caller's access gone or lowered.
        with pytest.raises(ProblemError) as refused:
            issued.result(timeout=30)
    assert refused.value.status == (404 if change in ("remove", "unmap") else 403)
    assert started.is_set()
    assert _live_grants(own_pg_database, tenancy.acme_member.id) == []
