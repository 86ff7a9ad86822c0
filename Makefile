# The two commands: `make demo` and `make test`. Every target makes .venv and installs on first use.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PIP_QUIET := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: install browsers run demo test test-fast lint format test-vllm clean

$(INSTALLED): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing dependencies into $(VENV) (first run takes a few minutes)"
	@$(BIN)/pip install -q --upgrade pip $(PIP_QUIET)
	@$(BIN)/pip install -q -e '.[dev]' $(PIP_QUIET)
	@touch $(INSTALLED)

install: $(INSTALLED)

# Headless Chromium for the browser tests, from Debian's packages (Playwright drives it; it cannot
# download its own browser here).
browsers:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	  else echo "browser tests need Chromium: sudo apt-get install chromium chromium-driver" >&2; exit 1; fi; }

run: install
	$(BIN)/python manage.py up

# Until the self-evolving demo lands, `make demo` starts the stack like `make run`.
demo: run

test: install browsers
	$(BIN)/python -m pytest

test-fast: install
	$(BIN)/python -m pytest -m "not browser and not worker"

lint: install
	$(BIN)/ruff check .
	$(BIN)/python manage.py makemigrations --check --dry-run

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf var test-artifacts .pytest_cache
