"""Add-ons: installed into the virtual cluster once it is Ready, one condition each, retried
with backoff, left alone when nothing changed, uninstalled when no longer wanted.

A cluster gets its add-ons from its template version (the templates domain builds them and
hands them over through ``app.clusters.shapes``); here they are written to the row as a create
or a template upgrade does.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml

from app.clusters import conditions as cond
from app.clusters.models import VirtualCluster
from app.clusters.shapes import ClusterAddon
from app.database.core import Database
from app.kube import simulated
from app.kube.helm import HelmInstaller, InstallError, SimulatedInstaller
from tests.clusters.support import Harness, create
from tests.support.tenancy import Tenancy

KAI = ClusterAddon(name="kai-scheduler", repo="https://charts.example.com/kai",
                   chart="kai-scheduler", version="0.9.3",
                   values={"scheduler": {"replicas": 2}})
MONITORING = ClusterAddon(name="monitoring", repo="https://charts.example.com/obs",
                          chart="agent", version="1.4.0")
KAI_READY = cond.addon_type("kai-scheduler")
MONITORING_READY = cond.addon_type("monitoring")


def want(database: Database, cluster_id: int, *addons: ClusterAddon,
         new_generation: bool = True) -> None:
    """What a template upgrade does to the row: new add-ons, a new generation."""
    with database.transaction() as db:
        cluster = db.get(VirtualCluster, cluster_id)
        assert cluster is not None
        cluster.addons = [a.as_json() for a in addons]
        if new_generation:
            cluster.generation += 1


def condition(harness: Harness, cluster_id: int, type_: str) -> dict[str, object] | None:
    cluster = harness.cluster(cluster_id)
    assert cluster is not None
    return cond.find(cluster.conditions, type_)


def test_addons_wait_for_ready_then_each_is_installed_with_its_condition(
    harness: Harness, tenancy: Tenancy
) -> None:
    created = create(harness.database, tenancy)
    want(harness.database, created.id, KAI, MONITORING, new_generation=False)
    harness.connector.answers_readyz = False
    harness.converge(3)
    assert harness.installer.addon_calls == []
    assert condition(harness, created.id, KAI_READY) is None

    harness.connector.answers_readyz = True
    harness.converge(3)
    assert harness.installer.addon_calls == [("install", "kai-scheduler"),
                                             ("install", "monitoring")]
    assert harness.installer.addons == {"kai-scheduler": KAI, "monitoring": MONITORING}
    cluster = harness.cluster(created.id)
    assert cluster is not None
    kai = cond.find(cluster.conditions, KAI_READY)
    assert kai is not None and kai["status"] == "True" and kai["reason"] == "Installed"
    assert "kai-scheduler 0.9.3 from https://charts.example.com/kai" in kai["message"]
    # Shown after Ready, before Failed, in name order.
    types = [c["type"] for c in cluster.conditions]
    assert types[types.index(cond.READY) + 1:] == [KAI_READY, MONITORING_READY]


def test_a_failed_install_is_retried_with_backoff_and_ready_stays(
    harness: Harness, tenancy: Tenancy
) -> None:
    created = create(harness.database, tenancy)
    want(harness.database, created.id, KAI, MONITORING, new_generation=False)
    harness.installer.addon_failures.append(
        InstallError("helm upgrade failed: repository unreachable"))
    harness.run()
    failed = condition(harness, created.id, KAI_READY)
    assert failed is not None and failed["status"] == "False"
    assert failed["reason"] == "HelmFailed" and "repository unreachable" in str(failed["message"])
    # The other add-on and the cluster itself are not held up.
    assert (condition(harness, created.id, MONITORING_READY) or {}).get("status") == "True"
    assert (condition(harness, created.id, cond.READY) or {}).get("status") == "True"
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.failed_attempts == 1
    retry_in = (harness.due_at(created.id) - harness.clock()).total_seconds()
    assert 0 < retry_in < harness.reconciler.settings.worker_resync_seconds

    harness.run(later=retry_in + 1)
    retried = condition(harness, created.id, KAI_READY)
    assert retried is not None and retried["status"] == "True"
    assert harness.installer.addon_calls.count(("install", "kai-scheduler")) == 2
    assert harness.installer.addon_calls.count(("install", "monitoring")) == 1
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.failed_attempts == 0


def test_an_unchanged_cluster_makes_no_installer_calls_and_a_changed_addon_one(
    harness: Harness, tenancy: Tenancy
) -> None:
    created = create(harness.database, tenancy)
    want(harness.database, created.id, KAI, new_generation=False)
    harness.converge(3)
    calls = list(harness.installer.addon_calls)
    cluster = harness.cluster(created.id)
    assert cluster is not None
    updated_at = cluster.updated_at
    harness.converge(5)
    assert harness.installer.addon_calls == calls
    cluster = harness.cluster(created.id)
    assert cluster is not None and cluster.updated_at == updated_at

    upgraded = ClusterAddon(**{**KAI.as_json(), "values": {"scheduler": {"replicas": 3}}})
    want(harness.database, created.id, upgraded)
    harness.converge(3)
    assert harness.installer.addon_calls == [*calls, ("install", "kai-scheduler")]
    assert harness.installer.addons["kai-scheduler"].values == {"scheduler": {"replicas": 3}}


def test_an_addon_no_longer_wanted_is_uninstalled_and_its_condition_removed(
    harness: Harness, tenancy: Tenancy
) -> None:
    created = create(harness.database, tenancy)
    want(harness.database, created.id, KAI, MONITORING, new_generation=False)
    harness.converge(3)
    want(harness.database, created.id, KAI)
    harness.installer.addon_failures.append(InstallError("helm uninstall failed: timeout"))
    harness.run()
    stuck = condition(harness, created.id, MONITORING_READY)
    assert stuck is not None and stuck["status"] == "False"
    assert "monitoring" in harness.installer.addons

    harness.converge(3)
    assert harness.installer.addon_calls[-2:] == [("uninstall", "monitoring"),
                                                  ("uninstall", "monitoring")]
    assert harness.installer.addons == {"kai-scheduler": KAI}
    assert condition(harness, created.id, MONITORING_READY) is None
    assert (condition(harness, created.id, KAI_READY) or {}).get("status") == "True"


def test_addons_are_installed_again_when_the_release_was_removed_behind_our_back(
    harness: Harness, tenancy: Tenancy
) -> None:
    created = create(harness.database, tenancy)
    want(harness.database, created.id, KAI, new_generation=False)
    harness.converge(3)
    harness.kube.delete("v1", "Secret", "vc-train", "t-acme--train")
    harness.converge(3)
    assert harness.installer.addon_calls == [("install", "kai-scheduler")] * 2


class RecordingHelm(HelmInstaller):
    """The real HelmInstaller up to running helm: records each command and the files it
    names while they exist."""

    def __init__(self) -> None:
        super().__init__(binary="helm", chart_repo="https://charts.loft.sh",
                         chart_version="0.26.0", kubeconfig="/host/kubeconfig")
        self.runs: list[tuple[list[str], dict[str, tuple[str, int]]]] = []

    def _run(self, command: list[str]) -> None:
        files = {flag: command[command.index(flag) + 1] for flag in ("--values", "--kubeconfig")
                 if flag in command}
        self.runs.append((command, {flag: (Path(path).read_text(),
                                           stat.S_IMODE(os.stat(path).st_mode))
                                    for flag, path in files.items()}))


def test_helm_installs_the_pinned_chart_into_the_virtual_cluster_with_private_files() -> None:
    helm = RecordingHelm()
    helm.install_addon(KAI, "apiVersion: v1\nkind: Config\n# the virtual cluster's\n")
    helm.uninstall_addon("kai-scheduler", "apiVersion: v1\nkind: Config\n")
    (install, install_files), (uninstall, uninstall_files) = helm.runs
    assert install[:10] == ["helm", "upgrade", "--install", "kai-scheduler", "kai-scheduler",
                            "--repo", "https://charts.example.com/kai", "--version", "0.9.3",
                            "--namespace"]
    assert "--create-namespace" in install and "/host/kubeconfig" not in install
    values, values_mode = install_files["--values"]
    assert yaml.safe_load(values) == {"scheduler": {"replicas": 2}} and values_mode == 0o600
    config, config_mode = install_files["--kubeconfig"]
    assert "the virtual cluster's" in config and config_mode == 0o600
    assert uninstall[:5] == ["helm", "uninstall", "kai-scheduler", "--namespace",
                             "kai-scheduler"]
    assert uninstall_files["--kubeconfig"][1] == 0o600
    # The files live only for the run.
    assert not Path(install[install.index("--kubeconfig") + 1]).exists()


def test_portal_dev_shows_an_installed_addon_as_its_namespace_in_the_virtual_cluster() -> None:
    host = simulated.SimulatedHost([], startup_seconds=0)
    installer = SimulatedInstaller(host)
    installer.install("train", "t-acme--train", "")
    config = simulated.simulated_admin_kubeconfig("t-acme--train")
    installer.install_addon(KAI, config)
    namespace = host.virtual(config).get("v1", "Namespace", "kai-scheduler")
    assert namespace is not None
    assert namespace["metadata"]["labels"]["helm.sh/chart"] == "kai-scheduler-0.9.3"
    installer.uninstall_addon("kai-scheduler", config)
    assert host.virtual(config).get("v1", "Namespace", "kai-scheduler") is None
