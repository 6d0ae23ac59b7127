"""KAI queues inside a virtual cluster (app.kube.manifests.team_queues builds them): applied
through the virtual cluster's API once the KAI add-on is Ready, and only where they differ.

One LIST reads what is there; an unchanged cluster costs no write. A leaf queue the portal made
for a team that is gone is deleted (KAI refuses to delete a queue that still has children, and
the portal never deletes the parent while the cluster lives).
"""

from __future__ import annotations

from app.kube import quantities
from app.kube.errors import KubeError, TransientKubeError
from app.kube.manifests import labels as lbl
from app.kube.manifests.team_queues import TEAM
from app.kube.port import KubePort, Manifest


def ensure(port: KubePort, wanted: list[Manifest]) -> int:
    """Make the virtual cluster's queues ``wanted``; returns how many writes that took."""
    try:
        live = {q["metadata"]["name"]: q for q in port.list(
            lbl.KAI_API_VERSION, "Queue", label_selector=lbl.managed())}
    except KubeError as error:
        if error.status == 404:
            raise TransientKubeError(
                "KAI's Queue CRD is not served in the virtual cluster yet",
                reason="QueueCRDMissing") from error
        raise
    writes = 0
    for queue in wanted:  # the parent first: the leaves name it
        if quantities.drifted(live.get(queue["metadata"]["name"]), queue):
            port.apply(queue, force=True)
            writes += 1
    names = {q["metadata"]["name"] for q in wanted}
    for name, queue in sorted(live.items()):
        if name not in names and TEAM in (queue["metadata"].get("labels") or {}):
            port.delete(lbl.KAI_API_VERSION, "Queue", name)
            writes += 1
    return writes


def summary(wanted: list[Manifest]) -> str:
    """The condition's message: the parent and each team's GPUs."""
    parent, *leaves = wanted
    gpus = parent["spec"]["resources"]["gpu"]["quota"]
    teams = ", ".join(f"{q['metadata']['name']} {q['spec']['resources']['gpu']['quota']}"
                      for q in leaves)
    return f"queue {parent['metadata']['name']} ({gpus} GPUs); team queues: {teams}"
