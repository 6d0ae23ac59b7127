"""A real OCI registry for tests: CNCF distribution (Debian's ``docker-registry``) on a loopback
port with a temporary storage folder, behind token authentication as ghcr.io is: anonymous
clients get 401 and a ``Bearer realm=...,service=...,scope=...`` challenge, and the token
service here (an in-process HTTP server) hands out RS256 tokens the registry verifies against
its certificate. Charts are pushed as ``helm push`` stores them, with plain HTTP API calls.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from app.templates.charts import (
    HELM_CHART_MEDIA_TYPE,
    HELM_CONFIG_MEDIA_TYPE,
    OCI_MANIFEST_MEDIA_TYPE,
)
from tests.support.web import free_port

KAI_PATH = "nvidia/kai-scheduler"
# A values schema in the manner of KAI's chart: what the tests' settings are checked against.
KAI_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
    "properties": {"scheduler": {"type": "object", "required": ["replicas"], "properties": {
        "replicas": {"type": "integer", "minimum": 1},
        "placementStrategy": {"enum": ["binpack", "spread"]}}}}}
BINARY = "docker-registry"
SERVICE = "portal-test-registry"
ISSUER = "portal-test-token-issuer"


def available() -> bool:
    return shutil.which(BINARY) is not None


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenIssuer:
    """Signs the registry's bearer tokens: whatever scope is asked for is granted (anonymous
    pull, and push for the fixture's own uploads)."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "registry token issuer")])
        now = datetime.now(UTC)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - timedelta(minutes=5))
                     .not_valid_after(now + timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                                    critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.issued: list[str] = []  # the scopes asked for, in order

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def token(self, scope: str) -> str:
        self.issued.append(scope)
        access = []
        for item in filter(None, scope.split(" ")):
            kind, _, rest = item.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256",
                  "x5c": [base64.b64encode(self.cert.public_bytes(
                      serialization.Encoding.DER)).decode()]}
        claims = {"iss": ISSUER, "sub": "", "aud": SERVICE, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": str(len(self.issued)), "access": access}
        signing = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64url(signature)}"


def _serve_tokens(issuer: TokenIssuer) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlparse(self.path).query)
            if query.get("service") != [SERVICE]:
                self.send_response(400)
                self.end_headers()
                return
            body = json.dumps({"token": issuer.token(" ".join(query.get("scope", [])))})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass
class Registry:
    address: str  # host:port
    issuer: TokenIssuer

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def repo(self, path: str = "nvidia/kai-scheduler") -> str:
        """The add-on's ``repo`` for charts pushed under ``path``."""
        return f"oci://{self.address}/{path}"

    def push_chart(self, path: str, archive: bytes, chart: str, version: str) -> None:
        """What ``helm push`` does: the chart archive and its config as blobs, then a manifest
        with Helm's media types, tagged with the version."""
        name = f"{path}/{chart}"
        config = json.dumps({"apiVersion": "v2", "name": chart, "version": version}).encode()
        with httpx.Client(base_url=self.url, timeout=10) as client:
            token = self._token(client, name)
            auth = {"Authorization": f"Bearer {token}"}
            layers = [self._blob(client, auth, name, blob) for blob in (config, archive)]
            manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST_MEDIA_TYPE,
                        "config": {**layers[0], "mediaType": HELM_CONFIG_MEDIA_TYPE},
                        "layers": [{**layers[1], "mediaType": HELM_CHART_MEDIA_TYPE}]}
            put = client.put(f"/v2/{name}/manifests/{version.replace('+', '_')}",
                             content=json.dumps(manifest).encode(),
                             headers={**auth, "Content-Type": OCI_MANIFEST_MEDIA_TYPE})
            assert put.status_code == 201, put.text

    def _token(self, client: httpx.Client, name: str) -> str:
        challenge = client.post(f"/v2/{name}/blobs/uploads/")
        assert challenge.status_code == 401, challenge.text
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge.headers["www-authenticate"]))
        realm, scope = params["realm"], params["scope"]
        answer = client.get(realm, params={"service": SERVICE, "scope": scope})
        token: str = answer.json()["token"]
        return token

    @staticmethod
    def _blob(client: httpx.Client, auth: dict[str, str], name: str,
              blob: bytes) -> dict[str, Any]:
        digest = f"sha256:{hashlib.sha256(blob).hexdigest()}"
        started = client.post(f"/v2/{name}/blobs/uploads/", headers=auth)
        assert started.status_code == 202, started.text
        # The location carries the upload's state in its query: the digest is added to it.
        location = started.headers["location"]
        separator = "&" if "?" in location else "?"
        put = client.put(f"{location}{separator}digest={digest}", content=blob,
                         headers={**auth, "Content-Type": "application/octet-stream"})
        assert put.status_code == 201, put.text
        return {"digest": digest, "size": len(blob)}


def chart_archive(chart: str, version: str, *, values: dict[str, Any] | None = None,
                  schema: dict[str, Any] | None = None) -> bytes:
    """A chart .tgz as ``helm package`` makes it: ``<chart>/Chart.yaml``, ``values.yaml`` and,
    if given, ``values.schema.json``."""
    files = {"Chart.yaml": yaml.safe_dump({"apiVersion": "v2", "name": chart,
                                           "version": version}),
             "values.yaml": yaml.safe_dump(values or {})}
    if schema is not None:
        files["values.schema.json"] = json.dumps(schema)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for file_name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{chart}/{file_name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def run_registry(directory: Path) -> Iterator[Registry]:
    """The registry on a free loopback port, with token auth; stopped when the test is done."""
    issuer = TokenIssuer()
    tokens = _serve_tokens(issuer)
    (directory / "storage").mkdir()
    (directory / "token.crt").write_bytes(issuer.cert_pem())
    address = f"127.0.0.1:{free_port()}"
    config = {
        "version": 0.1, "log": {"level": "error", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(directory / "storage")}},
        "http": {"addr": address, "secret": "test-only-secret"},
        "auth": {"token": {"realm": f"http://127.0.0.1:{tokens.server_port}/token",
                           "service": SERVICE, "issuer": ISSUER,
                           "rootcertbundle": str(directory / "token.crt")}},
    }
    (directory / "config.yml").write_text(yaml.safe_dump(config))
    with (directory / "registry.log").open("wb") as log:
        process = subprocess.Popen([BINARY, "serve", str(directory / "config.yml")],
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_until_up(f"http://{address}", process, directory / "registry.log")
        yield Registry(address, issuer)
    finally:
        process.terminate()
        process.wait(timeout=10)
        tokens.shutdown()
        tokens.server_close()


def _wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"docker-registry exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/v2/", timeout=1).status_code in (200, 401):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"docker-registry did not answer: {log.read_text()[-2000:]}")
