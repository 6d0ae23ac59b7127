"""Host admission for every tenant namespace: a tenant's pods stay off other tenants' nodes.

A dedicated node carries the label and the ``NoSchedule`` taint ``gpu-tenant-portal/tenant=<slug>``
(nodes.py). The taint keeps schedulers away only from pods that do not tolerate it, and a pod
created with ``spec.nodeName`` is never scheduled at all (a kubelet enforces ``NoExecute`` taints
only). A tenant writes its pods' specs inside its virtual cluster and vCluster syncs them, so the
host refuses, for every synced pod in a portal-managed tenant namespace, whatever would place it
on a node it may not use:

- the tenancy guard (no parameters; CREATE and UPDATE, tolerations can be added to a live pod):
  a blanket toleration (``operator: Exists`` without a key); a toleration of the tenant taint
  other than ``Equal`` to the namespace's own tenant in a dedicated-nodes cluster (a shared-pool
  cluster tolerates none); a node selector or node affinity on the tenant label naming another
  tenant (or, from a shared-pool cluster, any tenant); and in a shared-pool namespace any
  ``spec.nodeName`` at creation, which would bypass kai-scheduler and its queues.
- the dedicated-node guard (CREATE), evaluated once per node of the host as its parameter (so
  it follows the nodes' tenant labels, the dedications themselves, with nothing else to keep in
  step): a pod naming that node by ``spec.nodeName``, the ``kubernetes.io/hostname`` node
  selector, a hostname node-affinity term or a ``metadata.name`` field term (the form DaemonSet
  pods take) is refused unless a dedicated cluster's pod names a node of its own tenant, or a
  shared-pool pod a node dedicated to nobody. The node's name stands for its host name, as
  the kubelet labels it by default.

- the tenancy guard also holds a shared-pool pod to the GPU unit its namespace's labels name
  (host.unit_labels; none: whole GPUs): no share annotations or MIG slices beside whole GPUs; only
  the cluster's own MIG profile beside slices; only a ``gpu-fraction`` in (0, 1] in steps of 0.01
  beside a share, at creation no more than the share; and on UPDATE no change to
  ``gpu-fraction`` or ``gpu-memory`` (KAI reads them again every cycle).

The portal's admission webhook refuses the same specs (app/webhook/placement.py, gpu_asks.py)
with the pod's own words where it is called; these policies are the backstop that no virtual
cluster can skip.
Pods the syncer did not write (the vCluster control plane) are not matched, as for the queue guard.

The endpoints guard keeps a tenant's synced Endpoints and EndpointSlices off the cluster's own
addresses (endpoints_guard_policy).
"""

from typing import Any, Final

from app.kube.manifests import labels as lbl
from app.kube.manifests.admission import guard_binding, guard_policy
from app.kube.manifests.units import FRACTION_TEXT, MIG_RESOURCE_PREFIX

Manifest = dict[str, Any]
TENANCY_POLICY_NAME: Final = "gpu-tenant-portal-tenancy-guard"
DEDICATED_NODE_POLICY_NAME: Final = "gpu-tenant-portal-dedicated-node-guard"

_NS_LABELS = "namespaceObject.metadata.labels"
_COMMON_VARIABLES = [
    {"name": "tenant", "expression": f"{_NS_LABELS}['{lbl.TENANT}']"},
    {"name": "shared", "expression":
     f"'{lbl.PLACEMENT}' in {_NS_LABELS} && {_NS_LABELS}['{lbl.PLACEMENT}'] == 'shared-pool'"},
    # Required terms and preferred preferences alike: both can steer a pod to a node.
    {"name": "terms", "expression":
     "(has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity)"
     " && has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution)"
     " ? object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
     ".nodeSelectorTerms : [])"
     " + (has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity)"
     " && has(object.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution)"
     " ? object.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
     ".map(p, p.preference) : [])"},
]

_TOLERATIONS = (
    "!has(object.spec.tolerations) || object.spec.tolerations.all(t,"
    " has(t.key) && t.key != ''"
    f" && (t.key != '{lbl.TENANT}' || (!variables.shared"
    " && (!has(t.operator) || t.operator == 'Equal')"
    " && has(t.value) && t.value == variables.tenant)))")
_SELECTOR = (
    f"!has(object.spec.nodeSelector) || !('{lbl.TENANT}' in object.spec.nodeSelector)"
    f" || (!variables.shared && object.spec.nodeSelector['{lbl.TENANT}'] == variables.tenant)")
_AFFINITY = (
    "variables.terms.all(t, !has(t.matchExpressions) || t.matchExpressions.all(e,"
    f" e.key != '{lbl.TENANT}' || e.operator in ['NotIn', 'DoesNotExist']"
    " || (e.operator == 'In' && !variables.shared"
    " && has(e.values) && e.values.all(v, v == variables.tenant))))")
_NODE_NAME = (
    "request.operation != 'CREATE' || !variables.shared"
    " || !has(object.spec.nodeName) || object.spec.nodeName == ''")

# What a pod asks of GPUs, for the unit rules (tenancy guard only).
_ANNOTATIONS = "object.metadata.annotations"
_GPU_VARIABLES = [
    {"name": "unit", "expression":
     f"'{lbl.GPU_UNIT}' in {_NS_LABELS} ? {_NS_LABELS}['{lbl.GPU_UNIT}'] : 'gpu'"},
    {"name": "shareAsks", "expression":
     f"['{lbl.GPU_FRACTION}', '{lbl.GPU_MEMORY}', '{lbl.GPU_FRACTION_DEVICES}']"
     f".filter(k, has({_ANNOTATIONS}) && k in {_ANNOTATIONS})"},
    {"name": "fraction", "expression":
     f"'{lbl.GPU_FRACTION}' in variables.shareAsks ? {_ANNOTATIONS}['{lbl.GPU_FRACTION}'] : ''"},
    {"name": "containers", "expression":
     "object.spec.containers + (has(object.spec.initContainers)"
     " ? object.spec.initContainers : [])"},
]


def _asks(resource: str) -> str:
    """Whether a container requests or limits a resource ``k`` for which ``resource`` holds."""
    return ("variables.containers.exists(c, has(c.resources) && ("
            f"(has(c.resources.requests) && c.resources.requests.exists(k, {resource}))"
            f" || (has(c.resources.limits) && c.resources.limits.exists(k, {resource}))))")


def _same_annotation(key: str) -> str:
    old, new = "oldObject.metadata.annotations", _ANNOTATIONS
    in_old, in_new = f"(has({old}) && '{key}' in {old})", f"(has({new}) && '{key}' in {new})"
    return f"{in_old} == {in_new} && (!{in_new} || {old}['{key}'] == {new}['{key}'])"


_MIG_RESOURCE_OF_NS = f"'{MIG_RESOURCE_PREFIX}' + {_NS_LABELS}['{lbl.MIG_PROFILE}']"
_MIG = f"k.startsWith('{MIG_RESOURCE_PREFIX}')"
_WHOLE = f"k == '{lbl.GPU_RESOURCE}'"
_FRACTION_OK = (f"variables.fraction.matches('{FRACTION_TEXT}')"
                " && double(variables.fraction) > 0.0")
_WHOLE_UNIT = (
    "!variables.shared || variables.unit != 'gpu' || ("
    f"!variables.shareAsks.exists(k, k != '{lbl.GPU_FRACTION_DEVICES}') && !{_asks(_MIG)})")
_MIG_UNIT = (
    "!variables.shared || variables.unit != 'mig' || (variables.shareAsks.size() == 0"
    f" && !{_asks(f'{_WHOLE} || ({_MIG} && k != {_MIG_RESOURCE_OF_NS})')})")
_SHARE_UNIT = (
    "!variables.shared || variables.unit != 'share' || ("
    f"!{_asks(f'{_WHOLE} || {_MIG}')}"
    f" && !('{lbl.GPU_MEMORY}' in variables.shareAsks)"
    f" && !('{lbl.GPU_FRACTION_DEVICES}' in variables.shareAsks)"
    f" && (!('{lbl.GPU_FRACTION}' in variables.shareAsks) || ({_FRACTION_OK})))")
# Hundredths in a double: 0.07 * 100.0 is 7.000000000000001, so compare with half a step.
_SHARE_CEILING = (
    "!variables.shared || variables.unit != 'share' || request.operation != 'CREATE'"
    f" || !('{lbl.GPU_FRACTION}' in variables.shareAsks) || !({_FRACTION_OK})"
    f" || double(variables.fraction) * 100.0 < double({_NS_LABELS}['{lbl.GPU_SHARE}']) + 0.5")
_SHARE_ASK_FIXED = (
    "!variables.shared || request.operation != 'UPDATE' || ("
    f"{_same_annotation(lbl.GPU_FRACTION)}) && ({_same_annotation(lbl.GPU_MEMORY)})")

_NAMES_PARAM_NODE = (
    "(has(object.spec.nodeName) && object.spec.nodeName == params.metadata.name)"
    f" || (has(object.spec.nodeSelector) && '{lbl.HOSTNAME}' in object.spec.nodeSelector"
    f" && object.spec.nodeSelector['{lbl.HOSTNAME}'] == params.metadata.name)"
    " || variables.terms.exists(t,"
    " (has(t.matchExpressions) && t.matchExpressions.exists(e,"
    f" e.key == '{lbl.HOSTNAME}' && e.operator == 'In' && has(e.values)"
    " && params.metadata.name in e.values))"
    " || (has(t.matchFields) && t.matchFields.exists(f,"
    " f.key == 'metadata.name' && f.operator == 'In' && has(f.values)"
    " && params.metadata.name in f.values)))")
_PARAM_TENANT = (
    f"has(params.metadata.labels) && '{lbl.TENANT}' in params.metadata.labels"
    f" ? params.metadata.labels['{lbl.TENANT}'] : ''")
# A shared-pool pod may name only nodes dedicated to nobody; a dedicated cluster's pod only
# its own tenant's nodes.
_DEDICATED_NODE = (
    f"!({_NAMES_PARAM_NODE})"
    " || (variables.shared ? variables.paramTenant == ''"
    " : variables.paramTenant == variables.tenant)")


def _validation(expression: str, message: str) -> Manifest:
    return {"expression": expression, "message": message, "reason": "Forbidden"}


def _pods(*operations: str) -> Manifest:
    return {"apiGroups": [""], "apiVersions": ["v1"], "operations": list(operations),
            "resources": ["pods"]}


def tenancy_guard_policy() -> Manifest:
    validations = [
        _validation(_TOLERATIONS, "a tenant's pod tolerates no blanket toleration and the "
                    f"{lbl.TENANT} taint only as Equal to its own tenant, in a dedicated-nodes "
                    "cluster: other tenants' dedicated nodes are not for it"),
        _validation(_SELECTOR, f"a tenant's pod selects no other tenant's nodes by the "
                    f"{lbl.TENANT} label (a shared-pool pod none at all)"),
        _validation(_AFFINITY, f"a tenant's pod has no node affinity for other tenants' nodes "
                    f"by the {lbl.TENANT} label (a shared-pool pod none at all)"),
        _validation(_NODE_NAME, "a shared-pool pod is placed by kai-scheduler in its queue; "
                    "it may not name its node (spec.nodeName)"),
        *_gpu_unit_validations(),
    ]
    policy = _policy(TENANCY_POLICY_NAME, _pods("CREATE", "UPDATE"), validations)
    policy["spec"]["variables"] = [*_COMMON_VARIABLES, *_GPU_VARIABLES]
    return policy


def _gpu_unit_validations() -> list[Manifest]:
    unit = f"the {lbl.GPU_UNIT} label of its namespace"
    return [
        _validation(_WHOLE_UNIT, "a pod of a cluster of whole GPUs asks for them with "
                    f"{lbl.GPU_RESOURCE}: no share of one ({lbl.GPU_FRACTION}, {lbl.GPU_MEMORY}) "
                    f"and no MIG slices ({MIG_RESOURCE_PREFIX}*)"),
        _validation(_MIG_UNIT, "a pod of a cluster of MIG slices asks only for slices of the "
                    f"cluster's profile ({MIG_RESOURCE_PREFIX}<{lbl.MIG_PROFILE}>): no whole "
                    f"GPUs, no share of one, no other profile ({unit})"),
        _validation(_SHARE_UNIT, "a pod of a cluster holding a share of one GPU asks with the "
                    f"annotation {lbl.GPU_FRACTION}, a number in (0, 1] in steps of 0.01: no "
                    f"whole GPUs, MIG slices, {lbl.GPU_MEMORY} or {lbl.GPU_FRACTION_DEVICES} "
                    f"({unit})"),
        _validation(_SHARE_CEILING, f"a pod asks at most its cluster's share in "
                    f"{lbl.GPU_FRACTION} (the {lbl.GPU_SHARE} label of its namespace, in "
                    "hundredths of one GPU)"),
        _validation(_SHARE_ASK_FIXED, f"the annotations {lbl.GPU_FRACTION} and "
                    f"{lbl.GPU_MEMORY} of a pod cannot change once it is made"),
    ]


def dedicated_node_guard_policy() -> Manifest:
    validations = [_validation(_DEDICATED_NODE, "a tenant's pod names no node it may not use "
                               "(spec.nodeName, the kubernetes.io/hostname selector or node "
                               "affinity): a dedicated cluster's pod only its tenant's nodes, "
                               "a shared-pool pod no dedicated node")]
    policy = _policy(DEDICATED_NODE_POLICY_NAME, _pods("CREATE"), validations)
    policy["spec"]["paramKind"] = {"apiVersion": "v1", "kind": "Node"}
    policy["spec"]["variables"] = [*_COMMON_VARIABLES,
                                   {"name": "paramTenant", "expression": _PARAM_TENANT}]
    return policy


def _policy(name: str, rule: Manifest, validations: list[Manifest]) -> Manifest:
    return guard_policy(name, rule, validations, _COMMON_VARIABLES)


def _tenant_namespaces() -> Manifest:
    return {"matchLabels": lbl.managed(),
            "matchExpressions": [{"key": lbl.TENANT, "operator": "Exists"}]}


def tenancy_guard_binding() -> Manifest:
    return guard_binding(TENANCY_POLICY_NAME, _tenant_namespaces())


def dedicated_node_guard_binding() -> Manifest:
    binding = guard_binding(DEDICATED_NODE_POLICY_NAME, _tenant_namespaces())
    # Every node is a parameter: a pod naming a node that does not exist is never bound.
    binding["spec"]["paramRef"] = {"selector": {}, "parameterNotFoundAction": "Allow"}
    return binding


# Addresses inside a cluster: private, shared, loopback and link-local ranges, IPv4 and IPv6.
INTERNAL_RANGES: Final = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                          "127.0.0.0/8", "169.254.0.0/16", "0.0.0.0/8", "::1/128", "fc00::/7",
                          "fe80::/10")
_INTERNAL = f"[{', '.join(repr(r) for r in INTERNAL_RANGES)}]"
_EXTERNAL = "!isIP({a}) || {internal}.all(r, !cidr(r).containsIP({a}))"
_ENDPOINTS = (
    "!has(object.subsets) || object.subsets.all(s,"
    " (!has(s.addresses) || s.addresses.all(a, {ok}))"
    " && (!has(s.notReadyAddresses) || s.notReadyAddresses.all(a, {ok})))"
).format(ok=_EXTERNAL.format(a="a.ip", internal=_INTERNAL))
_ENDPOINT_SLICE = (
    "!has(object.endpoints) || object.endpoints.all(e, e.addresses.all(a, {ok}))"
).format(ok=_EXTERNAL.format(a="a", internal=_INTERNAL))
ENDPOINTS_POLICY_NAME: Final = "gpu-tenant-portal-endpoints-guard"


def endpoints_guard_policy() -> Manifest:
    """A virtual cluster syncs the Endpoints and EndpointSlices of its selector-less Services to
    the host, where the host's own proxies route to whatever they name: the host's API server,
    another tenant's pods. So a synced one in a tenant namespace may name only addresses outside
    the cluster's ranges (an external service); Services with selectors get theirs from the
    host's controllers, unsynced."""
    rule = {"apiGroups": ["", "discovery.k8s.io"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["endpoints", "endpointslices"]}
    message = ("a tenant's Endpoints and EndpointSlices name only addresses outside the "
               f"cluster's ranges ({', '.join(INTERNAL_RANGES)}): use a Service selector for "
               "pods")
    validations = [
        _validation(f"object.kind != 'Endpoints' || ({_ENDPOINTS})", message),
        _validation(f"object.kind != 'EndpointSlice' || ({_ENDPOINT_SLICE})", message),
    ]
    return guard_policy(ENDPOINTS_POLICY_NAME, rule, validations)


def endpoints_guard_binding() -> Manifest:
    return guard_binding(ENDPOINTS_POLICY_NAME, _tenant_namespaces())


def tenancy_objects() -> list[Manifest]:
    return [tenancy_guard_policy(), tenancy_guard_binding(),
            dedicated_node_guard_policy(), dedicated_node_guard_binding(),
            endpoints_guard_policy(), endpoints_guard_binding()]
