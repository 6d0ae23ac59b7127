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


# Where the product may be shown: as the label's second line and title, in a menu's text after
# the name, and in attributes a script or a test reads.
BESIDE_THE_NAME = (NAMED, "L40S 48GB (NVIDIA-L40S)", '="NVIDIA-L40S"')


def test_no_page_or_chart_names_a_class_by_its_product_alone(
        client: TestClient, db: Session) -> None:
    acme = factories.tenant(db, "acme")
    gpu = factories.gpu_class(db, "NVIDIA-L40S", display_name="L40S 48GB")
    host = factories.env_host(db)
    factories.node(db, host, gpu, gpu_count=4)
    factories.quota(db, acme, gpu, 2)
    factories.quota_request(db, acme, gpu, gpus=2)
    factories.cluster(db, acme, host, "train", gpu_class_id=gpu.id, gpus=2)
    template = factories.cluster_template(db, "training")
    factories.template_version(db, template, gpu_class_id=gpu.id)
    factories.machine(db, host, gpu, "gpu-r4-07")
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    for path in ("/", "/admin/usage", "/t/acme/usage", "/admin/cluster-templates/training",
                 "/admin/machines", "/admin/machines/gpu-r4-07", "/t/acme",
                 "/admin/quota-requests", "/admin/fleet/hosts"):
        page = client.get(path, headers=HTML)
        assert page.status_code == 200, path
        assert "L40S 48GB" in page.text, path
        rest = page.text
        for allowed in BESIDE_THE_NAME:
            rest = rest.replace(allowed, "")
        shown = [rest[max(i - 80, 0):i + 20] for i in _places(rest, "NVIDIA-L40S")]
        assert shown == [], path
    home = client.get("/", headers=HTML).text
    oldest = home.split('id="oldest-request"', 1)[1].split("</p>", 1)[0]
    assert f"2 \u00d7 {NAMED}" in oldest


def _places(text: str, word: str) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(word), text)]
