"""Dedicated node assignment through the REST API: suggestions, quota, exclusivity, history,
and what tenants see of their own nodes."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.gpu_classes.models import GpuClass
from app.http.pagination import Page
from app.nodes.models import NodeAssignment
from app.nodes.schemas import NodeOut
from tests import factories
from tests.nodes.conftest import Synced
from tests.support.principals import bearer

H100 = "NVIDIA-H100-80GB-HBM3"


@dataclass
class Callers:
    admin: dict[str, str]
    acme: dict[str, str]
    globex: dict[str, str]


def _callers(db: Session, acme_quota: int = 16) -> Callers:
    acme, globex = factories.tenant(db, "acme"), factories.tenant(db, "globex")
    h100 = db.scalar(select(GpuClass).where(GpuClass.product == H100))
    assert h100 is not None
    factories.quota(db, acme, h100, gpus=acme_quota)
    factories.quota(db, globex, h100, gpus=8)
    acme_user, globex_user = factories.user(db), factories.user(db)
    factories.membership(db, acme, acme_user, "viewer")
    factories.membership(db, globex, globex_user, "admin")
    callers = Callers(admin=bearer(db, factories.user(db, admin=True)),
                      acme=bearer(db, acme_user), globex=bearer(db, globex_user))
    db.commit()
    return callers


def _assign(client: TestClient, who: dict[str, str], node: str, tenant: str) -> int:
    response = client.put(f"/api/v1/nodes/{node}/assignment", headers=who,
                          json={"tenant": tenant})
    return int(response.status_code)


def _count(db: Session, model: type[AuditEvent] | type[NodeAssignment]) -> int:
    return db.scalar(select(func.count()).select_from(model)) or 0


def test_assign_the_suggested_nodes_and_tenants_see_only_theirs(
    synced: Synced, client: TestClient, db: Session
) -> None:
    who = _callers(db)
    suggested = client.post("/api/v1/node-suggestions", headers=who.admin,
                            json={"tenant": "acme", "gpu_class": H100, "gpus": 16})
    assert suggested.status_code == 200, suggested.text
    body = suggested.json()
    # rack-2 has 3 ready nodes (24 GPUs): the tightest rack that holds 16 whole
    assert [n["name"] for n in body["nodes"]] == ["h100-r2-n1", "h100-r2-n2"]
    assert (body["racks"], body["gpus"], body["fits_quota"]) == (["rack-2"], 16, True)
    for node in body["nodes"]:
        assert _assign(client, who.admin, node["name"], "acme") == 200
    detail = client.get("/api/v1/nodes/h100-r2-n1", headers=who.admin).json()
    assert detail["tenant"] == "acme" and detail["assignments"][0]["ended_at"] is None
    assert detail["conditions"][0]["status"] == "False"  # the reconciler has not run yet

    mine = client.get("/api/v1/tenants/acme/nodes", headers=who.acme).json()["items"]
    assert mine == [{"name": name, "gpu_class": H100, "gpu_class_name": "H100 80GB HBM3",
                     "gpus": 8, "ready": True} for name in ("h100-r2-n1", "h100-r2-n2")]
    assert client.get("/api/v1/tenants/globex/nodes", headers=who.globex).json()["items"] == []
    assert client.get("/api/v1/tenants/acme/nodes", headers=who.globex).status_code == 404
    assert client.get("/api/v1/nodes", headers=who.acme).status_code == 403

    classes = client.get("/api/v1/gpu-classes", headers=who.admin).json()["items"]
    [h100] = [c["capacity"] for c in classes if c["product"] == H100]
    # free: the 56 ready, less the 16 dedicated and the 8 guaranteed in the shared pool
    assert {k: h100[k] for k in ("total", "ready", "dedicated", "shared_guaranteed", "free",
                                 "not_ready")} == {
        "total": 64, "ready": 56, "dedicated": 16, "shared_guaranteed": 8, "free": 32,
        "not_ready": 8}


def test_assignments_beyond_quota_are_refused_and_write_nothing(
    synced: Synced, client: TestClient, db: Session
) -> None:
    who = _callers(db, acme_quota=8)
    assert _assign(client, who.admin, "h100-r1-n1", "acme") == 200
    audited, assigned = _count(db, AuditEvent), _count(db, NodeAssignment)
    refused = client.put("/api/v1/nodes/h100-r1-n2/assignment", headers=who.admin,
                         json={"tenant": "acme"})
    assert refused.status_code == 409
    assert "more than its approved quota of 8" in refused.json()["detail"]
    assert (_count(db, AuditEvent), _count(db, NodeAssignment)) == (audited, assigned)
    suggestion = client.post("/api/v1/node-suggestions", headers=who.admin,
                             json={"tenant": "acme", "gpu_class": H100, "gpus": 8}).json()
    assert suggestion["fits_quota"] is False and "approve more" in suggestion["note"]


def test_a_node_belongs_to_one_tenant_at_a_time(
    synced: Synced, client: TestClient, db: Session
) -> None:
    who = _callers(db)
    assert _assign(client, who.admin, "h100-r1-n1", "acme") == 200
    assert _assign(client, who.admin, "h100-r1-n1", "acme") == 200  # again: no change
    taken = client.put("/api/v1/nodes/h100-r1-n1/assignment", headers=who.admin,
                       json={"tenant": "globex"})
    assert taken.status_code == 409 and "dedicated to acme already" in taken.json()["detail"]
    assert client.delete("/api/v1/nodes/h100-r1-n1/assignment",
                         headers=who.admin).status_code == 204
    assert client.delete("/api/v1/nodes/h100-r1-n1/assignment",
                         headers=who.admin).status_code == 404
    assert _assign(client, who.admin, "h100-r1-n1", "globex") == 200
    history = client.get("/api/v1/nodes/h100-r1-n1", headers=who.admin).json()["assignments"]
    assert [(a["tenant"], a["ended_at"] is None) for a in history] == [
        ("globex", True), ("acme", False)]
    actions = list(db.scalars(select(AuditEvent.action).where(
        AuditEvent.target_id == "default/h100-r1-n1", AuditEvent.action.like("node.%assign")
    ).order_by(AuditEvent.id)))
    assert actions == ["node.assign", "node.unassign", "node.assign"]


def test_nodes_that_cannot_be_dedicated(synced: Synced, client: TestClient, db: Session) -> None:
    who = _callers(db)
    mig = client.put("/api/v1/nodes/a100-mig-n1/assignment", headers=who.admin,
                     json={"tenant": "acme"})
    assert mig.status_code == 409 and "no whole GPUs" in mig.json()["detail"]
    assert _assign(client, who.admin, "cpu-n1", "acme") == 404
    assert _assign(client, who.admin, "no-such-node", "acme") == 404
    unknown = client.put("/api/v1/nodes/h100-r1-n1/assignment", headers=who.admin,
                         json={"tenant": "initech"})
    assert unknown.status_code == 422 and unknown.json()["errors"][0]["field"] == "tenant"
    for body in ({}, {"tenant": ""}, {"tenant": "acme", "extra": 1}):
        assert client.put("/api/v1/nodes/h100-r1-n1/assignment", headers=who.admin,
                          json=body).status_code == 422
    assert client.put("/api/v1/nodes/h100-r1-n1/assignment?host_cluster=elsewhere",
                      headers=who.admin, json={"tenant": "acme"}).status_code == 404
    assert _count(db, NodeAssignment) == 0


def test_suggestions_refuse_what_cannot_be_met(
    synced: Synced, client: TestClient, db: Session
) -> None:
    who = _callers(db)
    too_many = client.post("/api/v1/node-suggestions", headers=who.admin,
                           json={"tenant": "acme", "gpu_class": H100, "gpus": 64})
    assert too_many.status_code == 409
    assert "only 56 H100 80GB HBM3 GPUs" in too_many.json()["detail"]  # one node not ready
    for body, field in (({"tenant": "acme", "gpu_class": "NVIDIA-X", "gpus": 8}, "gpu_class"),
                        ({"tenant": "acme", "gpu_class": H100, "gpus": 0}, "gpus"),
                        ({"tenant": "acme", "gpu_class": H100, "gpus": "8"}, "gpus")):
        response = client.post("/api/v1/node-suggestions", headers=who.admin, json=body)
        assert response.status_code == 422 and response.json()["errors"][0]["field"] == field
    gb200 = client.post("/api/v1/node-suggestions", headers=who.admin,
                        json={"tenant": "acme", "gpu_class": "NVIDIA-GB200", "gpus": 8}).json()
    assert len(gb200["cliques"]) == 1 and len(gb200["nodes"]) == 2


def test_the_node_list_filters_and_pages(synced: Synced, client: TestClient, db: Session) -> None:
    who = _callers(db)
    assert _assign(client, who.admin, "l40s-n1", "globex") == 409  # globex has no L40S quota
    assert _assign(client, who.admin, "h100-r1-n1", "globex") == 200

    def names(query: str) -> list[str]:
        response = client.get(f"/api/v1/nodes?{query}", headers=who.admin)
        assert response.status_code == 200, response.text
        return [n["name"] for n in response.json()["items"]]

    assert len(names("limit=200")) == 16
    assert names("gpu_class=NVIDIA-L40S") == ["l40s-n1", "l40s-n2", "l40s-n3"]
    assert names("ready=false") == ["h100-r2-n4"]
    assert names("tenant=globex") == ["h100-r1-n1"]
    assert len(names("zone=eu-central-b")) == 4
    assert names("rack=rack-4&gpu_class=NVIDIA-A100-SXM4-80GB") == ["a100-mig-n1"]
    first = client.get("/api/v1/nodes?limit=10", headers=who.admin).json()
    rest = client.get(f"/api/v1/nodes?limit=10&cursor={first['next_cursor']}",
                      headers=who.admin).json()
    assert len(first["items"]) + len(rest["items"]) == 16 and rest["next_cursor"] is None


def test_the_node_list_sorts_by_name_or_rack_and_pages_in_that_order(
    synced: Synced, client: TestClient, db: Session,
) -> None:
    who = _callers(db)

    def walk(query: str) -> list[tuple[str, str]]:
        """Every node, three a page, following next_cursor."""
        seen: list[tuple[str, str]] = []
        cursor = ""
        while True:
            page = client.get(f"/api/v1/nodes?limit=3&{query}{cursor}", headers=who.admin)
            assert page.status_code == 200, page.text
            seen += [(n["rack"], n["name"]) for n in page.json()["items"]]
            if page.json()["next_cursor"] is None:
                return seen
            cursor = f"&cursor={page.json()['next_cursor']}"

    by_name = walk("sort=name")
    assert [name for _, name in by_name] == sorted(name for _, name in by_name)
    assert len(by_name) == 16
    assert walk("sort=rack") == sorted(by_name)
    assert walk("sort=rack&zone=eu-central-b") == sorted(walk("zone=eu-central-b"))
    assert client.get("/api/v1/nodes?sort=gpus", headers=who.admin).status_code == 422


def test_the_node_list_answers_as_its_response_model_would(
    synced: Synced, client: TestClient, db: Session
) -> None:
    """The list is encoded without FastAPI's response model; its bytes must not drift."""
    who = _callers(db)
    h100 = client.get(f"/api/v1/nodes?gpu_class={H100}&limit=1", headers=who.admin).json()
    assert _assign(client, who.admin, h100["items"][0]["name"], "acme") == 200
    listed = client.get("/api/v1/nodes?limit=200", headers=who.admin)
    assert listed.headers["content-type"] == "application/json"
    assert {item["tenant"] for item in listed.json()["items"]} == {"acme", None}
    page = TypeAdapter(Page[NodeOut])
    assert page.dump_json(page.validate_json(listed.content)) == listed.content


def test_the_node_list_says_of_each_node_whether_it_carries_its_tenants_labels(
    synced: Synced, client: TestClient, db: Session
) -> None:
    who = _callers(db)
    assert _assign(client, who.admin, "h100-r2-n1", "acme") == 200
    listed = {n["name"]: n for n in client.get(
        "/api/v1/nodes", headers=who.admin, params={"limit": 200}).json()["items"]}
    pending, free = listed["h100-r2-n1"], listed["h100-r2-n2"]
    assert pending["conditions"] == [{
        "type": "TenantLabelsApplied", "status": "False", "reason": "Pending",
        "message": "waiting for the node reconciler to apply the label and NoSchedule taint "
                   "of tenant 'acme'",
        "lastTransitionTime": pending["last_seen_at"], "observedGeneration": None}]
    assert free["conditions"] == [{
        "type": "TenantLabelsApplied", "status": "True", "reason": "InSync",
        "message": "the node carries no tenant label or taint",
        "lastTransitionTime": free["last_seen_at"], "observedGeneration": None}]
    detail = client.get("/api/v1/nodes/h100-r2-n1", headers=who.admin).json()
    assert detail["conditions"] == pending["conditions"]
