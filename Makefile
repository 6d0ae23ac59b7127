# The README's two commands: `make run` (the embedded default) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint typecheck pytest setup upgrade-deps clean chromium oci-registry kube-assets bench-tools bench
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# The real-API-server tests read envtest's KUBEBUILDER_ASSETS; unless it is set, the binaries
# come from ../shared/kube-bin/ (unpacked once into .cache/). Without either, those tests skip
# (and fail under CI=true).
KUBE_ARCHIVE := $(firstword $(wildcard ../shared/kube-bin/kube-*.tar.gz))
KUBE_ASSETS := .cache/kube-assets
ifneq ($(KUBE_ARCHIVE),)
KUBEBUILDER_ASSETS ?= $(abspath $(KUBE_ASSETS))
KUBE_ASSETS_TARGET := $(KUBE_ASSETS)/.unpacked
endif
export KUBEBUILDER_ASSETS

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

# The newest releases pyproject.toml's ranges allow, written back into constraints.txt.
upgrade-deps: setup
	$(BIN)/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[test]'
	{ sed -n '/^#/p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable; } \
		> constraints.txt.new && mv constraints.txt.new constraints.txt
	touch $(BIN)/.installed

setup: $(BIN)/.installed

run: setup
	$(BIN)/portal dev

lint: setup
	$(BIN)/ruff check app tests bench

typecheck: setup
	$(BIN)/mypy

# The browser tests drive Debian's Chromium (never a downloaded browser).
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

# The OCI chart tests run a real registry: CNCF distribution, Debian's docker-registry.
oci-registry:
	@command -v docker-registry >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq docker-registry >/dev/null; }

# The HTTP benchmark (bench/run.py) drives the portal with Debian's wrk (else asyncio clients).
bench-tools:
	@command -v wrk >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wrk >/dev/null; }

bench: setup bench-tools
	$(BIN)/python bench/run.py --quick

$(KUBE_ASSETS)/.unpacked: $(KUBE_ARCHIVE)
	rm -rf $(KUBE_ASSETS) && mkdir -p $(KUBE_ASSETS)
	tar -xzf $< -C $(KUBE_ASSETS) --strip-components=1
	touch $@

kube-assets: $(KUBE_ASSETS_TARGET)

pytest: setup chromium oci-registry kube-assets
	$(BIN)/python -m pytest

test: lint typecheck pytest

clean:
	rm -rf $(VENV) .cache portal-dev.db* .mypy_cache .ruff_cache .pytest_cache
