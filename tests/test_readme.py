"""The README's Python examples run as written (each ```python block, in order, in one namespace).

A block preceded by ``<!-- no-run: reason -->`` is only compiled (it needs files or services a
test machine does not have). Output goes to a temporary directory, so PNGs the examples write do
not land in the checkout.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(r"(<!--\s*no-run:[^>]*-->\s*\n)?```python\n(.*?)```", re.DOTALL)


def _blocks() -> list[tuple[int, str, bool]]:
    text = README.read_text()
    out = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start(2)) + 1
        out.append((line, match.group(2), match.group(1) is None))
    return out


def test_readme_has_examples():
    """A positive control: the parser finds the README's blocks (else the tests below pass vacuously)."""
    blocks = _blocks()
    assert len(blocks) >= 5
    assert sum(run for _, _, run in blocks) >= 4


def test_every_block_compiles():
    for line, code, _ in _blocks():
        compile(code, f"README.md:{line}", "exec")


@pytest.mark.slow
def test_readme_examples_run(tmp_path, monkeypatch):
    """Every runnable block, in order, sharing one namespace (as a reader pasting them would)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    try:
        for line, code, run in _blocks():
            if run:
                exec(compile(code, f"README.md:{line}", "exec"), namespace)  # noqa: S102 - the README is ours
    finally:
        plt.close("all")
