"""Event files for ``bench_large.py``: the demo's Dalitz model sampled into ``.npy`` files, block by block.

``events_file(n)`` returns ``benchmarks/.data/dalitz_<n>.npy`` (shape (n, 2): s12, s13), generating it when
missing. The file is written through :func:`numpy.lib.format.open_memmap` in blocks of at most ``BLOCK``
events, so generating 1e8 events never holds more than one block in memory. Block ``k`` is seeded with
``SEED + k`` whatever the file's size, so every file is a prefix of a larger one: a file is built from the
whole blocks of the largest smaller file present (copied) and new blocks only for the rest.

**Two samplers.** The first ``MAX_TRUE`` events (1e7) come from the model's own sampler
(``AmplitudePdf.sample``: zcache's accept-reject under 1.5x the intensity's maximum; about 5 % of the
proposals inside the plot are kept): about 15 s per 1e6 events on this 2-core machine, so 1e8 would take
25 min. Beyond ``MAX_TRUE`` the blocks come from :func:`envelope_sample`, an accept-reject on the same
intensity with a cell-wise envelope (about 60 % kept: about 10x fewer intensity evaluations); its events
are new draws of the same density, not copies or transforms of the first 1e7 (no event repeats), and
the file's ``.json`` sidecar records which blocks came from which sampler and a two-sample check of the
two (the means of the three projections, in standard errors).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BLOCK", "MAX_TRUE", "DATA", "events_file", "phasespace_file", "envelope_sample", "log"]

HERE = Path(__file__).resolve().parent
# The demo model is the repository's demos/amplitude.py (demos/ is not installed with zcache).
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
DATA = HERE / ".data"
BLOCK = 1_000_000
MAX_TRUE = 10_000_000
SEED = 2028
MC_SEED = 1028


def log(text: str) -> None:
    """One progress line with a UTC time stamp, on stderr."""
    stamp = time.strftime("%H:%M:%S", time.gmtime())
    print(f"[bench_large {stamp}] {text}", file=sys.stderr, flush=True)


def _model(n_mc: int = 1000) -> dict[str, Any]:
    from demos.amplitude import build_model

    return build_model(n_mc)


def phasespace_file(n_mc: int) -> Path:
    """The integration sample (uniform in the Dalitz plot), ``phsp_<n_mc>.npy``, made once and reused."""
    from zcache.models import set_seed

    path = DATA / f"phsp_{n_mc}.npy"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        set_seed(MC_SEED)
        events = _model()["kinematics"].sample_tensor(n_mc).numpy()
        _save(path, events)
    return path


def _save(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def _s13_range(kin: Any, s12: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Dalitz plot's s13 limits at fixed s12 (particle energies in the (12) rest frame)."""
    m0, m1, m2, m3 = kin.masses
    root = np.sqrt(s12)
    e1 = (s12 + m1**2 - m2**2) / (2 * root)
    e3 = (m0**2 - s12 - m3**2) / (2 * root)
    p1 = np.sqrt(np.maximum(e1**2 - m1**2, 0.0))
    p3 = np.sqrt(np.maximum(e3**2 - m3**2, 0.0))
    return (e1 + e3) ** 2 - (p1 + p3) ** 2, (e1 + e3) ** 2 - (p1 - p3) ** 2


class EnvelopeSampler:
    """Accept-reject on the model's intensity under a cell-wise envelope.

    Coordinates (s12, t), t in [0, 1], s13 = lo(s12) + t (hi(s12) - lo(s12)), map the Dalitz plot onto a
    rectangle (density ``I(s12, s13) (hi - lo)``), split into ``cells`` cells. A cell's envelope is 1.5x the
    largest density on a 5 x 5 lattice of its points (corners included), then the largest over its 3 x 3
    neighbourhood; a proposal picks a cell in proportion to its envelope, a uniform point in it, and is
    kept when ``u * envelope < density``. A proposal above its cell's envelope raises (never a bias).
    """

    def __init__(self, intensity: Callable[[np.ndarray], np.ndarray], kin: Any, cells: tuple[int, int] = (160, 64)):
        self.intensity, self.kin = intensity, kin
        self.lo, self.hi = kin.s_range("12")
        self.cells = cells
        sub = 4
        s12 = np.linspace(self.lo, self.hi, cells[0] * sub + 1)
        t = np.linspace(0.0, 1.0, cells[1] * sub + 1)
        grid12, gridt = np.meshgrid(s12, t, indexing="ij")
        dens = self.density(grid12.ravel(), gridt.ravel()).reshape(grid12.shape)
        cell = np.zeros(cells)
        for i in range(cells[0]):
            for j in range(cells[1]):
                cell[i, j] = dens[i * sub:(i + 1) * sub + 1, j * sub:(j + 1) * sub + 1].max()
        padded = np.pad(cell, 1, mode="edge")
        dilated = np.max([padded[a:a + cells[0], b:b + cells[1]] for a in range(3) for b in range(3)], axis=0)
        self.envelope = 1.5 * dilated.ravel()
        self.weights = self.envelope / self.envelope.sum()
        self.efficiency = float(dens.mean() / self.envelope.mean())

    def density(self, s12: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The density in (s12, t): intensity times the s13 width at s12."""
        lo, hi = _s13_range(self.kin, s12)
        s13 = lo + t * (hi - lo)
        return self.intensity(np.stack([s12, s13], axis=1)) * (hi - lo)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` events (s12, s13)."""
        out, have = np.empty((n, 2)), 0
        h12, ht = (self.hi - self.lo) / self.cells[0], 1.0 / self.cells[1]
        while have < n:
            m = int(min(2_000_000, max(10_000, 1.2 * (n - have) / self.efficiency)))
            cell = rng.choice(self.envelope.size, size=m, p=self.weights)
            i, j = np.divmod(cell, self.cells[1])
            s12 = self.lo + (i + rng.uniform(size=m)) * h12
            t = (j + rng.uniform(size=m)) * ht
            dens, env = self.density(s12, t), self.envelope[cell]
            if not np.all(dens <= env):
                raise RuntimeError(f"envelope sampler: the density exceeded its cell's envelope "
                                   f"(by up to {np.max(dens / env):.3f}x): use more cells or a larger factor")
            keep = rng.uniform(size=m) * env < dens
            lo, hi = _s13_range(self.kin, s12[keep])
            events = np.stack([s12[keep], lo + t[keep] * (hi - lo)], axis=1)[: n - have]
            out[have:have + len(events)] = events
            have += len(events)
        return out


def envelope_sample(model: dict[str, Any]) -> EnvelopeSampler:
    """The :class:`EnvelopeSampler` of the demo model ``model`` (``build_model``'s dict) at its current values."""
    import tensorflow as tf

    amplitude = model["sum"]
    traced = tf.function(amplitude.intensity, input_signature=[tf.TensorSpec([None, 2], tf.float64)])

    def intensity(x: np.ndarray) -> np.ndarray:
        return np.concatenate([traced(tf.constant(x[i:i + 1_000_000])).numpy() for i in range(0, len(x), 1_000_000)])

    return EnvelopeSampler(intensity, model["kinematics"])


def _blocks(n: int) -> list[tuple[int, int]]:
    return [(k, min(BLOCK, n - k * BLOCK)) for k in range((n + BLOCK - 1) // BLOCK)]


def _prefix(n: int) -> tuple[Path | None, int]:
    """The largest smaller file of the same scheme and how many whole blocks of it to copy."""
    best, blocks = None, 0
    for path in DATA.glob("dalitz_*.npy"):
        meta = path.with_suffix(".json")
        try:
            size = int(path.stem.split("_")[1])
            info = json.loads(meta.read_text())
        except (ValueError, OSError, json.JSONDecodeError):
            continue
        if size < n and info.get("block") == BLOCK and info.get("max_true") == MAX_TRUE and size // BLOCK > blocks:
            best, blocks = path, size // BLOCK
    return best, blocks


def _two_sample(a: np.ndarray, b: np.ndarray, kin: Any) -> dict[str, float]:
    """Differences of the projections' means (K pi low, K pi high, pi pi), in standard errors, and the
    two-sample chi2 / ndf of their 30 x 30 Dalitz histograms (K pi low vs K pi high)."""
    def projections(v: np.ndarray) -> list[np.ndarray]:
        return [np.minimum(v[:, 0], v[:, 1]), np.maximum(v[:, 0], v[:, 1]), kin.mass_sum_sq - v[:, 0] - v[:, 1]]

    out = {}
    for name, x, y in zip(("Kpi low", "Kpi high", "pipi"), projections(a), projections(b), strict=True):
        out[name] = float((x.mean() - y.mean()) / np.sqrt(x.var() / len(x) + y.var() / len(y)))
    pa, pb = projections(a), projections(b)
    edges = [np.linspace(min(pa[i].min(), pb[i].min()), max(pa[i].max(), pb[i].max()), 31) for i in (0, 1)]
    ha = np.histogram2d(pa[0], pa[1], bins=edges)[0]
    hb = np.histogram2d(pb[0], pb[1], bins=edges)[0] * len(a) / len(b)
    filled = (ha + hb) > 0
    chi2 = np.sum((ha - hb)[filled] ** 2 / (ha + hb * len(a) / len(b))[filled])
    out["chi2/ndf (30x30 Dalitz histogram)"] = float(chi2 / max(1, filled.sum() - 1))
    return out


def events_file(n: int) -> Path:
    """``dalitz_<n>.npy``: ``n`` events of the demo model at its true values (made when missing, see the module).

    Parameters
    ----------
    n : int
        Number of events.

    Returns
    -------
    pathlib.Path
        The file (shape (n, 2), float64: s12, s13) beside its ``.json`` sidecar.
    """
    from zcache.models import set_seed

    path = DATA / f"dalitz_{n}.npy"
    if path.exists() and path.with_suffix(".json").exists():
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    out = np.lib.format.open_memmap(part, mode="w+", dtype=np.float64, shape=(n, 2))
    source, copied = _prefix(n)
    t_start = time.perf_counter()
    if copied:
        prior = np.load(source, mmap_mode="r")
        for k in range(copied):
            out[k * BLOCK:(k + 1) * BLOCK] = prior[k * BLOCK:(k + 1) * BLOCK]
        log(f"{path.name}: copied {copied} blocks of {BLOCK:,} events from {source.name}")
    model = _model()
    envelope, seconds = None, {"sampler": 0.0, "envelope": 0.0}
    for k, size in _blocks(n)[copied:]:
        t0 = time.perf_counter()
        if k * BLOCK + size <= MAX_TRUE:
            set_seed(SEED + k)
            out[k * BLOCK:k * BLOCK + size] = model["pdf"].sample(size).value().numpy()
            kind = "sampler"
        else:
            envelope = envelope or envelope_sample(model)
            out[k * BLOCK:k * BLOCK + size] = envelope.sample(size, np.random.default_rng(SEED + k))
            kind = "envelope"
        seconds[kind] += time.perf_counter() - t0
        if k == copied or (k + 1) % 10 == 0:
            done = k * BLOCK + size
            log(f"{path.name}: {done:,} of {n:,} events; block {k} ({kind}) took {time.perf_counter() - t0:.1f} s")
    out.flush()
    info: dict[str, Any] = {"n": n, "block": BLOCK, "max_true": MAX_TRUE, "seed": SEED,
                            "sampler_events": min(n, MAX_TRUE), "envelope_events": max(0, n - MAX_TRUE),
                            "seconds": seconds, "copied_blocks": copied, "wall_s": time.perf_counter() - t_start}
    if n > MAX_TRUE:
        info["envelope_efficiency"] = envelope.efficiency if envelope else None
        compare = min(MAX_TRUE, n - MAX_TRUE)
        info["two_sample_pulls"] = _two_sample(np.asarray(out[:compare]), np.asarray(out[MAX_TRUE:MAX_TRUE + compare]),
                                               model["kinematics"])
    del out
    os.replace(part, path)
    path.with_suffix(".json").write_text(json.dumps(info, indent=1))
    return path


if __name__ == "__main__":  # python benchmarks/_large_events.py N ...: make the files ahead of a run
    for arg in sys.argv[1:]:
        log(f"ready: {events_file(int(float(arg)))}")
