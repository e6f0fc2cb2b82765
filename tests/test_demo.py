"""The demo runs end to end on a small sample and reports what the caches did."""

from __future__ import annotations

from zcache import demo


def test_demo_runs(capsys):
    demo.main(n_events=2_000)
    out = capsys.readouterr().out
    assert "per-cache statistics" in out
    assert "traces: cached loss 1, uncached loss 1" in out
    assert "digraph zcache" in out
