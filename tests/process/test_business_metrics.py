"""The worker's business gauges, read from the database at scrape time: what a tenant holds
per class as its dashboard shows it, quota requests waiting, clusters and machines by phase,
and the queue's backlog."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import generate_latest
from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.http.pagination import PageParams
from app.kit.metrics import registry_of
from app.process.business_metrics import BusinessGauges
from app.quotas import service as quota_service
from app.workqueue.kinds import CLUSTERS
from tests import factories
from tests.http.test_metrics import sample

H100 = "NVIDIA-H100-80GB-HBM3"


def scrape(database: Database, *kinds: str, later: float = 1.0) -> str:
    gauges = BusinessGauges(database, kinds, clock=lambda: utcnow() + timedelta(seconds=later))
    return generate_latest(registry_of(gauges)).decode()


def test_a_tenants_gpus_match_its_dashboard(db: Session, database: Database) -> None:
    tenant, principal, gpu = factories.gpu_tenant(db, "metrics-acme", 8)
    host = factories.host_cluster(db)
    factories.cluster(db, tenant, host, "train", gpu_class_id=gpu.id, gpus=4)
    factories.cluster(db, tenant, host, "nap", gpu_class_id=gpu.id, gpus=2, power="asleep")
    db.commit()
    [shown] = quota_service.tenant_quota(db, principal, "metrics-acme",
                                         PageParams(limit=10)).items

    text = scrape(database)

    def gpus(state: str) -> float | None:
        return sample(text, "portal_tenant_gpus", tenant="metrics-acme", gpu_class=H100,
                      state=state)
    assert gpus("approved") == shown.approved_gpus == 8
    assert gpus("allocated") == shown.allocated_gpus
    assert gpus("slept") == 2
    assert shown.in_use_gpus is None and gpus("in_use") is None  # no host read yet: unknown
    assert sample(text, "portal_clusters", phase="Sleeping") == 1
    assert sample(text, "portal_clusters", phase="Provisioning") == 1


def test_pending_quota_requests_and_the_oldest_ones_age(db: Session, database: Database) -> None:
    tenant, _, gpu = factories.gpu_tenant(db, "metrics-globex", 2)
    waiting = factories.quota_request(db, tenant, gpu)
    waiting.created_at = utcnow() - timedelta(hours=3)
    factories.quota_request(db, tenant, gpu, state="approved")
    db.commit()

    text = scrape(database)

    assert "portal_quota_requests_pending 1.0" in text.splitlines()
    age = next(float(line.split()[1]) for line in text.splitlines()
               if line.startswith("portal_quota_request_oldest_pending_age_seconds "))
    assert 3 * 3600 <= age < 3 * 3600 + 60


def test_the_queue_backlog_per_kind_and_machines_by_phase(
        db: Session, database: Database) -> None:
    tenant, _, gpu = factories.gpu_tenant(db, "metrics-initech", 4)
    host = factories.host_cluster(db)
    factories.cluster(db, tenant, host, "a", gpu_class_id=gpu.id, gpus=1)  # enqueued, due now
    factories.cluster(db, tenant, host, "b", gpu_class_id=gpu.id, gpus=1)
    factories.machine(db, host, gpu)
    db.commit()

    text = scrape(database, CLUSTERS, "nodes", later=60)

    assert sample(text, "portal_workqueue_depth", kind=CLUSTERS) == 2
    assert sample(text, "portal_workqueue_depth", kind="nodes") == 0
    assert 60 <= (sample(text, "portal_workqueue_oldest_due_age_seconds", kind=CLUSTERS)
                  or 0) < 120
    assert sample(text, "portal_machines", state="registering") == 1


def test_a_database_that_does_not_answer_costs_the_scrape_only_those_figures() -> None:
    unreachable = Database("postgresql+psycopg://portal@127.0.0.1:1/portal")
    try:
        assert scrape(unreachable, CLUSTERS) == ""
    finally:
        unreachable.dispose()
