"""Which pods the webhook refuses for reaching past their tenant's nodes, in each placement."""

from __future__ import annotations

from typing import Any

import pytest

from app.kube.manifests import labels as lbl
from app.webhook.mutation import review_pod
from app.webhook.placement import placement_refusal
from tests.webhook.test_mutation import SHARED_POOL, SYNCED, review

ACME = {lbl.MANAGED_BY: lbl.MANAGED_BY_VALUE, lbl.TENANT: "acme"}
SHARED = {**ACME, lbl.PLACEMENT: "shared-pool", lbl.QUEUE: "acme--train"}
DEDICATED = {**ACME, lbl.PLACEMENT: "dedicated-nodes"}
OWN_TOLERATION = {"key": lbl.TENANT, "operator": "Equal", "value": "acme",
                  "effect": "NoSchedule"}


def spec_with(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": dict(SYNCED)},
            "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec}}


def affinity(*expressions: dict[str, Any], preferred: bool = False) -> dict[str, Any]:
    term = {"matchExpressions": list(expressions)}
    node: dict[str, Any]
    if preferred:
        node = {"preferredDuringSchedulingIgnoredDuringExecution":
                [{"weight": 1, "preference": term}]}
    else:
        node = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    return {"nodeAffinity": node}


ATTACKS = {
    "blanket toleration": spec_with(tolerations=[{"operator": "Exists"}]),
    "tenant taint, any value": spec_with(tolerations=[{"key": lbl.TENANT, "operator": "Exists"}]),
    "another tenant's taint": spec_with(tolerations=[{**OWN_TOLERATION, "value": "initech"}]),
    "another tenant's label": spec_with(nodeSelector={lbl.TENANT: "initech"}),
    "affinity to another tenant": spec_with(affinity=affinity(
        {"key": lbl.TENANT, "operator": "In", "values": ["acme", "initech"]})),
    "preferred affinity to another tenant": spec_with(affinity=affinity(
        {"key": lbl.TENANT, "operator": "In", "values": ["initech"]}, preferred=True)),
    "affinity to any dedicated node": spec_with(affinity=affinity(
        {"key": lbl.TENANT, "operator": "Exists"})),
}


@pytest.mark.parametrize("namespace", [SHARED, DEDICATED], ids=["shared-pool", "dedicated"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_every_reach_for_another_tenants_nodes_is_refused(namespace: dict[str, str],
                                                          attack: str) -> None:
    assert placement_refusal(ATTACKS[attack], namespace, "CREATE") is not None
    assert placement_refusal(ATTACKS[attack], namespace, "UPDATE") is not None


def test_a_dedicated_cluster_keeps_its_own_toleration_selector_and_affinity() -> None:
    own = spec_with(tolerations=[OWN_TOLERATION, {"key": "node.kubernetes.io/not-ready",
                                                  "operator": "Exists", "effect": "NoExecute"}],
                    nodeSelector={lbl.TENANT: "acme"}, nodeName="gb200-r1-n1",
                    affinity=affinity({"key": lbl.TENANT, "operator": "In", "values": ["acme"]},
                                      {"key": lbl.TENANT, "operator": "NotIn",
                                       "values": ["initech"]}))
    assert placement_refusal(own, DEDICATED, "CREATE") is None
    # The same pod from a shared-pool cluster: the shared pool has no dedicated node of its own.
    refused = placement_refusal(own, SHARED, "CREATE")
    assert refused is not None and "shared-pool" in refused


def test_a_shared_pool_pod_may_not_name_its_node_at_creation() -> None:
    named = spec_with(nodeName="h100-r2-n3")
    refused = placement_refusal(named, SHARED, "CREATE")
    assert refused is not None and "h100-r2-n3" in refused and "kai-scheduler" in refused
    # Bound by KAI: the syncer's later updates carry the node name KAI chose.
    assert placement_refusal(named, SHARED, "UPDATE") is None


def test_namespaces_of_no_tenant_are_not_judged() -> None:
    blanket = ATTACKS["blanket toleration"]
    assert placement_refusal(blanket, None, "CREATE") is None
    assert placement_refusal(blanket, {lbl.TENANT: "acme"}, "CREATE") is None  # not managed


def test_the_webhook_answers_a_reach_for_another_tenant_with_a_refusal() -> None:
    pod = ATTACKS["tenant taint, any value"]
    answer = review_pod(review(pod), {**SHARED_POOL, lbl.TENANT: "acme"})
    assert answer["response"]["allowed"] is False
    assert lbl.TENANT in answer["response"]["status"]["message"]
    plain = review_pod(review(spec_with()), {**SHARED_POOL, lbl.TENANT: "acme"})
    assert plain["response"]["allowed"] is True
