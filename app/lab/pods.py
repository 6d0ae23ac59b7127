"""The lab's kubelet for virtual cluster control planes, and its volume provisioner.

The worker's helm installs a vCluster StatefulSet; the host's scheduler puts its pod on the
runner's node (the portal's ``PORTAL_CONTROL_PLANE_NODE_SELECTOR`` says so). For each such pod
the runner does what a kubelet would with the vCluster image: it gives the pod a network of its
own (``app.lab.network``), mounts what the pod's volumes hold where the image expects them
(``/binaries``, ``/data``, ``/pki``, ``/var/lib/vcluster``, the ServiceAccount token), starts
``vcluster start`` (the syncer, which starts the virtual control plane), reports the pod Running
and Ready from the syncer's ``/readyz``, restarts it when it exits, and stops it when the pod is
deleted. Persistent volume claims get a hostPath volume under the lab's folder.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from app.kube.adapter import KubernetesAdapter
from app.kube.errors import KubeError
from app.kube.port import Manifest, register_kind
from app.lab.network import LabNetwork, NetworkError, PodNetwork

log = logging.getLogger(__name__)

NODE_NAME = "lab-control-planes"
MANAGER = "lab-pod-runner"  # the field manager of what the runner writes, as a kubelet's
NODE_LABELS = {"gpu-tenant-portal.dev/lab-role": "control-planes"}
# Where the vCluster image keeps what its volumes mount; empty folders on the machine, the
# pod's own content is mounted over them in its own mount namespace.
MOUNT_POINTS = ("/binaries", "/data", "/pki", "/var/lib/vcluster", "/run/secrets")
# What the pod's image holds: the control plane the syncer starts from /binaries, kine, and the
# syncer itself.
POD_PROGRAMS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kine",
                "vcluster")
SERVICE_ACCOUNT_DIR = "/run/secrets/kubernetes.io/serviceaccount"
SYNCER_PROXY_PORT = 8443
TOKEN_SECONDS = 30 * 24 * 3600
HEARTBEAT_SECONDS = 10.0
RESTART_DELAY_SECONDS = 5.0
# /tmp last: the lab's folders (and the programs, copied into /binaries) may be under it.
_MOUNT_SCRIPT = f"""set -e
mount --bind "$1" /binaries
mount --bind "$2" /data
mount --bind "$3" /pki
mount --bind "$4" /var/lib/vcluster
mount -t tmpfs lab-bin /usr/local/bin
ln -s /binaries/kine /usr/local/bin/kine
mount -t tmpfs lab-secrets /run/secrets
mkdir -p {SERVICE_ACCOUNT_DIR}
cp "$6"/token "$6"/ca.crt "$6"/namespace {SERVICE_ACCOUNT_DIR}/
mount --bind "$5" /tmp
shift 6
exec "$@"
"""

register_kind("v1", "PersistentVolume", "persistentvolumes", namespaced=False)
register_kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims", namespaced=True)


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def prepare_mount_points() -> None:
    for path in MOUNT_POINTS:
        Path(path).mkdir(parents=True, exist_ok=True)


@dataclass
class HostAccess:
    """How a pod reaches the host API: the address and port the kubelet would put in
    ``KUBERNETES_SERVICE_HOST``/``_PORT``, and the CA of ``ca.crt``."""

    network: LabNetwork
    port: int
    ca_pem: bytes

    @property
    def address(self) -> str:
        return self.network.gateway


@dataclass
class RunningPod:
    uid: str
    namespace: str
    name: str
    network: PodNetwork
    folder: Path
    argv: list[str]
    env: dict[str, str]
    endpoint_host: str
    process: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    restarts: int = 0
    exited_at: float = 0.0
    ready: bool = False
    reported: tuple[bool, int, bool] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        with (self.folder / "syncer.log").open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        self.started_at = now_text()
        self.ready = False

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal the whole pod (the syncer and the control plane it started)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        if self.process is not None:
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self.process.wait()
        self.network.remove()


@dataclass
class PodRunner:
    host: KubernetesAdapter
    access: HostAccess
    workdir: Path
    programs: Path
    pods: dict[str, RunningPod] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next_index: int = 0
    _last_heartbeat: float = 0.0

    # ----- what others ask

    def routes(self) -> dict[str, str]:
        """Endpoint host names (``exportKubeConfig.server``) to the pod address serving them."""
        with self._lock:
            return {pod.endpoint_host: pod.network.address
                    for pod in self.pods.values() if pod.running}

    def crash(self, namespace: str, *, hold: bool = False) -> None:
        """SIGKILL to the control plane pod of ``namespace``, as a crash would; ``hold`` keeps
        it down (a crash loop) until ``release``."""
        with self._lock:
            if hold:
                self.held.add(namespace)
            for pod in self.pods.values():
                if pod.namespace == namespace:
                    pod.kill()

    def release(self, namespace: str) -> None:
        with self._lock:
            self.held.discard(namespace)

    # ----- the loop

    def register_node(self) -> None:
        self.host.apply({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": NODE_NAME, "labels": {
                             "kubernetes.io/hostname": NODE_NAME, **NODE_LABELS}}}, force=True,
                        manager=MANAGER)
        self._heartbeat()

    def run(self, stop: threading.Event) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._copy_programs()
        while not stop.is_set():
            try:
                self.step()
            except (KubeError, NetworkError, OSError) as exc:  # the next step tries again
                log.warning("pod runner: %s", exc)
            stop.wait(1.0)
        self.stop_all()

    def step(self) -> None:
        if time.monotonic() - self._last_heartbeat > HEARTBEAT_SECONDS:
            self._heartbeat()
        self._provision_volumes()
        listed = self.host.list("v1", "Pod", field_selector={"spec.nodeName": NODE_NAME})
        seen = set()
        for pod in listed:
            seen.add(pod["metadata"]["uid"])
            self._tend(pod)
        for uid in set(self.pods) - seen:
            self._forget(uid)

    def stop_all(self) -> None:
        for uid in list(self.pods):
            self._forget(uid)

    # ----- one pod

    def _tend(self, pod: Manifest) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if meta.get("deletionTimestamp"):
            self._forget(uid)
            self.host.delete("v1", "Pod", meta["name"], meta["namespace"],
                             grace_period_seconds=0)
            return
        running = self.pods.get(uid)
        if running is None:
            running = self._prepare(pod)
            if running is None:
                return
            with self._lock:
                self.pods[uid] = running
            running.start()
        elif not running.running:
            self._restart(running)
        running.ready = running.running and _answers_readyz(running.network.address)
        self._report(running)

    def _restart(self, pod: RunningPod) -> None:
        if not pod.exited_at:
            pod.exited_at = time.monotonic()
            pod.ready = False
            log.warning("control plane of %s exited; restarting", pod.namespace)
        elif (time.monotonic() - pod.exited_at > RESTART_DELAY_SECONDS
              and pod.namespace not in self.held):
            pod.restarts += 1
            pod.exited_at = 0.0
            pod.start()

    def _forget(self, uid: str) -> None:
        with self._lock:
            pod = self.pods.pop(uid, None)
        if pod is not None:
            pod.stop()

    def _prepare(self, pod: Manifest) -> RunningPod | None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        syncer = _container(pod, "syncer")
        data = self._data_folder(pod)
        release = _env_value(syncer, "VCLUSTER_NAME")
        secret = self.host.get("v1", "Secret", f"vc-config-{release}", namespace)
        if syncer is None or data is None or secret is None:
            return None  # not a vCluster pod, or its volume or config is not there yet
        folder = self.workdir / "pods" / f"{namespace}_{name}"
        config = _fresh(folder / "config")
        config_yaml = base64.b64decode(secret["data"]["config.yaml"])
        (config / "config.yaml").write_bytes(config_yaml)
        network = self.access.network.pod(self._take_index()).create()
        accounts = self._service_account(folder, namespace, pod["spec"]["serviceAccountName"])
        argv = network.command([
            "sh", "-c", _MOUNT_SCRIPT, "sh", str(self.workdir / "binaries"), str(data),
            str(_fresh(folder / "pki")), str(config), str(_fresh(folder / "tmp")),
            str(accounts), "/binaries/vcluster", "start"])
        env = self._environment(pod, syncer, network.address)
        return RunningPod(pod["metadata"]["uid"], namespace, name, network, folder, argv, env,
                          _endpoint_host(config_yaml))

    def _take_index(self) -> int:
        used = {pod.network.index for pod in self.pods.values()}
        while self._next_index in used:
            self._next_index += 1
        return self._next_index

    def _service_account(self, folder: Path, namespace: str, account: str) -> Path:
        token = self.host.request_token(namespace, account, expiration_seconds=TOKEN_SECONDS,
                                        bound_secret=None)
        accounts = _fresh(folder / "serviceaccount")
        for name, text in (("token", token), ("namespace", namespace),
                           ("ca.crt", self.access.ca_pem.decode())):
            (accounts / name).write_text(text)
            (accounts / name).chmod(0o600)
        return accounts

    def _environment(self, pod: Manifest, container: Manifest, address: str) -> dict[str, str]:
        fields = {"metadata.name": pod["metadata"]["name"],
                  "metadata.namespace": pod["metadata"]["namespace"],
                  "spec.nodeName": NODE_NAME, "status.podIP": address,
                  "status.hostIP": self.access.address}
        env = {"PATH": "/binaries:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "KUBERNETES_SERVICE_HOST": self.access.address,
               "KUBERNETES_SERVICE_PORT": str(self.access.port)}
        for item in container.get("env") or []:
            value = _resolve(item, fields)
            if value is not None:
                env[item["name"]] = value
        return env

    def _data_folder(self, pod: Manifest) -> Path | None:
        volume = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == "data"), None)
        if volume is None or "persistentVolumeClaim" not in volume:
            meta = pod["metadata"]
            pod_folder = self.workdir / "pods" / f"{meta['namespace']}_{meta['name']}"
            return _fresh(pod_folder / "data", keep=True)
        claim = self.host.get("v1", "PersistentVolumeClaim",
                              volume["persistentVolumeClaim"]["claimName"],
                              pod["metadata"]["namespace"])
        volume_name = ((claim or {}).get("spec") or {}).get("volumeName")
        bound = self.host.get("v1", "PersistentVolume", volume_name) if volume_name else None
        path = ((bound or {}).get("spec") or {}).get("hostPath", {}).get("path")
        return Path(path) if path else None

    def _report(self, pod: RunningPod) -> None:
        state = (pod.running, pod.restarts, pod.ready)
        if state == pod.reported:
            return
        self.host.apply_status(_pod_status(pod, self.access.address), manager=MANAGER)
        pod.reported = state

    # ----- the node and the volumes

    def _heartbeat(self) -> None:
        capacity = {"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "500Gi"}
        now = now_text()
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "the lab's pod runner is running", "lastHeartbeatTime": now,
                 "lastTransitionTime": now}
        self.host.apply_status({"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": NODE_NAME},
                                "status": {"capacity": capacity, "allocatable": capacity,
                                           "conditions": [ready],
                                           "addresses": [{"type": "InternalIP",
                                                          "address": self.access.address}]}},
                               manager=MANAGER)
        self._last_heartbeat = time.monotonic()

    def _provision_volumes(self) -> None:
        for claim in self.host.list("v1", "PersistentVolumeClaim"):
            if claim["spec"].get("volumeName") or claim.get("status", {}).get("phase") == "Bound":
                continue
            self.host.apply(_host_path_volume(claim, self.workdir / "volumes"), force=True,
                            manager=MANAGER)

    def _copy_programs(self) -> None:
        """The image's programs, once per lab: linked where the file system allows, else
        copied (a symlink would point into a /tmp the pod has its own of)."""
        binaries = _fresh(self.workdir / "binaries")
        for program in POD_PROGRAMS:
            source = (self.programs / program).resolve()
            try:
                os.link(source, binaries / program)
            except OSError:
                shutil.copy2(source, binaries / program)


def _host_path_volume(claim: Manifest, root: Path) -> Manifest:
    meta, spec = claim["metadata"], claim["spec"]
    path = root / f"{meta['namespace']}_{meta['name']}"
    path.mkdir(parents=True, exist_ok=True)
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"lab-{meta['uid']}",
                         "labels": {"gpu-tenant-portal.dev/lab-volume": "true"}},
            "spec": {"capacity": {"storage": spec["resources"]["requests"]["storage"]},
                     "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                     "storageClassName": spec.get("storageClassName") or "",
                     "persistentVolumeReclaimPolicy": "Delete",
                     "claimRef": {"namespace": meta["namespace"], "name": meta["name"],
                                  "uid": meta["uid"]},
                     "hostPath": {"path": str(path), "type": "Directory"}}}


def _pod_status(pod: RunningPod, host_ip: str) -> Manifest:
    ready = "True" if pod.ready else "False"
    now = now_text()
    state: dict[str, Any] = (
        {"running": {"startedAt": pod.started_at}} if pod.running
        else {"waiting": {"reason": "CrashLoopBackOff",
                          "message": "the syncer exited; the lab restarts it"}})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "status": {
                "phase": "Running", "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
                "podIP": pod.network.address, "podIPs": [{"ip": pod.network.address}],
                "startTime": pod.started_at,
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                    {"type": "Ready", "status": ready, "lastTransitionTime": now}],
                "containerStatuses": [{
                    "name": "syncer", "ready": pod.ready, "started": pod.running,
                    "restartCount": pod.restarts, "image": "vcluster (lab: .cache/bin)",
                    "imageID": "", "state": state}]}}


def _answers_readyz(address: str) -> bool:
    # As a kubelet probes: no certificate check, never through a proxy.
    url = f"https://{address}:{SYNCER_PROXY_PORT}/readyz"
    try:
        answer = httpx.get(url, verify=False, timeout=1.0, trust_env=False)  # noqa: S501
    except httpx.HTTPError:
        return False
    return answer.status_code == 200


def _container(pod: Manifest, name: str) -> Manifest | None:
    return next((c for c in pod["spec"]["containers"] if c["name"] == name), None)


def _env_value(container: Manifest | None, name: str) -> str:
    for item in (container or {}).get("env") or []:
        if item["name"] == name:
            return str(item.get("value") or "")
    return ""


def _resolve(item: Mapping[str, Any], fields: Mapping[str, str]) -> str | None:
    if "value" in item:
        return str(item["value"])
    field_ref = (item.get("valueFrom") or {}).get("fieldRef")
    return fields.get(field_ref["fieldPath"]) if field_ref else None


def _endpoint_host(config_yaml: bytes) -> str:
    config = yaml.safe_load(config_yaml) or {}
    server = (config.get("exportKubeConfig") or {}).get("server") or ""
    return urlsplit(server).hostname or ""


def _fresh(path: Path, *, keep: bool = False) -> Path:
    if path.exists() and not keep:
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path
