"""A stand-in ``helm`` executable for tests: records its arguments and plays the release.

``install_standin_helm(directory)`` writes an executable ``helm`` into ``directory``; put that
directory first on PATH. On ``upgrade --install`` it creates, through the host API named by
``--kubeconfig``, the control plane StatefulSet and the Secret ``vc-<release>`` whose ``config``
is an admin kubeconfig for the same API server (so ``/readyz`` answers through it); on
``uninstall`` it removes the StatefulSet. Each call is appended as a JSON line to the file in
``HELM_STANDIN_LOG``, with the values file's content.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SCRIPT = r'''
import base64, json, os, sys, urllib.error, urllib.request

args = sys.argv[1:]
def flag(name):
    return args[args.index(name) + 1] if name in args else None

values_file = flag("--values")
with open(os.environ["HELM_STANDIN_LOG"], "a") as log:
    values = open(values_file).read() if values_file else None
    log.write(json.dumps({"argv": args, "values": values}) + "\n")

server = json.load(open(flag("--kubeconfig")))["clusters"][0]["cluster"]["server"]
namespace = flag("--namespace")

def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server + path, data=data, method=method, headers={
        "Content-Type": "application/apply-patch+yaml", "Accept": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=10).read()
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise

if args[0] == "upgrade":
    release = args[2]
    config = json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": release,
        "clusters": [{"name": release, "cluster": {"server": server}}],
        "users": [{"name": release, "user": {"token": "admin-token-never-shown"}}],
        "contexts": [{"name": release, "context": {"cluster": release, "user": release}}]})
    labels = {"app": "vcluster", "vcluster-name": release}
    apply = "?fieldManager=helm&force=true"
    call("PATCH", f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{release}{apply}",
         {"apiVersion": "apps/v1", "kind": "StatefulSet",
          "metadata": {"name": release, "namespace": namespace, "labels": labels}})
    call("PATCH", f"/api/v1/namespaces/{namespace}/secrets/vc-{release}{apply}",
         {"apiVersion": "v1", "kind": "Secret",
          "metadata": {"name": f"vc-{release}", "namespace": namespace, "labels": labels},
          "data": {"config": base64.b64encode(config.encode()).decode()}})
elif args[0] == "uninstall":
    call("DELETE", f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{args[1]}")
'''


def install_standin_helm(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    helm = directory / "helm"
    helm.write_text(f"#!{sys.executable}\n{SCRIPT}")
    helm.chmod(0o755)
    return helm


def host_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for the emulator (JSON is YAML, so both helm and the client read it)."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "host",
        "clusters": [{"name": "host", "cluster": {"server": server}}],
        "users": [{"name": "host", "user": {}}],
        "contexts": [{"name": "host", "context": {"cluster": "host", "user": "host"}}],
    }))
    return path


def helm_calls(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]
