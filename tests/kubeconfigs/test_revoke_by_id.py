"""Revoking a kubeconfig by its grant id alone (ids are global), as `portalctl grants revoke
ID` does: the same rules as under its cluster, and a grant of another tenant is not found
without naming that tenant. The virtual cluster is the in-memory fake (only the database is
observed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters.models import VirtualCluster
from app.database.core import Database
from app.kit.config import Settings
from app.kubeconfigs.models import KubeconfigGrant
from app.process.asgi import create_app
from tests.support import virtual_clusters
from tests.support.kube import InMemoryConnector
from tests.support.tenancy import Tenancy, headers

URL = "/api/v1/kubeconfig-grants"


@pytest.fixture
def fake_client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database, InMemoryConnector())) as test_client:
        yield test_client


def test_a_grant_is_revoked_by_its_id_by_its_holder_or_the_tenants_admin_only(
    fake_client: TestClient, db: Session, tenancy: Tenancy, offline_train: VirtualCluster,
) -> None:
    mine = virtual_clusters.grant(db, offline_train, tenancy.acme_member.id)
    theirs = virtual_clusters.grant(db, offline_train, tenancy.acme_viewer.id)
    member, admin = headers(db, tenancy.acme_member), headers(db, tenancy.acme_admin)
    outsider = headers(db, tenancy.globex_admin)
    db.commit()

    hidden = fake_client.delete(f"{URL}/{mine.id}", headers=outsider)
    assert hidden.status_code == 404
    assert hidden.json()["detail"] == f"no kubeconfig grant {mine.id}"
    assert "acme" not in hidden.text and "train" not in hidden.text
    assert fake_client.delete(f"{URL}/{theirs.id}", headers=member).status_code == 403
    assert fake_client.delete(f"{URL}/{mine.id}", headers=member).status_code == 204
    assert fake_client.delete(f"{URL}/{theirs.id}", headers=admin).status_code == 204
    assert fake_client.delete(f"{URL}/999999", headers=admin).status_code == 404

    db.expire_all()
    assert all(g.revoked_at is not None for g in db.scalars(select(KubeconfigGrant)))
    revoked = db.scalars(select(AuditEvent.target_id).where(
        AuditEvent.action == "kubeconfig.revoke")).all()
    assert sorted(revoked) == sorted([str(mine.id), str(theirs.id)])
