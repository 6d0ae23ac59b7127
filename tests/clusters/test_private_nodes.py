"""A tenant admin asks for N GPUs of a class as private nodes (issue 57): whole free machines
of the class, within the quota, or a refusal that says which; such a cluster does not sleep."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.clusters import service as clusters
from app.clusters.schemas import ClusterCreate, ClusterOut
from app.gpu_classes.models import GpuClass
from app.kit.errors import Conflict, ValidationFailed
from tests import factories
from tests.clusters.support import cluster_settings

SETTINGS = cluster_settings()


@pytest.fixture
def admin(db: Session) -> tuple[Principal, GpuClass]:
    tenant = factories.tenant(db, "acme")
    user = factories.user(db, "admin@acme.example.com")
    factories.membership(db, tenant, user, "admin")
    host = factories.env_host(db)
    gpu = factories.gpu_class(db, "NVIDIA-L40S", display_name="L40S")
    factories.quota(db, tenant, gpu, 12)
    for index in range(2):
        factories.machine(db, host, gpu, f"l40s-{index}", phase="available", gpu_count=4)
    factories.machine(db, host, gpu, "l40s-busy", phase="joined", gpu_count=4,
                      desired="provisioned")
    return Principal(user=user, via="token", roles={tenant.id: "admin"}), gpu


def _create(db: Session, principal: Principal, gpu: GpuClass, gpus: int,
            name: str = "train") -> ClusterOut:
    return clusters.create_cluster(db, principal, SETTINGS, "acme", ClusterCreate(
        name=name, gpu_class_id=gpu.id, gpus=gpus, placement="private-nodes"))


def test_whole_free_machines_make_the_cluster(db: Session,
                                              admin: tuple[Principal, GpuClass]) -> None:
    created = _create(db, *admin, 8)
    assert created.placement == "private-nodes" and created.gpus == 8


def test_a_count_no_set_of_free_machines_makes_is_refused_saying_their_sizes(
        db: Session, admin: tuple[Principal, GpuClass]) -> None:
    with pytest.raises(ValidationFailed) as refused:
        _create(db, *admin, 6)
    assert "6 L40S GPUs are not a sum of whole free machines' GPUs" in str(refused.value)
    assert "4, 4 GPUs each" in str(refused.value)


def test_more_than_the_pool_has_free_is_refused(db: Session,
                                                admin: tuple[Principal, GpuClass]) -> None:
    _create(db, *admin, 4, "first")
    with pytest.raises(ValidationFailed) as refused:
        _create(db, *admin, 8, "second")  # 8 free, 4 promised to the first
    assert "4 of them promised to clusters waiting for machines, 8 asked" in str(refused.value)


def test_more_than_the_quota_leaves_is_refused(db: Session,
                                               admin: tuple[Principal, GpuClass]) -> None:
    principal, gpu = admin
    clusters.create_cluster(db, principal, SETTINGS, "acme", ClusterCreate(
        name="shared", gpu_class_id=gpu.id, gpus=6, placement="shared-pool"))
    with pytest.raises(ValidationFailed) as refused:
        _create(db, principal, gpu, 8)
    assert "6 are left for private-nodes clusters, 8 asked" in str(refused.value)


def test_a_private_nodes_cluster_is_not_put_to_sleep(db: Session,
                                                     admin: tuple[Principal, GpuClass]) -> None:
    _create(db, *admin, 4)
    with pytest.raises(Conflict) as refused:
        clusters.change_power(db, admin[0], "acme", "train", "asleep")
    assert "a private-nodes cluster does not sleep" in str(refused.value)
