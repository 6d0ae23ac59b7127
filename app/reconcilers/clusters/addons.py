"""Add-ons, once the virtual cluster is Ready, and the team queues of KAI inside it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from app.clusters import conditions as cond
from app.clusters import desired, team_queues
from app.clusters.shapes import ClusterAddon
from app.kube.errors import KubeError
from app.kube.helm import InstallError
from app.kube.port import release
from app.reconcilers.clusters.results import Failure, Pass, classify
from app.reconcilers.clusters.scope import ClusterScope

log = logging.getLogger(__name__)


def converge(scope: ClusterScope, ready: Pass) -> Pass:
    """Install what is missing or changed, uninstall what is no longer wanted; each add-on
    keeps its own condition, and one failing retries with backoff without holding up the
    others or the cluster's Ready."""
    wanted = {addon.name: addon for addon in scope.wanted.addons}
    failures = [_step(scope, cond.addon_type(addon.name), _install, addon)
                for addon in wanted.values()]
    failures += [_step(scope, cond.addon_type(name), _uninstall, name)
                 for name in cond.addon_names(scope.conditions) if name not in wanted]
    failures.append(_step(scope, cond.TEAM_QUEUES, _team_queues, None))
    failed = [f for f in failures if f is not None]
    if not failed:
        return ready
    message = "add-ons: " + "; ".join(m for _, _, m in failed)
    if all(permanent for permanent, _, _ in failed):
        return Pass(converged=True, failure=Failure(message, permanent=True))
    delay = max(d for p, d, _ in failed if not p)
    return Pass(converged=True, failure=Failure(message, delay=delay or None))


def _step(scope: ClusterScope, type_: str, step: Callable[[ClusterScope, Any], None],
          subject: Any) -> tuple[bool, float, str] | None:
    """Runs one add-on's install or uninstall; (permanent, server's delay, message) if it
    failed."""
    try:
        step(scope, subject)
    except (InstallError, KubeError) as error:
        reason, message, permanent, delay = classify(error)
        scope.set(type_, False, reason, message)
        log.info("cluster %d: %s failed (%s): %s", scope.wanted.cluster_id, type_, reason,
                 message)
        return permanent, delay or 0.0, f"{type_}: {message}"
    return None


def _install(scope: ClusterScope, addon: ClusterAddon) -> None:
    type_ = cond.addon_type(addon.name)
    message = (f"{addon.chart} {addon.version} from {addon.repo} "
               f"(values {desired.addon_digest(addon)})")
    current = cond.find(scope.conditions, type_)
    if current is not None and current.get("status") == "True" and (
            current.get("message") == message) and not scope.reinstalled:
        return
    if current is None:
        scope.set(type_, False, "Installing", message)
    assert scope.kubeconfig is not None
    scope.check_lease()
    scope.save_conditions()
    scope.where.installer.install_addon(addon, scope.kubeconfig)
    scope.check_lease()
    scope.set(type_, True, "Installed", message)


def _uninstall(scope: ClusterScope, name: str) -> None:
    assert scope.kubeconfig is not None
    scope.check_lease()
    scope.save_conditions()
    scope.where.installer.uninstall_addon(name, scope.kubeconfig)
    scope.check_lease()
    scope.drop(cond.addon_type(name))


def _team_queues(scope: ClusterScope, _: None) -> None:
    """KAI inside a dedicated-nodes cluster: its parent and team queues, once KAI is Ready."""
    kai = scope.wanted.kai_addon
    if kai is None:
        scope.drop(cond.TEAM_QUEUES)
        return
    if not cond.is_true(scope.conditions, cond.addon_type(kai.name)):
        scope.set(cond.TEAM_QUEUES, False, "WaitingForAddon",
                f"the team queues are made once add-on {kai.name} is installed")
        return
    wanted = scope.wanted.team_queues()
    assert scope.kubeconfig is not None
    scope.check_lease()
    port = scope.deps.connector.virtual(scope.kubeconfig)
    try:
        team_queues.ensure(port, wanted)
    finally:
        release(port)
    scope.set(cond.TEAM_QUEUES, True, "Applied", team_queues.summary(wanted))
