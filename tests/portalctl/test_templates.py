"""`portalctl templates` and clusters made from and upgraded to templates, on the real app."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from app.kit.config import Settings
from app.reconcilers.template_validation import TemplateValidator
from tests import factories
from tests.portalctl.conftest import Portal, PortalCtl, Result
from tests.support.drive import run_due
from tests.support.kube import InMemoryConnector
from tests.templates.support import StandinCharts

FAILED = {"passed": False, "note": None, "checks": [
    {"name": "allowlist", "passed": False, "reasons": ["hostPath volumes are not allowed"]}]}


def test_tenants_see_offered_versions_and_admins_see_every_state(
    portal: Portal, portalctl: PortalCtl
) -> None:
    with portal.database.transaction() as db:
        training = factories.cluster_template(db, "training", "dedicated H100s")
        factories.template_version(db, training, 1)
        factories.template_version(db, training, 2, state="draft", validation=FAILED)
        factories.template_version(db, training, 3, state="draft")
    portalctl.login(portal, "acme-admin")

    listed = _json(portalctl("templates", "list", "-o", "json"))
    assert listed == _api(portal, "acme-admin", "/api/v1/cluster-templates")
    shown = _json(portalctl("templates", "show", "training", "-o", "json"))
    assert shown == _api(portal, "acme-admin", "/api/v1/cluster-templates/training")
    assert [v["version"] for v in shown["versions"]] == [1]
    table = portalctl("templates", "list").stdout
    assert "training" in table and "v1 offered" in table

    portalctl("--profile", "ops", "login", "--url", portal.url, "--token-stdin",
              stdin=portal.tokens["platform-admin"])
    detail = portalctl("--profile", "ops", "templates", "show", "training").stdout
    assert "v1 offered, v2 draft, v3 draft" in detail
    rows = {line.split()[0]: line for line in detail.splitlines()[4:] if line}
    assert "passed" in rows["1"] and "failed: allowlist" in rows["2"]
    assert "not run" in rows["3"]
    missing = portalctl("templates", "show", "no-such-template")
    assert missing.exit_code == 3 and missing.stderr.startswith("error: ")


def test_a_platform_admin_validates_offers_and_retires_a_version(
    portal: Portal, portalctl: PortalCtl
) -> None:
    with portal.database.transaction() as db:
        training = factories.cluster_template(db, "training")
        factories.template_version(db, training, 1, state="draft")
        factories.template_version(db, training, 2, state="draft", validation=FAILED)
        factories.template_version(db, training, 3, state="draft",
                                   validation=factories.PASSED)
    portalctl.login(portal, "platform-admin")

    refused = portalctl("templates", "offer", "training", "2")
    assert refused.exit_code == 1 and "hostPath volumes are not allowed" in refused.stderr
    queued = _json(portalctl("templates", "validate", "training", "1", "--no-wait",
                             "-o", "json"))
    assert queued["validation_pending"] is True and queued["validation"] is None
    assert "pending" in portalctl("templates", "show", "training").stdout
    # The worker runs it; the served portal has no host cluster, so the host dry-run fails.
    with validating(portal):
        validated = _json(portalctl("templates", "validate", "training", "1", "-o", "json"))
        stored = _api(portal, "platform-admin", "/api/v1/cluster-templates/training")
        assert validated == stored["versions"][0]
        assert validated["validation"]["passed"] is False
        table = portalctl("templates", "validate", "training", "1").stdout
    assert "failed: host-dry-run" in table and "host-dry-run: no host cluster" in table
    assert portalctl("templates", "offer", "training", "1").exit_code == 1

    offered = portalctl("templates", "offer", "training", "3")
    assert offered.exit_code == 0, offered.stderr
    fields = dict(line.split(maxsplit=1) for line in offered.stdout.splitlines())
    assert (fields["version:"], fields["state:"], fields["validation:"]) == (
        "3", "offered", "passed")
    retired = _json(portalctl("templates", "retire", "training", "3", "-o", "yaml"),
                    parse=False)
    assert "state: retired" in retired
    assert portalctl("templates", "validate", "training", "9").exit_code == 3


def test_a_tenant_cannot_offer_a_template(portal: Portal, portalctl: PortalCtl) -> None:
    with portal.database.transaction() as db:
        training = factories.cluster_template(db, "training")
        factories.template_version(db, training, 1, state="draft",
                                   validation=factories.PASSED)
    portalctl.login(portal, "acme-admin")
    denied = portalctl("templates", "offer", "training", "1")
    assert denied.exit_code == 4 and denied.stderr.startswith("error: ")
    assert portalctl("templates", "validate", "training", "1").exit_code == 4


def test_a_cluster_is_made_from_a_template_and_upgraded_to_its_newer_version(
    portal: Portal, portalctl: PortalCtl
) -> None:
    with portal.database.transaction() as db:
        training = factories.cluster_template(db, "training")
        first = factories.template_version(db, training, 1).id
        second = factories.template_version(db, training, 2).id
    portalctl.login(portal, "acme-admin")
    sizes = ("--gpu-class", str(portal.h100_id), "--gpus", "2")

    created = _json(portalctl("clusters", "create", "train", *sizes, "--template", "training",
                              "--template-version", "1", "-o", "json"))
    assert created["template_version_id"] == first
    upgraded = _json(portalctl("clusters", "upgrade-template", "train", "-o", "json"))
    assert upgraded["template_version_id"] == second
    assert upgraded == _api(portal, "acme-admin", "/api/v1/tenants/acme/clusters/train")

    unknown = portalctl("clusters", "create", "other", *sizes, "--template", "no-such")
    assert unknown.exit_code == 1  # the API answers 422: a field of the create is wrong
    assert "no offered cluster template no-such" in unknown.stderr
    assert portalctl("clusters", "upgrade-template", "nope").exit_code == 3
    alone = portalctl("clusters", "create", "other", "--template-version", "1")
    assert alone.exit_code == 2 and "--template" in alone.stderr


def test_an_admin_creates_a_template_with_addon_settings_and_edits_one(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "platform-admin")
    kai = ("kai-scheduler oci://ghcr.io/nvidia/kai-scheduler kai-scheduler v0.9.3 "
           'scheduler.replicas=2 global.gpuSharing=true image.tag="2"')
    created = portalctl("templates", "create", "training", "--description", "KAI inside",
                        "--placement", "dedicated-nodes", "--gpu-class", str(portal.h100_id),
                        "--default-gpus", "8", "--max-gpus", "16", "--user-namespaces",
                        "--addon", kai)
    assert created.exit_code == 0, created.stderr
    first = _api(portal, "platform-admin", "/api/v1/cluster-templates/training")["versions"][0]
    assert first["addons"] == [{
        "name": "kai-scheduler", "repo": "oci://ghcr.io/nvidia/kai-scheduler",
        "chart": "kai-scheduler", "version": "v0.9.3",
        "settings": {"scheduler.replicas": 2, "global.gpuSharing": True, "image.tag": "2"}}]
    assert (first["placement"], first["max_gpus"], first["user_namespaces"]) == (
        "dedicated-nodes", 16, True)

    edited = _json(portalctl("templates", "new-version", "training", "--set",
                             "kai-scheduler:scheduler.replicas=3", "--set",
                             "kai-scheduler:image.tag=", "-o", "json"))
    assert edited["version"] == 2
    assert edited["addons"][0]["settings"] == {"scheduler.replicas": 3,
                                               "global.gpuSharing": True}
    assert edited["max_gpus"] == 16  # the rest copied from v1
    unknown = portalctl("templates", "new-version", "training", "--set", "gpu-operator:a=1")
    assert unknown.exit_code == 2 and "no add-on 'gpu-operator'" in unknown.stderr
    bad = portalctl("templates", "new-version", "training", "--addon", "kai oci://x kai")
    assert bad.exit_code == 2 and "--addon" in bad.stderr
    refused = portalctl("templates", "new-version", "training", "--set",
                        "kai-scheduler:scheduler replicas=3")
    assert refused.exit_code == 1 and "dotted names" in refused.stderr


@contextmanager
def validating(portal: Portal) -> Iterator[None]:
    """The portal's worker, as far as templates go: runs queued validations until done."""
    settings = Settings(env="test", database_url=portal.database.url)
    validator = TemplateValidator(settings, portal.database, InMemoryConnector(None),
                                  StandinCharts())
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            run_due(validator, "test-worker")
            stop.wait(0.1)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def _api(portal: Portal, who: str, path: str) -> Any:
    response = httpx.get(f"{portal.url}{path}",
                         headers={"Authorization": f"Bearer {portal.tokens[who]}"})
    response.raise_for_status()
    return response.json()


def _json(result: Result, *, parse: bool = True) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout) if parse else result.stdout
