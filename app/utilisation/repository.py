"""SQL: who holds which host namespace and which node, for mapping the exporter's series."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.gpu_classes.models import GpuClass
from app.kube.manifests.names import host_namespace_name
from app.machines.models import Machine
from app.nodes.models import Node, NodeAssignment
from app.tenants.models import Tenant
from app.utilisation.mapping import Owner, Ownership, unambiguous


def ownership(db: Session) -> Ownership:
    """Every cluster's host namespace, every dedicated node and every private node now."""
    clusters = db.execute(
        select(Tenant.slug, VirtualCluster.name, GpuClass.product)
        .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
        .outerjoin(GpuClass, GpuClass.id == VirtualCluster.gpu_class_id))
    dedicated = db.execute(
        select(Node.name, Tenant.slug, GpuClass.product)
        .join(NodeAssignment, NodeAssignment.node_id == Node.id)
        .join(Tenant, Tenant.id == NodeAssignment.tenant_id)
        .outerjoin(GpuClass, GpuClass.id == Node.gpu_class_id)
        .where(NodeAssignment.ended_at.is_(None), Node.gone_at.is_(None)))
    private = db.execute(
        select(Machine.node_name, Tenant.slug, VirtualCluster.name, GpuClass.product)
        .join(VirtualCluster, VirtualCluster.id == Machine.cluster_id)
        .join(Tenant, Tenant.id == VirtualCluster.tenant_id)
        .outerjoin(GpuClass, GpuClass.id == Machine.gpu_class_id)
        .where(Machine.node_name.is_not(None)))
    by_namespace = {host_namespace_name(slug, name): Owner(slug, name, product or "")
                    for slug, name, product in clusters}
    nodes = [(node, Owner(slug, None, product or "")) for node, slug, product in dedicated]
    nodes += [(node, Owner(slug, name, product or ""))
              for node, slug, name, product in private if node]
    return Ownership(by_namespace=by_namespace, by_node=unambiguous(nodes))
