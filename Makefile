# The README's two commands: `make run` (the embedded default) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: bytecode lab lab-demo lab-reclaim lab-sleep lab-idle lab-slices run test lint typecheck pytest setup upgrade-deps clean chromium oci-registry tools etcd vcluster-chart kai-crds metal3-crds postgres bench-tools bench
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# apt-get one at a time: `make test` installs packages side by side, and dpkg has one lock.
APT_LOCK := /tmp/gpu-tenant-portal-apt.lock
APT_GET := $(SUDO) flock $(APT_LOCK) env DEBIAN_FRONTEND=noninteractive apt-get

# Every program the tests run is built from the Go module proxy by `make tools` into .cache/bin,
# pinned by the go.mod/go.sum of one module each under tools/ (etcd is Debian's etcd-server).
# Go's module and build caches make a second run cost seconds. The real-API-server tests read
# envtest's KUBEBUILDER_ASSETS, the others PORTAL_TOOLS_BIN; without them those tests skip (and
# fail under CI=true).
GO ?= go
TOOLS_BIN := .cache/bin
# What a fresh clone need not redo, kept beside Go's caches: the linked programs, per inputs
# (tools/build-programs.sh), and mypy's cache (checked against each file's hash).
USER_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpu-tenant-portal
TOOLS_CACHE ?= $(USER_CACHE)/programs
MYPY_CACHE_DIR ?= $(USER_CACHE)/mypy
TOOL_MODULES := kube helm kwok kai vcluster kine metal3 prometheus
KUBEBUILDER_ASSETS ?= $(abspath $(TOOLS_BIN))
PORTAL_TOOLS_BIN ?= $(abspath $(TOOLS_BIN))
# The vCluster chart of the same module as the vcluster binary, packaged as a Helm repository.
PORTAL_CHARTS ?= $(abspath .cache/charts)
# KAI Scheduler's CRDs, as its module download has them (Queue, PodGroup, BindRequest, ...).
PORTAL_KAI_CRDS ?= $(abspath .cache/kai-crds)
# Metal3's CRDs (BareMetalHost, HardwareData, ...), as the baremetal-operator's module has them.
PORTAL_METAL3_CRDS ?= $(abspath .cache/metal3-crds)
export KUBEBUILDER_ASSETS PORTAL_TOOLS_BIN PORTAL_CHARTS PORTAL_KAI_CRDS PORTAL_METAL3_CRDS
# The version each program reports (API discovery, `helm version`), set as their releases do.
LDFLAGS_kube := -X k8s.io/component-base/version.gitVersion=v1.32.13 \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=32 \
	-X k8s.io/client-go/pkg/version.gitVersion=v1.32.13 \
	-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=32
LDFLAGS_helm := -X helm.sh/helm/v3/internal/version.version=v3.19.5
LDFLAGS_prometheus := -X github.com/prometheus/common/version.Version=3.16.0
# Build tags per program. Prometheus: its release's netgo, and remove_all_sd drops the 26
# service-discovery plugins (AWS, Azure, GCE, Consul, ...): static, file and HTTP discovery stay,
# and the cloud SDKs are never compiled (promtool still links Kubernetes discovery itself).
TAGS_prometheus := netgo,remove_all_sd

# Two stamps: `make run` needs only the portal (.runtime); the tests, lint and type checks
# also need the test extras (.installed), which include the runtime, so either stamp is enough
# for `make run`.
$(BIN)/.runtime: pyproject.toml constraints.txt
	@if [ -f $(BIN)/.installed ] && [ $(BIN)/.installed -nt pyproject.toml ] && \
		[ $(BIN)/.installed -nt constraints.txt ]; then touch $@; else \
		$(PYTHON) -m venv $(VENV) && \
		$(BIN)/python -m pip install --quiet --upgrade pip && \
		$(BIN)/python -m pip install --quiet -c constraints.txt -e . && \
		touch $@; fi

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $@ $(BIN)/.runtime

# The newest releases pyproject.toml's ranges allow, written back into constraints.txt.
upgrade-deps: setup
	$(BIN)/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[test]'
	{ sed -n '/^#/p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable; } \
		> constraints.txt.new && mv constraints.txt.new constraints.txt
	touch $(BIN)/.installed $(BIN)/.runtime

setup: $(BIN)/.installed

run: $(BIN)/.runtime
	@echo "portalctl, the command-line client: $(abspath $(BIN))/portalctl (to have it on PATH: pipx install .)"
	$(BIN)/portal dev

# ruff, then the direction of app/'s packages (import-linter's contracts in pyproject.toml).
lint: setup
	$(BIN)/ruff check app tests bench
	$(BIN)/lint-imports

typecheck: setup
	MYPY_CACHE_DIR=$(MYPY_CACHE_DIR) $(BIN)/mypy

# The browser tests drive Debian's Chromium (never a downloaded browser).
chromium:
	@command -v chromium >/dev/null || { $(APT_GET) update -qq && \
		$(APT_GET) install -y -qq chromium >/dev/null; }

# The OCI chart tests run a real registry: CNCF distribution, Debian's docker-registry.
oci-registry:
	@command -v docker-registry >/dev/null || { $(APT_GET) update -qq && \
		$(APT_GET) install -y -qq docker-registry >/dev/null; }

# The HTTP benchmark (bench/run.py) drives the portal with Debian's wrk (else asyncio clients).
bench-tools:
	@command -v wrk >/dev/null || { $(APT_GET) update -qq && \
		$(APT_GET) install -y -qq wrk >/dev/null; }

bench: setup bench-tools
	$(BIN)/python bench/run.py --quick

# etcd from Debian, linked beside the built programs.
etcd:
	@command -v etcd >/dev/null || { $(APT_GET) update -qq && \
		$(APT_GET) install -y -qq etcd-server >/dev/null; }
	@mkdir -p $(TOOLS_BIN) && ln -sf "$$(command -v etcd)" $(TOOLS_BIN)/etcd

tool-%:
	GO=$(GO) bash tools/build-programs.sh $* $(TOOLS_BIN) $(TOOLS_CACHE) "$(TAGS_$*)" "-s -w $(LDFLAGS_$*)"

# The chart is read from the module download (never copied into the repository), versioned as
# its release is, and indexed so that helm installs it with --repo/--version like any release.
vcluster-chart: tool-helm
	@mkdir -p $(PORTAL_CHARTS)
	cd tools/vcluster && GOTOOLCHAIN=local GOFLAGS=-mod=readonly $(GO) mod download github.com/loft-sh/vcluster
	cd tools/vcluster && version=$$(GOTOOLCHAIN=local $(GO) list -m -f '{{.Version}}' github.com/loft-sh/vcluster) && \
		dir=$$(GOTOOLCHAIN=local $(GO) list -m -f '{{.Dir}}' github.com/loft-sh/vcluster) && \
		$(PORTAL_TOOLS_BIN)/helm package "$$dir/chart" --version "$${version#v}" \
			--app-version "$${version#v}" -d $(PORTAL_CHARTS) >/dev/null
	$(PORTAL_TOOLS_BIN)/helm repo index $(PORTAL_CHARTS)

kai-crds:
	@mkdir -p $(PORTAL_KAI_CRDS)
	cd tools/kai && dir=$$(GOTOOLCHAIN=local $(GO) list -m -f '{{.Dir}}' github.com/NVIDIA/KAI-scheduler) && \
		cp "$$dir"/deployments/kai-scheduler/crds/*.yaml $(PORTAL_KAI_CRDS)/ && chmod u+w $(PORTAL_KAI_CRDS)/*.yaml

metal3-crds:
	@mkdir -p $(PORTAL_METAL3_CRDS)
	cd tools/metal3 && dir=$$(GOTOOLCHAIN=local $(GO) list -m -f '{{.Dir}}' github.com/metal3-io/baremetal-operator) && \
		cp "$$dir"/config/base/crds/bases/*.yaml $(PORTAL_METAL3_CRDS)/ && chmod u+w $(PORTAL_METAL3_CRDS)/*.yaml

tools: etcd $(addprefix tool-,$(TOOL_MODULES)) vcluster-chart kai-crds metal3-crds

# The test database: Debian's PostgreSQL on 127.0.0.1:5432, installed and started when missing.
postgres:
	@bash tools/postgres.sh

# The lab (root: network namespaces): a real GPU host on this machine with the portal on it;
# `make lab-demo` in another shell walks three teams through it. See docs/lab.md.
lab: setup tools
	$(SUDO) $(BIN)/portal lab

lab-demo: setup
	$(SUDO) $(BIN)/portal lab-demo

# Burst and reclaim on KAI: one tenant borrows a pool's idle GPUs, their owner takes them back.
lab-reclaim: setup
	$(SUDO) $(BIN)/portal lab-reclaim

# Sleep on idle, wake on use, deletion after days asleep (policies 2880 times faster).
lab-sleep: setup
	$(SUDO) $(BIN)/portal lab-sleep

# GPUs held but idle: flagged through the lab's Prometheus, slept by a utilisation policy.
lab-idle: setup
	$(SUDO) $(BIN)/portal lab-idle

# Less than a GPU: MIG slices and shares of one GPU, bound by KAI, counted in the ledger.
lab-slices: setup
	$(SUDO) $(BIN)/portal lab-slices

# The suite in parallel (pytest-xdist; tests/conftest.py keeps a file, or a lab, on one
# worker, and orders the files: xdist's own reorder would start the labs last): most tests
# wait on a process (an API server, KAI, a browser), so on 2 cores more workers than cores pay. The 25 slowest tests and the count that ran close every run;
# PYTEST_ARGS adds options (e.g. `--junitxml=times.xml` for every test's time).
PYTEST_WORKERS ?= 4
PYTEST_NEEDS := setup chromium oci-registry tools postgres bytecode
pytest: $(if $(PYTEST_NEEDS_MET),,$(PYTEST_NEEDS))
	$(WRITE_BYTECODE) $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

# Python's bytecode, written once for the suite: an environment may turn Python's cache off
# (PYTHONDONTWRITEBYTECODE), and then each worker rewrites every test module's asserts again
# (pytest) and every `portal` the tests start compiles app/ again. A collection beside the
# builds writes it all before the workers start (its errors are the suite's to report).
WRITE_BYTECODE := env -u PYTHONDONTWRITEBYTECODE
bytecode: setup
	$(WRITE_BYTECODE) $(BIN)/python -m compileall -q app bench >/dev/null
	$(WRITE_BYTECODE) $(BIN)/python -m pytest --collect-only -q >/dev/null 2>&1 || true

# The checks beside the programs' builds and installs (each waits on its own), then the suite.
test:
	$(MAKE) --no-print-directory --jobs=3 --output-sync=target lint typecheck $(PYTEST_NEEDS)
	$(MAKE) --no-print-directory pytest PYTEST_NEEDS_MET=1

clean:
	rm -rf $(VENV) .cache portal.db* .mypy_cache .ruff_cache .pytest_cache
