"""The benchmark suite still runs (quick mode) and writes a report with its command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_benchmarks_quick(tmp_path):
    out = tmp_path / "results.md"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "run_all.py" in text and "Cache hit" in text and "What the numbers say" in text
