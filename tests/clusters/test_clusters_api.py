"""The clusters REST API: create within quota, resize, delete; what callers see and may do."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.principal import Principal
from app.clusters import conditions as cond
from app.clusters import repository, service
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterCreate, ClusterOut
from app.database.core import Database
from app.http.pagination import Page, PageParams
from app.kit.config import Settings
from app.kit.errors import Conflict, ValidationFailed
from app.process.asgi import create_app
from tests import factories
from tests.clusters.support import cluster_settings
from tests.support.kube import InMemoryConnector
from tests.support.sql import statements_during
from tests.support.tenancy import Tenancy, headers

URL = "/api/v1/tenants/acme/clusters"


def body(tenancy: Tenancy, **overrides: Any) -> dict[str, Any]:
    return {"name": "train", "kubernetes_version": "1.32.4", "placement": "shared-pool",
            "gpu_class_id": tenancy.h100.id, "gpus": 4, "cpu_millicores": 8000,
            "memory_mib": 65536, **overrides}


def cluster_rows(db: Session) -> int:
    return db.scalar(select(func.count()).select_from(VirtualCluster)) or 0


def test_an_admin_creates_a_cluster_and_everyone_in_the_tenant_sees_it(
    client: TestClient, db: Session, tenancy: Tenancy
) -> None:
    created = client.post(URL, json=body(tenancy), headers=headers(db, tenancy.acme_admin))
    assert created.status_code == 201, created.text
    cluster = created.json()
    assert (cluster["name"], cluster["gpus"], cluster["gpu_class"]) == (
        "train", 4, "NVIDIA-H100-80GB-HBM3")
    assert (cluster["generation"], cluster["observed_generation"], cluster["phase"]) == (
        1, 0, "Provisioning")
    assert cluster["endpoint"] == "https://train.acme.vc.example.com"
    assert "admin_kubeconfig" not in created.text and "encrypted" not in created.text
    listed = client.get(URL, headers=headers(db, tenancy.acme_viewer)).json()
    assert [c["name"] for c in listed["items"]] == ["train"]
    one = client.get(f"{URL}/train", headers=headers(db, tenancy.acme_member))
    assert one.status_code == 200 and one.json()["conditions"] == []
    assert client.get(f"{URL}/train", headers=headers(db, tenancy.globex_admin)).status_code == 404
    assert db.scalar(select(AuditEvent.action).where(
        AuditEvent.action == "virtual_cluster.create")) is not None


def test_members_and_viewers_may_not_create(client: TestClient, db: Session,
                                            tenancy: Tenancy) -> None:
    for user in (tenancy.acme_member, tenancy.acme_viewer):
        answer = client.post(URL, json=body(tenancy), headers=headers(db, user))
        assert answer.status_code == 403
    assert cluster_rows(db) == 0


def test_the_quota_bounds_the_gpus_of_all_clusters(client: TestClient, db: Session,
                                                   tenancy: Tenancy) -> None:
    admin = headers(db, tenancy.acme_admin)
    assert client.post(URL, json=body(tenancy, gpus=12), headers=admin).status_code == 201
    refused = client.post(URL, json=body(tenancy, name="more", gpus=5), headers=admin)
    assert refused.status_code == 422
    assert refused.json()["errors"] == [{"field": "gpus", "message": (
        "your shared-pool clusters hold 12 of your 16 H100 80GB GPUs; 4 are left for "
        "shared-pool clusters, 5 asked: request more quota first")}]
    assert client.post(URL, json=body(tenancy, name="more", gpus=4),
                       headers=admin).status_code == 201
    resize = client.patch(f"{URL}/more", json={"gpus": 5}, headers=admin)
    assert resize.status_code == 422
    assert client.patch(f"{URL}/train", json={"gpus": 8}, headers=admin).status_code == 200
    assert client.patch(f"{URL}/more", json={"gpus": 8}, headers=admin).status_code == 200


def test_bad_input_is_refused_with_field_messages_and_nothing_written(
    client: TestClient, db: Session, tenancy: Tenancy
) -> None:
    admin = headers(db, tenancy.acme_admin)
    cases = {
        "name": body(tenancy, name="Train_1"),
        "kubernetes_version": body(tenancy, kubernetes_version="1.29.0"),
        "gpu_class_id": body(tenancy, gpu_class_id=None),
        "placement": body(tenancy, placement="anywhere"),
        "gpus": body(tenancy, gpus=-1),
    }
    for field, payload in cases.items():
        answer = client.post(URL, json=payload, headers=admin)
        assert answer.status_code == 422, (field, answer.text)
        assert field in {e["field"] for e in answer.json()["errors"]}, (field, answer.text)
    assert cluster_rows(db) == 0


def test_a_name_with_the_host_separator_is_refused(
    client: TestClient, db: Session, tenancy: Tenancy
) -> None:
    admin = headers(db, tenancy.acme_admin)
    answer = client.post(URL, json=body(tenancy, name="a--b"), headers=admin)
    assert answer.status_code == 422
    assert "'--' is reserved" in answer.json()["errors"][0]["message"]
    assert cluster_rows(db) == 0


def test_a_taken_name_is_a_conflict(client: TestClient, db: Session, tenancy: Tenancy) -> None:
    admin = headers(db, tenancy.acme_admin)
    assert client.post(URL, json=body(tenancy, gpus=1), headers=admin).status_code == 201
    again = client.post(URL, json=body(tenancy, gpus=1), headers=admin)
    assert again.status_code == 409
    assert again.json()["errors"] == [{"field": "name", "message": "this name is taken"}]


def test_dedicated_nodes_clusters_must_fit_the_tenants_nodes(
    client: TestClient, db: Session, tenancy: Tenancy
) -> None:
    admin = headers(db, tenancy.acme_admin)
    dedicated = body(tenancy, placement="dedicated-nodes", gpus=8)
    refused = client.post(URL, json=dedicated, headers=admin)
    assert refused.status_code == 422
    assert "dedicated to the tenant (0 in all)" in refused.json()["errors"][0]["message"]
    node = factories.node(db, factories.env_host(db), tenancy.h100, gpu_count=8)
    factories.assignment(db, node, tenancy.acme)
    assert client.post(URL, json=dedicated, headers=admin).status_code == 201
    second = client.post(URL, json={**dedicated, "name": "second", "gpus": 1}, headers=admin)
    assert second.status_code == 422


def test_resize_bumps_the_generation_and_delete_is_accepted(
    client: TestClient, db: Session, tenancy: Tenancy
) -> None:
    admin = headers(db, tenancy.acme_admin)
    client.post(URL, json=body(tenancy), headers=admin)
    resized = client.patch(f"{URL}/train", json={"gpus": 6, "memory_mib": 131072},
                           headers=admin)
    assert resized.status_code == 200
    assert (resized.json()["gpus"], resized.json()["generation"]) == (6, 2)
    same = client.patch(f"{URL}/train", json={"gpus": 6}, headers=admin)
    assert same.json()["generation"] == 2  # nothing changed: no new generation
    deleted = client.delete(f"{URL}/train", headers=admin)
    assert deleted.status_code == 202
    assert (deleted.json()["deleting"], deleted.json()["phase"]) == (True, "Deleting")
    assert client.patch(f"{URL}/train", json={"gpus": 1}, headers=admin).status_code == 409
    assert client.delete(f"{URL}/train", headers=admin).status_code == 202  # idempotent


def test_the_manifests_show_what_the_worker_applies(client: TestClient, db: Session,
                                                    tenancy: Tenancy) -> None:
    client.post(URL, json=body(tenancy), headers=headers(db, tenancy.acme_admin))
    preview = client.get(f"{URL}/train/manifests", headers=headers(db, tenancy.acme_viewer))
    assert preview.status_code == 200
    shown = preview.json()
    assert shown["namespace"] == "t-acme--train" and shown["release"] == "train"
    assert [o["kind"] for o in shown["objects"]][:2] == ["Namespace", "ResourceQuota"]
    assert "requests.nvidia.com/gpu: '4'" in shown["values_yaml"]
    assert shown["helm_command"][:4] == ["helm", "upgrade", "--install", "train"]


def test_the_review_hides_where_the_host_credentials_live(
    settings: Settings, database: Database, db: Session, tenancy: Tenancy
) -> None:
    operator = settings.model_copy(update={"kubeconfig": "/etc/portal/secret-host.kubeconfig"})
    with TestClient(create_app(operator, database, kube=InMemoryConnector())) as client:
        client.post(URL, json=body(tenancy), headers=headers(db, tenancy.acme_admin))
        shown = client.get(f"{URL}/train/manifests", headers=headers(db, tenancy.acme_viewer))
    command = shown.json()["helm_command"]
    assert "/etc/portal/secret-host.kubeconfig" not in command
    host = factories.env_host(db).name
    assert command[-2:] == ["--kubeconfig", f"<kubeconfig of host {host}>"]


def test_the_review_names_the_host_the_cluster_is_on(
    settings: Settings, db: Session, tenancy: Tenancy
) -> None:
    """Each host's kubeconfig is its own: the command names the cluster's host, never the
    stored credentials (nor the environment's file)."""
    operator = settings.model_copy(update={"kubeconfig": "/etc/portal/secret-host.kubeconfig"})
    us = factories.registered_host(db, "gpu-us-1", region="us")
    factories.cluster(db, tenancy.acme, us, "far", gpu_class_id=tenancy.h100.id, gpus=1,
                      cpu_millicores=1000, memory_mib=1024)
    viewer = tenancy.principal(tenancy.acme_viewer)
    command = service.preview(db, viewer, operator, "acme", "far").helm_command
    assert command[-2:] == ["--kubeconfig", "<kubeconfig of host gpu-us-1>"]
    assert not any("apiVersion" in part or "secret-host" in part for part in command)
    in_cluster = settings.model_copy(update={"kubeconfig": None})
    factories.cluster(db, tenancy.acme, factories.env_host(db), "near",
                      gpu_class_id=tenancy.h100.id, gpus=1, cpu_millicores=1000,
                      memory_mib=1024)
    # The environment's host reached with in-cluster config: helm finds it by itself.
    assert "--kubeconfig" not in service.preview(db, viewer, in_cluster, "acme",
                                                 "near").helm_command
    assert service.preview(db, viewer, in_cluster, "acme", "far").helm_command[-2:] == [
        "--kubeconfig", "<kubeconfig of host gpu-us-1>"]


def test_idempotency_key_replays_the_create(client: TestClient, db: Session,
                                            tenancy: Tenancy) -> None:
    admin = {**headers(db, tenancy.acme_admin), "Idempotency-Key": "create-train"}
    first = client.post(URL, json=body(tenancy), headers=admin)
    again = client.post(URL, json=body(tenancy), headers=admin)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert cluster_rows(db) == 1


def _acme_with_quota(database: Database) -> tuple[Principal, int]:
    """Tenant acme, its admin, and 16 GPUs of quota of a class: (the admin, the class)."""
    with database.transaction() as db:
        tenant = factories.tenant(db, "acme")
        admin = factories.user(db)
        factories.membership(db, tenant, admin, "admin")
        gpu = factories.gpu_class(db)
        factories.quota(db, tenant, gpu, 16)
        return Principal(user=admin, via="token", roles={tenant.id: "admin"}), gpu.id


def _race(database: Database, principal: Principal, payloads: list[ClusterCreate]) -> Counter[str]:
    """Creates every payload at once, each in its own transaction: created, refused (quota)
    or taken (name), counted."""
    barrier = threading.Barrier(len(payloads))

    def create(payload: ClusterCreate) -> str:
        barrier.wait()
        try:
            with database.transaction() as db:
                service.create_cluster(db, principal, cluster_settings(), "acme", payload)
        except ValidationFailed:
            return "refused"
        except Conflict as error:
            return "taken" if error.errors == [{"field": "name", "message": "this name is taken"}
                                               ] else str(error)
        return "created"

    with ThreadPoolExecutor(max_workers=len(payloads)) as pool:
        return Counter(pool.map(create, payloads))


def _creates_racing_for_the_quota(database: Database, racing: int) -> None:
    principal, gpu_class_id = _acme_with_quota(database)
    outcomes = _race(database, principal, [
        ClusterCreate(name=f"c{index}", gpu_class_id=gpu_class_id, gpus=3)
        for index in range(racing)])
    assert outcomes == {"created": 5, "refused": racing - 5}  # 5 x 3 = 15 of 16 GPUs
    with database.session() as db:
        held = db.scalar(select(func.sum(VirtualCluster.gpus)))
    assert held == 15


def test_parallel_creates_never_exceed_the_quota(own_pg_database: Database) -> None:
    _creates_racing_for_the_quota(own_pg_database, 30)


@pytest.mark.sqlite
def test_parallel_creates_on_sqlite_never_exceed_the_quota_either(
    sqlite_database: Database,
) -> None:
    _creates_racing_for_the_quota(sqlite_database, 12)


def _creates_racing_for_one_name(database: Database) -> None:
    """They all pass the name check; those with GPUs queue on the quota rows: each one after
    the first loses at its insert, which answers as a taken name."""
    principal, gpu_class_id = _acme_with_quota(database)
    outcomes = _race(database, principal, [
        ClusterCreate(name="train", gpu_class_id=gpu_class_id if gpus else None, gpus=gpus)
        for gpus in (1, 1, 1, 1, 0, 0, 0, 0)])
    assert outcomes == {"created": 1, "taken": 7}
    with database.session() as db:
        assert db.scalar(select(func.count()).select_from(VirtualCluster)) == 1
        assert db.scalar(select(func.count()).select_from(AuditEvent).where(
            AuditEvent.action == "virtual_cluster.create")) == 1


def test_parallel_creates_of_one_name_make_one_cluster(own_pg_database: Database) -> None:
    _creates_racing_for_one_name(own_pg_database)


@pytest.mark.sqlite
def test_parallel_creates_of_one_name_on_sqlite_make_one_cluster(
    sqlite_database: Database,
) -> None:
    _creates_racing_for_one_name(sqlite_database)


def test_a_name_lost_at_the_insert_leaves_the_session_usable(
    db: Session, tenancy: Tenancy, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parallel create took the name between the check and the insert (here: the check is
    made to miss it): the answer is the taken name, and the session serves on."""
    principal = Principal(user=tenancy.acme_admin, via="token",
                          roles={tenancy.acme.id: "admin"})
    payload = ClusterCreate(name="train", gpu_class_id=tenancy.h100.id, gpus=1)
    service.create_cluster(db, principal, cluster_settings(), "acme", payload)
    db.commit()
    monkeypatch.setattr(repository, "name_taken", lambda *_args: False)
    with pytest.raises(Conflict, match="named 'train' already"):
        service.create_cluster(db, principal, cluster_settings(), "acme", payload)
    assert [c.name for c in service.list_clusters(
        db, principal, "acme", PageParams(limit=10)).items] == ["train"]


def test_the_cluster_list_costs_the_same_statements_for_three_clusters_or_thirty(
    client: TestClient, db: Session, database: Database, tenancy: Tenancy,
) -> None:
    auth = headers(db, tenancy.acme_member)
    host = factories.host_cluster(db)
    l40s = factories.gpu_class(db, "NVIDIA-L40S")
    url = "/api/v1/tenants/acme/clusters?limit=100"

    def listing(count: int) -> list[str]:
        existing = db.scalar(select(func.count()).select_from(VirtualCluster)) or 0
        for n in range(existing, count):
            factories.cluster(db, tenancy.acme, host, f"c{n}", gpu_class_id=(
                tenancy.h100 if n % 2 else l40s).id, gpus=0)
        db.commit()
        response = client.get(url, headers=auth)  # also notes the token's first use
        assert len(response.json()["items"]) == count
        return statements_during(database, lambda: client.get(url, headers=auth))

    few, many = listing(3), listing(30)
    assert len(many) == len(few)
    assert len([s for s in many if "gpu_classes" in s]) == 1


def test_the_cluster_list_answers_each_cluster_as_its_own_page_does(
    client: TestClient, db: Session, tenancy: Tenancy,
) -> None:
    """The list is encoded without FastAPI's response model; its bytes must not drift."""
    host = factories.host_cluster(db)
    ready = cond.set_condition([], cond.READY, True, "Installed", "ready", 2,
                               datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    factories.cluster(db, tenancy.acme, host, "ready", gpu_class_id=tenancy.h100.id, gpus=2,
                      generation=2, observed_generation=2, conditions=ready)
    factories.cluster(db, tenancy.acme, host, "going", gpus=0,
                      deletion_requested_at=datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC))
    db.commit()
    auth = headers(db, tenancy.acme_member)
    listed = client.get(URL, headers=auth)
    assert listed.headers["content-type"] == "application/json"
    for name in ("ready", "going"):
        alone = client.get(f"{URL}/{name}", headers=auth)
        assert alone.status_code == 200
        assert alone.content in listed.content
    page = TypeAdapter(Page[ClusterOut])
    assert page.dump_json(page.validate_json(listed.content)) == listed.content
