"""The demo runs end to end on a small sample and reports what the caches did."""

from __future__ import annotations

from zcache import demo


def test_demo_runs(capsys):
    demo.main(n_events=2_000, n_fit_events=1_000, n_toys=3)
    out = capsys.readouterr().out
    assert "per-cache statistics" in out
    assert "traces: cached loss 1, uncached loss 1" in out
    assert "digraph zcache" in out
    assert "with precompute" in out and "always dirty" in out and "valid=True" in out
    assert "3 toys" in out and "sampler 1" in out
