"""A stand-in ``helm`` executable for tests: records its arguments and plays the release.

``install_standin_helm(directory)`` writes an executable ``helm`` into ``directory``; put that
directory first on PATH and set ``HELM_STANDIN_LOG`` (a file each call is appended to as a JSON
line, with the values file's content) and ``HELM_STANDIN_VCLUSTER_KUBECONFIG`` (a file holding
the virtual cluster's admin kubeconfig: a real API server's, so ``/readyz`` answers through it).

It speaks to the host API server named by ``--kubeconfig`` as helm does: over TLS, trusting the
kubeconfig's CA and presenting its client certificate (or its bearer token). On
``upgrade --install`` it applies (as field manager ``helm``) the control plane StatefulSet and
the Secret ``vc-<release>`` whose ``config`` is the virtual cluster's admin kubeconfig; on
``uninstall`` it deletes the StatefulSet (the Secret is vCluster's own, as with the real
chart). With ``HELM_STANDIN_HANG``
(a file name) ``upgrade --install`` writes its pid there and then hangs, as a helm run that
outlasts the worker.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

SCRIPT = r'''
import base64, json, os, ssl, sys, tempfile, time, urllib.error, urllib.request

import yaml

args = sys.argv[1:]
def flag(name):
    return args[args.index(name) + 1] if name in args else None

values_file = flag("--values")
with open(os.environ["HELM_STANDIN_LOG"], "a") as log:
    values = open(values_file).read() if values_file else None
    log.write(json.dumps({"argv": args, "values": values}) + "\n")

hang = os.environ.get("HELM_STANDIN_HANG")
if hang and args[0] == "upgrade":
    # A helm run that does not end (a slow chart, an image pull): the worker is killed in it.
    with open(hang, "w") as marker:
        marker.write(str(os.getpid()))
    time.sleep(3600)

kubeconfig = yaml.safe_load(open(flag("--kubeconfig")))
cluster = kubeconfig["clusters"][0]["cluster"]
user = kubeconfig["users"][0]["user"]
server = cluster["server"]
namespace = flag("--namespace")

context = ssl.create_default_context(
    cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
headers = {"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"}
if "token" in user:  # a ServiceAccount's, as the worker has in the host cluster
    headers["Authorization"] = "Bearer " + user["token"]
else:
    with tempfile.TemporaryDirectory(prefix="helm-standin-") as directory:
        cert, key = os.path.join(directory, "client.crt"), os.path.join(directory, "client.key")
        with open(cert, "wb") as out:
            out.write(base64.b64decode(user["client-certificate-data"]))
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as out:
            out.write(base64.b64decode(user["client-key-data"]))
        context.load_cert_chain(cert, key)

def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server + path, data=data, method=method, headers=headers)
    try:
        urllib.request.urlopen(request, timeout=10, context=context).read()
    except urllib.error.HTTPError as error:
        if error.code != 404:
            sys.exit(f"Error: {method} {path}: {error.code} {error.read().decode()}")

if args[0] == "upgrade":
    release = args[2]
    config = open(os.environ["HELM_STANDIN_VCLUSTER_KUBECONFIG"]).read()
    labels = {"app": "vcluster", "release": release}
    apply = "?fieldManager=helm&force=true"
    pod = {"metadata": {"labels": labels}, "spec": {
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 12345,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "syncer", "image": "ghcr.io/loft-sh/vcluster-pro:0.26.0",
                        "securityContext": {"allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}}}]}}
    call("PATCH", f"/apis/apps/v1/namespaces/{namespace}/statefulsets/{release}{apply}",
         {"apiVersion": "apps/v1", "kind": "StatefulSet",
          "metadata": {"name": release, "namespace": namespace, "labels": labels},
          "spec": {"replicas": 1, "serviceName": release,
                   "selector": {"matchLabels": labels}, "template": pod}})
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


def helm_calls(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def use_standin_helm(directory: Path, monkeypatch: pytest.MonkeyPatch,
                     vcluster_kubeconfig: str) -> Path:
    """Put the stand-in first on PATH, its release's kubeconfig beside it; returns the log."""
    install_standin_helm(directory / "bin")
    monkeypatch.setenv("PATH", f"{directory / 'bin'}{os.pathsep}{os.environ['PATH']}")
    config = directory / "vcluster.kubeconfig"
    config.write_text(vcluster_kubeconfig)
    config.chmod(0o600)
    monkeypatch.setenv("HELM_STANDIN_VCLUSTER_KUBECONFIG", str(config))
    log = directory / "helm-calls.jsonl"
    monkeypatch.setenv("HELM_STANDIN_LOG", str(log))
    return log
