"""What a synced pod may ask of its cluster's GPUs, by the unit the cluster holds them in, and
the sharing a pod asking for a share of one GPU leaves with (KAI's admission's shape)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from app.kube.manifests import ClusterSpec, ManifestPolicy, namespace
from app.kube.manifests import labels as lbl
from app.webhook.gpu_sharing import configmap_prefix
from app.webhook.mutation import review_pod
from tests.support.json_patch import patched

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
SYNCED = {lbl.VCLUSTER_SYNCED_MARKER: "notebooks"}
UID = "0f7c0b1e-5d0e-4c36-9d1b-2d5d3c1c4a51"


def labels_of(unit: str, **overrides: Any) -> dict[str, str]:
    """The namespace labels the portal writes for a cluster of ``unit``."""
    fields: dict[str, Any] = {
        "tenant": "acme", "name": "notebooks", "kubernetes_version": "1.32.4",
        "placement": "shared-pool", "gpu_class": H100, "gpus": 2, "cpu_millicores": 8000,
        "memory_mib": 16384, "endpoint": "https://notebooks.acme.vc.example.com"}
    if unit == "mig":
        fields.update(gpu_class=A100, gpus=0, gpu_unit="mig", mig_profile="1g.10gb", amount=3)
    elif unit == "share":
        fields.update(gpus=0, gpu_unit="share", amount=50)
    spec = ClusterSpec(**{**fields, **overrides})
    labels: dict[str, str] = namespace(spec, ManifestPolicy())["metadata"]["labels"]
    return labels


def pod(annotations: dict[str, str] | None = None, limits: dict[str, Any] | None = None,
        name: str = "nb-x-default-x-notebooks", **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": dict(SYNCED)}
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if limits is not None:
        container["resources"] = {"limits": limits}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [container], **spec}}


def review(obj: dict[str, Any], labels: dict[str, str], operation: str = "CREATE",
           old: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": UID, "operation": operation,
                               "namespace": "t-acme--notebooks", "object": obj}
    if old is not None:
        request["oldObject"] = old
    answer: dict[str, Any] = review_pod({"apiVersion": "admission.k8s.io/v1",
                                         "kind": "AdmissionReview", "request": request}, labels)
    response: dict[str, Any] = answer["response"]
    return response


def refusal(obj: dict[str, Any], labels: dict[str, str], operation: str = "CREATE",
            old: dict[str, Any] | None = None) -> str | None:
    response = review(obj, labels, operation, old)
    return None if response["allowed"] else str(response["status"]["message"])


def landed(obj: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """The pod as the API server stores it after the webhook's patch."""
    response = review(obj, labels)
    return patched(obj, response)


GPU, MIG, SHARE = labels_of("gpu"), labels_of("mig"), labels_of("share")


# --- a namespace of whole GPUs ---------------------------------------------------------


@pytest.mark.parametrize(("obj", "words"), [
    (pod({"gpu-fraction": "0.5"}),
     "this cluster holds whole GPUs: a pod asks for them with nvidia.com/gpu; this pod asks "
     "for a share of one with the annotation gpu-fraction"),
    (pod({"gpu-memory": "4096"}), "with the annotation gpu-memory"),
    (pod(limits={"nvidia.com/mig-1g.10gb": "1"}),
     "this pod asks for MIG slices (nvidia.com/mig-1g.10gb)"),
])
def test_whole_gpus_refuse_shares_and_slices(obj: dict[str, Any], words: str) -> None:
    assert words in (refusal(obj, GPU) or "")


def test_whole_gpus_are_asked_for_as_always() -> None:
    assert refusal(pod(limits={"nvidia.com/gpu": "2"}), GPU) is None
    assert refusal(pod(), GPU) is None


# --- a namespace of MIG slices ---------------------------------------------------------

MIG_HOLDS = "this cluster holds 3 \u00d7 1g.10gb of A100 SXM4 80GB"


@pytest.mark.parametrize(("obj", "asks"), [
    (pod(limits={"nvidia.com/gpu": "1"}), "nvidia.com/gpu"),
    (pod(limits={"nvidia.com/mig-3g.40gb": "1"}), "nvidia.com/mig-3g.40gb"),
    (pod({"gpu-fraction": "0.5"}), "a share of one GPU with the annotation gpu-fraction"),
    (pod({"gpu-memory": "100"}), "a share of one GPU with the annotation gpu-memory"),
])
def test_slices_refuse_whole_gpus_shares_and_other_profiles(obj: dict[str, Any],
                                                            asks: str) -> None:
    assert refusal(obj, MIG) == (
        f"{MIG_HOLDS}; a pod may ask for nvidia.com/mig-1g.10gb only; this pod asks for {asks}")


def test_one_pod_asks_for_no_more_slices_than_the_cluster_holds() -> None:
    two_containers = pod(limits={"nvidia.com/mig-1g.10gb": "2"})
    two_containers["spec"]["containers"].append(
        {"name": "side", "image": "busybox",
         "resources": {"requests": {"nvidia.com/mig-1g.10gb": 2},
                       "limits": {"nvidia.com/mig-1g.10gb": 2}}})
    assert refusal(two_containers, MIG) == f"{MIG_HOLDS}; this pod asks for 4 of them"
    assert refusal(pod(limits={"nvidia.com/mig-1g.10gb": "3"}), MIG) is None
    # An init container runs before the others: the most at once is what counts.
    with_init = pod(limits={"nvidia.com/mig-1g.10gb": "2"}, initContainers=[
        {"name": "warm", "image": "busybox", "resources": {"limits": {
            "nvidia.com/mig-1g.10gb": "3"}}}])
    assert refusal(with_init, MIG) is None


def test_slices_of_the_own_profile_are_admitted_and_not_patched_for_sharing() -> None:
    obj = pod(limits={"nvidia.com/mig-1g.10gb": "1"})
    assert "shared-gpu" not in json.dumps(landed(obj, MIG))


# --- a namespace of a share ------------------------------------------------------------

SHARE_HOLDS = "this cluster holds 0.5 of one H100 80GB HBM3, shared"


@pytest.mark.parametrize(("obj", "words"), [
    (pod(limits={"nvidia.com/gpu": "1"}),
     f"{SHARE_HOLDS}: ask with the annotation gpu-fraction; this pod asks for nvidia.com/gpu"),
    (pod(limits={"nvidia.com/mig-1g.10gb": "1"}),
     f"{SHARE_HOLDS}: ask with the annotation gpu-fraction; this pod asks for "
     "nvidia.com/mig-1g.10gb"),
    (pod({"gpu-memory": "4096"}),
     f"{SHARE_HOLDS}: ask with the annotation gpu-fraction, not gpu-memory"),
    (pod({"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"}),
     f"{SHARE_HOLDS}: a pod shares one GPU, so gpu-fraction-num-devices is not supported"),
    (pod({"gpu-fraction": "0.75"}),
     "this pod asks 0.75 of one H100 80GB HBM3, the cluster holds 0.5"),
])
def test_a_share_refuses_in_words(obj: dict[str, Any], words: str) -> None:
    assert refusal(obj, SHARE) == words


@pytest.mark.parametrize("text", ["0", "0.00", "1.5", "-0.5", "0.125", "half", "5e-1", "",
                                  " 0.5", "01"])
def test_a_fraction_kai_would_not_read_as_hundredths_of_one_gpu_is_refused(text: str) -> None:
    assert refusal(pod({"gpu-fraction": text}), labels_of("share", amount=100)) == (
        f"gpu-fraction is a number in (0, 1] in steps of 0.01; this pod has "
        f"gpu-fraction: {text!r}")


@pytest.mark.parametrize("text", ["0.5", ".5", "0.50", "0.25", "0.01", "1", "1.0"])
def test_a_fraction_up_to_the_share_is_admitted(text: str) -> None:
    assert refusal(pod({"gpu-fraction": text}), labels_of("share", amount=100)) is None


def test_the_share_is_the_ceiling_of_one_pod() -> None:
    assert refusal(pod({"gpu-fraction": "0.5"}), SHARE) is None
    assert refusal(pod({"gpu-fraction": "0.51"}), SHARE) is not None
    assert refusal(pod({"gpu-fraction": "0.07"}), labels_of("share", amount=7)) is None


def test_a_pod_without_a_gpu_ask_is_admitted_anywhere_unpatched_for_sharing() -> None:
    for labels in (GPU, MIG, SHARE):
        assert refusal(pod(), labels) is None
        assert "shared-gpu" not in json.dumps(landed(pod(), labels))


# --- UPDATE ----------------------------------------------------------------------------


def test_a_share_ask_cannot_change_on_update() -> None:
    before = pod({"gpu-fraction": "0.25"})
    assert refusal(pod({"gpu-fraction": "0.5"}), SHARE, "UPDATE", before) == (
        "the annotation gpu-fraction of a pod cannot change once it is made ('0.25' to "
        "'0.5'): make a new pod")
    assert "gpu-fraction" in (refusal(pod(), SHARE, "UPDATE", before) or "")
    assert "gpu-memory" in (refusal(pod({"gpu-memory": "1"}), GPU, "UPDATE", pod()) or "")
    assert refusal(pod({"gpu-fraction": "0.25"}), SHARE, "UPDATE", before) is None


def test_an_update_keeps_a_pod_the_cluster_since_shrank_below() -> None:
    running = pod({"gpu-fraction": "0.5"})
    assert refusal(running, labels_of("share", amount=25), "UPDATE", running) is None
    assert refusal(running, labels_of("share", amount=25)) is not None


# --- the sharing mutation --------------------------------------------------------------


def test_a_share_pod_leaves_with_kais_sharing_configmaps() -> None:
    obj = pod({"gpu-fraction": "0.25"})
    obj["spec"]["containers"][0]["env"] = [{"name": "GPU_PORTION", "value": "mine"},
                                           {"name": "KEEP", "value": "1"}]
    out = landed(obj, SHARE)
    prefix = out["metadata"]["annotations"]["runai/shared-gpu-configmap"]
    assert prefix == configmap_prefix(obj, UID, 0)
    base, hashed, *_ = prefix.rsplit("-", 3)
    assert (base, prefix.endswith("-shared-gpu"), len(hashed)) == (
        "nb-x-default-x-notebooks", True, 7)
    container = out["spec"]["containers"][0]
    assert container["env"] == [{"name": "KEEP", "value": "1"}] + [
        {"name": name, "valueFrom": {"configMapKeyRef": {"name": f"{prefix}-0", "key": name}}}
        for name in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")]
    assert container["envFrom"] == [{"configMapRef": {"name": f"{prefix}-0-evar",
                                                      "optional": False}}]
    assert out["spec"]["volumes"] == [{"name": f"{prefix}-0-vol",
                                       "configMap": {"name": f"{prefix}-0"}}]
    assert out["spec"]["schedulerName"] == lbl.KAI_SCHEDULER_NAME
    # Already there (a second review, or KAI's own admission): nothing more.
    again = review(out, SHARE)
    assert again == {"uid": UID, "allowed": True}


def test_the_prefix_is_the_same_for_a_retried_review_and_differs_per_request() -> None:
    obj = pod({"gpu-fraction": "0.25"})
    assert configmap_prefix(obj, UID, 0) == configmap_prefix(obj, UID, 0)
    assert configmap_prefix(obj, UID, 0) != configmap_prefix(obj, "another-uid", 0)


def test_a_long_name_is_cut_so_every_name_stays_a_dns_label() -> None:
    long = pod({"gpu-fraction": "0.25"}, name="a" * 120)
    out = landed(long, SHARE)
    volume = out["spec"]["volumes"][-1]["name"]
    evar = out["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"]
    assert len(volume) <= 63 and len(evar) <= 63
    assert out["metadata"]["annotations"]["runai/shared-gpu-configmap"].startswith("a" * 33 + "-")
    owned = pod({"gpu-fraction": "0.25"}, name="x.y")
    owned["metadata"]["ownerReferences"] = [{"name": "my.job", "kind": "Job"}]
    assert configmap_prefix(owned, UID, 0).startswith("my-job-")


def test_the_fraction_container_may_be_named_and_be_an_init_container() -> None:
    obj = pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "warm"},
              initContainers=[{"name": "warm", "image": "busybox"}], volumes=[
                  {"name": "data", "emptyDir": {}}])
    out = landed(obj, SHARE)
    prefix = out["metadata"]["annotations"]["runai/shared-gpu-configmap"]
    assert out["spec"]["initContainers"][0]["envFrom"][0]["configMapRef"]["name"] == (
        f"{prefix}-i0-evar")
    assert "env" not in out["spec"]["containers"][0]
    assert [v["name"] for v in out["spec"]["volumes"]] == ["data", f"{prefix}-i0-vol"]
    missing = pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "nope"})
    assert refusal(missing, SHARE) == ("the annotation gpu-fraction-container-name names "
                                       "container 'nope', which this pod does not have")


def test_an_optional_configmap_still_becomes_projected_beside_the_sharing_volume() -> None:
    obj = pod({"gpu-fraction": "0.5"}, volumes=[
        {"name": "custom", "configMap": {"name": "coredns-custom", "optional": True}}])
    out = landed(obj, SHARE)
    assert "projected" in out["spec"]["volumes"][0]
    assert out["spec"]["volumes"][1]["configMap"]["name"].endswith("-shared-gpu-0")


def test_sharing_is_set_on_create_only() -> None:
    obj = pod({"gpu-fraction": "0.5"})
    response = review(obj, SHARE, "UPDATE", obj)
    assert response["allowed"]
    assert "shared-gpu" not in base64.b64decode(response.get("patch", "")).decode()
