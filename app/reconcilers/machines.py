"""Kind ``machines``: one bare-metal machine per key, driven through Metal3 on its host cluster.

Level-triggered: each reconcile brings the host to what the machine asks from whatever state
it finds (a worker killed half-way leaves nothing another pass cannot finish), then reads
Metal3's answer back into the machine's phase. Its applies are forced: the BareMetalHost's spec
and the Secrets are the portal's, and a field someone else changed on the host is written back
rather than left to fail every pass.

- In the pool: the BMC Secret and an online BareMetalHost without image; what a release left
  (the machine's Node once Metal3 deprovisions, the user-data and bootstrap token Secrets) is
  removed.
- Provisioned: while Metal3 has not started provisioning, a bootstrap token (kube-system
  Secret, ``PORTAL_MACHINE_JOIN_TOKEN_TTL_SECONDS``) is minted when none is valid, its id
  recorded first (a pass that dies after finds the Secret missing and mints another); the
  user-data Secret carries the host's server, CA and the token; the BareMetalHost gets the image
  and user data. The machine is ``joined`` once a Node with its providerID is Ready.
- Deleting: the BareMetalHost is deleted and awaited (Metal3 deprovisions or detaches it),
  then the Secrets and the machine itself.

Nothing enqueues on Metal3's progress, so a machine between two states is looked at again
every few seconds; a settled one at the resync period. The token's secret half is never
logged nor stored in the portal's database.
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.database.core import Database, utcnow
from app.hosts import repository as hosts_repository
from app.hosts import service as hosts_service
from app.kit.config import Settings
from app.kube.connector import HostTarget, KubeConnector
from app.kube.errors import KubeError, PermanentKubeError
from app.kube.manifests import baremetal as metal3
from app.kube.manifests import labels as lbl
from app.kube.port import KubePort, Manifest
from app.machines import join
from app.machines import repository as machines_repository
from app.machines import service as machines_service
from app.machines.lifecycle import Observed
from app.machines.service import MachineSpec
from app.reconcilers.host_keys import client, failure, wait_for_breaker
from app.reconcilers.kind import DONE, GONE, Context, Outcome, TerminalError
from app.reconcilers.leases import Lease
from app.workqueue import MACHINES, NODES, enqueue

log = logging.getLogger(__name__)
# Metal3 states in which the user data has not been read yet: a token may still be minted.
BEFORE_PROVISIONING = frozenset({"", "unmanaged", "registering", "match profile", "inspecting",
                                 "preparing", "available", "ready"})
# A token with less than this share of its lifetime left is replaced before use.
TOKEN_RENEWAL_SHARE = 0.25
SECRET = ("v1", "Secret")
NODE = ("v1", "Node")
BMH = (metal3.METAL3_API_VERSION, metal3.BAREMETAL_HOST)


class Stuck(Exception):
    """What stops the machine until someone changes the host or the machine: ``reason`` for
    its condition (CamelCase), ``message`` in words."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Snapshot:
    spec: MachineSpec
    target: HostTarget | None
    stored_endpoint: join.JoinEndpoint | None


class MachineReconciler:
    name = MACHINES

    def __init__(self, settings: Settings, database: Database, kube: KubeConnector, *,
                 now: Callable[[], datetime] = utcnow,
                 choose: Callable[[str], str] = secrets.choice) -> None:
        self.settings = settings
        self.database = database
        self.kube = kube
        self.now = now
        self.choose = choose
        self.resync_seconds = settings.worker_resync_seconds
        # Metal3's progress is polled: a machine on its way is looked at this often.
        self.poll_seconds = max(settings.worker_poll_seconds * 5, 1.0)
        checksum = settings.machine_image_checksum or f"{settings.machine_image_url}.sha256sum"
        self.image = metal3.MachineImage(settings.machine_image_url, checksum,
                                         settings.machine_image_checksum_type,
                                         settings.machine_image_format)

    def keys(self, db: Session) -> list[str]:
        return [str(machine_id) for machine_id in machines_repository.all_machine_ids(db)]

    def reconcile(self, key: str, context: Context) -> Outcome:
        snapshot = self._read(key) if key.isdigit() else None
        if snapshot is None:
            return GONE
        try:
            return self._reconcile(snapshot, context)
        except Stuck as stuck:
            # Retrying will not help until someone fixes the host: said where the admin looks
            # (the runtime logs it), looked at again at the resync or the machine's next change.
            self._note(snapshot.spec, stuck, context.lease)
            raise TerminalError(f"machine {snapshot.spec.name}: {stuck.message}") from None

    def _reconcile(self, snapshot: Snapshot, context: Context) -> Outcome:
        spec, target = snapshot.spec, snapshot.target
        if target is None:
            raise Stuck("NoCredentials", "the portal cannot reach the machine's host cluster: "
                                         "it has no stored credentials")
        wait_for_breaker(context, target.host_id)
        host = client(self.kube, target)
        if host is None:
            raise Stuck("NoClient", f"the portal has no Kubernetes client for host cluster "
                                    f"{target.name}: give it a kubeconfig (PORTAL_KUBECONFIG, "
                                    "or a real host with `make lab`)")
        try:
            observed = self._converge(host, snapshot, context.lease)
        except KubeError as error:
            log.warning("machine %s on host cluster %s: %s (%s)", spec.name, target.name,
                        error.reason, error.message)
            if isinstance(error, PermanentKubeError):
                self._note(spec, Stuck("HostRefused",
                                       f"the host cluster refused: {error.message}"),
                           context.lease)
            raise failure(target, error, f"machine {spec.name}") from error
        context.hosts.reached(target.host_id)
        if observed is None:
            return self._forget(spec, context.lease)
        phase = self._record(spec, observed, context.lease)
        if phase is None:
            return GONE
        return DONE if _settled(spec, phase) else Outcome(requeue_after=self.poll_seconds)

    # ----- reading the machine

    def _read(self, key: str) -> Snapshot | None:
        with self.database.session() as db:
            row = machines_repository.machine_by_id(db, int(key))
            if row is None:
                return None
            host = hosts_repository.host_by_id(db, row.host_cluster_id)
            if host is None:
                return None
            target = hosts_service.target_for(host, self.settings)
            return Snapshot(machines_service.spec_of(row, self.settings), target,
                            self._stored_endpoint(target))

    def _stored_endpoint(self, target: HostTarget | None) -> join.JoinEndpoint | None:
        if target is None:
            return None
        if target.kubeconfig_yaml is not None:
            return join.from_kubeconfig(target.kubeconfig_yaml)
        if self.settings.kubeconfig:
            return join.from_kubeconfig_file(self.settings.kubeconfig)
        return None

    # ----- converging the host

    def _converge(self, host: KubePort, snapshot: Snapshot, lease: Lease) -> Observed | None:
        """Brings the host to what the machine asks; what Metal3 and the host then say (None:
        a deleted machine is gone from the host)."""
        spec = snapshot.spec
        if spec.deleting:
            return self._delete(host, spec)
        host.apply(_machines_namespace(), force=True)
        host.apply(metal3.bmc_secret(spec.name, spec.bmc.username, spec.bmc.password), force=True)
        current = metal3.host_observation(host.get(*BMH, spec.name, metal3.MACHINES_NAMESPACE))
        if spec.desired == "provisioned":
            user_data = self._ensure_join(host, snapshot, current, lease)
            stored = host.apply(self._host(spec, image=True, user_data=user_data), force=True)
        else:
            stored = host.apply(self._host(spec, image=False, user_data=None), force=True)
        observation = metal3.host_observation(stored)
        node = self._node(host, spec) if observation.state == "provisioned" else None
        if spec.desired == "pool":
            self._clean_after_release(host, spec, observation, lease)
        return _observed(observation, node)

    def _host(self, spec: MachineSpec, *, image: bool, user_data: str | None) -> Manifest:
        return metal3.baremetal_host(spec.name, bmc_address=spec.bmc_address,
                                     boot_mac=spec.boot_mac, online=True,
                                     image=self.image if image else None, user_data=user_data)

    def _ensure_join(self, host: KubePort, snapshot: Snapshot,
                     current: metal3.HostObservation, lease: Lease) -> str:
        """The user-data Secret's name, the Secret written with a valid token while Metal3
        has not read it yet; afterwards it is left as the machine booted with."""
        spec = snapshot.spec
        name = metal3.user_data_secret_name(spec.name)
        if current.exists and current.state not in BEFORE_PROVISIONING:
            return name
        token = self._valid_token(host, spec)
        if token is None:
            token = self._mint(host, spec, lease)
        for binding in metal3.bootstrap_role_bindings():
            host.apply(binding, force=True)
        endpoint = self._endpoint(host, snapshot)
        host.apply(metal3.user_data_secret(spec.name, server=endpoint.server,
                                           ca_data=endpoint.ca_data, token=token.value,
                                           node_name=spec.name), force=True)
        return name

    def _valid_token(self, host: KubePort, spec: MachineSpec) -> metal3.BootstrapToken | None:
        """The recorded token, when its Secret is on the host and enough of its life is left."""
        if not spec.bootstrap_token_id or spec.bootstrap_token_expires_at is None:
            return None
        left = spec.bootstrap_token_expires_at - self.now()
        if left < timedelta(seconds=self.settings.machine_join_token_ttl_seconds
                            * TOKEN_RENEWAL_SHARE):
            return None
        stored = host.get(*SECRET, metal3.bootstrap_token_secret_name(spec.bootstrap_token_id),
                          metal3.BOOTSTRAP_TOKEN_NAMESPACE)
        secret = _decoded((stored or {}).get("data") or {}, "token-secret")
        try:
            return metal3.BootstrapToken(spec.bootstrap_token_id, secret) if secret else None
        except ValueError:
            return None

    def _mint(self, host: KubePort, spec: MachineSpec, lease: Lease) -> metal3.BootstrapToken:
        """A new token: its id recorded before its Secret exists, so that no pass leaves a
        Secret the machine does not name (an orphan would still expire by itself)."""
        token = metal3.BootstrapToken.generate(self.choose)
        expires_at = self.now() + timedelta(seconds=self.settings.machine_join_token_ttl_seconds)
        with self.database.transaction() as db:
            lease.fence(db)
            row = machines_repository.machine_by_id(db, spec.id, lock=True)
            if row is not None:
                machines_service.record_token(row, token.token_id, expires_at)
        if spec.bootstrap_token_id:
            _delete_token(host, spec.bootstrap_token_id)
        host.apply(metal3.bootstrap_token_secret(spec.name, token, expires_at), force=True)
        log.info("machine %s: bootstrap token %s minted, valid until %s", spec.name,
                 token.token_id, expires_at.isoformat())
        return token

    def _endpoint(self, host: KubePort, snapshot: Snapshot) -> join.JoinEndpoint:
        endpoint = snapshot.stored_endpoint or join.from_cluster_info(
            host.get("v1", "ConfigMap", join.CLUSTER_INFO, join.CLUSTER_INFO_NAMESPACE))
        if endpoint is None:
            raise Stuck("NoJoinEndpoint", (
                "no API server address and CA to join the host cluster with: the host's "
                "kubeconfig has no certificate-authority-data and "
                f"{join.CLUSTER_INFO_NAMESPACE}/{join.CLUSTER_INFO} has no kubeconfig; give "
                "the host a kubeconfig that carries its CA (the machine is looked at again "
                f"within {self.resync_seconds:g} s, or when it changes)"))
        return endpoint

    def _node(self, host: KubePort, spec: MachineSpec) -> Manifest | None:
        """The machine's Node: named after it, and carrying its providerID (a Node of that name
        from elsewhere is not it)."""
        node = host.get(*NODE, spec.name)
        if node is None or (node.get("spec") or {}).get("providerID") != metal3.provider_id(
                spec.name):
            return None
        return node

    def _clean_after_release(self, host: KubePort, spec: MachineSpec,
                             observation: metal3.HostObservation, lease: Lease) -> None:
        """Once Metal3 has started deprovisioning: the Node goes (it will not come back), and
        with it the join's Secrets."""
        if observation.state == "provisioned" or not (spec.node_name
                                                      or spec.bootstrap_token_id):
            return
        if self._node(host, spec) is not None:
            host.delete(*NODE, spec.name)
        _delete_join_secrets(host, spec)
        with self.database.transaction() as db:
            lease.fence(db)
            row = machines_repository.machine_by_id(db, spec.id, lock=True)
            if row is not None and row.desired == "pool":
                machines_service.record_token(row, None, None)
                row.node_name = None
                enqueue(db, NODES, row.host_cluster_id)  # the inventory marks the node gone

    def _delete(self, host: KubePort, spec: MachineSpec) -> Observed | None:
        stored = host.get(*BMH, spec.name, metal3.MACHINES_NAMESPACE)
        if stored is not None:
            if not (stored.get("metadata") or {}).get("deletionTimestamp"):
                host.delete(*BMH, spec.name, metal3.MACHINES_NAMESPACE)
            stored = host.get(*BMH, spec.name, metal3.MACHINES_NAMESPACE)
        if stored is not None:
            return _observed(metal3.host_observation(stored), None)  # Metal3 still at it
        if self._node(host, spec) is not None:
            host.delete(*NODE, spec.name)
        _delete_join_secrets(host, spec)
        host.delete(*SECRET, metal3.bmc_secret_name(spec.name), metal3.MACHINES_NAMESPACE)
        return None

    # ----- recording what was read

    def _record(self, spec: MachineSpec, observed: Observed, lease: Lease) -> str | None:
        with self.database.transaction() as db:
            lease.fence(db)
            row = machines_repository.machine_by_id(db, spec.id, lock=True)
            if row is None:
                return None
            machines_service.record_observation(db, row, observed, spec.generation, self.now())
            return row.phase

    def _note(self, spec: MachineSpec, stuck: Stuck, lease: Lease) -> None:
        """What keeps the machine where it is, where the admin looks: its reason and its
        ``Reconciled`` condition (retrying will not help until someone fixes the host: a
        missing CRD, a refused field, no address to join)."""
        with self.database.transaction() as db:
            lease.fence(db)
            row = machines_repository.machine_by_id(db, spec.id, lock=True)
            if row is not None:
                machines_service.record_blocked(row, stuck.reason, stuck.message,
                                                spec.generation, self.now())

    def _forget(self, spec: MachineSpec, lease: Lease) -> Outcome:
        with self.database.transaction() as db:
            lease.fence(db)
            row = machines_repository.machine_by_id(db, spec.id, lock=True)
            if row is not None:
                machines_service.forget(db, row)
        log.info("machine %s: BareMetalHost and Secrets removed; machine deleted", spec.name)
        return GONE


def _settled(spec: MachineSpec, phase: str) -> bool:
    """Nothing to wait for: looked at again at the resync period."""
    if spec.deleting:
        return False
    wanted = "joined" if spec.desired == "provisioned" else "available"
    return phase in (wanted, "failed")


def _observed(observation: metal3.HostObservation, node: Manifest | None) -> Observed:
    error_type = observation.error_type or (
        "OperationalError" if observation.has_error else "")
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    allocatable = ((node or {}).get("status") or {}).get("allocatable") or {}
    return Observed(state=observation.state if observation.exists else None,
                    error_type=error_type, error_message=observation.error_message,
                    node_ready=node is not None and _ready(node),
                    node_name=str(node["metadata"]["name"]) if node is not None else None,
                    node_gpu_product=str(labels.get(lbl.GPU_PRODUCT, "")),
                    node_gpus=_count(allocatable.get(lbl.GPU_RESOURCE)))


def _ready(node: Manifest) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _count(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _machines_namespace() -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": metal3.MACHINES_NAMESPACE, "labels": lbl.managed()}}


def _delete_join_secrets(host: KubePort, spec: MachineSpec) -> None:
    host.delete(*SECRET, metal3.user_data_secret_name(spec.name), metal3.MACHINES_NAMESPACE)
    if spec.bootstrap_token_id:
        _delete_token(host, spec.bootstrap_token_id)


def _delete_token(host: KubePort, token_id: str) -> None:
    host.delete(*SECRET, metal3.bootstrap_token_secret_name(token_id),
                metal3.BOOTSTRAP_TOKEN_NAMESPACE)


def _decoded(data: dict[str, str], key: str) -> str:
    try:
        return base64.b64decode(data.get(key) or "", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""
