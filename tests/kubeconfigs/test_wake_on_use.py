"""Asking for a kubeconfig of a sleeping cluster wakes it (202, Retry-After), audited; who may
not get that kubeconfig does not wake it; the page says it is waking."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters import conditions as cond
from app.clusters.models import VirtualCluster
from app.database.core import utcnow
from tests.support.tenancy import Tenancy, headers

URL = "/api/v1/tenants/acme/clusters/train/kubeconfigs"


def put_to_sleep(db: Session, cluster: VirtualCluster) -> None:
    """As the worker leaves it: asked to sleep, asleep (its Asleep condition True)."""
    cluster.power, cluster.power_reason = "asleep", "idle"
    cluster.conditions = cond.set_condition(list(cluster.conditions), cond.ASLEEP, True,
                                            "Sleeping", "asleep", cluster.generation, utcnow())
    db.commit()


def test_asking_for_a_kubeconfig_wakes_a_sleeping_cluster(
        client: TestClient, db: Session, tenancy: Tenancy,
        offline_train: VirtualCluster) -> None:
    put_to_sleep(db, offline_train)
    asked = client.post(URL, headers=headers(db, tenancy.acme_member), json={"role": "view"})
    assert asked.status_code == 202, asked.text
    assert asked.headers["Retry-After"] == "10" and asked.json()["phase"] == "Waking"
    db.expire_all()
    cluster = db.get(VirtualCluster, offline_train.id)
    assert cluster is not None and (cluster.power, cluster.power_reason) == ("awake",
                                                                            "kubeconfig")
    woken = db.scalar(select(AuditEvent).where(AuditEvent.action == "virtual_cluster.wake"))
    assert woken is not None and woken.after is not None and woken.after["reason"] == "kubeconfig"
    # Still waking: asking again says so, and wakes nothing more.
    again = client.post(URL, headers=headers(db, tenancy.acme_member), json={"role": "view"})
    assert again.status_code == 202


def test_who_may_not_have_the_kubeconfig_does_not_wake_the_cluster(
        client: TestClient, db: Session, tenancy: Tenancy,
        offline_train: VirtualCluster) -> None:
    put_to_sleep(db, offline_train)
    refused = client.post(URL, headers=headers(db, tenancy.acme_member), json={"role": "admin"})
    assert refused.status_code == 403
    db.expire_all()
    cluster = db.get(VirtualCluster, offline_train.id)
    assert cluster is not None and cluster.power == "asleep"
