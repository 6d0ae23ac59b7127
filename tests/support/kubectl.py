"""Acting on a real API server as someone other than the portal: an operator, a kubelet.

The portal's adapter writes only by server-side apply as the field manager
``gpu-tenant-portal``. Tests that play an operator editing an object by hand or a kubelet
registering its Node need other verbs (create, merge patch, update) under other field managers:
had the portal's manager created a Node, its next apply would own (and so could drop) every
label on it. This is plain HTTPS with the admin's client certificate, so that no test imports
the Kubernetes client.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import httpx

from app.kube.port import Manifest, kind_info
from tests.support.kube_server import ApiServer

MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class KubectlError(Exception):
    """The API server refused a request: its HTTP status and its Status message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Kubectl:
    """An admin's client for one API server, writing as ``manager`` (not the portal)."""

    def __init__(self, server: ApiServer, workdir: Path, *, manager: str = "kubectl") -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        admin = server.ca.client("kubectl-admin", "system:masters")
        cert, key = workdir / "kubectl.crt", workdir / "kubectl.key"
        cert.write_bytes(admin.cert_pem)
        key.write_bytes(admin.key_pem)
        key.chmod(0o600)
        context = ssl.create_default_context(cadata=server.ca.cert_pem.decode())
        context.load_cert_chain(cert, key)
        self.manager = manager
        self._http = httpx.Client(base_url=server.url, verify=context, timeout=10.0)

    def close(self) -> None:
        self._http.close()

    def create(self, obj: Manifest) -> Manifest:
        """POST, as ``kubectl create`` (a Node keeps the status it is created with)."""
        info = kind_info(obj["apiVersion"], obj["kind"])
        path = info.collection_path(obj["metadata"].get("namespace"))
        return self._send("POST", path, obj, "application/json")

    def merge_patch(self, api_version: str, kind: str, name: str, namespace: str | None,
                    patch: Manifest, *, subresource: str | None = None) -> Manifest:
        """A JSON merge patch, as ``kubectl edit`` or ``kubectl patch --type merge``."""
        path = kind_info(api_version, kind).object_path(name, namespace)
        if subresource:
            path = f"{path}/{subresource}"
        return self._send("PATCH", path, patch, MERGE_PATCH)

    def apply(self, obj: Manifest) -> Manifest:
        """Server-side apply under this client's own field manager (forced)."""
        info = kind_info(obj["apiVersion"], obj["kind"])
        path = info.object_path(obj["metadata"]["name"], obj["metadata"].get("namespace"))
        return self._send("PATCH", path, obj, APPLY_PATCH, force=True)

    def delete(self, api_version: str, kind: str, name: str,
               namespace: str | None = None) -> bool:
        """Delete; ``False`` when the object was already gone."""
        path = kind_info(api_version, kind).object_path(name, namespace)
        response = self._http.delete(path)
        if response.status_code == 404:
            return False
        _check(response)
        return True

    def _send(self, method: str, path: str, body: Manifest, content_type: str,
              *, force: bool = False) -> Manifest:
        params = {"fieldManager": self.manager, **({"force": "true"} if force else {})}
        response = self._http.request(method, path, params=params, content=json.dumps(body),
                                      headers={"Content-Type": content_type})
        _check(response)
        parsed: dict[str, Any] = response.json()
        return parsed


def _check(response: httpx.Response) -> None:
    """Raise the server's refusal with the message of its Status body."""
    if response.status_code < 400:
        return
    try:
        message = str(response.json().get("message") or response.text)
    except ValueError:
        message = response.text
    raise KubectlError(response.status_code, message[:1000])
