"""Where validation finds an add-on's chart: a classic Helm repository (``https://`` with an
``index.yaml``) or an OCI registry (``oci://``, as KAI Scheduler publishes its chart).

A lookup says whether the pinned version exists and, when the chart archive ships a
``values.schema.json``, hands it back so that the add-on's settings can be checked against it.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import urljoin

import httpx
import yaml

OCI_PREFIX: Final = "oci://"
# Helm's media types for a chart pushed to an OCI registry (helm.sh/helm/v3/pkg/registry).
HELM_CONFIG_MEDIA_TYPE: Final = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART_MEDIA_TYPE: Final = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
OCI_MANIFEST_MEDIA_TYPE: Final = "application/vnd.oci.image.manifest.v1+json"
# A chart archive is small; a bigger blob is not read into memory.
MAX_CHART_BYTES: Final = 10 * 1024 * 1024
MAX_TAG_PAGES: Final = 20
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')
_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


@dataclass(frozen=True)
class ChartLookup:
    """``problem``: why the chart version cannot be installed (None: it resolves).
    ``values_schema``: the chart's values.schema.json when it ships one and it was read;
    ``default_values``: its values.yaml, which Helm merges under the given values before it
    checks them against the schema."""

    problem: str | None = None
    values_schema: dict[str, Any] | None = None
    default_values: dict[str, Any] = field(default_factory=dict)


class ChartResolver(Protocol):
    def lookup(self, repo: str, chart: str, version: str) -> ChartLookup:
        """Whether ``chart`` ``version`` can be installed from ``repo``, and its values schema."""
        ...


def chart_reference(repo: str, chart: str) -> str:
    """What ``helm`` is given: ``oci://host/path/chart`` for OCI, else the chart's name."""
    return f"{repo}/{chart}" if repo.startswith(OCI_PREFIX) else chart


def oci_tag(version: str) -> str:
    """Helm stores SemVer build metadata (``+``, not allowed in OCI tags) as ``_``."""
    return version.replace("+", "_")


class ChartError(Exception):
    pass


def chart_files(archive: bytes, chart: str) -> ChartLookup:
    """The values schema and defaults of a chart archive (.tgz): ``<chart>/values.schema.json``
    (None when the chart ships none) and ``<chart>/values.yaml``."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            files = {m.name.partition("/")[2]: m for m in tar.getmembers()
                     if m.isfile() and m.name.count("/") == 1}
            texts = {}
            for wanted in ("values.schema.json", "values.yaml"):
                member = files.get(wanted)
                extracted = tar.extractfile(member) if member is not None else None
                if extracted is not None:
                    texts[wanted] = extracted.read().decode()
    except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as error:
        raise ChartError(f"the chart archive of {chart} cannot be read: {error}") from error
    return ChartLookup(values_schema=_schema(texts.get("values.schema.json"), chart),
                       default_values=_defaults(texts.get("values.yaml"), chart))


def _schema(text: str | None, chart: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        schema = json.loads(text)
    except ValueError as error:
        raise ChartError(f"{chart}'s values.schema.json is not JSON: {error}") from error
    if not isinstance(schema, dict):
        raise ChartError(f"{chart}'s values.schema.json is not a JSON object")
    return schema


def _defaults(text: str | None, chart: str) -> dict[str, Any]:
    try:
        values = yaml.safe_load(text or "") or {}
    except yaml.YAMLError as error:
        raise ChartError(f"{chart}'s values.yaml is not YAML: {error}") from error
    return values if isinstance(values, dict) else {}


class HelmIndexResolver:
    """Reads the repository's index.yaml, as ``helm repo add`` + ``helm pull --version`` would,
    then the chart archive the entry points at, for its values schema."""

    def __init__(self, timeout_seconds: float = 10.0,
                 get: Callable[[str], httpx.Response] | None = None) -> None:
        self._get = get or (lambda url: httpx.get(url, timeout=timeout_seconds,
                                                  follow_redirects=True))

    def lookup(self, repo: str, chart: str, version: str) -> ChartLookup:
        url = f"{repo.rstrip('/')}/index.yaml"
        try:
            response = self._get(url)
            response.raise_for_status()
            index = yaml.safe_load(response.text) or {}
        except (httpx.HTTPError, yaml.YAMLError) as error:
            return ChartLookup(f"could not read {url}: {error}")
        entries = (index.get("entries") or {}).get(chart) if isinstance(index, dict) else None
        if not entries:
            return ChartLookup(f"{repo} has no chart {chart!r}")
        entry = next((e for e in entries if str(e.get("version")) == version), None)
        if entry is None:
            return ChartLookup(f"{repo} has chart {chart!r} but not version {version}")
        urls = entry.get("urls") or []
        if not urls:
            return ChartLookup()
        archive_url = urljoin(f"{repo.rstrip('/')}/", str(urls[0]))
        try:
            archive = self._get(archive_url)
            archive.raise_for_status()
            if len(archive.content) > MAX_CHART_BYTES:
                return ChartLookup(f"the chart archive {archive_url} is over 10 MiB")
            return chart_files(archive.content, chart)
        except httpx.HTTPError as error:
            return ChartLookup(f"could not download {archive_url}: {error}")
        except ChartError as error:
            return ChartLookup(str(error))


class OciResolver:
    """Asks an OCI registry (the distribution API) for a chart's tags, then reads the pinned
    version's manifest and chart layer for its values schema.

    Registries such as ghcr.io answer anonymous clients with 401 and a ``WWW-Authenticate:
    Bearer realm=...,service=...,scope=...`` challenge: the token the realm hands out for that
    scope is sent on the retry. ``plain_http`` registries (host:port) are spoken to over plain
    HTTP, as ``helm --plain-http`` would (a registry on the loopback in tests).
    """

    def __init__(self, timeout_seconds: float = 10.0,
                 plain_http: frozenset[str] = frozenset(),
                 transport: httpx.BaseTransport | None = None) -> None:
        self.timeout_seconds = timeout_seconds
        self.plain_http = plain_http
        self.transport = transport

    def lookup(self, repo: str, chart: str, version: str) -> ChartLookup:
        registry, _, path = repo.removeprefix(OCI_PREFIX).partition("/")
        name = f"{path}/{chart}" if path else chart
        reference = f"{repo}/{chart}"
        scheme = "http" if registry in self.plain_http else "https"
        with httpx.Client(base_url=f"{scheme}://{registry}", timeout=self.timeout_seconds,
                          follow_redirects=True, transport=self.transport) as client:
            session = _RegistrySession(client, name)
            try:
                tags = session.tags()
                if tags is None:
                    return ChartLookup(f"{reference}: the registry has no such chart")
                if oci_tag(version) not in tags:
                    return ChartLookup(f"{reference} has no version {version}")
                return session.chart(oci_tag(version), chart)
            except httpx.HTTPError as error:
                return ChartLookup(f"could not reach the registry {registry} for {reference}: "
                                   f"{error}")
            except ChartError as error:
                return ChartLookup(f"{reference}: {error}")


class _RegistrySession:
    """One repository on one registry, with the bearer token once the registry asked for it."""

    def __init__(self, client: httpx.Client, name: str) -> None:
        self.client = client
        self.name = name
        self.token: str | None = None

    def get(self, path: str, accept: str | None = None) -> httpx.Response:
        response = self._send(path, accept)
        if response.status_code == 401 and self.token is None:
            self.token = self._token(response.headers.get("www-authenticate", ""))
            response = self._send(path, accept)
        if response.status_code == 401:
            raise ChartError(f"the registry refused anonymous pulls of {self.name} "
                             "(the portal does not log in to registries)")
        return response

    def _send(self, path: str, accept: str | None) -> httpx.Response:
        headers = {"Accept": accept} if accept else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return self.client.get(path, headers=headers)

    def _token(self, challenge: str) -> str:
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() != "bearer":
            raise ChartError(f"the registry asks for {scheme or 'no'} authentication, not an "
                             "anonymous bearer token")
        found = dict(_CHALLENGE_PARAM.findall(params))
        realm = found.get("realm")
        if not realm:
            raise ChartError("the registry's bearer challenge names no realm")
        query = {k: found[k] for k in ("service",) if k in found}
        query["scope"] = found.get("scope", f"repository:{self.name}:pull")
        response = self.client.get(realm, params=query)
        if response.status_code != 200:
            raise ChartError(f"the token service {realm} answered {response.status_code}")
        body = response.json()
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise ChartError(f"the token service {realm} gave no token")
        return token

    def tags(self) -> set[str] | None:
        """The repository's tags; None when the registry does not know it."""
        found: set[str] = set()
        path: str | None = f"/v2/{self.name}/tags/list"
        for _ in range(MAX_TAG_PAGES):
            if path is None:
                break
            response = self.get(path)
            if response.status_code == 404:
                return None
            response.raise_for_status()
            found.update((response.json() or {}).get("tags") or [])
            link = _NEXT_LINK.search(response.headers.get("link", ""))
            path = link.group(1) if link else None
        return found

    def chart(self, tag: str, chart: str) -> ChartLookup:
        response = self.get(f"/v2/{self.name}/manifests/{tag}", OCI_MANIFEST_MEDIA_TYPE)
        response.raise_for_status()
        layers = (response.json() or {}).get("layers") or []
        layer = next((item for item in layers if item.get("mediaType") == HELM_CHART_MEDIA_TYPE),
                     None)
        if layer is None:
            raise ChartError(f"version {tag} is not a Helm chart (no {HELM_CHART_MEDIA_TYPE} "
                             "layer)")
        if int(layer.get("size") or 0) > MAX_CHART_BYTES:
            raise ChartError(f"the chart archive of {tag} is over 10 MiB")
        blob = self.get(f"/v2/{self.name}/blobs/{layer['digest']}")
        blob.raise_for_status()
        return chart_files(blob.content, chart)


class ChartSources:
    """The resolver the app uses: OCI references to the registry, the rest to index.yaml."""

    def __init__(self, index: ChartResolver | None = None,
                 oci: ChartResolver | None = None) -> None:
        self.index = index or HelmIndexResolver()
        self.oci = oci or OciResolver()

    def lookup(self, repo: str, chart: str, version: str) -> ChartLookup:
        source = self.oci if repo.startswith(OCI_PREFIX) else self.index
        return source.lookup(repo, chart, version)
