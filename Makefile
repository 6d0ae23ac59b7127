# The README's two commands: `make run` (the embedded default) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint typecheck pytest setup clean

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

pytest: setup
	$(BIN)/python -m pytest

test: lint typecheck pytest

clean:
	rm -rf $(VENV) portal-dev.db* .mypy_cache .ruff_cache .pytest_cache
