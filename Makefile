# zcache: `make test` and `make demo` set everything up from nothing (a .venv here).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The test targets write Python's bytecode caches (__pycache__/, ignored by git) even where the environment sets
# PYTHONDONTWRITEBYTECODE: without them each pytest worker and each fresh process a test starts (Dask workers,
# compile-cache and process-state children) parses and compiles zcache and the rewritten test modules again, about
# 6 CPU seconds a process (benchmarks/RESULTS.md, "Suite times").
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest
STAMP := $(VENV)/.installed
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed

.PHONY: test test-all test-fast demo toys docs bench bench-smoke lint stress clean

# $(call make-venv,DIR): create the virtualenv DIR if missing and install zcache[dev] into it.
define make-venv
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(1)/bin/python -m pip install --quiet -e .[dev]
	touch $(1)/.installed
endef

$(STAMP): setup.cfg pyproject.toml
	$(call make-venv,$(VENV))

# Two pytest-xdist workers, one per core: the suite is mostly Python- and TensorFlow-dispatch-bound
# (single-threaded), so two processes take about 0.6x the time of one. CI's clean-clone run (install, `make test`,
# `make docs`) must stay within 25 minutes: the full suite took 21 min here on 2026-11-26 (1,565 tests), so
# `make test` leaves out the tests marked exhaustive (costlier repeats of a behaviour it checks in another mode
# or combination, marked where each test is defined) and the benchmark smoke runs (`make bench-smoke`);
# `make test-all` runs everything.
# --dist worksteal: an idle worker takes queued tests from the other, so a long test at the end is not waited on.
# The budget, 15 minutes on a quiet 2-core machine, is kept in CPU seconds (wall time lies on a shared machine):
# --cpu-durations (the root conftest.py) prints the costliest tests and files and the run's total CPU, and
# --cpu-budget whether that is within 1,600 s; a report line, never a failure (CONTRIBUTING.md, "Test times").
test: $(STAMP)
	$(PYTEST) -n 2 --dist worksteal -m "not bench_smoke and not exhaustive" --cpu-durations 25 --cpu-budget 1600

test-all: $(STAMP)
	$(PYTEST) -n 2 --dist worksteal

# The quick runs of the amplitude, jit and symbolic benchmarks (tests/test_benchmarks_smoke.py), which
# `make test` leaves out to stay within CI's 25 minutes (run before `make bench` or after changing benchmarks/).
bench-smoke: $(STAMP)
	$(PYTEST) -n 2 -m bench_smoke tests/test_benchmarks_smoke.py

# The inner loop: tests marked slow (demos, benchmarks, toy studies, fits beyond one per module,
# XLA compiles, ampform models, long property runs, the costlier cases of each behaviour) are left
# out. Budget: 90 s on a quiet 2-core machine, kept as 160 CPU seconds (the run total that
# --cpu-durations prints; --cpu-budget says within or OVER: CONTRIBUTING.md, "Test times"; the
# measurements are in benchmarks/RESULTS.md, "Suite times").
test-fast: $(STAMP)
	$(PYTEST) -n 2 -m "not slow" --cpu-durations 15 --cpu-budget 160

demo: $(STAMP)
	$(PY) -m demos.amplitude

# A 1000-toy study (Gauss + Exp, 10k events per toy) in batches of 100 on a 2-worker Dask
# LocalCluster: prints the pulls and coverage, writes demo_output/toys/pulls_*.png and toys.csv.
toys: $(STAMP)
	$(PY) -m demos.toys

# The documentation site (Sphinx + numpydoc + sphinx-gallery + MyST, the PyData theme): API reference from the
# docstrings, the user guide, the migration pages and the example gallery, each example run at build time.
# Warnings are errors: a broken example, a missing reference or a malformed docstring fails the build.
# Open docs/_build/html/index.html. -j 2: pages are read and written in two processes (83 s instead of 98 s here;
# the gallery's examples, 49 s of it, run one after another).
docs: $(STAMP)
	rm -rf docs/_build docs/api/generated docs/auto_examples
	$(PY) -m sphinx -W --keep-going -j 2 -b html docs docs/_build/html

lint: $(STAMP)
	$(PY) -m ruff check zcache demos tests benchmarks docs
	$(PYTEST) -q tests/test_docstrings.py tests/test_imports.py tests/test_tf_internals.py::test_no_other_module_touches_tensorflow_internals
	$(VENV)/bin/lint-imports

# The stateful machines, CacheMachine (tests/test_properties.py) and FitMachine
# (tests/test_properties_fit.py), for 10,000 random sequences in 2 worker processes, with
# tests/stress.py's defaults (the run design/reliability.md records: its mix, batches and recycling);
# prints failures, the count per rule, per-machine rates and RSS (not part of `make test`).
stress: $(STAMP)
	$(PY) tests/stress.py

# A separate environment for benchmarks, so that peers (zfit; tensorwaves: later issues) can be
# installed there without touching the test environment. zfit and tf-keras require the
# `tensorflow` distribution, which would install a second TensorFlow over tensorflow-cpu: they
# come with --no-deps (requirements-peers-nodeps.txt), their other dependencies from
# requirements-peers.txt. The amplitude peers (qrules, ampform, tensorwaves with jax on the CPU)
# come from requirements-peers-amplitude.txt. A peer that fails to install is a warning, not an
# error: bench_fit.py / bench_tensorwaves.py then say "not installed" in their rows.
PEER_REQS := benchmarks/requirements-peers.txt benchmarks/requirements-peers-nodeps.txt \
  benchmarks/requirements-peers-amplitude.txt
$(BENCH_STAMP): setup.cfg pyproject.toml $(PEER_REQS)
	$(call make-venv,$(BENCH_VENV))
	$(BENCH_PY) -m pip install --quiet -r benchmarks/requirements-peers.txt \
	  && $(BENCH_PY) -m pip install --quiet --no-deps -r benchmarks/requirements-peers-nodeps.txt \
	  || echo "WARNING: benchmark peers not installed in $(BENCH_VENV); bench_fit.py will say so"
	$(BENCH_PY) -m pip install --quiet -r benchmarks/requirements-peers-amplitude.txt \
	  || echo "WARNING: amplitude peers not installed in $(BENCH_VENV); bench_tensorwaves.py will say so"
	@if $(BENCH_PY) -m pip show --quiet tensorflow 2>/dev/null; then \
	  echo "ERROR: the 'tensorflow' distribution was installed into $(BENCH_VENV) beside tensorflow-cpu"; \
	  rm -f $@; exit 1; fi

bench: $(BENCH_STAMP)
	$(BENCH_PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) build dist *.egg-info .pytest_cache .hypothesis docs/_build docs/api/generated docs/auto_examples
