"""A GPU class reads the same on every page: its display name, the product label a smaller
second line (and its title)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests import factories
from tests.support import oidc
from tests.support.web import HTML

NAMED = (
    '<span class="gpu-class" title="NVIDIA-L40S">'
    '<span class="gpu-class-name">L40S 48GB</span>'
    '<code class="gpu-class-product">NVIDIA-L40S</code></span>'
)


def test_every_admin_page_names_a_class_alike(client: TestClient, db: Session) -> None:
    acme = factories.tenant(db, "acme")
    gpu = factories.gpu_class(db, "NVIDIA-L40S", display_name="L40S 48GB")
    host = factories.env_host(db)
    node = factories.node(db, host, gpu, gpu_count=4)
    factories.assignment(db, factories.node(db, host, gpu, gpu_count=4), acme)
    factories.quota(db, acme, gpu, 2)
    factories.quota_request(db, acme, gpu, gpus=2)
    factories.cluster(db, acme, host, "train", gpu_class_id=gpu.id, gpus=2)
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    for path in (
        "/admin/quota-requests",
        "/admin/fleet",
        f"/admin/nodes/{node.name}",
        "/admin/gpu-classes",
        "/admin/fleet/hosts",
        "/t/acme",
        "/t/acme/nodes",
        "/t/acme/usage",
    ):
        page = client.get(path, headers=HTML)
        assert page.status_code == 200, path
        assert NAMED in page.text, path
    # Where only text fits, a menu says the same: name, then product.
    fleet = client.get("/admin/fleet", headers=HTML).text
    assert re.search(r'<option value="NVIDIA-L40S"\s*>L40S 48GB \(NVIDIA-L40S\)</option>', fleet)
