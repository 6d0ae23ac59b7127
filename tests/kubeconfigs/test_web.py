"""The kubeconfig panel of the cluster page: get one to copy or download, see and revoke, on a
real kube-apiserver standing in for the virtual cluster (``virtual_api``)."""

from __future__ import annotations

import base64
import json
import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.kube.adapter import KubernetesAdapter
from app.kubeconfigs.manifests import service_account_name
from app.kubeconfigs.models import KubeconfigGrant
from tests import factories
from tests.support import oidc
from tests.support.kube import RecordingConnector
from tests.support.kube_server import ApiServer
from tests.support.kubeconfigs import (
    Kubeconfig,
    account_username,
    bound_secret_name,
    objects_of_user,
    real_ready_cluster,
)
from tests.support.web import HTML, csrf_of, htmx

pytestmark = pytest.mark.kube_server
PANEL = "/t/acme/clusters/train/kubeconfigs"


def sign_in_to_acme(client: TestClient, db: Session, oidc_issuer: str, virtual_api: ApiServer,
                    role: str) -> User:
    """A user with ``role`` in acme, signed in; acme has a Ready cluster ``train``."""
    acme = factories.tenant(db, "acme")
    email = f"{role}-web@acme.example"
    user = User(email=email, name="")
    db.add(user)
    db.flush()
    factories.membership(db, acme, user, role)
    real_ready_cluster(db, acme, virtual_api)
    db.commit()
    oidc.register_user(oidc_issuer, email)
    oidc.sign_in(client, email)
    return user


def test_a_member_gets_a_kubeconfig_to_copy_and_download_then_revokes_it(
    client: TestClient, db: Session, oidc_issuer: str, virtual_api: ApiServer,
    virtual: KubernetesAdapter,
) -> None:
    user = sign_in_to_acme(client, db, oidc_issuer, virtual_api, "member")
    page = client.get(PANEL, headers=HTML)
    assert page.status_code == 200 and "Get kubeconfig" in page.text
    roles = re.findall(r'<option value="(\w+)"', page.text.split('name="lifetime_seconds"')[0])
    assert roles == ["edit", "view"]  # a member is offered no admin kubeconfig
    csrf = csrf_of(page.text)

    issued = client.post(PANEL, headers=htmx(csrf),
                         data={"role": "view", "lifetime_seconds": "3600"})
    assert issued.status_code == 201
    assert issued.headers["cache-control"] == "no-store"
    download = re.search(r'href="data:application/yaml;base64,([^"]+)"', issued.text)
    assert download
    kubeconfig = Kubeconfig.parse(base64.b64decode(download.group(1)).decode())
    token = kubeconfig.token
    assert token in issued.text and 'data-copy-target="#kubeconfig-yaml"' in issued.text
    assert kubeconfig.who_am_i() == account_username(service_account_name(user.id, "view"))
    grant = db.scalars(select(KubeconfigGrant)).one()
    assert bound_secret_name(kubeconfig.claims()) == grant.secret_name
    assert f'id="grant-{grant.id}"' in issued.text

    asked = client.get(f"{PANEL}/{grant.id}/revoke", headers=htmx(csrf))
    assert asked.status_code == 200 and f'id="confirm-revoke-{grant.id}"' in asked.text
    assert "Revoke the view kubeconfig of member-web@acme.example?" in asked.text
    assert "hx-confirm" not in asked.text  # asked in the page, not in a browser dialog
    assert db.scalars(select(KubeconfigGrant)).one().revoked_at is None  # asking changes nothing

    revoked = client.post(f"{PANEL}/{grant.id}/revoke", headers=htmx(csrf))
    assert revoked.status_code == 200 and f'id="grant-{grant.id}"' not in revoked.text
    assert token not in revoked.text
    assert json.loads(revoked.headers["hx-trigger"]) == {"toast": {"message": (
        "Revoked the view kubeconfig of member-web@acme.example: it no longer works.")}}
    history = revoked.text.split('id="revoked-grants"')[1]
    assert f'id="revoked-{grant.id}"' in history and "member-web@acme.example" in history
    assert virtual.get("v1", "Secret", grant.secret_name, "gpu-tenant-portal") is None


def test_the_lifetime_menu_counts_in_words(
    client: TestClient, db: Session, oidc_issuer: str, virtual_api: ApiServer,
) -> None:
    sign_in_to_acme(client, db, oidc_issuer, virtual_api, "member")
    menu = client.get(PANEL, headers=HTML).text.split('name="lifetime_seconds"')[1]
    choices = [" ".join(c.split()) for c in re.findall(r"<option[^>]*>([^<]+)</option>", menu)]
    assert "1 hour" in choices and "10 minutes" in choices and "24 hours" in choices
    assert not [choice for choice in choices if choice.startswith("1 ") and choice.endswith("s")]


def test_a_plain_form_post_downloads_the_file(
    client: TestClient, db: Session, oidc_issuer: str, virtual_api: ApiServer,
) -> None:
    user = sign_in_to_acme(client, db, oidc_issuer, virtual_api, "viewer")
    csrf = csrf_of(client.get(PANEL, headers=HTML).text)
    response = client.post(PANEL, data={"csrf_token": csrf, "role": "view",
                                        "lifetime_seconds": "600"})
    assert response.status_code == 201
    assert response.headers["content-disposition"].startswith("attachment;")
    assert "acme-train-view.kubeconfig.yaml" in response.headers["content-disposition"]
    assert response.headers["cache-control"] == "no-store"
    kubeconfig = Kubeconfig.parse(response.text)  # the file is the kubeconfig itself
    claims = kubeconfig.claims()
    assert claims["sub"] == account_username(service_account_name(user.id, "view"))
    assert claims["exp"] - claims["iat"] == 600
    assert kubeconfig.answers() == 200


def test_a_bad_lifetime_shows_the_form_again_with_the_message_and_makes_nothing(
    client: TestClient, db: Session, oidc_issuer: str, virtual_api: ApiServer,
    virtual: KubernetesAdapter, kube_calls: RecordingConnector,
) -> None:
    user = sign_in_to_acme(client, db, oidc_issuer, virtual_api, "admin")
    csrf = csrf_of(client.get(PANEL, headers=HTML).text)
    response = client.post(PANEL, headers=htmx(csrf),
                           data={"role": "admin", "lifetime_seconds": "90000"})
    assert response.status_code == 422
    assert 'class="field-error"' in response.text and "at most 86400 seconds" in response.text
    assert kube_calls.calls == [] and db.scalars(select(KubeconfigGrant)).all() == []
    assert objects_of_user(virtual, user.id) == []
