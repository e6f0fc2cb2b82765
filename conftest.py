"""Loaded before any test or doctest imports zcache: the test session's compile cache is a temporary folder.

zcache keeps compiled XLA programs in ``$ZCACHE_CACHE_DIR`` (default ``~/.cache/zcache``); a test run
must not write there. This file is at the root so that it also applies to ``pytest zcache`` (the
doctests alone), which does not load ``tests/conftest.py``. Subprocesses and xdist workers inherit
the variable; the process that made the folder removes it at exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if os.environ.get("ZCACHE_TEST_SESSION_CACHE") != os.environ.get("ZCACHE_CACHE_DIR") or \
        "ZCACHE_TEST_SESSION_CACHE" not in os.environ:
    _folder = tempfile.mkdtemp(prefix="zcache-test-cache-")
    os.environ["ZCACHE_CACHE_DIR"] = os.environ["ZCACHE_TEST_SESSION_CACHE"] = _folder
    atexit.register(shutil.rmtree, _folder, True)


# --- `--cpu-durations N`: CPU seconds per test (issue 53) ---------------------------------------------------------
# Wall time lies on a shared machine; the CPU time a test's process spends does much less. This plugin records
# time.process_time() (all threads of the process: TensorFlow's too) around each test's setup + call + teardown,
# in each xdist worker (with the CPU of the subprocesses it waited for), and the CPU of each worker's start
# (imports + collection) and whole session. It is here, at the root, so that doctests (zcache/...) are measured
# too: tests/conftest.py's hooks see only tests/. The budgets it compares with (`--cpu-budget`) and how to use it:
# CONTRIBUTING.md ("Test times").

import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402


def pytest_addoption(parser):
    """``--cpu-durations N``, ``--cpu-durations-json PATH`` and ``--cpu-budget SECONDS``."""
    group = parser.getgroup("cpu-durations", "CPU seconds per test (issue 53; CONTRIBUTING.md)")
    group.addoption("--cpu-durations", type=int, default=None, metavar="N",
                    help="record the CPU seconds of each test (setup + call + teardown, its finished subprocesses "
                         "too) and print the N costliest, the costliest files and the run's total CPU (0: only the totals)")
    group.addoption("--cpu-durations-json", default=None, metavar="PATH",
                    help="with --cpu-durations: also write every test's CPU seconds and the workers' totals to PATH "
                         "(and each test's as it ends to PATH.lines)")
    group.addoption("--cpu-budget", type=float, default=None, metavar="SECONDS",
                    help="with --cpu-durations: say whether the run's total CPU is within SECONDS (a report line, "
                         "never a failure: a loaded machine must not fail tests)")


def pytest_configure(config):
    """Register the recorder when ``--cpu-durations`` is given."""
    if config.getoption("--cpu-durations") is not None:
        config.pluginmanager.register(_CpuDurations(config), "zcache-cpu-durations")


def _cpu_self_and_children() -> tuple[float, float]:
    """Return the CPU seconds of this process and of its finished subprocesses (Dask workers, `python -c` tests)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


class _CpuDurations:
    """Per-test CPU seconds in each process; the xdist controller gathers the workers' totals."""

    def __init__(self, config):
        self.config = config
        self.worker = getattr(config, "workerinput", {}).get("workerid")
        self.tests: dict[str, dict] = {}  # nodeid -> {"cpu": s, "slow": bool}
        self.processes: dict[str, dict] = {}  # worker id (or "main") -> start, tests, total, children
        self.start_cpu = None
        self._phase_start = {}

    # Each phase separately: the teardown report, made inside the protocol, carries the sum to the controller.
    # A test's subprocesses (a demo, a Dask cluster) count too, once they have been waited for.
    def _wrap(self, item):
        start = time.process_time() + _cpu_self_and_children()[1]
        yield
        item.stash.setdefault(_CPU_KEY, [0.0])[0] += time.process_time() + _cpu_self_and_children()[1] - start

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        yield from self._wrap(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        yield from self._wrap(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item):
        yield from self._wrap(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        if call.when == "teardown":
            report = outcome.get_result()
            report.zcache_cpu_s = item.stash.get(_CPU_KEY, [0.0])[0]  # a plain float: xdist serializes it
            report.zcache_slow = item.get_closest_marker("slow") is not None

    def pytest_runtest_logreport(self, report):
        if report.when == "teardown" and hasattr(report, "zcache_cpu_s"):
            self.tests[report.nodeid] = {"cpu": report.zcache_cpu_s, "slow": report.zcache_slow}
            path = self.config.getoption("--cpu-durations-json")
            if path and self.worker is None:  # one line per test as the run goes: a run stopped early keeps them
                with open(path + ".lines", "a") as out:
                    out.write(json.dumps([report.nodeid, report.zcache_cpu_s, report.zcache_slow]) + "\n")

    def pytest_collection_finish(self, session):
        self.start_cpu = time.process_time()  # imports of test modules + collection

    def pytest_sessionfinish(self, session):
        own, children = _cpu_self_and_children()
        totals = {"start": self.start_cpu or 0.0, "total": own, "children": children}
        if self.worker is not None:
            self.config.workeroutput["zcache_cpu"] = json.dumps(totals)
        else:
            self.processes["main"] = totals

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        if "zcache_cpu" in getattr(node, "workeroutput", {}):
            self.processes[node.gateway.id] = json.loads(node.workeroutput["zcache_cpu"])

    def pytest_terminal_summary(self, terminalreporter):
        if self.worker is not None:
            return
        write = terminalreporter.write_line
        top = self.config.getoption("--cpu-durations")
        ranked = sorted(self.tests.items(), key=lambda kv: -kv[1]["cpu"])
        terminalreporter.write_sep("=", f"CPU seconds per test (top {top} of {len(ranked)}: setup + call + teardown)")
        for nodeid, rec in ranked[:top]:
            write(f"{rec['cpu']:8.2f}  {nodeid}{'  [slow]' if rec['slow'] else ''}")
        files: dict[str, list] = {}
        for nodeid, rec in self.tests.items():
            entry = files.setdefault(nodeid.split("::")[0], [0.0, 0])
            entry[0] += rec["cpu"]
            entry[1] += 1
        if top:
            write("per file:")
            for name, (cpu, count) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
                write(f"{cpu:8.2f}  {name} ({count} tests)")
        in_tests = sum(rec["cpu"] for rec in self.tests.values())
        main = self.processes.get("main", {"total": 0.0, "children": 0.0})
        workers = {name: p for name, p in self.processes.items() if name != "main"}
        in_workers = sum(p["total"] for p in workers.values())
        starts = sum(p["start"] for p in workers.values())
        spawned = sum(p["children"] for p in workers.values()) if workers else main["children"]
        # the controller's finished children are the workers (once reaped) and what they spawned
        total = main["total"] + max(main["children"], in_workers + spawned)
        if workers:
            where = (f"{len(workers)} workers {in_workers:.1f} s ({starts:.1f} s of it imports and collection), "
                     f"controller {main['total']:.1f} s")
        else:
            where = f"one process {main['total']:.1f} s ({main.get('start', 0.0):.1f} s of it imports and collection)"
        write(f"CPU: {in_tests:.1f} s in {len(self.tests)} tests; {where}, subprocesses {spawned:.1f} s; "
              f"run total {total:.1f} s")
        budget = self.config.getoption("--cpu-budget")
        if budget is not None:
            verdict = "within" if total <= budget else "OVER"
            write(f"CPU budget: {total:.1f} s of {budget:.0f} s: {verdict} (CONTRIBUTING.md, 'Test times': "
                  "mark the costliest new tests slow)")
        path = self.config.getoption("--cpu-durations-json")
        if path:
            with open(path, "w") as out:
                json.dump({"tests": self.tests, "processes": self.processes}, out, indent=1, sort_keys=True)


_CPU_KEY = pytest.StashKey[list]()
