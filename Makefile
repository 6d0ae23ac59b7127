# The README's two commands: `make run` (the embedded default) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint typecheck pytest setup clean chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

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

pytest: setup chromium
	$(BIN)/python -m pytest

test: lint typecheck pytest

clean:
	rm -rf $(VENV) portal-dev.db* .mypy_cache .ruff_cache .pytest_cache
