"""Every object the portal builds, sent by the real adapter to a real kube-apiserver 1.32.

On the host: the platform objects and each placement's cluster objects, with KAI's real Queue
CRD installed. Inside a virtual cluster: the kubeconfig guard and the objects of a grant of each
role. Each list is applied in dependency order, accepted by the server's schema, admission and
CEL compiler, stored as built, and a second apply writes nothing.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import pytest

from app.kube.adapter import KubernetesAdapter
from app.kube.errors import PermanentKubeError
from app.kube.manifests import (
    ClusterSpec,
    ManifestPolicy,
    TenantSpec,
    cluster_host_objects,
    host_namespace_name,
    platform_objects,
)
from app.kube.manifests.labels import KAI_API_VERSION
from app.kube.port import KubePort, Manifest, ObjectRef
from app.kube.quantities import drifted
from app.kubeconfigs import guard
from app.kubeconfigs.manifests import CLUSTER_ROLES, GrantSpec, grant_objects
from tests.support.kube_server import ApiServer

pytestmark = pytest.mark.kube_server
POLICY = ManifestPolicy()
H100 = "NVIDIA-H100-80GB-HBM3"
PLACEMENTS = ("shared-pool", "dedicated-nodes")
# A status some controller writes late (a quota's usage, a policy's type check) is in by then.
SETTLED_WITHIN = 30.0


def tenant_slug() -> str:
    return f"real-{uuid.uuid4().hex[:8]}"


def host_objects(slug: str, placement: str) -> list[Manifest]:
    tenant = TenantSpec(slug, "Real Research", {H100: 8, "NVIDIA-L40S": 2}, 128000, 1024000)
    cluster = ClusterSpec(
        tenant=slug, name="train", kubernetes_version="1.32.4", placement=placement,  # type: ignore[arg-type]
        gpu_class=H100, gpus=4, cpu_millicores=64000, memory_mib=524288,
        endpoint=f"https://train.{slug}.vc.example.com")
    return [*platform_objects(POLICY), *cluster_host_objects(cluster, tenant, POLICY)]


def virtual_objects(admin_kubeconfig: str) -> list[Manifest]:
    """What issuing one kubeconfig of each role applies, in the service's order."""
    objects = guard.guard_objects(guard.portal_identity(admin_kubeconfig))
    expires = datetime(2030, 1, 1, tzinfo=UTC)
    # The server is shared by the run: ids no test user (a sequence's) reaches, so that
    # kubeconfig tests looking for their users' objects never find these.
    for user_id, role in enumerate(CLUSTER_ROLES, start=1_000_000_000):
        spec = GrantSpec(grant_id=user_id, user_id=user_id, user_email=f"u{user_id}@example.com",
                         role=role, secret_suffix=f"real{user_id}", expires_at=expires)
        objects += grant_objects(spec)
    return objects


def dependency_errors(objects: list[Manifest]) -> list[str]:
    """What an object names that the same list makes only later (or twice, differently)."""
    made: set[tuple[str, str]] = set()
    listed = {(obj["kind"], obj["metadata"]["name"]) for obj in objects}
    errors = []
    for obj in objects:
        for needed in _needs(obj):
            if needed in listed and needed not in made:
                errors.append(f"{obj['kind']} {obj['metadata']['name']} before {needed}")
        made.add((obj["kind"], obj["metadata"]["name"]))
    return errors


def _needs(obj: Manifest) -> list[tuple[str, str]]:
    spec = obj.get("spec") or {}
    needs = []
    if namespace := obj["metadata"].get("namespace"):
        needs.append(("Namespace", namespace))
    if obj["kind"].endswith("PolicyBinding"):
        needs.append((obj["kind"].removesuffix("Binding"), spec["policyName"]))
    if role := obj.get("roleRef"):
        needs.append((role["kind"], role["name"]))
    if parent := spec.get("parentQueue"):
        needs.append(("Queue", parent))
    return needs


def apply_all(port: KubePort, objects: list[Manifest]) -> dict[ObjectRef, tuple[str, int]]:
    """Applies in order; the resourceVersion and generation of each object afterwards."""
    versions = {}
    for obj in objects:
        meta = port.apply(obj, force=True)["metadata"]
        versions[ObjectRef.of(obj)] = (meta["resourceVersion"], meta.get("generation", 0))
    return versions


def assert_reapply_changes_nothing(port: KubePort, objects: list[Manifest]) -> None:
    """Applying again changes no object's spec (generations stay) and soon writes nothing.

    Not always the very next apply: where a controller applied an object's status (a policy's
    type check, a quota's usage), the API server rewrites the managed fields once on the next
    apply, and on a loaded machine the controller may come late. A builder that made the server
    store something else would write every time, until the deadline.
    """
    first = apply_all(port, objects)
    assert [o for o in objects if not stored_as_built(port, o)] == []
    generations = {ref: generation for ref, (_, generation) in first.items()}
    previous = first
    written: list[str] = []
    deadline = time.monotonic() + SETTLED_WITHIN
    while time.monotonic() < deadline:
        again = apply_all(port, objects)
        assert {ref: generation for ref, (_, generation) in again.items()} == generations
        if again == previous:
            return
        written = sorted(str(ref) for ref in again if again[ref] != previous[ref])
        previous = again
        time.sleep(0.5)
    pytest.fail(f"re-applying the same objects kept writing: {written}")


def stored_as_built(port: KubePort, obj: Manifest) -> bool:
    ref = ObjectRef.of(obj)
    return not drifted(port.get(ref.api_version, ref.kind, ref.name, ref.namespace), obj)


def remove(port: KubePort, objects: list[Manifest], *, keep_shared: bool = True) -> None:
    """Deletes what a test made; cluster-wide objects shared by every tenant stay."""
    shared = {ObjectRef.of(o) for o in platform_objects(POLICY)} if keep_shared else set()
    for obj in reversed(objects):
        ref = ObjectRef.of(obj)
        if ref not in shared and (ref.namespace is None or ref.kind == "Namespace"):
            port.delete(ref.api_version, ref.kind, ref.name, ref.namespace)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_the_host_accepts_every_object_of_a_cluster_and_a_second_apply_writes_nothing(
    host_admin: KubernetesAdapter, placement: str,
) -> None:
    objects = host_objects(tenant_slug(), placement)
    assert dependency_errors(objects) == []
    try:
        assert_reapply_changes_nothing(host_admin, objects)
    finally:
        remove(host_admin, objects)


def test_the_queues_are_checked_by_kais_real_crd(host_admin: KubernetesAdapter) -> None:
    slug = tenant_slug()
    objects = host_objects(slug, "shared-pool")
    queue = next(o for o in objects if o["kind"] == "Queue" and o["metadata"]["name"] == slug)
    broken = {**queue, "spec": {**queue["spec"], "resources": {"gpu": {"quota": "eight"}}}}
    calls = host_admin.api_calls
    with pytest.raises(PermanentKubeError, match=r"spec\.resources\.gpu\.quota"):
        host_admin.apply(broken, force=True)
    assert host_admin.api_calls == calls + 1  # refused for good: not retried
    assert host_admin.get(KAI_API_VERSION, "Queue", slug) is None


def test_a_virtual_cluster_accepts_the_guard_and_every_grant_and_a_second_apply_writes_nothing(
    virtual: KubernetesAdapter, virtual_api: ApiServer,
) -> None:
    objects = virtual_objects(virtual_api.admin_kubeconfig)
    assert dependency_errors(objects) == []
    assert_reapply_changes_nothing(virtual, objects)


def test_a_binding_listed_before_its_policy_is_reported() -> None:
    objects = guard.guard_objects(guard.PortalIdentity())
    assert dependency_errors(list(reversed(objects))) != []
    namespace = host_namespace_name("acme", "train")
    quota = {"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": "q", "namespace": namespace}}
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    assert dependency_errors([quota, ns]) == [
        f"ResourceQuota q before ('Namespace', '{namespace}')"]
    assert dependency_errors([ns, quota]) == []
