# The README's commands. `make up` runs Enclave Queues; `make test` runs ruff, the import contracts
# (pyproject.toml [tool.importlinter]: the layers, checked by lint-imports) and the whole suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: up test lint bench clean chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

up: $(STAMP)
	$(BIN)/enclave up

# the console tests drive Debian's Chromium (Playwright's Python API, no browser download)
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the console tests"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || { \
	    $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }; }

test: $(STAMP) chromium
	$(BIN)/ruff check enclave_queue cli tests bench terraform-provider
	$(BIN)/lint-imports --no-cache --no-logo
	@# the Node.js client tests' packages, pinned by tests/node/package-lock.json
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix tests/node --no-audit --no-fund --loglevel=error; fi
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m bench
	$(BIN)/python -m bench.iterate
	$(BIN)/python -m bench.delays

clean:
	rm -rf $(VENV) .pytest_cache
