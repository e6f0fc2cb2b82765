# zcache: `make test` and `make demo` set everything up from nothing (a .venv here).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed

.PHONY: test demo bench lint clean

# $(call make-venv,DIR): create the virtualenv DIR if missing and install zcache[dev] into it.
define make-venv
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(1)/bin/python -m pip install --quiet -e .[dev]
	touch $(1)/.installed
endef

$(STAMP): setup.cfg pyproject.toml
	$(call make-venv,$(VENV))

test: $(STAMP)
	$(PY) -m pytest

demo: $(STAMP)
	$(PY) -m zcache.demo

lint: $(STAMP)
	$(PY) -m ruff check zcache tests benchmarks

# A separate environment for benchmarks, so that peers (zfit, tensorwaves: later issues) can be
# installed there without touching the test environment.
$(BENCH_STAMP): setup.cfg pyproject.toml
	$(call make-venv,$(BENCH_VENV))

bench: $(BENCH_STAMP)
	$(BENCH_PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) *.egg-info .pytest_cache .hypothesis
