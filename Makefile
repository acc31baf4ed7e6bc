# cairn: the two set-up commands are `make demo` and `make test`; both create .venv and install what they need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.cairn-installed
CODE   := cairn_cli tests scripts e2e

.PHONY: install demo test test-fast e2e lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch is installed first and pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build).
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	@touch $@

install: $(STAMP)

demo: install
	bash scripts/demo.sh

# everything: real models, training, daemon processes included
test: install
	$(PY) -m pytest -q

# while working: the tests not marked slow (no real model, no training, no process), under a minute
test-fast: install
	$(PY) -m pytest -q -m "not slow"

# the real agent CLIs (Claude Code, Codex CLI, Gemini CLI, pinned, from npm into ~/.cache/cairn-e2e) drive cairn
# for two turns each against a fake model API on loopback, inside `unshare -n` when it works (e2e/README.md);
# without Node and npm it skips, except under CI=true where that is a failure
e2e: install
	$(PY) e2e/check.py

# ruff (lint and format) over the code, mypy over the whole cairn_cli package (config in pyproject.toml)
lint: install
	$(VENV)/bin/ruff check $(CODE)
	$(VENV)/bin/ruff format --check $(CODE)
	$(VENV)/bin/mypy

bench: install
	$(PY) scripts/bench_ranking.py

clean:
	rm -rf $(VENV) .cairn-demo *.egg-info
