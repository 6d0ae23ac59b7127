"""The cluster reconciler on the in-memory Kubernetes fake: convergence, idempotence, resize,
deletion, the embedded default without a host cluster, and failures."""

from __future__ import annotations

import base64

import pytest
import yaml
from sqlalchemy import func, select

from app.audit.models import AuditEvent
from app.clusters import conditions as cond
from app.clusters.desired import manifest_policy
from app.clusters.models import VirtualCluster
from app.clusters.schemas import ClusterResize
from app.clusters.service import delete_cluster, resize_cluster
from app.database.core import Database
from app.kit.crypto import SecretBox
from app.kube import manifests
from app.kube.errors import PermanentKubeError
from app.kube.helm import InstallError
from app.kube.manifests.chart_schema import validate_values
from app.kubeconfigs.models import KubeconfigGrant
from app.nodes.models import Node
from tests import factories
from tests.clusters.support import Harness, cluster_settings, create
from tests.support import installers, virtual_clusters
from tests.support.tenancy import Tenancy
from tests.templates.support import vcluster_values_schema

STEPS = [*cond.STEP_TYPES, cond.READY]
NAMESPACE = "t-acme--train"


def statuses(cluster: VirtualCluster | None) -> dict[str, str]:
    assert cluster is not None
    return {c["type"]: c["status"] for c in cluster.conditions}


def audit_count(database: Database) -> int:
    with database.session() as db:
        return db.scalar(select(func.count()).select_from(AuditEvent)) or 0


def test_a_new_cluster_converges_to_ready_with_every_object(
    harness: Harness, tenancy: Tenancy
) -> None:
    created = create(harness.database, tenancy)
    harness.converge()
    cluster = harness.cluster(created.id)
    assert statuses(cluster) == dict.fromkeys(STEPS, "True")
    assert cluster is not None and cluster.observed_generation == cluster.generation == 1
    assert harness.managed_objects() == sorted([
        ("LimitRange", NAMESPACE, "tenant-defaults"),
        ("Namespace", None, NAMESPACE),
        ("NetworkPolicy", NAMESPACE, "tenant-isolation"),
        ("NetworkPolicy", NAMESPACE, "vcluster-api-server"),
        ("Queue", None, "acme"),
        ("Queue", None, "acme--train"),
        ("Queue", None, "tenants"),
        ("ResourceQuota", NAMESPACE, "tenant-quota"),
        ("Secret", NAMESPACE, "vc-train"),
        ("StatefulSet", NAMESPACE, "train"),
        ("ValidatingAdmissionPolicy", None, "gpu-tenant-portal-dedicated-node-guard"),
        ("ValidatingAdmissionPolicy", None, "gpu-tenant-portal-endpoints-guard"),
        ("ValidatingAdmissionPolicy", None, "gpu-tenant-portal-hardening-guard"),
        ("ValidatingAdmissionPolicy", None, "gpu-tenant-portal-kai-queue-guard"),
        ("ValidatingAdmissionPolicy", None, "gpu-tenant-portal-tenancy-guard"),
        ("ValidatingAdmissionPolicyBinding", None, "gpu-tenant-portal-dedicated-node-guard"),
        ("ValidatingAdmissionPolicyBinding", None, "gpu-tenant-portal-endpoints-guard"),
        ("ValidatingAdmissionPolicyBinding", None, "gpu-tenant-portal-hardening-guard"),
        ("ValidatingAdmissionPolicyBinding", None, "gpu-tenant-portal-kai-queue-guard"),
        ("ValidatingAdmissionPolicyBinding", None, "gpu-tenant-portal-tenancy-guard"),
    ], key=str)
    assert harness.installer.installs == 1
    values = yaml.safe_load(harness.installer.values["train"])
    assert values["exportKubeConfig"]["server"] == "https://train.acme.vc.example.com"


def test_the_admin_kubeconfig_is_stored_encrypted_and_never_in_the_api(
    harness: Harness, tenancy: Tenancy
) -> None:
    created = create(harness.database, tenancy)
    harness.converge()
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.admin_kubeconfig_encrypted is not None
    assert "admin-token-never-shown" not in cluster.admin_kubeconfig_encrypted
    opened = SecretBox(cluster_settings().encryption_key).open(cluster.admin_kubeconfig_encrypted)
    assert "admin-token-never-shown" in opened
    with harness.database.session() as db:
        after = [e.after for e in db.scalars(select(AuditEvent))]
    assert "admin-token-never-shown" not in str(after)


def test_a_resync_of_a_converged_cluster_writes_nothing(
    harness: Harness, tenancy: Tenancy
) -> None:
    created = create(harness.database, tenancy)
    harness.converge()
    before = harness.cluster(created.id)
    audits = audit_count(harness.database)
    harness.kube.reset_calls()
    # The cluster, its tenant's queue and its host's shared objects, each looked at once.
    assert harness.run() == 3
    after = harness.cluster(created.id)
    assert harness.kube.mutations() == []
    assert harness.kube.writes() == []
    assert harness.installer.installs == 1
    assert before is not None and after is not None
    assert (after.conditions, after.updated_at, after.admin_kubeconfig_encrypted) == (
        before.conditions, before.updated_at, before.admin_kubeconfig_encrypted)
    assert audit_count(harness.database) == audits


def test_a_resync_lists_each_kind_once_and_gets_only_each_clusters_secret(
    harness: Harness, tenancy: Tenancy
) -> None:
    for name in ("a", "b", "c"):
        create(harness.database, tenancy, name, gpus=2)
    harness.converge()
    harness.kube.reset_calls()
    assert harness.run() == 3 + 2  # and the tenant's queue, and the host's shared objects
    assert harness.kube.writes() == []
    # What the tenant's and the host's kinds read is one GET per object, whatever the number
    # of clusters.
    policy = manifest_policy(harness.reconciler.settings)
    shared = [("get", obj["kind"]) for obj in manifests.platform_objects(policy)]
    assert sorted((c.method, c.kind) for c in harness.kube.calls) == sorted([
        ("list", "Namespace"), ("list", "ResourceQuota"), ("list", "LimitRange"),
        ("list", "NetworkPolicy"), ("list", "Queue"), ("list", "ValidatingAdmissionPolicy"),
        ("list", "ValidatingAdmissionPolicyBinding"), *[("get", "Secret")] * 3,
        ("get", "Queue"), *shared])


def test_drift_is_repaired_on_resync(harness: Harness, tenancy: Tenancy) -> None:
    create(harness.database, tenancy)
    harness.converge()
    harness.kube.delete("networking.k8s.io/v1", "NetworkPolicy", "tenant-isolation", NAMESPACE)
    quota = harness.kube.get("v1", "ResourceQuota", "tenant-quota", NAMESPACE)
    assert quota is not None
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "64"
    harness.kube.apply(quota, force=True)  # as if someone raised it by hand
    harness.kube.reset_calls()
    harness.run()
    assert harness.kube.get("networking.k8s.io/v1", "NetworkPolicy", "tenant-isolation",
                            NAMESPACE) is not None
    repaired = harness.kube.get("v1", "ResourceQuota", "tenant-quota", NAMESPACE)
    assert repaired is not None and repaired["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    assert {c.kind for c in harness.kube.mutations()} == {"NetworkPolicy", "ResourceQuota"}


def test_a_vanished_release_is_installed_again(harness: Harness, tenancy: Tenancy) -> None:
    create(harness.database, tenancy)
    harness.converge()
    harness.kube.delete("v1", "Secret", "vc-train", NAMESPACE)
    harness.converge(2)
    assert harness.installer.installs == 2
    assert harness.kube.get("v1", "Secret", "vc-train", NAMESPACE) is not None


def test_resize_updates_quota_queue_and_release(harness: Harness, tenancy: Tenancy) -> None:
    created = create(harness.database, tenancy)
    harness.converge()
    with harness.database.transaction() as db:
        resize_cluster(db, tenancy.principal(tenancy.acme_admin), "acme", "train",
                       ClusterResize(gpus=8, memory_mib=131072))
    harness.converge(2)
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.observed_generation == cluster.generation == 2
    assert all(c["observedGeneration"] == 2 for c in cluster.conditions)
    quota = harness.kube.get("v1", "ResourceQuota", "tenant-quota", NAMESPACE)
    queue = harness.kube.get("scheduling.run.ai/v2", "Queue", "acme--train")
    assert quota is not None and queue is not None
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    assert quota["spec"]["hard"]["requests.memory"] == "131072Mi"
    assert queue["spec"]["resources"]["gpu"] == {"quota": 8, "limit": 8, "overQuotaWeight": 1}
    values = yaml.safe_load(harness.installer.values["train"])
    assert values["policies"]["resourceQuota"]["quota"]["requests.nvidia.com/gpu"] == "8"
    assert harness.installer.installs == 2


def test_delete_removes_everything_then_the_row(harness: Harness, tenancy: Tenancy,
                                               database: Database) -> None:
    created = create(harness.database, tenancy)
    harness.converge()
    with database.transaction() as db:
        cluster = db.get(VirtualCluster, created.id)
        assert cluster is not None
        grant = virtual_clusters.grant(db, cluster, tenancy.acme_member.id)
        grant_id = grant.id
        delete_cluster(db, tenancy.principal(tenancy.acme_admin), "acme", "train")
    harness.converge(2)
    assert harness.cluster(created.id) is None
    assert harness.managed_objects() == [
        ("Queue", None, "tenants"),
        ("ValidatingAdmissionPolicy", None, "gpu-tenant-portal-dedicated-node-guard"),
        ("ValidatingAdmissionPolicy", None, "gpu-tenant-portal-endpoints-guard"),
        ("ValidatingAdmissionPolicy", None, "gpu-tenant-portal-hardening-guard"),
        ("ValidatingAdmissionPolicy", None, "gpu-tenant-portal-kai-queue-guard"),
        ("ValidatingAdmissionPolicy", None, "gpu-tenant-portal-tenancy-guard"),
        ("ValidatingAdmissionPolicyBinding", None, "gpu-tenant-portal-dedicated-node-guard"),
        ("ValidatingAdmissionPolicyBinding", None, "gpu-tenant-portal-endpoints-guard"),
        ("ValidatingAdmissionPolicyBinding", None, "gpu-tenant-portal-hardening-guard"),
        ("ValidatingAdmissionPolicyBinding", None, "gpu-tenant-portal-kai-queue-guard"),
        ("ValidatingAdmissionPolicyBinding", None, "gpu-tenant-portal-tenancy-guard"),
    ]
    assert ("uninstall", "train", NAMESPACE) in harness.installer.calls
    with database.session() as db:
        assert db.get(KubeconfigGrant, grant_id) is None
        actions = list(db.scalars(select(AuditEvent.action).order_by(AuditEvent.id)))
    assert actions[-1] == "virtual_cluster.deleted"
    assert actions.index("kubeconfig.revoke") < actions.index("virtual_cluster.deleted")


def test_the_tenant_queue_stays_while_another_cluster_needs_it(
    harness: Harness, tenancy: Tenancy, database: Database
) -> None:
    create(harness.database, tenancy, "train")
    create(harness.database, tenancy, "infer", gpus=2)
    harness.converge()
    with database.transaction() as db:
        delete_cluster(db, tenancy.principal(tenancy.acme_admin), "acme", "train")
    harness.converge(2)
    queues = {name for kind, _ns, name in harness.managed_objects() if kind == "Queue"}
    assert queues == {"tenants", "acme", "acme--infer"}


def test_a_delete_during_provisioning_leaves_nothing_behind(
    harness: Harness, tenancy: Tenancy, database: Database
) -> None:
    # the control plane never comes up
    harness.installer.brings_up = installers.vcluster_chart(harness.kube, None)
    created = create(harness.database, tenancy)
    harness.converge(3)
    assert statuses(harness.cluster(created.id))[cond.READY] == "False"
    with database.transaction() as db:
        delete_cluster(db, tenancy.principal(tenancy.acme_admin), "acme", "train")
    harness.converge(2)
    assert harness.cluster(created.id) is None
    assert {kind for kind, _ns, _name in harness.managed_objects()} == {
        "Queue", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def test_waiting_for_the_api_server_is_shown_until_readyz_answers(
    harness: Harness, tenancy: Tenancy
) -> None:
    harness.connector.answers_readyz = False
    created = create(harness.database, tenancy)
    harness.converge(3)
    cluster = harness.cluster(created.id)
    assert cluster is not None
    ready = cond.find(cluster.conditions, cond.READY)
    assert ready is not None and ready["reason"] == "APIServerNotReady"
    assert cluster.observed_generation == 0 and cluster.admin_kubeconfig_encrypted is None
    harness.connector.answers_readyz = True
    harness.converge(1)
    assert statuses(harness.cluster(created.id))[cond.READY] == "True"


def test_without_a_host_cluster_the_condition_says_so(
    database: Database, tenancy: Tenancy
) -> None:
    harness = Harness.build(database, host=False)
    created = create(database, tenancy)
    harness.converge(2)
    cluster = harness.cluster(created.id)
    assert cluster is not None
    ready = cond.find(cluster.conditions, cond.READY)
    assert ready is not None and ready["status"] == "False"
    assert ready["reason"] == "HostClusterNotConfigured"
    assert harness.installer.calls == []
    with database.transaction() as db:
        delete_cluster(db, tenancy.principal(tenancy.acme_admin), "acme", "train")
    harness.converge(1)
    assert harness.cluster(created.id) is None  # nothing was ever applied: the row just goes


def test_a_permanent_error_sets_failed_with_its_reason(
    harness: Harness, tenancy: Tenancy
) -> None:
    harness.kube.inject("apply", PermanentKubeError("queues.scheduling.run.ai is forbidden",
                                                    reason="Forbidden", status=403),
                        match=lambda call: call.kind == "Queue"
                        and call.name == manifests.cluster_queue_name("acme", "train"))
    created = create(harness.database, tenancy)
    harness.run()
    cluster = harness.cluster(created.id)
    assert cluster is not None
    failed = cond.find(cluster.conditions, cond.FAILED)
    assert failed is not None and (failed["status"], failed["reason"]) == ("True", "Forbidden")
    assert statuses(cluster)[cond.QUEUES_APPLIED] == "False"
    with harness.database.session() as db:
        assert db.scalar(select(AuditEvent).where(
            AuditEvent.action == "virtual_cluster.failed")) is not None
    harness.converge(2)  # the operator fixed the cause: the resync recovers
    recovered = harness.cluster(created.id)
    assert statuses(recovered)[cond.READY] == "True"
    assert statuses(recovered)[cond.FAILED] == "False"


def test_a_helm_failure_is_retried_with_backoff(harness: Harness, tenancy: Tenancy) -> None:
    harness.installer.failures.append(InstallError("helm upgrade failed: connection refused"))
    created = create(harness.database, tenancy)
    harness.run()
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.failed_attempts == 1
    release = cond.find(cluster.conditions, cond.RELEASE_INSTALLED)
    assert release is not None and release["reason"] == "HelmFailed"
    assert harness.due_at(created.id) > harness.clock.now
    harness.converge(2)
    assert statuses(harness.cluster(created.id))[cond.READY] == "True"


def test_kubeconfig_secret_is_read_from_the_config_key(
    harness: Harness, tenancy: Tenancy
) -> None:
    create(harness.database, tenancy)
    harness.converge()
    secret = harness.kube.get("v1", "Secret", "vc-train", NAMESPACE)
    assert secret is not None
    config = base64.b64decode(secret["data"]["config"]).decode()
    assert yaml.safe_load(config)["kind"] == "Config"


@pytest.mark.parametrize("placement", ["shared-pool", "dedicated-nodes"])
def test_placement_shapes_the_values(harness: Harness, tenancy: Tenancy, placement: str,
                                     database: Database) -> None:
    if placement == "dedicated-nodes":
        with database.transaction() as db:
            node = db.scalar(select(Node).where(Node.gpu_class_id == tenancy.h100.id))
            assert node is not None
            factories.assignment(db, node, db.merge(tenancy.acme))
    create(harness.database, tenancy, placement=placement)
    harness.converge()
    values = yaml.safe_load(harness.installer.values["train"])
    scheduler = values["controlPlane"].get("advanced", {}).get("virtualScheduler", {})
    assert bool(scheduler.get("enabled")) == (placement == "dedicated-nodes")


@pytest.mark.parametrize(("overrides", "patched"), [({}, False),
                                                   ({"vcluster_edition": "pro"}, True)],
                         ids=["default-oss", "pro"])
def test_the_edition_setting_decides_whether_the_release_gets_translate_patches(
        database: Database, tenancy: Tenancy, overrides: dict[str, str], patched: bool) -> None:
    settings = cluster_settings(**overrides)
    harness = Harness.build(database, settings=settings)
    create(harness.database, tenancy, settings=settings)
    harness.converge()
    values = yaml.safe_load(harness.installer.values["train"])
    pods = values["sync"].get("toHost", {}).get("pods", {})
    assert ("patches" in pods) == patched
    schema = vcluster_values_schema(settings.vcluster_chart_version)
    assert validate_values(values, schema) == []
