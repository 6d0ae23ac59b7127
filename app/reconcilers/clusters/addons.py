"""Add-ons, once the virtual cluster is Ready, and the team queues of KAI inside it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.clusters import conditions as cond
from app.clusters import desired, team_queues
from app.clusters.shapes import ClusterAddon
from app.kube.errors import KubeError
from app.kube.helm import InstallError
from app.reconcilers.clusters.results import Failure, Pass, classify

if TYPE_CHECKING:
    from app.reconcilers.clusters.run import ClusterRun

log = logging.getLogger(__name__)


def converge(run: ClusterRun, ready: Pass) -> Pass:
    """Install what is missing or changed, uninstall what is no longer wanted; each add-on
    keeps its own condition, and one failing retries with backoff without holding up the
    others or the cluster's Ready."""
    wanted = {addon.name: addon for addon in run.wanted.addons}
    failures = [_step(run, cond.addon_type(addon.name), _install, addon)
                for addon in wanted.values()]
    failures += [_step(run, cond.addon_type(name), _uninstall, name)
                 for name in cond.addon_names(run.conditions) if name not in wanted]
    failures.append(_step(run, cond.TEAM_QUEUES, _team_queues, None))
    failed = [f for f in failures if f is not None]
    if not failed:
        return ready
    message = "add-ons: " + "; ".join(m for _, _, m in failed)
    if all(permanent for permanent, _, _ in failed):
        return Pass(converged=True, failure=Failure(message, permanent=True))
    delay = max(d for p, d, _ in failed if not p)
    return Pass(converged=True, failure=Failure(message, delay=delay or None))


def _step(run: ClusterRun, type_: str, step: Callable[[ClusterRun, Any], None],
          subject: Any) -> tuple[bool, float, str] | None:
    """Runs one add-on's install or uninstall; (permanent, server's delay, message) if it
    failed."""
    try:
        step(run, subject)
    except (InstallError, KubeError) as error:
        reason, message, permanent, delay = classify(error)
        run.set(type_, False, reason, message)
        log.info("cluster %d: %s failed (%s): %s", run.wanted.cluster_id, type_, reason,
                 message)
        return permanent, delay or 0.0, f"{type_}: {message}"
    return None


def _install(run: ClusterRun, addon: ClusterAddon) -> None:
    type_ = cond.addon_type(addon.name)
    message = (f"{addon.chart} {addon.version} from {addon.repo} "
               f"(values {desired.addon_digest(addon)})")
    current = cond.find(run.conditions, type_)
    if current is not None and current.get("status") == "True" and (
            current.get("message") == message) and not run.reinstalled:
        return
    if current is None:
        run.set(type_, False, "Installing", message)
    assert run.kubeconfig is not None
    run.check_lease()
    run.save_conditions()
    run.where.installer.install_addon(addon, run.kubeconfig)
    run.check_lease()
    run.set(type_, True, "Installed", message)


def _uninstall(run: ClusterRun, name: str) -> None:
    assert run.kubeconfig is not None
    run.check_lease()
    run.save_conditions()
    run.where.installer.uninstall_addon(name, run.kubeconfig)
    run.check_lease()
    run.conditions = cond.remove_condition(run.conditions, cond.addon_type(name))
    run.unsaved = run.owner.clock()


def _team_queues(run: ClusterRun, _: None) -> None:
    """KAI inside a dedicated-nodes cluster: its parent and team queues, once KAI is Ready."""
    kai = run.wanted.kai_addon
    if kai is None:
        if cond.find(run.conditions, cond.TEAM_QUEUES) is not None:
            run.conditions = cond.remove_condition(run.conditions, cond.TEAM_QUEUES)
            run.unsaved = run.owner.clock()
        return
    if not cond.is_true(run.conditions, cond.addon_type(kai.name)):
        run.set(cond.TEAM_QUEUES, False, "WaitingForAddon",
                f"the team queues are made once add-on {kai.name} is installed")
        return
    wanted = run.wanted.team_queues()
    assert run.kubeconfig is not None
    run.check_lease()
    port = run.owner.connector.virtual(run.kubeconfig)
    try:
        team_queues.ensure(port, wanted)
    finally:
        # A client made for this one pass: its connections are not kept for the next.
        close = getattr(port, "close", None)
        if callable(close):
            close()
    run.set(cond.TEAM_QUEUES, True, "Applied", team_queues.summary(wanted))
