# The README's commands. `make up` runs Enclave Queues; `make test` runs ruff, the import contracts
# (pyproject.toml [tool.importlinter]: the layers, checked by lint-imports) and the whole suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUNTIME := $(VENV)/.runtime

SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: up test lint bench clean chromium

$(BIN)/python:
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# `make up` installs the runtime only (no test extras), quietly: one line, and pip's output in
# $(VENV)/install.log (shown if it fails). A venv `make test` installed already has it all.
$(RUNTIME): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $@; else \
	  echo "Installing Enclave Queues into $(VENV) (about a minute the first time)..." && \
	  { [ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV); } && \
	  { $(BIN)/pip install --disable-pip-version-check --upgrade pip && \
	    $(BIN)/pip install --disable-pip-version-check -e .; } > $(VENV)/install.log 2>&1 && touch $@ || \
	  { cat $(VENV)/install.log 2>/dev/null; echo "make up: the install failed; pip's output is above."; exit 1; }; fi

up: $(RUNTIME)
	@$(BIN)/enclave up

# the console tests drive Debian's Chromium (Playwright's Python API, no browser download)
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the console tests"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || { \
	    $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }; }

test: $(STAMP) chromium
	$(BIN)/ruff check enclave_queue cli tests bench terraform-provider
	$(BIN)/lint-imports --no-cache --no-logo
	@# the Node.js client tests' packages, pinned by tests/node/package-lock.json (nats.js, the AWS SDK's SQS
	@# client) and tests/node/sqs-query/package-lock.json (the SQS client's last query-protocol release)
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix tests/node --no-audit --no-fund --loglevel=error; \
	  npm ci --prefix tests/node/sqs-query --no-audit --no-fund --loglevel=error; fi
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m bench
	$(BIN)/python -m bench.iterate
	$(BIN)/python -m bench.delays

clean:
	rm -rf $(VENV) .pytest_cache
