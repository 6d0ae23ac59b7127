"""A machine's phase, reason and conditions, read from what Metal3 and the host say; no I/O.

Never guessed: the phase follows the BareMetalHost's provisioning state, except ``joined``,
which needs the host's Node with the machine's providerID to be Ready, and ``failed``, which
is Metal3's errorType (its errorMessage becomes the reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

Condition = dict[str, Any]

HOST_REGISTERED = "HostRegistered"
PROVISIONED = "Provisioned"
NODE_READY = "NodeReady"
# Whether the worker's last pass could do what the machine asks on its host (False: what
# stops it, in words, until someone fixes the host or the machine).
RECONCILED = "Reconciled"
ORDER = (HOST_REGISTERED, PROVISIONED, NODE_READY, RECONCILED)

# Metal3's provisioning states, by the phase each means for a machine.
_PHASE_OF_STATE = {
    "": "registering", "unmanaged": "registering", "registering": "registering",
    "match profile": "registering", "externally provisioned": "registering",
    "inspecting": "inspecting", "preparing": "inspecting",
    "available": "available", "ready": "available",
    "provisioning": "provisioning", "provisioned": "provisioning",
    "deprovisioning": "deprovisioning", "powering off before delete": "deprovisioning",
    "deleting": "deprovisioning",
}


@dataclass(frozen=True)
class Observed:
    """What the worker read: the BareMetalHost's status (None: no such object yet) and
    whether the machine's Node is Ready."""

    state: str | None
    error_type: str = ""
    error_message: str = ""
    node_ready: bool = False
    node_name: str | None = None
    # What the Node says of its GPUs (GPU Feature Discovery's product label, allocatable GPUs).
    node_gpu_product: str = ""
    node_gpus: int = 0
    # What keeps a private machine from going on (its cluster not Ready, a host Node of its
    # name): its reason until it is joined.
    waiting: str = ""


@dataclass(frozen=True)
class Reading:
    phase: str
    reason: str


def reading(observed: Observed, desired: str, deleting: bool,
            expected: tuple[str, int] | None = None) -> Reading:
    """The phase and reason; ``expected`` (GPU class product, count) is checked against a
    joined machine's Node."""
    found = _reading(observed, desired, deleting)
    if observed.waiting and found.phase not in ("joined", "failed"):
        return Reading(found.phase, observed.waiting)
    if found.phase == "joined" and expected is not None:
        return Reading("joined", _gpu_mismatch(observed, *expected))
    return found


def _gpu_mismatch(observed: Observed, product: str, gpus: int) -> str:
    if observed.node_gpu_product != product or observed.node_gpus != gpus:
        return (f"its node reports {observed.node_gpus} GPUs of "
                f"{observed.node_gpu_product or 'no product'}; {gpus} of {product} expected")
    return ""


def _reading(observed: Observed, desired: str, deleting: bool) -> Reading:
    if observed.error_type:
        return Reading("failed", observed.error_message or f"Metal3: {observed.error_type}")
    state = observed.state
    if state is None:
        return Reading("deprovisioning" if deleting else "registering",
                       "waiting for the BareMetalHost to be removed" if deleting
                       else "waiting for the BareMetalHost to be created")
    phase = _PHASE_OF_STATE.get(state, "registering")
    joining = desired in ("provisioned", "private")
    if state == "provisioned" and observed.node_ready and joining and not deleting:
        return Reading("joined", "")
    if state == "provisioned":
        return Reading("deprovisioning" if deleting or desired == "pool" else "provisioning",
                       _provisioned_reason(observed, desired, deleting))
    if phase == "available" and joining and not deleting:
        return Reading("available", "waiting for Metal3 to start provisioning")
    return Reading(phase, "" if phase == "available" else f"Metal3: {state or 'new'}")


def _provisioned_reason(observed: Observed, desired: str, deleting: bool) -> str:
    if deleting or desired == "pool":
        return "waiting for Metal3 to start deprovisioning"
    if observed.node_name:
        return f"waiting for node {observed.node_name} to be Ready"
    where = "its private-nodes cluster" if desired == "private" else "the host cluster"
    return f"imaged; waiting for the machine's node to join {where}"


def conditions_of(previous: list[Condition], observed: Observed, generation: int,
                  now: datetime) -> list[Condition]:
    registered = observed.state is not None and observed.state not in ("", "registering")
    found = [
        (HOST_REGISTERED, registered and not observed.error_type,
         observed.error_type or ("Registered" if registered else "Pending"),
         observed.error_message or f"Metal3 state: {observed.state or 'none yet'}"),
        (PROVISIONED, observed.state == "provisioned",
         "Provisioned" if observed.state == "provisioned" else "NotProvisioned",
         f"Metal3 state: {observed.state or 'none yet'}"),
        (NODE_READY, observed.node_ready, "NodeReady" if observed.node_ready else "NoReadyNode",
         f"node {observed.node_name} is Ready" if observed.node_ready
         else "no Ready node with the machine's providerID"),
        (RECONCILED, True, "Reconciled",
         "the worker's last pass applied what the machine asks on its host cluster"),
    ]
    before = {str(c.get("type")): c for c in previous}
    return [_condition(before.get(type_), type_, status, reason, message, generation, now)
            for type_, status, reason, message in found]


def blocked(previous: list[Condition], reason: str, message: str, generation: int,
            now: datetime) -> list[Condition]:
    """The conditions with ``Reconciled`` False: what stops the worker, the others as they
    were (what Metal3 said last)."""
    others = [c for c in previous if c.get("type") != RECONCILED]
    before = next((c for c in previous if c.get("type") == RECONCILED), None)
    return [*others, _condition(before, RECONCILED, False, reason, message, generation, now)]


def _condition(previous: Condition | None, type_: str, status: bool, reason: str, message: str,
               generation: int, now: datetime) -> Condition:
    text = "True" if status else "False"
    flipped = previous is None or previous.get("status") != text
    return {"type": type_, "status": text, "reason": reason, "message": message[:1000],
            "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ") if flipped or not previous
            else previous["lastTransitionTime"],
            "observedGeneration": generation}
