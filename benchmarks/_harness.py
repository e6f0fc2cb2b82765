"""Timing and reporting helpers shared by the ``bench_*.py`` modules.

The interface between a benchmark module and ``run_all.py`` is one function,

.. code-block:: python

    def run(quick: bool) -> list[tuple[str, str]]:
        ...

returning one ``(title, body)`` pair per table. ``body`` is Markdown: the table
(:func:`markdown_table`) followed by a paragraph that reads the measured numbers
(no conclusion is written in advance). ``quick=True`` must finish in seconds: it
is the smoke test.

Timings are interleaved (:func:`time_interleaved`): every repeat times each
variant once, in rotating order, so that a slow phase of a busy machine hits all
variants alike and a ratio compares neighbouring samples.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Timing",
    "time_interleaved",
    "paired_ratio",
    "markdown_table",
    "fmt",
    "verdict",
]


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one variant.

    Attributes
    ----------
    samples : numpy.ndarray
        One entry per repeat: the mean time of ``inner`` consecutive calls.
    inner : int
        Calls averaged into one sample.
    """

    samples: np.ndarray
    inner: int

    @property
    def median(self) -> float:
        """Median seconds per call."""
        return float(np.median(self.samples))

    @property
    def us(self) -> float:
        """Median microseconds per call."""
        return 1e6 * self.median

    @property
    def iqr_us(self) -> float:
        """Interquartile range of the samples, in microseconds."""
        q25, q75 = np.percentile(self.samples, [25, 75])
        return 1e6 * float(q75 - q25)


def _noop() -> None:
    return None


def time_interleaved(
    variants: Mapping[str, Callable[[], Any]],
    *,
    repeats: int,
    warmup: int = 3,
    before: Mapping[str, Callable[[], Any]] | None = None,
    inner: int | None = None,
    min_sample_s: float = 2e-3,
    max_inner: int = 50,
) -> dict[str, Timing]:
    """Time several variants side by side, interleaved repeat by repeat.

    Parameters
    ----------
    variants : mapping of str to callable
        Zero-argument callables to time.
    repeats : int
        Samples per variant; report their median.
    warmup : int
        Untimed calls of each variant first (tracing, allocation).
    before : mapping of str to callable, optional
        Untimed callable run right before each timed call of the variant of the same
        name (e.g. a ``set_value`` that makes the next call a cache miss).
    inner : int, optional
        Calls averaged into one sample. By default chosen so that a sample of the
        fastest variant lasts about ``min_sample_s`` (at most ``max_inner`` calls).
    min_sample_s, max_inner
        See ``inner``.

    Returns
    -------
    dict of str to Timing
        Seconds per call of each variant, in the order of ``variants``.
    """
    names = list(variants)
    pre = {name: (before or {}).get(name, _noop) for name in names}
    for _ in range(warmup):
        for name in names:
            pre[name]()
            variants[name]()
    if inner is None:
        fastest = math.inf
        for name in names:
            runs = []
            for _ in range(3):
                pre[name]()
                t0 = time.perf_counter()
                variants[name]()
                runs.append(time.perf_counter() - t0)
            fastest = min(fastest, float(np.median(runs)))
        inner = int(min(max_inner, max(1, math.ceil(min_sample_s / max(fastest, 1e-9)))))
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for r in range(repeats):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                func, prepare = variants[name], pre[name]
                total = 0.0
                for _ in range(inner):
                    prepare()
                    t0 = time.perf_counter()
                    func()
                    total += time.perf_counter() - t0
                samples[name].append(total / inner)
    finally:
        if gc_enabled:
            gc.enable()
    return {name: Timing(np.asarray(samples[name]), inner) for name in names}


def paired_ratio(num: Timing, den: Timing) -> tuple[float, float, float]:
    """Ratio of medians and the interquartile range of the repeat-by-repeat ratios.

    Returns
    -------
    ratio, q25, q75 : float
        ``median(num) / median(den)`` and the 25th and 75th percentiles of
        ``num.samples[i] / den.samples[i]`` (neighbouring samples, see
        :func:`time_interleaved`).
    """
    per_repeat = num.samples / den.samples
    q25, q75 = np.percentile(per_repeat, [25, 75])
    return num.median / den.median, float(q25), float(q75)


def fmt(value: Any) -> str:
    """Format one table cell: 4 significant digits for floats below 1000."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "**no**"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}"
    return str(value)


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Render rows (dicts with the same keys) as a GitHub-flavoured Markdown table.

    Parameters
    ----------
    rows : sequence of mapping
        One dict per row; keys are column headers.
    columns : sequence of str, optional
        Column order; by default the keys of the first row that do not start with
        ``_`` (such keys carry numbers for the text, not for the table).

    Returns
    -------
    str
        The table, without a trailing newline.
    """
    if not rows:
        return "_(no rows)_"
    columns = list(columns or [key for key in rows[0] if not key.startswith("_")])

    def numeric(col: str) -> bool:
        return all(isinstance(row.get(col), (int, float, np.number)) for row in rows)

    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---:" if numeric(col) else ":---" for col in columns) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(col, "")) for col in columns) + " |")
    return "\n".join(lines)


def verdict(ratio: float, target: float, spread: tuple[float, float] | None = None) -> str:
    """Say in words whether a measured ratio meets a ``<= target`` goal.

    Parameters
    ----------
    ratio : float
        The measured ratio (cached / baseline).
    target : float
        The goal, met when ``ratio <= target``.
    spread : (float, float), optional
        Interquartile range of the repeat-by-repeat ratios; when it contains the
        target, the text says that the verdict is within the noise.
    """
    word = "met" if ratio <= target else "**missed**"
    text = f"{ratio:.3f} (target ≤ {target:.2f}: {word}"
    if spread is not None and spread[0] <= target <= spread[1]:
        text += f"; the repeat-by-repeat ratios straddle the target, IQR {spread[0]:.3f}–{spread[1]:.3f}"
    return text + ")"
