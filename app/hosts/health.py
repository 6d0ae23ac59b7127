"""What "healthy" means for a host cluster, one named check each.

Each check turns failures into a result with a message; none raises, so an unreachable host
is a failed check on its page, not an error in the worker. The chart check goes through a
port (the templates domain's resolver is injected by the caller): hosts sits below templates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.hosts.webhook_route import WebhookRoute
from app.kit.config import Settings
from app.kit.plurals import plural
from app.kube.errors import KubeError
from app.kube.manifests.admission import (
    HARDENING_WEBHOOK_NAME,
    WEBHOOK_CONFIGURATION_KIND,
    WEBHOOK_CONFIGURATION_NAME,
    WEBHOOK_NAME,
    WEBHOOK_PATH,
)
from app.kube.port import KubePort

API_REACHABLE = "api-reachable"
KAI_QUEUE_CRD = "kai-queue-crd"
ADMISSION_WEBHOOK = "admission-webhook"
VCLUSTER_CHART = "vcluster-chart"
CHECK_NAMES = (API_REACHABLE, KAI_QUEUE_CRD, ADMISSION_WEBHOOK, VCLUSTER_CHART)
KAI_QUEUE_CRD_NAME = "queues.scheduling.run.ai"
_CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")


class ChartAnswer(Protocol):
    @property
    def problem(self) -> str | None:
        """Why the chart version cannot be installed; None when it resolves."""
        ...


class ChartProbe(Protocol):
    def lookup(self, repo: str, chart: str, version: str) -> ChartAnswer:
        """Whether ``chart`` ``version`` can be installed from ``repo``."""
        ...


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    message: str

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "passed": self.passed, "message": self.message}


NO_WEBHOOK_URL = (
    "no webhook URL is set for this host, so the portal does not register its admission "
    "webhook here: set the https:// address at which this host's API server reaches `portal "
    "webhook` (Admin → Host clusters, or `portalctl hosts update NAME --webhook-url URL`). "
    "Until then no shared-pool or hardened cluster is placed on this host; the queue guard "
    "refuses shared-pool pods here rather than let them run outside KAI's queues, and the "
    "hardening guard refuses hardened clusters' pods that do not set their seccomp profile "
    "(and hostUsers: false) themselves rather than let them run unhardened")


def run_checks(port: KubePort | None, settings: Settings, charts: ChartProbe | None, *,
               webhook_routed: bool = True,
               route: WebhookRoute | None = None) -> list[CheckResult]:
    """``webhook_routed``: the host's API server has a way to the webhook (the environment's
    host, or a host with a webhook URL). ``route``: the way the portal registers for it
    (app/hosts/webhook_route.py's route_of); when given, the registered configuration must
    call exactly that, else only its presence is checked."""
    reachable = _api_reachable(port)
    results = [reachable]
    if port is None or not reachable.passed:
        skipped = "not checked: the API server is not reachable"
        results += [CheckResult(KAI_QUEUE_CRD, False, skipped),
                    CheckResult(ADMISSION_WEBHOOK, False,
                                skipped if webhook_routed else NO_WEBHOOK_URL)]
    else:
        webhook = (_admission_webhook(port, settings, route) if webhook_routed
                   else CheckResult(ADMISSION_WEBHOOK, False, NO_WEBHOOK_URL))
        results += [_kai_queue_crd(port), webhook]
    results.append(_vcluster_chart(settings, charts))
    return results


def _api_reachable(port: KubePort | None) -> CheckResult:
    if port is None:
        return CheckResult(API_REACHABLE, False, "no credentials: none stored, or for the "
                                                 "environment's host PORTAL_KUBECONFIG is "
                                                 "unset and the portal is not in a cluster")
    try:
        version = getattr(port, "server_version", None)
        if version is not None:
            return CheckResult(API_REACHABLE, True, f"Kubernetes {version()}")
        port.get("v1", "Namespace", "default")
        return CheckResult(API_REACHABLE, True, "the API server answers")
    except KubeError as error:
        return CheckResult(API_REACHABLE, False, f"{error.reason}: {error.message}"[:500])
    except Exception as error:
        return CheckResult(API_REACHABLE, False, f"{type(error).__name__}: {error}"[:500])


def _kai_queue_crd(port: KubePort) -> CheckResult:
    return _present(port, _CRD, KAI_QUEUE_CRD, KAI_QUEUE_CRD_NAME,
                    "install the KAI Scheduler: shared-pool clusters need its Queue kind")


def _admission_webhook(port: KubePort, settings: Settings,
                       route: WebhookRoute | None) -> CheckResult:
    def calls_as_expected(live: dict[str, Any]) -> CheckResult:
        assert route is not None
        expected = expected_call(route, settings)
        problem = _route_problem(live, expected, settings)
        if problem is None:
            return CheckResult(ADMISSION_WEBHOOK, True,
                               f"{WEBHOOK_CONFIGURATION_KIND[1]} {WEBHOOK_CONFIGURATION_NAME} "
                               f"is present and calls {expected}")
        return CheckResult(ADMISSION_WEBHOOK, False, problem[:1000])

    return _present(port, WEBHOOK_CONFIGURATION_KIND, ADMISSION_WEBHOOK,
                    WEBHOOK_CONFIGURATION_NAME,
                    "the portal's worker registers it; until then shared-pool pods are not put "
                    "in their KAI queue", then=None if route is None else calls_as_expected)


def expected_call(route: WebhookRoute, settings: Settings) -> str:
    """What the host's API server should call: the URL, or the in-cluster Service."""
    if route.url:
        return route.url
    return (f"service {settings.webhook_namespace}/{settings.webhook_service_name}"
            f"{WEBHOOK_PATH}")


def _registered_call(client: dict[str, Any]) -> str:
    if client.get("url"):
        return str(client["url"])
    service = client.get("service") or {}
    return (f"service {service.get('namespace', '?')}/{service.get('name', '?')}"
            f"{service.get('path') or ''}")


def _route_problem(live: dict[str, Any], expected: str, settings: Settings) -> str | None:
    """Why the registered configuration is not the one the portal keeps for this host."""
    webhooks = {str(w.get("name")): w for w in live.get("webhooks") or []}
    missing = [name for name in (WEBHOOK_NAME, HARDENING_WEBHOOK_NAME) if name not in webhooks]
    calls = sorted({_registered_call(w.get("clientConfig") or {}) for w in webhooks.values()})
    stale = [call for call in calls if call != expected]
    if not missing and not stale:
        return None
    found = (f"lacks {plural(len(missing), 'webhook')} {', '.join(missing)}" if missing
             else f"calls {', '.join(stale)}")
    return (f"{WEBHOOK_CONFIGURATION_KIND[1]} {WEBHOOK_CONFIGURATION_NAME} {found}, but the "
            f"portal expects this host's API server to call {expected}: the worker rewrites "
            f"it at its next pass (every {settings.worker_resync_seconds:g}s); if it stays "
            "this way, look for this "
            "host in the worker's log (it may lack the rights to write it), and check the "
            "host's webhook URL (Admin → Host clusters)")


def _present(port: KubePort, kind: tuple[str, str], check: str, name: str, missing: str, *,
             then: Callable[[dict[str, Any]], CheckResult] | None = None) -> CheckResult:
    """Whether the object is there; ``then`` judges the object found (one read for both)."""
    try:
        found = port.get(*kind, name)
    except KubeError as error:
        return CheckResult(check, False, f"{kind[1]} {name}: {error.reason}: "
                                         f"{error.message}"[:500])
    if found is None:
        return CheckResult(check, False, f"{kind[1]} {name} is missing: {missing}")
    return then(found) if then is not None else CheckResult(check, True,
                                                             f"{kind[1]} {name} is present")


SIMULATED_CHART = ("not applicable: the simulated host of `portal dev` installs no chart (its "
                   "virtual clusters start in memory), so the chart repository is not asked")


def _vcluster_chart(settings: Settings, charts: ChartProbe | None) -> CheckResult:
    where = f"vcluster {settings.vcluster_chart_version} from {settings.vcluster_chart_repo}"
    if settings.simulated_host:
        return CheckResult(VCLUSTER_CHART, True, SIMULATED_CHART)
    if charts is None:
        return CheckResult(VCLUSTER_CHART, False, "not checked: no chart resolver")
    try:
        problem = charts.lookup(settings.vcluster_chart_repo, "vcluster",
                                settings.vcluster_chart_version).problem
    except Exception as error:
        problem = f"{type(error).__name__}: {error}"
    if problem:
        return CheckResult(VCLUSTER_CHART, False, problem[:500])
    return CheckResult(VCLUSTER_CHART, True, f"{where} resolves")
