# zcache: `make test` and `make demo` set everything up from nothing (a .venv here).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed

.PHONY: test demo bench lint clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .[dev]
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

demo: $(STAMP)
	$(PY) -m zcache.demo

lint: $(STAMP)
	$(PY) -m ruff check zcache tests benchmarks

# The bench environment also holds the peers (zfit is installed with --no-deps next to
# tensorflow-cpu, because its own requirement pulls the full `tensorflow` wheel).
$(BENCH_STAMP): setup.cfg pyproject.toml
	test -x $(BENCH_PY) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --upgrade pip
	$(BENCH_PY) -m pip install --quiet -e .[dev]
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BENCH_PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) *.egg-info .pytest_cache .hypothesis
