"""The benchmark suite still runs (quick mode) and writes a report with its command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # benchmark smoke tests: 32 s


#: run_all.py --quick in five groups, so that two test workers share the work (each group's own strings).
GROUPS = {
    "jit": (["bench_jit"], ["XLA-compiled loss", "| 10,000 | auto |"]),
    "symbolic": (["bench_symbolic"], ["D0 -> K- pi+ pi0: fits", "(b) couplings, masses, widths", "(c) `",
                                      "Memory: peak RSS", "| D0 -> K- pi+ pi0 | zcache |"]),
    "fit": (["bench_fit", "bench_toys"], ["What the numbers say"]),
    "amplitude": (["bench_amplitude", "bench_core", "bench_reliability", "bench_tensorwaves"],
                  ["Cache hit", "What the numbers say"]),
    "large": (["bench_large"], ["Large Dalitz fit: rows", "| UnbinnedNLL (in memory), N = 2e4 | ok |",
                                "GPU: per-evaluation time"]),
    "scans": (["bench_scans"], ["Profile scans (quick)", "What the numbers say"]),
    "inference": (["bench_inference"], ["Toy upper limit (quick)", "zcache ToyCalculator (quick)"]),
}


def test_the_groups_cover_every_benchmark():
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    assert sorted(m for modules, _ in GROUPS.values() for m in modules) == run_all.discover()


#: Groups that `make test` (CI) leaves to `make bench-smoke`: their quick runs cost ~300 CPU-s of compiles and
#: ampform builds that the library's own tests (test_jit, test_amplitude_models, test_amplitude_symbolic) already pay. The "fit"
#: group (49 s) joined them when CI began to build the documentation; CI keeps bench_fit's single fit and
#: bench_reliability's toy loop (the tests below), and the report's format through test_the_groups_cover_every_benchmark.
SMOKE_ONLY = {"jit", "symbolic", "amplitude", "fit", "large", "scans", "inference"}  # scans, inference: batched compiles


@pytest.mark.parametrize("group", [pytest.param(g, marks=pytest.mark.bench_smoke) if g in SMOKE_ONLY else g
                                   for g in GROUPS])
def test_benchmarks_quick(tmp_path, group):
    modules, expected = GROUPS[group]
    out = tmp_path / "results.md"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--out", str(out), "--only", *modules],
        capture_output=True, text=True, cwd=ROOT,  # no time limit: a busy machine is not a failure
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "run_all.py" in text
    for module in modules:
        assert f"## `{module}`" in text, module
    for phrase in expected:
        assert phrase in text, phrase


def test_bench_fit_single_fit_quick_without_peers(monkeypatch):
    """bench_fit's cheapest table (quick single fit): numpy + iminuit fits, a missing zfit says so.

    The test environment has no zfit, so its rows must read "not installed" instead of
    failing; where zfit is installed it is left out here (importing it takes seconds).
    """
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import _harness
    import bench_fit

    zfit_missing = importlib.util.find_spec("zfit") is None
    include = ("numpy", "zfit") if zfit_missing else ("numpy",)
    rows = bench_fit.bench_single_fit(bench_fit.QUICK, include=include)

    by_name = {row["implementation"]: row for row in rows}
    numpy_rows = [row for name, row in by_name.items() if name.startswith("numpy")]
    assert len(numpy_rows) == 2
    for row in numpy_rows:
        assert row["status"] == "ok" and row["valid"], row
        assert abs(row["mu"] - bench_fit.QUICK.fit_setup.truth["mu"]) < 0.1
    assert numpy_rows[0]["warm / numpy+iminuit"] == 1.0
    if zfit_missing:
        zfit_rows = [row for name, row in by_name.items() if name.startswith("zfit")]
        assert zfit_rows and all(row["status"] == "not installed" for row in zfit_rows)
    table = _harness.markdown_table(rows, bench_fit._present(rows, bench_fit._FIT_COLUMNS))
    assert "numpy + iminuit" in table and ("not installed" in table or not zfit_missing)


def test_bench_reliability_toy_loop_quick():
    """bench_reliability's toy loop: no retrace and no growth of live objects over a few toys.

    In a process of its own: the census counts every live Variable of the process, and objects of tests that
    ran before in the same worker can die during the loop (a count that fell 74 -> 69 in one full run).
    """
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "import bench_reliability\n"
        "cfg = bench_reliability.Config(toys=8, new_model_toys=1, unfixed_toys=1, warmup=1, steps=2, samples=1)\n"
        "rows, trend = bench_reliability.toy_loop(cfg)\n"
        "print(json.dumps({'row': rows[0], 'trend': [trend[0], trend[-1]]},\n"
        "                 default=lambda o: o.item() if hasattr(o, 'item') else str(o)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    row, trend = out["row"], out["trend"]
    assert row["retraces after toy 1"] == 0 and row["final loss equals numpy"] is True
    assert row["toys where the loss did not descend"] == 0
    for key in ("tf.Variable", "FuncGraph", "graph nodes"):
        assert trend[0][key] == trend[-1][key], key


def test_phase_space_kinematics_of_the_d0_topology(monkeypatch):
    """bench_symbolic's numpy kinematics (the D0 columns without tensorwaves): Dalitz sum, flat helicity angles."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import _peers_tensorwaves as peers
    import numpy as np

    m_parent, masses = 1.86484, (0.493677, 0.13957039, 0.1349768)
    momenta, kin = peers.phase_space(40_000, 5, m_parent, masses)

    def mass2(p):
        return p[:, 0] ** 2 - np.sum(p[:, 1:] ** 2, axis=1)

    m02_sq = mass2(momenta["p0"] + momenta["p2"])
    np.testing.assert_allclose(kin["m_01"] ** 2 + kin["m_12"] ** 2 + m02_sq, m_parent**2 + sum(m * m for m in masses),
                               rtol=1e-10)
    np.testing.assert_allclose(kin["m_01"] ** 2, mass2(momenta["p0"] + momenta["p1"]), rtol=1e-10)
    for angle in ("theta_0^01", "theta_1^12"):  # flat phase space: cos(helicity angle) uniform on [-1, 1]
        cos = np.cos(kin[angle])
        assert abs(cos.mean()) < 0.02 and abs(np.mean(cos**2) - 1 / 3) < 0.02, angle


def test_large_envelope_sampler_draws_the_density(monkeypatch):
    """bench_large's event files beyond 1e7: the cell-wise envelope sampler draws the same density as plain
    accept-reject on uniform phase-space events (a narrow Breit-Wigner band, so that the cells matter)."""
    import numpy as np

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import _large_events as events

    from zcache.amplitude import DalitzKinematics

    kin = DalitzKinematics(1.86966, 0.493677, 0.13957039, 0.13957039)

    def intensity(x):
        return 0.2 + 1.0 / ((x[:, 0] - 0.8) ** 2 + 0.05**2) + 1.0 / ((x[:, 1] - 0.8) ** 2 + 0.05**2)

    sampler = events.EnvelopeSampler(intensity, kin, cells=(80, 32))
    drawn = sampler.sample(100_000, np.random.default_rng(1))
    assert bool(np.all(kin.inside(drawn).numpy()))
    rng = np.random.default_rng(2)
    (lo, hi) = kin.s_range("12")
    uniform = rng.uniform(lo, hi, size=(4_000_000, 2))
    uniform = uniform[kin.inside(uniform).numpy()]
    weights = intensity(uniform)
    reference = uniform[rng.uniform(size=len(weights)) * weights.max() < weights]
    pulls = events._two_sample(drawn, reference, kin)
    assert all(abs(v) < 4.0 for k, v in pulls.items() if not k.startswith("chi2")), pulls
    assert pulls["chi2/ndf (30x30 Dalitz histogram)"] < 1.3, pulls
