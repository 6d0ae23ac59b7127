"""The kubeconfig panel of the cluster page: get one to copy or download, see and revoke."""

from __future__ import annotations

import base64
import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.kubeconfigs.models import KubeconfigGrant
from tests import factories
from tests.kube.emulator import KubeEmulator
from tests.support import oidc
from tests.support.virtual_clusters import ready_cluster
from tests.support.web import HTML, csrf_of, htmx

PANEL = "/t/acme/clusters/train/kubeconfigs"


def sign_in_to_acme(client: TestClient, db: Session, oidc_issuer: str, kube_emulator: KubeEmulator,
                    role: str) -> str:
    """A user with ``role`` in acme, signed in; acme has a Ready cluster ``train``."""
    acme = factories.tenant(db, "acme")
    email = f"{role}-web@acme.example"
    user = User(email=email, name="")
    db.add(user)
    db.flush()
    factories.membership(db, acme, user, role)
    ready_cluster(db, acme, server=kube_emulator.url)
    db.commit()
    oidc.register_user(oidc_issuer, email)
    oidc.sign_in(client, email)
    return email


def test_a_member_gets_a_kubeconfig_to_copy_and_download_then_revokes_it(
    client: TestClient, db: Session, oidc_issuer: str, kube_emulator: KubeEmulator,
) -> None:
    sign_in_to_acme(client, db, oidc_issuer, kube_emulator, "member")
    page = client.get(PANEL, headers=HTML)
    assert page.status_code == 200 and "Get kubeconfig" in page.text
    roles = re.findall(r'<option value="(\w+)"', page.text.split('name="lifetime_seconds"')[0])
    assert roles == ["edit", "view"]  # a member is offered no admin kubeconfig
    csrf = csrf_of(page.text)

    issued = client.post(PANEL, headers=htmx(csrf),
                         data={"role": "view", "lifetime_seconds": "3600"})
    assert issued.status_code == 201
    assert issued.headers["cache-control"] == "no-store"
    token = kube_emulator.tokens[-1]["token"]
    assert token in issued.text and 'data-copy-target="#kubeconfig-yaml"' in issued.text
    download = re.search(r'href="data:application/yaml;base64,([^"]+)"', issued.text)
    assert download and token in base64.b64decode(download.group(1)).decode()
    grant = db.scalars(select(KubeconfigGrant)).one()
    assert f'id="grant-{grant.id}"' in issued.text

    revoked = client.post(f"{PANEL}/{grant.id}/revoke", headers=htmx(csrf))
    assert revoked.status_code == 200 and f'id="grant-{grant.id}"' not in revoked.text
    assert token not in revoked.text
    assert kube_emulator.stored("v1", "Secret", grant.secret_name, "gpu-tenant-portal") is None


def test_a_plain_form_post_downloads_the_file(
    client: TestClient, db: Session, oidc_issuer: str, kube_emulator: KubeEmulator,
) -> None:
    sign_in_to_acme(client, db, oidc_issuer, kube_emulator, "viewer")
    csrf = csrf_of(client.get(PANEL, headers=HTML).text)
    response = client.post(PANEL, data={"csrf_token": csrf, "role": "view",
                                        "lifetime_seconds": "600"})
    assert response.status_code == 201
    assert response.headers["content-disposition"].startswith("attachment;")
    assert "acme-train-view.kubeconfig.yaml" in response.headers["content-disposition"]
    assert response.headers["cache-control"] == "no-store"
    assert kube_emulator.tokens[-1]["token"] in response.text


def test_a_bad_lifetime_shows_the_form_again_with_the_message_and_makes_nothing(
    client: TestClient, db: Session, oidc_issuer: str, kube_emulator: KubeEmulator,
) -> None:
    sign_in_to_acme(client, db, oidc_issuer, kube_emulator, "admin")
    csrf = csrf_of(client.get(PANEL, headers=HTML).text)
    response = client.post(PANEL, headers=htmx(csrf),
                           data={"role": "admin", "lifetime_seconds": "90000"})
    assert response.status_code == 422
    assert 'class="field-error"' in response.text and "at most 86400 seconds" in response.text
    assert kube_emulator.tokens == [] and db.scalars(select(KubeconfigGrant)).all() == []
