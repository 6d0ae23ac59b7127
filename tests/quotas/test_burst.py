"""Burst: a platform admin sets how a tenant may borrow idle GPUs; the tenant reads it; the
tenant's clusters follow on the hosts."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clusters import desired
from app.kit.config import Settings
from app.quotas.models import BurstPolicy
from app.workqueue.models import WorkItem
from tests import factories
from tests.support import oidc
from tests.support.tenancy import build_tenancy, headers, signed_in_admin_of
from tests.support.web import HTML, csrf_of, htmx

POLICY = "/api/v1/tenants/acme/burst-policy"


def test_a_tenant_without_a_policy_is_guaranteed_only(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    shown = client.get(POLICY, headers=headers(db, t.acme_member))
    assert shown.status_code == 200, shown.text
    assert shown.json() == {"tier": "guaranteed", "burst_gpus": 0, "over_quota_weight": 1,
                            "reclaim_min_runtime_s": None, "preempt_min_runtime_s": None,
                            "overrides": []}


def test_a_platform_admin_sets_a_tier_and_a_value_apart_audited_and_enqueued(
        client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    train = factories.cluster(db, t.acme, factories.env_host(db))
    db.execute(delete(WorkItem))
    chosen = client.put(POLICY, headers=headers(db, t.platform_admin),
                        json={"tier": "priority-burst", "burst_gpus": 8})
    assert chosen.status_code == 200, chosen.text
    assert chosen.json() == {"tier": "priority-burst", "burst_gpus": 8, "over_quota_weight": 3,
                             "reclaim_min_runtime_s": 600, "preempt_min_runtime_s": None,
                             "overrides": ["burst_gpus"]}
    assert client.get(POLICY, headers=headers(db, t.acme_member)).json() == chosen.json()
    event = db.scalar(select(AuditEvent).where(
        AuditEvent.action == "tenant.burst_policy_change"))
    assert event is not None and event.tenant_id == t.acme.id
    assert event.before is not None and event.before["tier"] == "guaranteed"
    assert event.after is not None and event.after["burst_gpus"] == 8
    due = db.scalars(select(WorkItem.key).where(WorkItem.kind == "clusters"))
    assert str(train.id) in set(due)


def test_members_and_tenant_admins_may_not_set_burst(client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    for who in (t.acme_member, t.acme_admin):
        refused = client.put(POLICY, headers=headers(db, who), json={"tier": "burst"})
        assert refused.status_code == 403, refused.text
    assert db.get(BurstPolicy, t.acme.id) is None


def test_bad_values_are_refused_by_field_and_change_nothing(
        client: TestClient, db: Session) -> None:
    t = build_tenancy(db)
    admin = headers(db, t.platform_admin)
    assert client.put(POLICY, headers=admin, json={"tier": "burst", "burst_gpus": 4}
                      ).status_code == 200
    for body, field in (({"tier": "gold"}, "tier"),
                        ({"tier": "burst", "burst_gpus": -2}, "burst_gpus"),
                        ({"tier": "burst", "reclaim_min_runtime_s": -1},
                         "reclaim_min_runtime_s"),
                        ({"tier": "burst", "over_quota_weight": "3"}, "over_quota_weight")):
        refused = client.put(POLICY, headers=admin, json=body)
        assert refused.status_code == 422, body
        assert field in refused.text
    assert client.get(POLICY, headers=admin).json()["burst_gpus"] == 4


def test_the_hosts_get_the_guarantee_as_quota_and_the_burst_as_ceiling(
        client: TestClient, db: Session, settings: Settings) -> None:
    t = build_tenancy(db)
    factories.quota(db, t.acme, t.h100, 2)
    train = factories.cluster(db, t.acme, factories.env_host(db), gpus=2,
                              gpu_class_id=t.h100.id)
    assert client.put(POLICY, headers=headers(db, t.platform_admin),
                      json={"tier": "burst", "burst_gpus": 6}).status_code == 200
    wanted = desired.load(db, train, settings)
    objects = {o["kind"] + "/" + o["metadata"]["name"]: o for o in wanted.host_objects()}
    leaf = objects["Queue/acme--train"]["spec"]["resources"]["gpu"]
    tenant_queue = objects["Queue/acme"]["spec"]["resources"]["gpu"]
    assert (leaf["quota"], leaf["limit"]) == (2, 8)
    assert (tenant_queue["quota"], tenant_queue["limit"]) == (2, 8)
    quota = objects["ResourceQuota/tenant-quota"]["spec"]["hard"]
    assert quota["requests.nvidia.com/gpu"] == "8"


def test_the_dashboard_shows_the_burst_and_only_a_platform_admin_changes_it(
        client: TestClient, db: Session, oidc_issuer: str) -> None:
    acme = factories.tenant(db, "acme")
    db.commit()
    signed_in_admin_of(client, db, oidc_issuer, acme)
    mine = client.get("/t/acme", headers=HTML)
    assert "Tier <strong class=\"burst-tier\">guaranteed</strong>" in mine.text
    assert "/burst-policy" not in mine.text  # no form for a tenant admin
    refused = client.post("/admin/tenants/acme/burst-policy", headers=htmx(csrf_of(mine.text)),
                          data={"tier": "burst"})
    assert refused.status_code == 403

    oidc.sign_in(client, "admin@example.com")
    page = client.get("/t/acme", headers=HTML)
    csrf = csrf_of(page.text)
    bad = client.post("/admin/tenants/acme/burst-policy", headers=htmx(csrf),
                      data={"tier": "burst", "burst_gpus": "-5"})
    assert bad.status_code == 422
    assert 'value="-5"' in bad.text
    assert 'aria-invalid="true" aria-describedby="burst-gpus-error"' in bad.text
    assert 'id="burst-gpus-error">at least 0 GPUs; for no ceiling, tick &#34;No ceiling&#34;<' in (
        bad.text)
    assert db.get(BurstPolicy, acme.id) is None
    chosen = client.post("/admin/tenants/acme/burst-policy", headers=htmx(csrf),
                         data={"tier": "burst", "burst_gpus": "6", "over_quota_weight": ""})
    assert chosen.status_code == 200, chosen.text
    assert 'class="burst-gpus">6<' in chosen.text and "reclaimable" in chosen.text
    assert 'value="6"' in chosen.text  # sending the form again keeps the value set apart
    db.expire_all()
    row = db.get(BurstPolicy, acme.id)
    assert row is not None and (row.tier, row.burst_gpus, row.over_quota_weight) == (
        "burst", 6, None)
