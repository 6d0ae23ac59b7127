"""Which host cluster a new virtual cluster goes to: a pure function over plain facts.

A host fits when all of these hold, each checked and each refusal named per host:
- it takes new clusters (state ``active``; a cordoned or draining host takes none);
- the portal can reach it: it has credentials (or is the environment's host), and its last
  health check, if any, found it answering;
- it carries the requested GPU class (its live nodes have GPUs of that class), when GPUs are
  asked; a class no host's inventory shows yet (declared by an admin ahead of its nodes, as on
  a single host before the first sync) rules no host out;
- it is in the requested region, when one is named;
- the tenant's quota of the class in the host's region has room for the GPUs asked;
- for ``dedicated-nodes``: the tenant's nodes of the class on that host have room for them;
- for MIG slices (issue 61): its live nodes of the class have slices of the profile; for a
  share of one GPU: it has whole GPUs of the class to share; and the tenant's quota of that
  unit in its region has room for the slices or the share asked;
- for ``shared-pool`` on the open-source vCluster, and for a hardened cluster (a template with
  pod security baseline or user namespaces, whose pods the webhook hardens): its API server can
  reach the portal's admission webhook (the environment's host, or a host with a webhook URL).

Among the hosts that fit, the choice is deterministic: hosts whose free capacity of the class
covers the request first, then the most free capacity of the class (the most free GPUs of any
class when no GPUs are asked), then the name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.kit.gpu_units import GrantUnit, steps
from app.kit.plurals import counted, plural
from app.kube.manifests import labels as lbl

ACTIVE = "active"
DEDICATED = "dedicated-nodes"
PRIVATE = "private-nodes"


@dataclass(frozen=True)
class HostFacts:
    """One host as placement sees it; GPU figures are of the requested class."""

    id: int
    name: str
    region: str
    state: str
    # GPU class id -> whole GPUs on live nodes of the class on this host.
    class_gpus: Mapping[int, int]
    # GPU class id -> GPUs of the class neither dedicated nor held by shared-pool clusters here.
    free_gpus: Mapping[int, int]
    # GPU class id -> GPUs on this tenant's dedicated nodes here not held by its clusters yet.
    tenant_node_gpus: Mapping[int, int]
    has_credentials: bool = True
    # The last health check: None when never run.
    answers: bool | None = None
    # Its API server has a way to the portal's admission webhook (the environment's host, or
    # a webhook URL set on the host).
    has_webhook: bool = True
    # For ``private-nodes``: why this host's free machines of the class cannot make the GPUs
    # asked (None: they can).
    private_unfit: str | None = None
    # (GPU class id, MIG profile) -> slices on live nodes of the class here.
    slices: Mapping[tuple[int, str], int] = field(default_factory=dict)

    def free_of(self, gpu_class_id: int | None) -> int:
        if gpu_class_id is None:
            return sum(self.free_gpus.values())
        return self.free_gpus.get(gpu_class_id, 0)


@dataclass(frozen=True)
class PlacementRequest:
    placement: str
    gpu_class_id: int | None
    gpu_class_name: str
    gpus: int
    region: str | None  # None: the portal chooses
    # region -> GPUs of the class the tenant's quota there still has room for.
    quota_free: Mapping[str, int]
    # Shared-pool pods on the open-source vCluster join their KAI queue through the webhook.
    needs_webhook: bool = False
    # The hardening level the webhook gives the cluster's pods (app/kube/manifests/host.py's
    # hardening_level); None: none.
    hardening: str | None = None
    # A cluster of MIG slices or of a share of one GPU: its unit and amount in the unit's
    # steps (``gpus`` is then 0, and ``quota_free`` is of that unit).
    unit: GrantUnit | None = None
    amount: int = 0


@dataclass(frozen=True)
class Placed:
    host_id: int
    host_name: str
    region: str
    reason: str


@dataclass(frozen=True)
class Unfit:
    host_name: str
    region: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Unplaceable:
    """No host fits: why, for each host."""

    hosts: tuple[Unfit, ...]

    @property
    def message(self) -> str:
        if not self.hosts:
            return "no host cluster is registered"
        closed = all(any(r.startswith("host is ") for r in h.reasons) for h in self.hosts)
        lead = ("no host cluster takes new clusters: every host is cordoned or draining"
                if closed else "no host cluster fits")
        return f"{lead}: " + "; ".join(
            f"{h.host_name} ({h.region or 'no region'}): {', '.join(h.reasons)}"
            for h in self.hosts)


def unfit_reasons(host: HostFacts, request: PlacementRequest,
                  class_seen: bool = True) -> tuple[str, ...]:
    """Why ``host`` cannot take the request; empty when it fits. ``class_seen``: some host's
    inventory shows the requested class."""
    reasons = []
    if host.state != ACTIVE:
        reasons.append(f"host is {host.state} and takes no new clusters")
    if not host.has_credentials:
        reasons.append("the portal has no credentials for it")
    elif host.answers is False:
        reasons.append("it did not answer its last health check")
    if not host.has_webhook and (needs := _webhook_needs(request)):
        reasons.append("no admission webhook URL is set for it, and " + ", and ".join(needs))
    if request.region is not None and host.region != request.region:
        reasons.append(f"in region {host.region or '(none)'}, not {request.region or '(none)'}")
    if request.gpus > 0 and request.gpu_class_id is not None:
        reasons.extend(_gpu_reasons(host, request, request.gpu_class_id, class_seen))
    if request.unit is not None and request.gpu_class_id is not None:
        reasons.extend(_part_reasons(host, request, request.unit, request.gpu_class_id))
    return tuple(reasons)


def _part_reasons(host: HostFacts, request: PlacementRequest, unit: GrantUnit,
                  class_id: int) -> list[str]:
    """Why a host cannot take a cluster of slices or of a share, in words."""
    reasons = []
    name = request.gpu_class_name
    if unit.kind == "mig" and host.slices.get((class_id, unit.profile), 0) <= 0:
        reasons.append(f"has no {unit.profile} slices of {name}")
    elif unit.kind == "share" and host.class_gpus.get(class_id, 0) <= 0:
        reasons.append(f"has no {name} GPUs to share")
    room = request.quota_free.get(host.region, 0)
    if room < request.amount:
        what = f"{unit.profile} slices" if unit.kind == "mig" else "shares"
        reasons.append(f"the tenant's quota of {name} {what} in region "
                       f"{host.region or '(none)'} has room for {steps(unit, max(room, 0))}, "
                       f"{steps(unit, request.amount)} asked")
    return reasons


_HARDENING = {
    lbl.HARDENING_SECCOMP: "the seccomp RuntimeDefault profile",
    lbl.HARDENING_USER_NAMESPACES: "user namespaces, hostUsers: false, and the seccomp "
                                   "RuntimeDefault profile",
}


def _webhook_needs(request: PlacementRequest) -> list[str]:
    """What the request's pods need the admission webhook for."""
    needs = []
    if request.needs_webhook:
        needs.append("shared-pool pods need the webhook to join their KAI queue")
    if request.hardening is not None:
        what = _HARDENING.get(request.hardening, f"hardening {request.hardening!r}")
        needs.append(f"the cluster's pods get their hardening ({what}) from the webhook")
    return needs


def _gpu_reasons(host: HostFacts, request: PlacementRequest, class_id: int,
                 class_seen: bool) -> list[str]:
    reasons = []
    if request.placement == PRIVATE:
        if host.private_unfit is not None:
            reasons.append(host.private_unfit)
    elif class_seen and host.class_gpus.get(class_id, 0) <= 0:
        reasons.append(f"has no {request.gpu_class_name} nodes")
    room = request.quota_free.get(host.region, 0)
    if room < request.gpus:
        reasons.append(f"the tenant's {request.gpu_class_name} quota in region "
                       f"{host.region or '(none)'} has room for {max(room, 0)} GPUs, "
                       f"{request.gpus} asked")
    if request.placement == DEDICATED:
        on_nodes = host.tenant_node_gpus.get(class_id, 0)
        if on_nodes < request.gpus:
            reasons.append(f"the tenant's dedicated {request.gpu_class_name} nodes here have "
                           f"room for {max(on_nodes, 0)} GPUs, {request.gpus} asked")
    return reasons


def _part_room(host: HostFacts, request: PlacementRequest, unit: GrantUnit,
               class_id: int) -> str:
    if unit.kind == "mig":
        return (f"{host.slices.get((class_id, unit.profile), 0)} {unit.profile} slices of "
                f"{request.gpu_class_name} on its nodes")
    return f"{request.gpu_class_name} GPUs to share"


def place(hosts: Iterable[HostFacts], request: PlacementRequest) -> Placed | Unplaceable:
    """The host for the request, or why none fits."""
    candidates = sorted(hosts, key=lambda h: h.name)
    seen = request.gpu_class_id is None or request.placement == PRIVATE or any(
        h.class_gpus.get(request.gpu_class_id, 0) > 0 for h in candidates)
    fitting = [h for h in candidates if not unfit_reasons(h, request, seen)]
    if not fitting:
        return Unplaceable(tuple(Unfit(h.name, h.region, unfit_reasons(h, request, seen))
                                 for h in candidates))
    chosen = min(fitting, key=lambda h: _rank(h, request))
    return Placed(chosen.id, chosen.name, chosen.region,
                  _reason(chosen, request, fitting, len(candidates)))


def _rank(host: HostFacts, request: PlacementRequest) -> tuple[bool, int, str]:
    free = host.free_of(request.gpu_class_id if request.gpus > 0 else None)
    return (free < request.gpus, -free, host.name)


def _reason(chosen: HostFacts, request: PlacementRequest, fitting: list[HostFacts],
            registered: int) -> str:
    region = chosen.region or "(none)"
    where = (f"region {region} as requested" if request.region is not None
             else f"region {region} chosen by the portal")
    class_id = request.gpu_class_id if request.gpus > 0 else None
    if request.unit is not None and request.gpu_class_id is not None:
        what = _part_room(chosen, request, request.unit, request.gpu_class_id)
    elif class_id is None:
        what = f"{chosen.free_of(None)} free {plural(chosen.free_of(None), 'GPU')}"
    elif request.placement == PRIVATE:
        what = f"free {request.gpu_class_name} machines for {counted(request.gpus, 'GPU')}"
    elif request.placement == DEDICATED:
        what = (f"{counted(chosen.tenant_node_gpus.get(class_id, 0), 'GPU')} free on the "
                f"tenant's dedicated {request.gpu_class_name} nodes")
    else:
        free = chosen.free_of(class_id)
        what = f"{free} free {request.gpu_class_name} {plural(free, 'GPU')}"
    others = len(fitting) - 1
    if others == 0:
        among = ("the only host" if registered == 1
                 else f"the only one of {registered} hosts that fits")
    else:
        among = f"most free capacity of {len(fitting)} fitting hosts, then name"
    return f"{chosen.name}: {where}; {what}; {among}"
