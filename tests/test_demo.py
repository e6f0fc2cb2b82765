"""The demos run end to end on small samples and report what the caches did."""

from __future__ import annotations

import numpy as np
import pytest

from demos import amplitude as demo
from demos import basics as demo_basics

pytestmark = pytest.mark.slow  # the demos end to end: 35 s


def test_demo_basics_runs(capsys):
    demo_basics.main(n_events=2_000, n_fit_events=1_000, n_toys=3)
    out = capsys.readouterr().out
    assert "per-cache statistics" in out
    assert "traces: cached loss 1, uncached loss 1" in out
    assert "digraph zcache" in out
    assert "with precompute" in out and "always dirty" in out and "valid=True" in out
    assert "3 toys" in out and "sampler 1" in out


def test_amplitude_demo_runs(capsys, tmp_path):
    """The main demo: three fits agree, precompute caches the columns and integrals, files are written."""
    result = demo.main(n_events=3_000, n_mc=6_000, out_dir=tmp_path, n_simulation=2)
    out = capsys.readouterr().out
    fits = result["results"]
    assert set(fits) == {"no caches", "caches, no precompute", "caches + precompute"}
    assert all(r.valid for r in fits.values())
    ref = fits["no caches"]
    for r in fits.values():  # same minimum, same parameters
        assert abs(r.fmin - ref.fmin) < 1e-6 * abs(ref.fmin)
        for name, v in ref.values.items():
            assert abs(r.values[name] - v) < 1e-3 * max(1.0, abs(v)) + 1e-3 * ref.errors[name]
    status = {n.name: n.status for n in result["report"].nodes}
    assert status["I[phsp]"] == "cached" and status["A_k[data]"] == "cached"
    assert status["K*(892)[phsp]"] == "cached (inner)"
    assert status["D+ -> K- pi+ pi+.normalization"] == "always dirty"
    assert result["integral_misses"] == 0  # new data: the parameter-only integrals are kept
    assert abs(result["fractions"].sum() - 1.0) < 0.5  # interference: the sum is not exactly 1
    for name in ("dalitz.png", "fit_projections.png", "dependency_graph.png", "dependency_graph.dot"):
        assert (tmp_path / name).stat().st_size > 1000
    assert str(tmp_path / "fit_projections.png") in out  # named in the printout
    assert "fit result" in out and "per-cache statistics" in out and "retraces: 0" in out
    # floating the K*(892) line shape: its 2 columns, its 5 integral entries and the 3 nodes above are bypassed
    assert "floating the K*(892) mass and width too (10 parameters)" in out and "precompute: 10 always dirty" in out
    assert np.isfinite(list(result["timings"].values())).all()
