# cairn: the two set-up commands are `make demo` and `make test`; both create .venv and install what they need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.cairn-installed

.PHONY: install demo test bench clean

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

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) scripts/bench_ranking.py

clean:
	rm -rf $(VENV) .cairn-demo *.egg-info
