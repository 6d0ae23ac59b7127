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

- Private (issue 57, r57.md §8): the machine serves a private-nodes cluster and joins *its*
  API server. Once the cluster is Ready with its bootstrap bindings, and no host Node has the
  machine's name, a token is minted in the **virtual** cluster's kube-system (id and expiry
  recorded first), the user data names the virtual cluster's endpoint and CA; once imaged, the
  token's CSR for the machine's node is approved and any other CSR of the token denied; the
  token is deleted once the Node registered, the user data once it is Ready there. Given back
  (desired pool, cluster kept): its pods are deleted and the virtual Node removed, then the
  image taken off; once Metal3 has it in the pool again, the machine is no cluster's.

Nothing enqueues on Metal3's progress, so a machine between two states is looked at again
every few seconds; a settled one at the resync period. The token's secret half is never
logged nor stored in the portal's database.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.clusters import conditions as cond
from app.clusters.models import VirtualCluster
from app.database.core import Database, utcnow
from app.hosts import repository as hosts_repository
from app.hosts import service as hosts_service
from app.kit.config import Settings
from app.kit.crypto import SecretBox
from app.kube.connector import HostTarget, KubeConnector
from app.kube.errors import KubeError, PermanentKubeError
from app.kube.manifests import baremetal as metal3
from app.kube.manifests import private_nodes
from app.kube.port import KubePort, Manifest, release
from app.machines import join
from app.machines import repository as machines_repository
from app.machines import service as machines_service
from app.machines.lifecycle import Observed
from app.machines.service import MachineSpec
from app.reconcilers import machine_parts as parts
from app.reconcilers.host_keys import client, failure, wait_for_breaker
from app.reconcilers.kind import DONE, GONE, Context, Outcome, TerminalError
from app.reconcilers.leases import Lease
from app.reconcilers.machine_parts import (
    BEFORE_PROVISIONING,
    BMH,
    CLUSTER_LABEL,
    NODE,
    POD,
    SECRET,
    TOKEN_RENEWAL_SHARE,
    PrivateCluster,
    Stuck,
)
from app.workqueue import MACHINES, NODES, enqueue

log = logging.getLogger(__name__)
@dataclass(frozen=True)
class Snapshot:
    spec: MachineSpec
    target: HostTarget | None
    stored_endpoint: join.JoinEndpoint | None
    private: PrivateCluster | None = None


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
        if spec.cluster_id is not None and spec.desired == "pool" and phase == "available" and (
                not observed.waiting):
            self._returned(spec, context.lease)
            return DONE
        return DONE if parts.settled(spec, phase) else Outcome(requeue_after=self.poll_seconds)

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
            private = self._private(db, row.cluster_id) if row.cluster_id else None
            return Snapshot(machines_service.spec_of(row, self.settings), target,
                            self._stored_endpoint(target), private)

    def _private(self, db: Session, cluster_id: int) -> PrivateCluster | None:
        cluster = db.get(VirtualCluster, cluster_id)
        if cluster is None:
            return None
        conditions = list(cluster.conditions or [])
        ready = (cond.is_true(conditions, cond.READY)
                 and cond.is_true(conditions, cond.NODE_BOOTSTRAP)
                 and cluster.power == "awake")
        kubeconfig = None
        if cluster.admin_kubeconfig_encrypted:
            try:
                kubeconfig = SecretBox.from_settings(self.settings).open(
                    cluster.admin_kubeconfig_encrypted)
            except ValueError:
                kubeconfig = None
        return PrivateCluster(cluster.id, cluster.tenant_id, cluster.name, ready, kubeconfig)

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
        if spec.cluster_id is not None:
            return self._converge_private(host, snapshot, lease)
        host.apply(parts.machines_namespace(), force=True)
        host.apply(metal3.bmc_secret(spec.name, spec.bmc.username, spec.bmc.password), force=True)
        current = metal3.host_observation(host.get(*BMH, spec.name, metal3.MACHINES_NAMESPACE))
        if spec.desired == "provisioned":
            user_data = self._ensure_join(host, snapshot, current, lease)
            stored = host.apply(self._host(spec, image=True, user_data=user_data), force=True)
        else:
            stored = host.apply(self._host(spec, image=False, user_data=None), force=True)
        observation = metal3.host_observation(stored)
        node = parts.node_of(host, spec) if observation.state == "provisioned" else None
        if spec.desired == "pool":
            self._clean_after_release(host, spec, observation, lease)
        return parts.observed(observation, node)

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
        secret = parts.decoded((stored or {}).get("data") or {}, "token-secret")
        try:
            return metal3.BootstrapToken(spec.bootstrap_token_id, secret) if secret else None
        except ValueError:
            return None

    def _recorded_token(self, spec: MachineSpec,
                        lease: Lease) -> tuple[metal3.BootstrapToken, datetime]:
        """A new token and its expiry, its id recorded on the machine before any Secret of it
        exists (a pass that dies after finds the Secret missing and mints another)."""
        token = metal3.BootstrapToken.generate(self.choose)
        expires_at = self.now() + timedelta(seconds=self.settings.machine_join_token_ttl_seconds)
        with self.database.transaction() as db:
            lease.fence(db)
            row = machines_repository.machine_by_id(db, spec.id, lock=True)
            if row is not None:
                machines_service.record_token(row, token.token_id, expires_at)
        return token, expires_at

    def _mint(self, host: KubePort, spec: MachineSpec, lease: Lease) -> metal3.BootstrapToken:
        """A new token: its id recorded before its Secret exists, so that no pass leaves a
        Secret the machine does not name (an orphan would still expire by itself)."""
        token, expires_at = self._recorded_token(spec, lease)
        if spec.bootstrap_token_id:
            parts.delete_token(host, spec.bootstrap_token_id)
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

    def _clean_after_release(self, host: KubePort, spec: MachineSpec,
                             observation: metal3.HostObservation, lease: Lease) -> None:
        """Once Metal3 has started deprovisioning: the Node goes (it will not come back), and
        with it the join's Secrets."""
        if observation.state == "provisioned" or not (spec.node_name
                                                      or spec.bootstrap_token_id):
            return
        if parts.node_of(host, spec) is not None:
            host.delete(*NODE, spec.name)
        parts.delete_join_secrets(host, spec)
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
            return parts.observed(metal3.host_observation(stored), None)  # Metal3 still at it
        if parts.node_of(host, spec) is not None:
            host.delete(*NODE, spec.name)
        parts.delete_join_secrets(host, spec)
        host.delete(*SECRET, metal3.bmc_secret_name(spec.name), metal3.MACHINES_NAMESPACE)
        return None

    # ----- a private-nodes cluster's machine

    def _converge_private(self, host: KubePort, snapshot: Snapshot, lease: Lease) -> Observed:
        spec, cluster = snapshot.spec, snapshot.private
        host.apply(parts.machines_namespace(), force=True)
        host.apply(metal3.bmc_secret(spec.name, spec.bmc.username, spec.bmc.password), force=True)
        current = metal3.host_observation(host.get(*BMH, spec.name, metal3.MACHINES_NAMESPACE))
        virtual = (self.kube.virtual(cluster.kubeconfig)
                   if cluster is not None and cluster.kubeconfig else None)
        try:
            if spec.desired == "private":
                return self._join_private(host, virtual, snapshot, current, lease)
            return self._leave_private(host, virtual, spec, lease)
        finally:
            release(virtual)

    def _join_private(self, host: KubePort, virtual: KubePort | None, snapshot: Snapshot,
                      current: metal3.HostObservation, lease: Lease) -> Observed:
        spec, cluster = snapshot.spec, snapshot.private
        name = metal3.user_data_secret_name(spec.name)
        waiting = parts.not_yet(host, virtual, spec, cluster)
        if waiting:
            # Whatever Metal3 has begun is kept: a cluster briefly not Ready takes nothing away.
            imaged = current.exists and bool(current.wanted_image_url)
            stored = host.apply(self._host(spec, image=imaged, user_data=name if imaged
                                           else None), force=True)
            return replace(parts.observed(metal3.host_observation(stored), None), waiting=waiting)
        assert virtual is not None and cluster is not None
        if not current.exists or current.state in BEFORE_PROVISIONING:
            self._private_user_data(host, virtual, spec, cluster, lease)
        stored = host.apply(self._host(spec, image=True, user_data=name), force=True)
        observation = metal3.host_observation(stored)
        node = None
        if observation.state == "provisioned":
            parts.decide_csrs(virtual, spec)
            node = parts.node_of(virtual, spec)
            if node is not None and spec.bootstrap_token_id:
                parts.delete_token(virtual, spec.bootstrap_token_id)  # registered: never again
                self._forget_token(spec, lease)
            if node is not None and parts.ready(node):
                host.delete(*SECRET, name, metal3.MACHINES_NAMESPACE)
        return parts.observed(observation, node)

    def _private_user_data(self, host: KubePort, virtual: KubePort, spec: MachineSpec,
                           cluster: PrivateCluster, lease: Lease) -> None:
        token = self._valid_token(virtual, spec) or self._mint_private(virtual, spec, cluster,
                                                                         lease)
        endpoint = join.from_kubeconfig(cluster.kubeconfig)
        assert endpoint is not None
        args = [f"--node-labels={CLUSTER_LABEL}={cluster.cluster_id}", "--rotate-certificates"]
        dns = ((virtual.get("v1", "Service", "kube-dns", "kube-system") or {}).get("spec")
               or {}).get("clusterIP")
        if dns:
            args.append(f"--cluster-dns={dns}")
        host.apply(metal3.user_data_secret(spec.name, server=endpoint.server,
                                           ca_data=endpoint.ca_data, token=token.value,
                                           node_name=spec.name, extra_kubelet_args=args),
                   force=True)

    def _mint_private(self, virtual: KubePort, spec: MachineSpec, cluster: PrivateCluster,
                      lease: Lease) -> metal3.BootstrapToken:
        """A token in the virtual cluster's kube-system, its id and expiry recorded first."""
        token, expires_at = self._recorded_token(spec, lease)
        if spec.bootstrap_token_id:
            parts.delete_token(virtual, spec.bootstrap_token_id)
        virtual.apply(private_nodes.bootstrap_token_secret(
            token.token_id, token.secret, expires_at,
            f"gpu-tenant-portal: joins machine {spec.name} to cluster {cluster.name}"),
            force=True)
        log.info("machine %s: bootstrap token %s minted in cluster %s, valid until %s",
                 spec.name, token.token_id, cluster.name, expires_at.isoformat())
        return token

    def _leave_private(self, host: KubePort, virtual: KubePort | None, spec: MachineSpec,
                       lease: Lease) -> Observed:
        """Given back: out of the cluster (its pods, then its Node), then wiped by Metal3."""
        if virtual is not None:
            node = parts.node_of(virtual, spec)
            if node is not None:
                for pod in virtual.list(*POD, field_selector={"spec.nodeName": spec.name}):
                    meta = pod["metadata"]
                    virtual.delete(*POD, meta["name"], meta.get("namespace"))
                virtual.delete(*NODE, spec.name)
            if spec.bootstrap_token_id:
                parts.delete_token(virtual, spec.bootstrap_token_id)
        stored = host.apply(self._host(spec, image=False, user_data=None), force=True)
        host.delete(*SECRET, metal3.user_data_secret_name(spec.name), metal3.MACHINES_NAMESPACE)
        if spec.bootstrap_token_id or spec.node_name:
            self._forget_token(spec, lease, node_too=True)
        observation = metal3.host_observation(stored)
        return replace(parts.observed(observation, None), waiting="" if observation.in_pool else
                       "leaving its private-nodes cluster: waiting for Metal3 to wipe it")

    def _forget_token(self, spec: MachineSpec, lease: Lease, *, node_too: bool = False) -> None:
        with self.database.transaction() as db:
            lease.fence(db)
            row = machines_repository.machine_by_id(db, spec.id, lock=True)
            if row is not None:
                machines_service.record_token(row, None, None)
                if node_too and row.desired == "pool":
                    row.node_name = None

    def _returned(self, spec: MachineSpec, lease: Lease) -> None:
        """Wiped and available: the machine is no cluster's any more."""
        with self.database.transaction() as db:
            lease.fence(db)
            row = machines_repository.machine_by_id(db, spec.id, lock=True)
            if row is None or row.cluster_id is None:
                return
            cluster = db.get(VirtualCluster, row.cluster_id)
            machines_service.record_returned(
                db, row, cluster.tenant_id if cluster else None,
                f"cluster {cluster.name}" if cluster else f"cluster #{row.cluster_id}")

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

