"""The cluster pages in words a tenant uses: whether the host runs the latest change (the
generation numbers only for operators), and the GPU class by its name."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from tests.clusters.test_end_to_end import sign_in_acme_admin
from tests.support.web import HTML, csrf_of, htmx


def _status(client: TestClient) -> str:
    answer = client.get("/t/acme/clusters/train/status", headers={**HTML, "HX-Request": "true"})
    assert answer.status_code == 200
    return str(answer.text)


def _sync_sentence(status: str) -> str:
    found = re.search(r'<span id="cluster-sync"[^>]*>([^<]+)</span>', status)
    assert found
    return found.group(1)


def test_the_status_says_in_words_whether_the_cluster_is_up_to_date(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    created = client.post(
        "/t/acme/clusters",
        headers=htmx(csrf),
        data={"name": "train", "gpu_class_id": str(gpu_id), "gpus": "4"},
    )
    assert created.headers["HX-Redirect"] == "/t/acme/clusters/train"

    fresh = _status(client)
    assert _sync_sentence(fresh).startswith("Being set up")
    assert "converged at" not in fresh

    cluster_id = db.scalars(select(VirtualCluster.id)).one()
    db.execute(
        update(VirtualCluster)
        .where(VirtualCluster.id == cluster_id)
        .values(generation=2, observed_generation=1)
    )
    db.commit()
    behind = _status(client)
    assert _sync_sentence(behind).startswith("Catching up")
    # The numbers stay, for operators, out of the way.
    details = re.search(
        r"<details class=\"operator-details[^>]*>(.*?)</details>", behind, flags=re.S
    )
    assert details and "generation 2" in details.group(1) and "generation 1" in details.group(1)

    db.execute(
        update(VirtualCluster).where(VirtualCluster.id == cluster_id).values(observed_generation=2)
    )
    db.commit()
    assert _sync_sentence(_status(client)).startswith("Up to date")


def test_cluster_pages_name_the_gpu_class_by_its_display_name(
    client: TestClient, db: Session, oidc_issuer: str
) -> None:
    gpu_id = sign_in_acme_admin(db, oidc_issuer, client)
    csrf = csrf_of(client.get("/t/acme/clusters", headers=HTML).text)
    client.post(
        "/t/acme/clusters",
        headers=htmx(csrf),
        data={"name": "train", "gpu_class_id": str(gpu_id), "gpus": "4"},
    )
    named = (
        '<span class="gpu-class" title="NVIDIA-H100-80GB-HBM3">'
        '<span class="gpu-class-name">H100 80GB</span>'
        '<code class="gpu-class-product">NVIDIA-H100-80GB-HBM3</code></span>'
    )
    for path in ("/t/acme/clusters", "/t/acme/clusters/train", "/t/acme"):
        page = client.get(path, headers=HTML).text
        assert named in page, path
    listed = client.get("/api/v1/tenants/acme/clusters", headers={"X-CSRF-Token": csrf}).json()[
        "items"
    ]
    assert (listed[0]["gpu_class"], listed[0]["gpu_class_name"]) == (
        "NVIDIA-H100-80GB-HBM3",
        "H100 80GB",
    )
