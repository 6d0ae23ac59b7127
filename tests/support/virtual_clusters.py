"""Ready virtual clusters for tests: a row as the cluster reconciler leaves it once Ready,
with a sealed admin kubeconfig pointing at a test API server (the emulator's URL)."""

from __future__ import annotations

import base64
from datetime import timedelta

import yaml
from sqlalchemy.orm import Session

from app.clusters.models import VirtualCluster
from app.database.core import utcnow
from app.kit.config import DEV_ENCRYPTION_KEY
from app.kit.crypto import SecretBox
from app.kubeconfigs.models import KubeconfigGrant
from app.tenants.models import Tenant
from tests import factories

TEST_CA_PEM = b"-----BEGIN CERTIFICATE-----\nTUlJQnRlc3QtY2E=\n-----END CERTIFICATE-----\n"
TEST_CA_DATA = base64.b64encode(TEST_CA_PEM).decode()
READY = {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
         "lastTransitionTime": "2026-11-29T15:00:00Z", "observedGeneration": 1}


def admin_kubeconfig(server: str, name: str = "vc-train") -> str:
    """What vCluster exports in Secret vc-<release> (key ``config``), with a client token."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server,
                                                "certificate-authority-data": TEST_CA_DATA}}],
        "users": [{"name": name, "user": {"token": "admin-token-never-shown"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    })


def ready_cluster(db: Session, tenant: Tenant, *, server: str = "http://127.0.0.1:1",
                  name: str = "train", endpoint: str = "https://train.acme.vc.example.com",
                  key: str = DEV_ENCRYPTION_KEY, ready: bool = True,
                  kubeconfig: str | None = None) -> VirtualCluster:
    """``kubeconfig`` is the admin credential as stored; by default a token one for ``server``."""
    host = factories.host_cluster(db)
    return factories.cluster(
        db, tenant, host, name, endpoint=endpoint, observed_generation=1,
        conditions=[READY if ready else {**READY, "status": "False", "reason": "Installing"}],
        admin_kubeconfig_encrypted=SecretBox(key).seal(kubeconfig or admin_kubeconfig(server)),
    )


def grant(db: Session, cluster: VirtualCluster, user_id: int, role: str = "view", *,
          hours: float = 1.0, secret_name: str | None = None) -> KubeconfigGrant:
    service_account = f"user-{user_id}-{role}"
    row = KubeconfigGrant(user_id=user_id, cluster_id=cluster.id, role=role,
                          service_account=service_account,
                          secret_name=secret_name or f"{service_account}-test{user_id}",
                          expires_at=utcnow() + timedelta(hours=hours))
    db.add(row)
    db.flush()
    return row
