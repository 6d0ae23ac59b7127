"""Metal3's baremetal-operator of ``app.lab.metal3`` for tests: the program and CRDs ``make tools``
built, or a skip (a failure in CI) when they are missing; a failed wait shows its log."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as _k8s_client
from kubernetes import config as _k8s_config
from kubernetes import watch as _watch

from app.kube.port import KubePort, Manifest
from app.lab.metal3 import METAL3_API, PROGRAM, BareMetalOperator
from tests.support.kube_server import ApiServer, skip_unless_ci, tool

# untyped
k8s_client: Any = _k8s_client
k8s_config: Any = _k8s_config
watch: Any = _watch


def metal3_crds() -> Path:
    folder = Path(os.environ.get("PORTAL_METAL3_CRDS", ""))
    if not folder.is_dir() or not list(folder.glob("*.yaml")):
        skip_unless_ci("Metal3's CRDs are not in PORTAL_METAL3_CRDS: `make tools` copies them "
                       "from the baremetal-operator's module download into .cache/metal3-crds "
                       "(`make pytest` sets the variable)")
    return folder


@contextmanager
def baremetal_operator(server: ApiServer, workdir: Path,
                       namespace: str) -> Iterator[BareMetalOperator]:
    """The operator in test mode on ``server``, watching ``namespace``, until the block ends."""
    program = tool(PROGRAM)
    operator = BareMetalOperator(server, workdir, namespace, programs=program.parent,
                                 crds=metal3_crds())
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


def bmc_secret(name: str, namespace: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name,
                                                               "namespace": namespace},
            "stringData": {"username": "admin", "password": "lab-bmc-password"}}


def bare_metal_host(name: str, namespace: str, *, mac: str, credentials: str,
                    **spec: Any) -> Manifest:
    return {"apiVersion": METAL3_API, "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"online": False, "bootMACAddress": mac,
                     "bmc": {"address": "ipmi://192.0.2.10:623", "credentialsName": credentials},
                     **spec}}


def wait_for_host(port: KubePort, operator: BareMetalOperator, name: str, namespace: str,
                  until: Callable[[Manifest], bool], what: str,
                  timeout: float = 30.0) -> Manifest:
    """The host once ``until`` holds for it; otherwise an AssertionError with its status and
    the operator's log."""
    deadline = time.monotonic() + timeout
    host: Manifest | None = None
    while time.monotonic() < deadline:
        host = port.get(METAL3_API, "BareMetalHost", name, namespace)
        if host is not None and until(host):
            return host
        if operator.exited() is not None:
            break
        time.sleep(0.2)
    status = (host or {}).get("status")
    raise AssertionError(f"{name} never {what} within {timeout:.0f}s; status {status}\n"
                         f"--- {PROGRAM} (exit {operator.exited()})\n{operator.log()}")


def provisioning_state(host: Manifest) -> str:
    return str(((host.get("status") or {}).get("provisioning") or {}).get("state") or "")


@contextmanager
def recorded_states(server: ApiServer, name: str, namespace: str) -> Iterator[list[str]]:
    """Every provisioning state the API server stored for host ``name`` while the block runs,
    in order, repeats folded: a watch sees each write, however briefly a state lasted."""
    states: list[str] = []
    stopping = threading.Event()
    api_client = k8s_config.new_client_from_config_dict(yaml.safe_load(server.admin_kubeconfig))
    objects = k8s_client.CustomObjectsApi(api_client)
    group, version = METAL3_API.split("/")

    listed = objects.list_namespaced_custom_object(group, version, namespace, "baremetalhosts")
    version_seen = listed["metadata"]["resourceVersion"]

    def follow() -> None:
        nonlocal version_seen
        while not stopping.is_set():
            for event in watch.Watch().stream(
                    objects.list_namespaced_custom_object, group, version, namespace,
                    "baremetalhosts", field_selector=f"metadata.name={name}",
                    resource_version=version_seen, timeout_seconds=1):
                version_seen = event["object"]["metadata"]["resourceVersion"]
                state = provisioning_state(event["object"])
                if state and (not states or states[-1] != state):
                    states.append(state)

    follower = threading.Thread(target=follow, name=f"watch-{name}", daemon=True)
    follower.start()
    try:
        yield states
    finally:
        stopping.set()
        follower.join(5)
        api_client.close()
