"""The bursts of the contention suite (``test_contention.py``), one or more per write route that
locks a row: what each sends, 50 requests at once on one row or on rows of one tenant, and what
must hold in the database afterwards."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.auth.models import ApiToken, User
from app.clusters.models import VirtualCluster
from app.database.core import Database, utcnow
from app.gpu_classes.models import GpuClass
from app.hosts.models import HostCluster
from app.kubeconfigs.models import KubeconfigGrant
from app.lab.pki import CertificateAuthority
from app.machines.models import Machine
from app.nodes.models import Node, NodeAssignment
from app.notifications.models import WebhookEndpoint
from app.quotas.models import QuotaRequest, TenantQuota
from app.templates.models import ClusterTemplateVersion
from app.tenants.models import GroupMapping, Membership, Tenant
from tests import factories
from tests.support.kube_server import kubeconfig_yaml
from tests.support.principals import bearer

BURST = 50

_seq = count(1)


@dataclass
class World:
    """What every burst shares: a platform admin, and another tenant whose reads go on."""

    database: Database
    base: str
    platform: dict[str, str]
    bystander: dict[str, str]
    bystander_slug: str


@dataclass
class Tenancy:
    """A fresh tenant of one burst: its admin, a GPU class of its own with capacity, a host."""

    tenant: Tenant
    admin: User
    headers: dict[str, str]
    gpu: GpuClass
    host: HostCluster
    nodes: list[Node] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return self.tenant.slug


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    headers: dict[str, str]
    json: Any = None


@dataclass
class Plan:
    """The burst's requests, and what must hold afterwards given the statuses answered."""

    calls: list[Call]
    holds: Callable[[Session, Counter[int]], None]


def new_tenancy(db: Session, *, nodes: int = 16, gpus_per_node: int = 8) -> Tenancy:
    """A tenant of its own for one burst: nothing another burst did counts in its figures."""
    n = next(_seq)
    tenant = factories.tenant(db, f"burst-{n}")
    admin = factories.user(db, f"admin-{n}@burst.example")
    factories.membership(db, tenant, admin, "admin")
    gpu = factories.gpu_class(db, f"NVIDIA-BURST-{n}")
    host = factories.registered_host(db, f"host-{n}")
    made = [factories.node(db, host, gpu, f"burst-{n}-node-{i}", gpu_count=gpus_per_node)
            for i in range(nodes)]
    return Tenancy(tenant, admin, bearer(db, admin), gpu, host, made)


# ----- what must hold afterwards


def _audited(db: Session, action: str, target_ids: list[Any] | None = None) -> int:
    query = select(func.count()).select_from(AuditEvent).where(AuditEvent.action == action)
    if target_ids is not None:
        query = query.where(AuditEvent.target_id.in_([str(i) for i in target_ids]))
    return db.scalar(query) or 0


def _only(statuses: Counter[int], *allowed: int) -> None:
    assert set(statuses) <= set(allowed), statuses


# ----- the routes: each prepares a burst on one row and one on rows of one tenant


def quota_requests(db: Session, t: Tenancy, n: int, gpus: int = 1) -> list[int]:
    rows = [factories.quota_request(db, t.tenant, t.gpu, t.admin, gpus=gpus) for _ in range(n)]
    return [row.id for row in rows]


def cancel(one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=1)
        ids = quota_requests(db, t, 1 if one_row else BURST)
        calls = [Call("POST", f"/api/v1/tenants/{t.slug}/quota-requests/{ids[i % len(ids)]}"
                      "/cancel", t.headers) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200, 409)
            states = Counter(db.scalars(select(QuotaRequest.state).where(
                QuotaRequest.id.in_(ids))))
            assert states == {"cancelled": len(ids)}
            assert statuses[200] == len(ids) == _audited(db, "quota_request.cancel", ids)

        return Plan(calls, holds)

    return prepare


def decide(verb: str, one_row: bool) -> Callable[[Session, World], Plan]:
    """Approve or reject: one request decided once, whoever of 50 admins' clicks comes first;
    the approved GPUs are the tenant's quota, never more."""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=2)  # 16 GPUs: room for 16 requests of one
        ids = quota_requests(db, t, 1 if one_row else BURST)
        calls = [Call("POST", f"/api/v1/quota-requests/{ids[i % len(ids)]}/{verb}",
                      world.platform, {}) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200, 409)
            decided = db.scalar(select(func.count()).select_from(QuotaRequest).where(
                QuotaRequest.id.in_(ids), QuotaRequest.state != "pending")) or 0
            assert statuses[200] == decided == _audited(db, f"quota_request.{verb}", ids)
            quota = db.scalar(select(func.coalesce(func.sum(TenantQuota.gpus), 0)).where(
                TenantQuota.tenant_id == t.tenant.id)) or 0
            assert quota == (decided if verb == "approve" else 0) <= 16
            if one_row:
                assert decided == 1
            elif verb == "reject":
                assert decided == BURST

        return Plan(calls, holds)

    return prepare


def create_quota_request(one_row: bool) -> Callable[[Session, World], Plan]:
    """Fifty requests of one tenant at once, against its limit of pending requests (the default
    10): the limit holds, never one more (one row: the same request fifty times)."""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=1)
        calls = [Call("POST", f"/api/v1/tenants/{t.slug}/quota-requests", t.headers,
                      {"gpu_class_id": t.gpu.id, "gpus": 1 if one_row else 1 + i % 8,
                       "reason": "burst"}) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 201, 409)
            pending = db.scalar(select(func.count()).select_from(QuotaRequest).where(
                QuotaRequest.tenant_id == t.tenant.id, QuotaRequest.state == "pending")) or 0
            assert statuses[201] == pending == 10
            assert _audited(db, "quota_request.create") >= pending

        return Plan(calls, holds)

    return prepare


def create_token(one_row: bool) -> Callable[[Session, World], Plan]:
    """Fifty tokens asked at once by one user (one row), or by two users of one tenant, against
    the limit of live tokens a user holds (the default 25, the caller's own token included)."""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=0)
        users = [t.admin] if one_row else [t.admin, factories.user(db, f"{t.slug}@second.example")]
        if not one_row:
            factories.membership(db, t.tenant, users[1], "member")
        headers = [t.headers] if one_row else [t.headers, bearer(db, users[1])]
        calls = [Call("POST", "/api/v1/tokens", headers[i % len(headers)],
                      {"name": f"burst-{i}", "scopes": ["read"], "expires_in_days": 30})
                 for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 201, 409)
            live = Counter(db.scalars(select(ApiToken.user_id).where(
                ApiToken.user_id.in_([u.id for u in users]), ApiToken.revoked_at.is_(None))))
            assert live == {u.id: 25 for u in users}, live
            assert statuses[201] == 24 * len(users)

        return Plan(calls, holds)

    return prepare


def _quota(db: Session, t: Tenancy, gpus: int) -> None:
    factories.quota(db, t.tenant, t.gpu, gpus)


def _cluster_body(t: Tenancy, name: str, gpus: int = 1) -> dict[str, Any]:
    return {"name": name, "kubernetes_version": "1.32.4", "placement": "shared-pool",
            "gpu_class_id": t.gpu.id, "gpus": gpus, "cpu_millicores": 1000, "memory_mib": 1024}


def create_cluster(one_row: bool) -> Callable[[Session, World], Plan]:
    """One name created once; 50 names against a quota of 20 GPUs: 20 clusters, never more."""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db)
        _quota(db, t, 20)
        calls = [Call("POST", f"/api/v1/tenants/{t.slug}/clusters", t.headers,
                      _cluster_body(t, "train" if one_row else f"train-{i}"))
                 for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 201, 409, 422)  # 422: the quota is spent
            names = Counter(db.scalars(select(VirtualCluster.name).where(
                VirtualCluster.tenant_id == t.tenant.id)))
            assert all(n == 1 for n in names.values()), names
            assert statuses[201] == sum(names.values()) == (1 if one_row else 20)
            assert _allocated(db, t) <= 20

        return Plan(calls, holds)

    return prepare


def _allocated(db: Session, t: Tenancy) -> int:
    return db.scalar(select(func.coalesce(func.sum(VirtualCluster.gpus), 0)).where(
        VirtualCluster.tenant_id == t.tenant.id)) or 0


def _clusters(db: Session, t: Tenancy, n: int, **fields: Any) -> list[VirtualCluster]:
    return [factories.cluster(db, t.tenant, t.host, f"c{i}", gpu_class_id=t.gpu.id, gpus=1,
                              **fields) for i in range(n)]


def _per_cluster(t: Tenancy, clusters: list[VirtualCluster], method: str, tail: str,
                 body: Callable[[int], Any] | None = None) -> list[Call]:
    return [Call(method, f"/api/v1/tenants/{t.slug}/clusters/{clusters[i % len(clusters)].name}"
                 f"{tail}", t.headers, body(i) if body else None) for i in range(BURST)]


def resize_cluster(one_row: bool) -> Callable[[Session, World], Plan]:
    """Resizes to 4 or 5 GPUs of one cluster, or of 10 against a quota of 30: never more
    than the quota allocated."""
    quota = 12 if one_row else 30

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db)
        _quota(db, t, quota)
        clusters = _clusters(db, t, 1 if one_row else 10)
        calls = _per_cluster(t, clusters, "PATCH", "", lambda i: {"gpus": 5 - i % 2})

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200, 409, 422)  # 422: the quota is spent
            assert _allocated(db, t) <= quota
            assert statuses[200] >= 1

        return Plan(calls, holds)

    return prepare


def delete_cluster(one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db)
        clusters = _clusters(db, t, 1 if one_row else 10)
        ids = [c.id for c in clusters]
        calls = _per_cluster(t, clusters, "DELETE", "")

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 202, 409)
            deleting = db.scalar(select(func.count()).select_from(VirtualCluster).where(
                VirtualCluster.id.in_(ids), VirtualCluster.deletion_requested_at.is_not(None)))
            assert deleting == len(ids) == _audited(db, "virtual_cluster.delete", ids)

        return Plan(calls, holds)

    return prepare


def power(verb: str, one_row: bool) -> Callable[[Session, World], Plan]:
    """Sleep (or wake) asked 50 times: one change per cluster, audited once."""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db)
        start = "awake" if verb == "sleep" else "asleep"
        clusters = _clusters(db, t, 1 if one_row else 10, power=start)
        ids = [c.id for c in clusters]
        calls = _per_cluster(t, clusters, "POST", f"/{verb}")

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 202)
            generations = Counter(db.scalars(select(VirtualCluster.generation).where(
                VirtualCluster.id.in_(ids))))
            assert generations == {2: len(ids)}
            assert _audited(db, f"virtual_cluster.{verb}", ids) == len(ids)

        return Plan(calls, holds)

    return prepare


def sleep_policy(one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db)
        clusters = _clusters(db, t, 1 if one_row else 10)
        ids = [c.id for c in clusters]
        calls = _per_cluster(t, clusters, "PUT", "/sleep-policy",
                             lambda i: {"sleep_after_idle_minutes": 30 + i % 2 * 30})

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200)
            assert 0 < _audited(db, "virtual_cluster.sleep_policy", ids) <= BURST

        return Plan(calls, holds)

    return prepare


def burst_policy(one_row: bool) -> Callable[[Session, World], Plan]:
    """A tenant's burst policy set by 50 platform admins' clicks; rows: 10 tenants' policies."""

    def prepare(db: Session, world: World) -> Plan:
        tenants = [new_tenancy(db, nodes=0) for _ in range(1 if one_row else 10)]
        calls = [Call("PUT", f"/api/v1/tenants/{tenants[i % len(tenants)].slug}/burst-policy",
                      world.platform, {"tier": "burst" if i % 2 else "priority-burst"})
                 for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200)
            ids = [t.tenant.id for t in tenants]
            assert len(ids) <= _audited(db, "tenant.burst_policy_change", ids) <= BURST

        return Plan(calls, holds)

    return prepare


def assign_node(one_row: bool) -> Callable[[Session, World], Plan]:
    """One node asked for by two tenants 25 times each: one owner. Rows: 50 nodes of 8 GPUs
    for a tenant with a quota of 80: 10 assigned, never more."""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=1 if one_row else BURST)
        rival = new_tenancy(db, nodes=0)
        _quota(db, t, 80)
        factories.quota(db, rival.tenant, t.gpu, 80)
        names = [n.name for n in t.nodes]
        ids = [n.id for n in t.nodes]
        calls = [Call("PUT", f"/api/v1/nodes/{names[i % len(names)]}/assignment"
                      f"?host_cluster={t.host.name}",
                      world.platform,
                      {"tenant": rival.slug if one_row and i % 2 else t.slug})
                 for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200, 409)
            owners = Counter(db.scalars(select(NodeAssignment.node_id).where(
                NodeAssignment.node_id.in_(ids), NodeAssignment.ended_at.is_(None))))
            assert all(n == 1 for n in owners.values()), owners
            assert sum(owners.values()) == (1 if one_row else 10)

        return Plan(calls, holds)

    return prepare


def end_assignment(one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=1 if one_row else 10)
        _quota(db, t, 80)
        for node in t.nodes:
            factories.assignment(db, node, t.tenant)
        ids = [n.id for n in t.nodes]
        calls = [Call("DELETE", f"/api/v1/nodes/{t.nodes[i % len(t.nodes)].name}/assignment"
                      f"?host_cluster={t.host.name}", world.platform) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 204, 404, 409)
            left = db.scalar(select(func.count()).select_from(NodeAssignment).where(
                NodeAssignment.node_id.in_(ids), NodeAssignment.ended_at.is_(None)))
            assert left == 0
            targets = [f"{t.host.name}/{node.name}" for node in t.nodes]
            assert statuses[204] == len(ids) == _audited(db, "node.unassign", targets)

        return Plan(calls, holds)

    return prepare


def machine(verb: str, one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=0)
        desired = "pool" if verb == "provision" else "provisioned"
        rows = [factories.machine(db, t.host, t.gpu, f"m-{t.slug}-{i}", desired=desired)
                for i in range(1 if one_row else 10)]
        ids = [m.id for m in rows]
        calls = [Call("POST", f"/api/v1/machines/{rows[i % len(rows)].name}/{verb}",
                      world.platform) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200)
            wanted = "provisioned" if verb == "provision" else "pool"
            assert Counter(db.scalars(select(Machine.desired).where(Machine.id.in_(ids)))) == {
                wanted: len(ids)}
            assert _audited(db, f"machine.{verb}", ids) == len(ids)

        return Plan(calls, holds)

    return prepare


def issue_kubeconfig(one_row: bool) -> Callable[[Session, World], Plan]:
    """Asking a sleeping cluster for a kubeconfig wakes it (202): woken once, audited once.
    (Issuing one from a Ready cluster needs its API server: tests/kubeconfigs.)"""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db)
        clusters = _clusters(db, t, 1 if one_row else 10, power="asleep")
        ids = [c.id for c in clusters]
        calls = _per_cluster(t, clusters, "POST", "/kubeconfigs", lambda i: {"role": "view"})

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 202, 409)  # 409: awake now, not Ready yet
            assert _audited(db, "virtual_cluster.wake", ids) == len(ids)

        return Plan(calls, holds)

    return prepare


def revoke_kubeconfig(one_row: bool) -> Callable[[Session, World], Plan]:
    return _revoke(one_row, lambda slug, cluster, grant_id:
                   f"/api/v1/tenants/{slug}/clusters/{cluster}/kubeconfigs/{grant_id}")


def revoke_grant_by_id(one_row: bool) -> Callable[[Session, World], Plan]:
    return _revoke(one_row, lambda _slug, _cluster, grant_id:
                   f"/api/v1/kubeconfig-grants/{grant_id}")


def _revoke(one_row: bool, path: Callable[[str, str, int], str]
            ) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db)
        [cluster] = _clusters(db, t, 1)
        grants = [KubeconfigGrant(user_id=t.admin.id, cluster_id=cluster.id, role="view",
                                  service_account=f"sa-{i}", secret_name=f"secret-{i}",
                                  expires_at=utcnow().replace(year=utcnow().year + 1))
                  for i in range(1 if one_row else 10)]
        db.add_all(grants)
        db.flush()
        ids = [g.id for g in grants]
        calls = [Call("DELETE", path(t.slug, cluster.name, ids[i % len(ids)]), t.headers)
                 for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 204)
            revoked = db.scalar(select(func.count()).select_from(KubeconfigGrant).where(
                KubeconfigGrant.id.in_(ids), KubeconfigGrant.revoked_at.is_not(None)))
            assert revoked == len(ids) == _audited(db, "kubeconfig.revoke", ids)

        return Plan(calls, holds)

    return prepare


def host_state(verb: str, one_row: bool) -> Callable[[Session, World], Plan]:
    """Cordon, uncordon, drain or check asked 50 times of one host, or of 10: each answered,
    each audited (a host's state change is audited even when it was so already). The hosts'
    credentials lead nowhere: a check finds them unreachable at once."""

    def prepare(db: Session, world: World) -> Plan:
        hosts = [factories.registered_host(db, f"state-{next(_seq)}")
                 for _ in range(1 if one_row else 10)]
        calls = [Call("POST", f"/api/v1/host-clusters/{hosts[i % len(hosts)].name}/{verb}",
                      world.platform, {}) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200)
            assert _audited(db, f"host_cluster.{verb}", [h.id for h in hosts]) == BURST

        return Plan(calls, holds)

    return prepare


def delete_host(one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        hosts = [factories.registered_host(db, f"gone-{next(_seq)}")
                 for _ in range(1 if one_row else 10)]
        ids = [h.id for h in hosts]
        calls = [Call("DELETE", f"/api/v1/host-clusters/{hosts[i % len(hosts)].name}",
                      world.platform) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 204, 404)
            assert db.scalar(select(func.count()).select_from(HostCluster).where(
                HostCluster.id.in_(ids))) == 0
            assert statuses[204] == len(ids) == _audited(db, "host_cluster.delete", ids)

        return Plan(calls, holds)

    return prepare


def update_host(one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        hosts = [factories.registered_host(db, f"edit-{next(_seq)}")
                 for _ in range(1 if one_row else 10)]
        calls = [Call("PATCH", f"/api/v1/host-clusters/{hosts[i % len(hosts)].name}",
                      world.platform, {"description": f"take {i}"}) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200)
            assert 0 < _audited(db, "host_cluster.update", [h.id for h in hosts]) <= BURST

        return Plan(calls, holds)

    return prepare


def machine_change(verb: str, one_row: bool) -> Callable[[Session, World], Plan]:
    """Delete (once per machine, audited once) or new BMC credentials (each audited)."""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=0)
        rows = [factories.machine(db, t.host, t.gpu, f"m-{t.slug}-{i}", phase="available")
                for i in range(1 if one_row else 10)]
        ids = [m.id for m in rows]
        if verb == "delete":
            calls = [Call("DELETE", f"/api/v1/machines/{rows[i % len(rows)].name}",
                          world.platform) for i in range(BURST)]
        else:
            calls = [Call("PUT", f"/api/v1/machines/{rows[i % len(rows)].name}/bmc-credentials",
                          world.platform, {"username": "admin", "password": f"pw-{i}"})
                     for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            if verb == "delete":
                _only(statuses, 202)
                assert _audited(db, "machine.delete", ids) == len(ids)
            else:
                _only(statuses, 200)
                assert _audited(db, "machine.bmc_credentials_replace", ids) == BURST

        return Plan(calls, holds)

    return prepare


def _admins(db: Session, t: Tenancy, n: int) -> list[int]:
    """Memberships of ``n`` more admins of the tenant."""
    made = []
    for _ in range(n):
        user = factories.user(db, f"admin-{next(_seq)}@burst.example")
        made.append(factories.membership(db, t.tenant, user, "admin").id)
    return made


def change_role(one_row: bool) -> Callable[[Session, World], Plan]:
    """Two admins demoted by 25 clicks each, or 10 by 5 each: the tenant keeps an admin."""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=0)
        own = db.scalar(select(Membership.id).where(Membership.user_id == t.admin.id))
        assert own is not None
        ids = [own, *_admins(db, t, 1 if one_row else 9)]
        calls = [Call("PATCH", f"/api/v1/tenants/{t.slug}/members/{ids[i % len(ids)]}",
                      world.platform, {"role": "member"}) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200, 409)
            admins = db.scalar(select(func.count()).select_from(Membership).where(
                Membership.tenant_id == t.tenant.id, Membership.role == "admin"))
            assert admins == 1
            assert _audited(db, "membership.update", ids) == len(ids) - 1

        return Plan(calls, holds)

    return prepare


def remove_member(one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=0)
        ids = _admins(db, t, 1 if one_row else 10)
        calls = [Call("DELETE", f"/api/v1/tenants/{t.slug}/members/{ids[i % len(ids)]}",
                      world.platform) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 204, 404)
            assert statuses[204] == len(ids) == _audited(db, "membership.delete", ids)

        return Plan(calls, holds)

    return prepare


def delete_mapping(one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=0)
        rows = [GroupMapping(tenant_id=t.tenant.id, group_name=f"team-{i}", role="member")
                for i in range(1 if one_row else 10)]
        db.add_all(rows)
        db.flush()
        ids = [m.id for m in rows]
        calls = [Call("DELETE", f"/api/v1/tenants/{t.slug}/group-mappings/{ids[i % len(ids)]}",
                      world.platform) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 204, 404)
            assert statuses[204] == len(ids) == _audited(db, "group_mapping.delete", ids)

        return Plan(calls, holds)

    return prepare


CA = CertificateAuthority()


def _credentials(i: int) -> dict[str, Any]:
    return {"kind": "kubeconfig", "kubeconfig": kubeconfig_yaml(
        "https://host.contention.example:6443", CA.cert_pem, token=f"token-{i}")}


def register_host(one_row: bool) -> Callable[[Session, World], Plan]:
    """One name registered by 50 clicks: one host. Rows: 50 names, 50 hosts."""

    def prepare(db: Session, world: World) -> Plan:
        stem = f"new-{next(_seq)}"
        names = [stem if one_row else f"{stem}-{i}" for i in range(BURST)]
        calls = [Call("POST", "/api/v1/host-clusters", world.platform,
                      {"name": name, "credentials": _credentials(i)})
                 for i, name in enumerate(names)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 201, 409)
            made = Counter(db.scalars(select(HostCluster.name).where(
                HostCluster.name.in_(set(names)))))
            assert made == dict.fromkeys(names, 1)
            assert statuses[201] == len(made)

        return Plan(calls, holds)

    return prepare


def host_credentials(one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        hosts = [factories.registered_host(db, f"keys-{next(_seq)}")
                 for _ in range(1 if one_row else 10)]
        calls = [Call("PUT", f"/api/v1/host-clusters/{hosts[i % len(hosts)].name}/credentials",
                      world.platform, _credentials(i)) for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200)
            ids = [h.id for h in hosts]
            assert _audited(db, "host_cluster.credentials_replace", ids) == BURST

        return Plan(calls, holds)

    return prepare


def register_machine(one_row: bool) -> Callable[[Session, World], Plan]:
    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=0)
        names = [f"m-{t.slug}" if one_row else f"m-{t.slug}-{i}" for i in range(BURST)]
        calls = [Call("POST", "/api/v1/machines", world.platform, {
            "name": name, "host_cluster": t.host.name,
            "bmc_address": f"redfish+https://10.0.4.{i}/redfish/v1/Systems/1",
            "bmc": {"username": "admin", "password": "pw"},
            "boot_mac": f"0c:c4:7a:00:01:{i:02x}", "gpu_class": t.gpu.product,
            "gpu_count": 8}) for i, name in enumerate(names)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 201, 409)
            made = Counter(db.scalars(select(Machine.name).where(
                Machine.name.in_(set(names)))))
            assert made == dict.fromkeys(names, 1)
            assert statuses[201] == len(made)

        return Plan(calls, holds)

    return prepare


def suggest_nodes(one_row: bool) -> Callable[[Session, World], Plan]:
    """Suggestions only read (the quota under a shared lock): every one answered."""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db, nodes=4)
        _quota(db, t, 32)
        calls = [Call("POST", f"/api/v1/node-suggestions?host_cluster={t.host.name}",
                      world.platform, {"tenant": t.slug, "gpu_class": t.gpu.product,
                                       "gpus": 8 if one_row else 8 * (1 + i % 4)})
                 for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200)

        return Plan(calls, holds)

    return prepare


def retire_version(one_row: bool) -> Callable[[Session, World], Plan]:
    """A template's version retired by 50 clicks: retired once, audited once."""

    def prepare(db: Session, world: World) -> Plan:
        template = factories.cluster_template(db)
        versions = [factories.template_version(db, template, n)
                    for n in range(1, 2 if one_row else 11)]
        calls = [Call("POST", f"/api/v1/cluster-templates/{template.name}/versions/"
                      f"{versions[i % len(versions)].version}/retire", world.platform)
                 for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200)
            assert _audited(db, "cluster_template.retire", [template.name]) == len(versions)

        return Plan(calls, holds)

    return prepare


def offer_version(one_row: bool) -> Callable[[Session, World], Plan]:
    """A validated draft offered by 50 clicks: offered once, audited once."""

    def prepare(db: Session, world: World) -> Plan:
        template = factories.cluster_template(db)
        drafts = [factories.template_version(db, template, n, state="draft",
                                             validation=factories.PASSED)
                  for n in range(1, 2 if one_row else 11)]
        calls = [Call("POST", f"/api/v1/cluster-templates/{template.name}/versions/"
                      f"{drafts[i % len(drafts)].version}/offer", world.platform)
                 for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200, 409)
            assert statuses[200] == len(drafts)
            assert _audited(db, "cluster_template.offer", [template.name]) == len(drafts)

        return Plan(calls, holds)

    return prepare


def new_version(one_row: bool) -> Callable[[Session, World], Plan]:
    """50 new drafts of one template (or of 10): each its own number, none lost."""

    def prepare(db: Session, world: World) -> Plan:
        templates = [factories.cluster_template(db) for _ in range(1 if one_row else 10)]
        calls = [Call("POST", f"/api/v1/cluster-templates/{templates[i % len(templates)].name}"
                      "/versions", world.platform, {"default_gpus": i % 2})
                 for i in range(BURST)]

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 201)
            numbers = Counter(db.execute(select(
                ClusterTemplateVersion.template_id, ClusterTemplateVersion.version).where(
                ClusterTemplateVersion.template_id.in_([t.id for t in templates]))).all())
            assert set(numbers.values()) == {1} and len(numbers) == BURST

        return Plan(calls, holds)

    return prepare


def upgrade_template(one_row: bool) -> Callable[[Session, World], Plan]:
    """A cluster moved to its template's v2 by 50 clicks: moved once, audited once."""

    def prepare(db: Session, world: World) -> Plan:
        t = new_tenancy(db)
        template = factories.cluster_template(db)
        first = factories.template_version(db, template, 1)
        second = factories.template_version(db, template, 2)
        clusters = _clusters(db, t, 1 if one_row else 10, template_version_id=first.id)
        ids = [c.id for c in clusters]
        calls = _per_cluster(t, clusters, "POST", "/template-upgrade", lambda i: {"version": 2})

        def holds(db: Session, statuses: Counter[int]) -> None:
            _only(statuses, 200, 409)
            assert Counter(db.scalars(select(VirtualCluster.template_version_id).where(
                VirtualCluster.id.in_(ids)))) == {second.id: len(ids)}
            assert statuses[200] == len(ids)
            assert _audited(db, "virtual_cluster.template_upgrade", ids) == len(ids)

        return Plan(calls, holds)

    return prepare


def _webhooks(db: Session, tenant_id: int | None, n: int) -> list[int]:
    rows = [WebhookEndpoint(tenant_id=tenant_id, name=f"burst-hook-{i}", format="cloudevents",
                            url="https://93.184.216.34/hook", secret_sealed="sealed")
            for i in range(n)]
    db.add_all(rows)
    db.flush()
    return [row.id for row in rows]


# verb -> (method, path tail, body of the i-th call, the statuses it answers)
_WEBHOOK_VERBS: dict[str, tuple[str, str, Callable[[int], Any], tuple[int, ...]]] = {
    "update": ("PATCH", "", lambda i: {"disabled": i % 2 == 0, "name": f"hook-{i % 2}"},
               (200,)),
    "delete": ("DELETE", "", lambda i: None, (204, 404)),
    "test": ("POST", "/test", lambda i: None, (202, 409)),
    "roll_secret": ("POST", "/roll-secret", lambda i: None, (200,)),
}


def webhook(verb: str, platform: bool) -> Callable[[bool], Callable[[Session, World], Plan]]:
    """A webhook endpoint changed by 50 clicks at once (a tenant's, or the platform's); rows:
    10 endpoints."""
    method, tail, body, answered = _WEBHOOK_VERBS[verb]

    def burst(one_row: bool) -> Callable[[Session, World], Plan]:
        def prepare(db: Session, world: World) -> Plan:
            t = new_tenancy(db, nodes=0)
            ids = _webhooks(db, None if platform else t.tenant.id, 1 if one_row else 10)
            base = ("/api/v1/admin/webhooks" if platform
                    else f"/api/v1/tenants/{t.slug}/webhooks")
            headers = world.platform if platform else t.headers
            calls = [Call(method, f"{base}/{ids[i % len(ids)]}{tail}", headers, body(i))
                     for i in range(BURST)]

            def holds(db: Session, statuses: Counter[int]) -> None:
                _only(statuses, *answered)
                done = _audited(db, f"webhook_endpoint.{verb}", ids)
                if verb == "delete":
                    assert statuses[204] == len(ids) == done
                    assert db.scalar(select(func.count()).select_from(WebhookEndpoint).where(
                        WebhookEndpoint.id.in_(ids))) == 0
                elif verb == "update":
                    assert 0 < done <= BURST
                else:
                    assert done == statuses[answered[0]] > 0

            return Plan(calls, holds)

        return prepare

    return burst


TENANT = "/api/v1/tenants/{tenant}"
CLUSTER = f"{TENANT}/clusters/{{cluster}}"
ADMIN_WEBHOOKS = "/api/v1/admin/webhooks"
# Every write route that takes a row lock, and the bursts it gets.
ROUTES: dict[tuple[str, str], Callable[[bool], Callable[[Session, World], Plan]]] = {
    ("POST", f"{TENANT}/quota-requests/{{request_id}}/cancel"): cancel,
    ("POST", "/api/v1/quota-requests/{request_id}/approve"): lambda one: decide("approve", one),
    ("POST", "/api/v1/quota-requests/{request_id}/reject"): lambda one: decide("reject", one),
    ("POST", f"{TENANT}/quota-requests"): create_quota_request,
    ("POST", "/api/v1/tokens"): create_token,
    ("POST", f"{TENANT}/clusters"): create_cluster,
    ("PATCH", CLUSTER): resize_cluster,
    ("DELETE", CLUSTER): delete_cluster,
    ("POST", f"{CLUSTER}/sleep"): lambda one: power("sleep", one),
    ("POST", f"{CLUSTER}/wake"): lambda one: power("wake", one),
    ("PUT", f"{CLUSTER}/sleep-policy"): sleep_policy,
    ("PUT", f"{TENANT}/burst-policy"): burst_policy,
    ("POST", f"{CLUSTER}/kubeconfigs"): issue_kubeconfig,
    ("DELETE", f"{CLUSTER}/kubeconfigs/{{grant_id}}"): revoke_kubeconfig,
    ("DELETE", "/api/v1/kubeconfig-grants/{grant_id}"): revoke_grant_by_id,
    ("PUT", "/api/v1/nodes/{node}/assignment"): assign_node,
    ("DELETE", "/api/v1/nodes/{node}/assignment"): end_assignment,
    ("POST", "/api/v1/machines/{name}/provision"): lambda one: machine("provision", one),
    ("POST", "/api/v1/machines/{name}/release"): lambda one: machine("release", one),
    ("DELETE", "/api/v1/machines/{name}"): lambda one: machine_change("delete", one),
    ("PUT", "/api/v1/machines/{name}/bmc-credentials"):
        lambda one: machine_change("bmc-credentials", one),
    ("POST", "/api/v1/host-clusters/{name}/cordon"): lambda one: host_state("cordon", one),
    ("POST", "/api/v1/host-clusters/{name}/uncordon"): lambda one: host_state("uncordon", one),
    ("POST", "/api/v1/host-clusters/{name}/drain"): lambda one: host_state("drain", one),
    ("POST", "/api/v1/host-clusters/{name}/check"): lambda one: host_state("check", one),
    ("PATCH", "/api/v1/host-clusters/{name}"): update_host,
    ("DELETE", "/api/v1/host-clusters/{name}"): delete_host,
    ("PATCH", f"{TENANT}/members/{{member_id}}"): change_role,
    ("DELETE", f"{TENANT}/members/{{member_id}}"): remove_member,
    ("DELETE", f"{TENANT}/group-mappings/{{mapping_id}}"): delete_mapping,
    ("POST", "/api/v1/host-clusters"): register_host,
    ("PUT", "/api/v1/host-clusters/{name}/credentials"): host_credentials,
    ("POST", "/api/v1/machines"): register_machine,
    ("POST", "/api/v1/node-suggestions"): suggest_nodes,
    ("POST", "/api/v1/cluster-templates/{name}/versions/{version}/retire"): retire_version,
    ("POST", "/api/v1/cluster-templates/{name}/versions"): new_version,
    ("POST", "/api/v1/cluster-templates/{name}/versions/{version}/offer"): offer_version,
    ("POST", f"{CLUSTER}/template-upgrade"): upgrade_template,
    **{(_WEBHOOK_VERBS[verb][0], f"{owner}/{{endpoint_id}}{_WEBHOOK_VERBS[verb][1]}"):
       webhook(verb, owner == ADMIN_WEBHOOKS)
       for verb in _WEBHOOK_VERBS for owner in (f"{TENANT}/webhooks", ADMIN_WEBHOOKS)},
}
