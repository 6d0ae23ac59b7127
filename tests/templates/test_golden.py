"""Golden vcluster.yaml and host objects per template: what a cluster made from each template
gets, through the same path as a tenant's create (template -> cluster row -> builders).

UPDATE_GOLDEN=1 rewrites tests/templates/golden/ from the current code; review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.orm import Session

from app.clusters import service as clusters
from app.clusters.schemas import ClusterCreate
from app.templates.catalog import TemplateCatalog
from app.templates.schemas import VersionSettings
from app.templates.validation import outside_allowlist
from tests import factories
from tests.clusters.support import cluster_settings
from tests.support.tenancy import Tenancy

GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


def templates(tenancy: Tenancy) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Template settings, and what the tenant sends when creating a cluster from it."""
    h100 = tenancy.h100.id
    return {
        "default": ({"pod_security": None},
                    {"placement": "shared-pool", "gpu_class_id": h100, "gpus": 4,
                     "kubernetes_version": "1.32.4"}),
        "training": ({"placement": "dedicated-nodes", "kubernetes_version": "1.32.4",
                      "gpu_class_id": h100, "default_gpus": 8, "max_gpus": 16,
                      "user_namespaces": True}, {}),
        "inference": ({"placement": "shared-pool", "kubernetes_version": "1.31.8",
                       "gpu_class_id": h100, "default_gpus": 1, "max_gpus": 4,
                       "pod_security": "baseline"}, {"gpus": 2}),
    }


@pytest.mark.parametrize("name", ["default", "training", "inference"])
def test_golden_cluster_from_template(db: Session, tenancy: Tenancy, name: str) -> None:
    settings, asked = templates(tenancy)[name]
    if name != "default":
        template = factories.cluster_template(db, name)
        factories.template_version(db, template, 1, **VersionSettings.model_validate(
            settings).model_dump())
    principal = tenancy.principal(tenancy.acme_admin)
    payload = ClusterCreate.model_validate({"name": "train", "template": name, **asked})
    clusters.create_cluster(db, principal, cluster_settings(), "acme", payload,
                            TemplateCatalog())
    preview = clusters.preview(db, principal, cluster_settings(), "acme", "train")
    check_golden(f"{name}.values.yaml", preview.values_yaml)
    check_golden(f"{name}.objects.yaml", preview.objects_yaml)
    assert outside_allowlist(yaml.safe_load(preview.values_yaml)) == []
