# One image for the three processes of the GPU Tenant Portal:
#   web      portal serve --host 0.0.0.0      (the default command)
#   worker   portal worker
#   webhook  portal webhook
# Build: docker build -t gpu-tenant-portal:0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#          --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) --build-arg SOURCE=<repository URL> .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- helm, pinned and checksum-verified --------------------------------------------------------
# The worker installs each virtual cluster's vCluster chart with `helm upgrade --install`.
# To bump: set HELM_VERSION and both checksums to the values published beside each archive, at
#   https://get.helm.sh/helm-<HELM_VERSION>-linux-amd64.tar.gz.sha256sum
#   https://get.helm.sh/helm-<HELM_VERSION>-linux-arm64.tar.gz.sha256sum
# (the machine these were written on has no internet: the v3.16.3 values below are the ones
# several independent public pins of that release agree on; check them against those URLs before
# a release). An empty or wrong checksum fails the build.
FROM ${PYTHON_IMAGE} AS helm
ARG TARGETARCH
ARG HELM_VERSION=v3.16.3
ARG HELM_SHA256_AMD64=f5355c79190951eed23c5432a3b920e071f4c00a64f75e077de0dd4cb7b294ea
ARG HELM_SHA256_ARM64=5bd34ed774df6914b323ff84a0a156ea6ff2ba1eaf0113962fa773f3f9def798
RUN set -eu; \
    arch="${TARGETARCH:-amd64}"; \
    case "$arch" in \
      amd64) sum="$HELM_SHA256_AMD64" ;; \
      arm64) sum="$HELM_SHA256_ARM64" ;; \
      *) echo "no helm checksum for architecture $arch" >&2; exit 1 ;; \
    esac; \
    if [ -z "$sum" ]; then \
      echo "HELM_SHA256_$(echo "$arch" | tr a-z A-Z) is empty: pass the sha256 from" \
           "https://get.helm.sh/helm-${HELM_VERSION}-linux-${arch}.tar.gz.sha256sum" >&2; \
      exit 1; \
    fi; \
    archive="helm-${HELM_VERSION}-linux-${arch}.tar.gz"; \
    work="$(mktemp -d)"; \
    python -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
        "https://get.helm.sh/${archive}" "${work}/${archive}"; \
    echo "${sum}  ${work}/${archive}" | sha256sum -c -; \
    tar -xzf "${work}/${archive}" -C "${work}" "linux-${arch}/helm"; \
    install -m 0755 "${work}/linux-${arch}/helm" /usr/local/bin/helm; \
    /usr/local/bin/helm version --short; \
    rm -rf "${work}"

# --- Python dependencies (the runtime ones only: never the test extra) ------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY app ./app
# The portal finds its templates, static files and migrations beside the app package, so the
# package itself runs from /opt/portal (PYTHONPATH); the venv keeps only its dependencies.
RUN /opt/venv/bin/pip install . --constraint constraints.txt \
 && /opt/venv/bin/pip uninstall --yes gpu-tenant-portal

# --- runtime -----------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
# The repository the image is built from (e.g. its https clone URL); no public home yet.
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="GPU Tenant Portal" \
      org.opencontainers.image.description="Self-service portal for GPU cloud operators: tenants, GPU quota, dedicated nodes and virtual Kubernetes clusters." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

RUN groupadd --system --gid 10001 portal \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/portal --create-home \
        --shell /usr/sbin/nologin portal

COPY --from=helm /usr/local/bin/helm /usr/local/bin/helm
COPY --from=build /opt/venv /opt/venv

WORKDIR /opt/portal
COPY alembic.ini ./
COPY app ./app
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
# Compiled now: the root filesystem may be read-only at run time.
RUN python -m compileall -q /opt/portal/app /opt/portal/migrations \
 && printf '#!/bin/sh\nexec python -m app.process.cli "$@"\n' > /usr/local/bin/portal \
 && chmod 0755 /usr/local/bin/portal

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/opt/portal \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/home/portal \
    HELM_CACHE_HOME=/tmp/helm/cache \
    HELM_CONFIG_HOME=/tmp/helm/config \
    HELM_DATA_HOME=/tmp/helm/data \
    PORTAL_HELM_BINARY=/usr/local/bin/helm

# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001

EXPOSE 8000 9443
# The web process's liveness; the worker has no port (compose and Kubernetes override this).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

CMD ["portal", "serve", "--host", "0.0.0.0", "--port", "8000"]
