"""The ``--cpu-durations`` report (the root conftest.py; CONTRIBUTING.md, "Test times").

Each check runs pytest on a small suite in a temporary folder that holds a copy of the root conftest, in a
subprocess (the plugin registers at configure time). The numbers themselves are not asserted (no timing
assertions): what is checked is that every test is counted once, with its ``slow`` mark, from each worker, and
that the budget line compares the run total with the budget.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT_CONFTEST = pathlib.Path(__file__).resolve().parent.parent / "conftest.py"

SUITE = '''
import pytest

def busy():
    return sum(i * i for i in range(20000))

def test_a():
    assert busy() > 0

@pytest.mark.slow
def test_b():
    assert busy() > 0

@pytest.mark.parametrize("k", [1, 2, 3])
def test_c(k):
    assert busy() * k > 0

def f():
    """
    >>> f.__name__
    'f'
    """
'''


def _run(tmp_path, *args):
    (tmp_path / "conftest.py").write_text(ROOT_CONFTEST.read_text())
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\naddopts = --doctest-modules\n")
    out = tmp_path / "cpu.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--cpu-durations-json",
                           str(out), *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out.read_text()), (tmp_path / "cpu.json.lines").read_text().splitlines()


IDS = {"test_suite.py::test_a": False, "test_suite.py::test_b": True, "test_suite.py::test_c[1]": False,
       "test_suite.py::test_c[2]": False, "test_suite.py::test_c[3]": False, "test_suite.py::test_suite.f": False}


def _check(stdout, record, lines, top, processes):
    assert {nodeid: rec["slow"] for nodeid, rec in record["tests"].items()} == IDS
    assert all(rec["cpu"] >= 0.0 for rec in record["tests"].values())
    assert sorted(json.loads(line)[0] for line in lines) == sorted(IDS)
    assert sorted(record["processes"]) == processes
    listed = [line.split()[1] for line in stdout.splitlines() if line.split()[1:2] and line.split()[1] in IDS]
    assert len(listed) == top and set(listed) <= set(IDS)
    assert ("test_suite.py::test_b  [slow]" in stdout) == ("test_suite.py::test_b" in listed)
    assert f"in {len(IDS)} tests" in stdout


def test_one_process_counts_every_test_once(tmp_path):
    stdout, record, lines = _run(tmp_path, "-p", "no:xdist", "--cpu-durations", "2", "--cpu-budget", "0")
    _check(stdout, record, lines, 2, ["main"])
    assert "CPU budget:" in stdout and ": OVER" in stdout


@pytest.mark.exhaustive  # CI's 25 minutes; the one-process report runs in make test
def test_xdist_workers_report_to_the_controller(tmp_path):
    stdout, record, lines = _run(tmp_path, "-n", "2", "--cpu-durations", "3", "--cpu-budget", "100000")
    _check(stdout, record, lines, 3, ["gw0", "gw1", "main"])
    assert ": within" in stdout
    assert all(record["processes"][w]["total"] >= record["processes"][w]["start"] > 0.0 for w in ("gw0", "gw1"))


def test_without_the_option_nothing_is_recorded(tmp_path):
    (tmp_path / "conftest.py").write_text(ROOT_CONFTEST.read_text())
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CPU seconds per test" not in proc.stdout and "CPU:" not in proc.stdout
