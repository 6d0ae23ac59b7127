"""What moving a cluster to another template version may not change (its placement and GPU
class, which hold quota and nodes; more GPUs than the version allows), and the host reach the
version's hardening needs."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.clusters import desired, repository
from app.clusters.models import VirtualCluster
from app.clusters.shapes import TemplateUpgrade
from app.kit.config import Settings
from app.kit.errors import Conflict


def check(db: Session, settings: Settings, cluster: VirtualCluster,
          upgrade: TemplateUpgrade) -> None:
    """Refuses (409) a version the cluster cannot move to; writes nothing."""
    _check_the_version_fits(cluster, upgrade)
    _check_hardening_reach(db, settings, cluster, upgrade)


def _check_the_version_fits(cluster: VirtualCluster, upgrade: TemplateUpgrade) -> None:
    if cluster.template_version_id == upgrade.template_version_id:
        raise Conflict(f"cluster {cluster.name!r} is on {upgrade.label} already")
    if upgrade.placement is not None and upgrade.placement != cluster.placement:
        raise Conflict(f"{upgrade.label} places clusters on {upgrade.placement}; this cluster "
                       f"uses {cluster.placement}: create a new cluster from it instead")
    if upgrade.gpu_class_id is not None and upgrade.gpu_class_id != cluster.gpu_class_id:
        raise Conflict(f"{upgrade.label} uses another GPU class: create a new cluster from it")
    if upgrade.max_gpus is not None and cluster.gpus > upgrade.max_gpus:
        raise Conflict(f"{upgrade.label} allows at most {upgrade.max_gpus} GPUs; resize the "
                       f"cluster from {cluster.gpus} first")


def _check_hardening_reach(db: Session, settings: Settings, cluster: VirtualCluster,
                           upgrade: TemplateUpgrade) -> None:
    """A version whose pods the webhook hardens needs a host whose API server reaches the
    webhook, as placement does for a new cluster: elsewhere the hardening guard would refuse
    every new pod of the upgraded cluster."""
    if desired.hardening(settings, upgrade.pod_security, upgrade.user_namespaces) is None:
        return
    host, reaches = repository.host_webhook_reach(db, cluster.host_cluster_id)
    if not reaches:
        raise Conflict(
            f"{upgrade.label} hardens the cluster's pods through the portal's admission "
            f"webhook, and host cluster {host!r} has no webhook URL: its hardening guard would "
            f"refuse the pods. A platform admin sets the host's webhook URL first "
            f"(portalctl hosts update {host} --webhook-url https://...)")

