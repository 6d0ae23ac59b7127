"""Validation of a template version before it is offered.

Checks, each stored with its reasons: the vcluster.yaml renders for every combination the
version leaves open; it passes the pinned chart's values schema, the edition check (no Pro-only
key on `oss`) and the allowlist of keys the portal may set; the host objects pass a server-side
dry-run on the host cluster; the host supports the hardening asked for; every add-on's chart
version resolves in its repository.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from jsonschema.exceptions import SchemaError

from app.kit.config import Settings
from app.kube import manifests
from app.kube.errors import KubeError
from app.kube.manifests import ClusterSpec, ManifestPolicy, TenantSpec
from app.kube.manifests import labels as lbl
from app.kube.manifests.chart_schema import (
    pro_only_paths,
    schema_errors,
    validate_values,
    validator_for,
)
from app.kube.manifests.specs import Placement
from app.kube.port import HostProbe, Manifest
from app.templates.addons import addon_values, merged_values
from app.templates.charts import ChartResolver, HelmIndexResolver
from app.templates.schemas import VersionSettings

__all__ = ["ChartResolver", "HelmIndexResolver", "validate"]

PROBE_TENANT: Final = "template-check"
PROBE_CLUSTER: Final = "probe"
# Namespaced host objects are dry-run here: a dry-run Namespace is not there for them to go in.
CHECK_NAMESPACE: Final = "gtp-template-check"
PLACEMENTS: Final = ("shared-pool", "dedicated-nodes", "private-nodes")
# Where in vcluster.yaml the portal may put values at all (dotted prefixes). The builders only
# write these; a key elsewhere means a builder change that nobody reviewed for tenants' safety.
ALLOWED_VALUE_PATHS: Final = (
    "controlPlane.distro.k8s.enabled", "controlPlane.distro.k8s.image.tag",
    "controlPlane.distro.k8s.securityContext",
    "controlPlane.statefulSet.image.repository", "controlPlane.statefulSet.security",
    "controlPlane.coredns.security", "controlPlane.advanced.virtualScheduler.enabled",
    "controlPlane.proxy.extraSANs", "controlPlane.statefulSet.scheduling.nodeSelector",
    "policies.podSecurityStandard", "policies.resourceQuota", "policies.limitRange",
    "policies.networkPolicy.enabled", "exportKubeConfig.server",
    "sync.toHost.pods.enforceTolerations", "sync.fromHost.nodes",
    # Private nodes (r57.md §8): portal constants, never template input.
    "controlPlane.distro.k8s.apiServer.extraArgs",
    "controlPlane.distro.k8s.controllerManager.extraArgs",
    "sync.toHost.pods.enabled", "sync.toHost.persistentVolumeClaims.enabled",
    "sync.fromHost.csiNodes.enabled", "sync.fromHost.csiDrivers.enabled",
    "sync.fromHost.csiStorageCapacities.enabled", "sync.fromHost.storageClasses.enabled",
    "experimental.syncSettings.setOwner", "rbac.enableVolumeSnapshotRules.enabled",
    # Pro only; the edition check refuses them on oss.
    "sync.toHost.pods.patches",
)
# User namespaces: on by default from Kubernetes 1.33; 1.30 to 1.32 behind UserNamespacesSupport.
USERNS_DEFAULT_ON: Final = (1, 33)
USERNS_GATED_FROM: Final = (1, 30)


@dataclass
class Check:
    name: str
    passed: bool = True
    reasons: list[str] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        self.passed = False
        self.reasons.append(reason)


@dataclass(frozen=True)
class Probe:
    """One combination of the settings a version leaves open."""

    placement: str
    kubernetes_version: str


def probes(settings: VersionSettings, portal: Settings) -> list[Probe]:
    placements = [settings.placement] if settings.placement else list(PLACEMENTS)
    versions = ([settings.kubernetes_version] if settings.kubernetes_version
                else list(portal.kubernetes_versions))
    return [Probe(p, v) for p, v in itertools.product(placements, versions)]


def probe_spec(settings: VersionSettings, probe: Probe, gpu_product: str | None,
               portal: Settings) -> ClusterSpec:
    gpus = settings.max_gpus if settings.max_gpus is not None else settings.default_gpus
    return ClusterSpec(
        tenant=PROBE_TENANT, name=PROBE_CLUSTER, kubernetes_version=probe.kubernetes_version,
        placement=_placement(probe.placement),
        gpu_class=gpu_product, gpus=gpus if gpu_product else 0, cpu_millicores=4000,
        memory_mib=16384,
        endpoint=portal.cluster_endpoint_template.format(tenant=PROBE_TENANT,
                                                         cluster=PROBE_CLUSTER),
        pod_security="baseline" if (settings.pod_security or portal.pod_security) == "baseline"
        else "restricted",
        user_namespaces=settings.user_namespaces,
    )


def _placement(name: str) -> Placement:
    if name == "dedicated-nodes":
        return "dedicated-nodes"
    if name == "private-nodes":
        return "private-nodes"
    return "shared-pool"


def probe_tenant(gpu_product: str | None, gpus: int) -> TenantSpec:
    quota = {gpu_product: gpus} if gpu_product else {}
    return TenantSpec(slug=PROBE_TENANT, display_name="template check", gpu_quota=quota,
                      cpu_millicores=4000, memory_mb=17180)


def leaf_paths(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from leaf_paths(value, f"{path}.")
        else:
            yield path


def outside_allowlist(values: Mapping[str, Any]) -> list[str]:
    return [path for path in leaf_paths(values)
            if not any(path == allowed or path.startswith(f"{allowed}.")
                       for allowed in ALLOWED_VALUE_PATHS)]


def vcluster_chart_schema(portal: Settings, charts: ChartResolver
                          ) -> tuple[dict[str, Any] | None, str | None]:
    """The pinned vCluster chart's own values schema, as its repository serves the chart (what
    helm checks the values against on install), or why it cannot be had."""
    where = f"vCluster chart {portal.vcluster_chart_version} from {portal.vcluster_chart_repo}"
    try:
        found = charts.lookup(portal.vcluster_chart_repo, "vcluster",
                              portal.vcluster_chart_version)
    except Exception as error:  # an unreachable repository is a reason, not a crash
        return None, f"{where}: {type(error).__name__}: {error}"
    if found.problem:
        return None, f"{where}: {found.problem}"
    if found.values_schema is None:
        return None, f"{where} ships no values.schema.json to check the values against"
    return found.values_schema, None


def _values_checks(specs: list[ClusterSpec], portal: Settings,
                   charts: ChartResolver) -> list[Check]:
    render, schema, edition, allowlist = (Check("render"), Check("chart-schema"),
                                          Check("edition"), Check("allowlist"))
    policy = ManifestPolicy(vcluster_edition=portal.vcluster_edition,
                            control_plane_node_selector=portal.control_plane_node_selector)
    chart_schema, unavailable = vcluster_chart_schema(portal, charts) if specs else (None, None)
    if unavailable:
        schema.fail(unavailable)
    for spec in specs:
        where = f"{spec.placement}, Kubernetes {spec.kubernetes_version}"
        values = manifests.vcluster_values(spec, policy)
        for problem in validate_values(values, chart_schema) if chart_schema else ():
            schema.fail(f"{where}: {problem}")
        if portal.vcluster_edition == "oss":
            for path in pro_only_paths(values):
                edition.fail(f"{where}: {path} needs vCluster Pro; the host runs the oss build")
        for path in outside_allowlist(values):
            allowlist.fail(f"{where}: {path} is not a key the portal may set")
    if not specs:
        render.fail("nothing rendered")
    return [render, schema, edition, allowlist]


def _in_check_namespace(obj: Manifest) -> Manifest:
    if "namespace" not in obj.get("metadata", {}):
        return obj
    return {**obj, "metadata": {**obj["metadata"], "namespace": CHECK_NAMESPACE}}


def check_namespace() -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": CHECK_NAMESPACE, "labels": lbl.managed()}}


def _dry_run(host: HostProbe, objects: list[Manifest], check: Check) -> None:
    seen: set[str] = set()
    for obj in objects:
        # The same object recurs across probes (the root queue in each); ask about each once.
        key = json.dumps(obj, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        try:
            host.dry_run_apply(_in_check_namespace(obj))
        except KubeError as error:
            check.fail(f"{obj['kind']} {obj['metadata']['name']}: {error.message}")


def _minor(version: str) -> tuple[int, int] | None:
    found = re.match(r"^v?(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def userns_probe() -> Manifest:
    """A StatefulSet whose pods ask for their own user namespace. An API server without
    UserNamespacesSupport drops ``hostUsers`` from what it would store, so the dry-run's answer
    tells whether the gate is on. A StatefulSet (no ServiceAccount needed to admit it) because
    the worker may already write StatefulSets for the vCluster chart: the probe adds no rights
    (deploy/kubernetes/base/rbac-worker.yaml)."""
    pod = {"hostUsers": False, "containers": [{"name": "probe", "image": "probe"}]}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "userns-probe", "namespace": CHECK_NAMESPACE,
                     "labels": lbl.managed()},
        "spec": {"serviceName": "userns-probe",
                 "selector": {"matchLabels": {"app": "userns-probe"}},
                 "template": {"metadata": {"labels": {"app": "userns-probe"}}, "spec": pod}},
    }


def _host_support(host: HostProbe, settings: VersionSettings, check: Check) -> None:
    if not settings.user_namespaces:
        return
    try:
        version = host.server_version()
        minor = _minor(version)
        if minor is None or minor < USERNS_GATED_FROM:
            check.fail(f"user namespaces need Kubernetes 1.30 or later; the host runs "
                       f"{version or 'an unknown version'}")
            return
        if minor >= USERNS_DEFAULT_ON:
            return
        stored = host.dry_run_apply(userns_probe())
    except KubeError as error:
        check.fail(f"asking the host about user namespaces failed: {error.message}")
        return
    pod = ((stored.get("spec") or {}).get("template") or {}).get("spec") or {}
    if pod.get("hostUsers") is not False:
        check.fail(f"the host runs {version}, where user namespaces need the "
                   "UserNamespacesSupport feature gate, and it is off")


def _checks_on_every_host(hosts: Mapping[str, HostProbe | None], specs: list[ClusterSpec],
                          settings: VersionSettings, gpu_product: str | None) -> list[Check]:
    """The dry-run and support checks, passed only where every host passes them; with several
    hosts each reason names its host."""
    if not hosts:
        return _host_checks(None, specs, settings, gpu_product)
    merged = [Check("host-dry-run"), Check("host-support")]
    for name, host in sorted(hosts.items()):
        for total, check in zip(merged, _host_checks(host, specs, settings, gpu_product),
                                strict=True):
            total.passed = total.passed and check.passed
            total.reasons += [f"{name}: {r}" if len(hosts) > 1 else r for r in check.reasons]
    return merged


def _host_checks(host: HostProbe | None, specs: list[ClusterSpec], settings: VersionSettings,
                 gpu_product: str | None) -> list[Check]:
    dry_run, support = Check("host-dry-run"), Check("host-support")
    if host is None:
        dry_run.fail("no host cluster is configured (PORTAL_KUBECONFIG) or registered and active "
                     "to dry-run against")
        support.fail("no host cluster is configured to ask")
        return [dry_run, support]
    policy = ManifestPolicy()
    try:
        host.apply(check_namespace(), force=True)
    except KubeError as error:
        dry_run.fail(f"making namespace {CHECK_NAMESPACE} for the dry-runs failed: "
                     f"{error.message}")
        return [dry_run, support]
    objects = [obj for spec in specs for obj in manifests.cluster_host_objects(
        spec, probe_tenant(gpu_product, spec.gpus), policy)]
    _dry_run(host, objects, dry_run)
    _host_support(host, settings, support)
    return [dry_run, support]


def _addon_check(settings: VersionSettings, charts: ChartResolver) -> Check:
    """Every add-on's chart version resolves, and its settings pass the chart's values schema
    (merged over the chart's defaults, as Helm checks them) when the chart ships one."""
    check = Check("addons")
    for addon in settings.addons:
        found = charts.lookup(addon.repo, addon.chart, addon.version)
        if found.problem:
            check.fail(f"add-on {addon.name}: {found.problem}")
            continue
        if found.values_schema is None:
            continue
        try:
            validator = validator_for(found.values_schema)
        except SchemaError as error:
            check.fail(f"add-on {addon.name}: {addon.chart} {addon.version} ships a "
                       f"values.schema.json that is not a valid JSON schema: {error.message}")
            continue
        values = merged_values(found.default_values, addon_values(addon.settings))
        for problem in schema_errors(values, validator):
            check.fail(f"add-on {addon.name}: setting {problem} "
                       f"(values.schema.json of {addon.chart} {addon.version})")
    return check


def validate(settings: VersionSettings, gpu_product: str | None, portal: Settings,
             hosts: Mapping[str, HostProbe | None], charts: ChartResolver) -> dict[str, Any]:
    """The stored result: ``passed`` and every check with its reasons. The host checks run on
    every host cluster in ``hosts`` (by name), the ones new clusters may be placed on."""
    render = Check("render")
    if settings.kubernetes_version and \
            settings.kubernetes_version not in portal.kubernetes_versions:
        render.fail(f"Kubernetes {settings.kubernetes_version} is not one the operator offers "
                    f"({', '.join(portal.kubernetes_versions)})")
    specs: list[ClusterSpec] = []
    for probe in probes(settings, portal):
        try:
            specs.append(probe_spec(settings, probe, gpu_product, portal))
        except ValueError as error:
            render.fail(f"{probe.placement}, Kubernetes {probe.kubernetes_version}: {error}")
    values_checks = _values_checks(specs, portal, charts)
    values_checks[0].reasons[:0] = render.reasons
    values_checks[0].passed = values_checks[0].passed and render.passed
    checks = [*values_checks, *_checks_on_every_host(hosts, specs, settings, gpu_product),
              _addon_check(settings, charts)]
    return {"passed": all(c.passed for c in checks), "checks": [asdict(c) for c in checks]}
