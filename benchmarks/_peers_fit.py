"""Peer implementations of the fitting benchmarks: hand-written numpy + iminuit, and zfit.

``bench_fit.py`` compares zcache with what a physicist would otherwise use for the same
extended unbinned fit of a Gaussian signal on an exponential background:

- **numpy + iminuit**, the field's baseline: the negative log-likelihood written by hand in
  numpy with analytic normalizations, minimized by iminuit with its own numerical gradient
  (and, as a second row, with a gradient written by hand);
- **zfit 0.28** in graph mode (and eagerly), with ``zfit.minimize.Minuit``.

Everything that decides what is compared lives here, so that every implementation sees the
same model, the same data, the same start point and the same convergence goal:

- the model (:data:`FIT50K`, :data:`TOY10K`): observable ``x`` in [-5, 10], a Gaussian
  (``mu``, ``sigma``) and an exponential (``lam``) each normalized analytically over the
  range, yields ``nsig`` and ``nbkg``; 5 free parameters;
- the data (:func:`dataset`): drawn by numpy with a fixed seed, exactly ``n_sig`` signal
  and ``n_bkg`` background events;
- the start point (``start``): every parameter moved off its true value, the same for all;
- the convergence goal (:data:`EDM_GOAL`): Migrad stops at an estimated distance to the
  minimum below 1e-3, zfit's default (``tol=1e-3``); iminuit's ``tol`` is set to match.

zfit is imported lazily and only here: where it is not installed (the test environment),
every zfit function returns a result whose ``status`` says so instead of raising, and the
tables print "not installed". zfit's eager mode switches TensorFlow's
``run_functions_eagerly`` globally, so it is only ever entered as a ``with`` block, which
restores the mode for the zcache measurements that run in the same process.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "PARAMS",
    "EDM_GOAL",
    "GaussExpSetup",
    "FIT50K",
    "TOY10K",
    "FitRecord",
    "ToyStudy",
    "Fitter",
    "TraceCounter",
    "count_traces",
    "rss_mb",
    "generate",
    "dataset",
    "GaussExpNLL",
    "iminuit_tol",
    "NumpyFitter",
    "numpy_toys",
    "zfit_status",
    "zfit_version",
    "ZfitFitter",
    "zfit_toys",
]

#: Parameter names in the order the fitters use; results are reported under these names.
PARAMS: tuple[str, ...] = ("mu", "sigma", "lam", "nsig", "nbkg")

#: Migrad stops when its estimated distance to minimum falls below this (zfit's default tol).
EDM_GOAL = 1e-3

_SQRT2 = math.sqrt(2.0)
_SQRT2PI = math.sqrt(2.0 * math.pi)


@dataclass(frozen=True)
class GaussExpSetup:
    """One extended Gauss + Exponential problem: range, true values, start point and limits.

    Attributes
    ----------
    low, high : float
        Range of the observable ``x``; both shapes are normalized over it.
    truth : dict of str to float
        Generating values (yields are the expected numbers of events).
    start : dict of str to float
        Where every fit starts: each parameter moved off its true value.
    limits : dict of str to (float, float)
        Parameter limits, the same as in zcache's parameter definitions.
    seed : int
        Seed of the numpy generator that draws the fixed dataset.
    """

    low: float
    high: float
    truth: dict[str, float]
    start: dict[str, float]
    limits: dict[str, tuple[float, float]]
    seed: int

    @property
    def n_events(self) -> int:
        """Expected total number of events (the sum of the true yields)."""
        return int(round(self.truth["nsig"] + self.truth["nbkg"]))


_LIMITS = {
    "mu": (-1.0, 3.0),
    "sigma": (0.05, 3.0),
    "lam": (-2.0, -0.001),
    "nsig": (0.0, 1e6),
    "nbkg": (0.0, 1e6),
}

#: The 50k-event fit of table 1: 20k signal on 30k background.
FIT50K = GaussExpSetup(
    low=-5.0, high=10.0,
    truth={"mu": 1.0, "sigma": 0.6, "lam": -0.25, "nsig": 20_000.0, "nbkg": 30_000.0},
    start={"mu": 1.2, "sigma": 0.7, "lam": -0.2, "nsig": 22_000.0, "nbkg": 28_000.0},
    limits=_LIMITS, seed=20_240_601,
)

#: The toy study of table 2: the same shapes, yields scaled to 10k events in total.
TOY10K = GaussExpSetup(
    low=-5.0, high=10.0,
    truth={"mu": 1.0, "sigma": 0.6, "lam": -0.25, "nsig": 4_000.0, "nbkg": 6_000.0},
    start={"mu": 1.0, "sigma": 0.6, "lam": -0.25, "nsig": 4_000.0, "nbkg": 6_000.0},
    limits=_LIMITS, seed=1,
)


@dataclass
class FitRecord:
    """Outcome of one fit.

    Attributes
    ----------
    seconds : float
        Wall time of the minimization (for a toy: generation + minimization).
    values, errors : dict of str to float
        Fitted values and Migrad's parabolic errors, under the names in :data:`PARAMS`.
    valid : bool
        Migrad's (or the fitter's) validity flag.
    fmin : float
        Loss at the minimum (each implementation has its own additive constant).
    nfcn, ngrad : int
        Loss and gradient evaluations (``ngrad`` is 0 with Minuit's numerical gradient).
    """

    seconds: float
    values: dict[str, float]
    errors: dict[str, float]
    valid: bool
    fmin: float
    nfcn: int
    ngrad: int = 0


@dataclass
class ToyStudy:
    """Timings of a toy study (generate, fit, repeat) by one implementation.

    Attributes
    ----------
    name : str
        Implementation, as printed in the tables.
    status : str
        ``"ok"``, or why nothing was measured (e.g. "not installed").
    records : list of FitRecord
        One per toy, in order; ``seconds`` is generation + fit.
    traces_after_first : int or None
        TensorFlow graphs traced during toys 2..n (None: not a TensorFlow implementation).
    rss_growth_mb : float or None
        Resident memory after the last toy minus after the first (MiB).
    """

    name: str
    status: str = "ok"
    records: list[FitRecord] = field(default_factory=list)
    traces_after_first: int | None = None
    rss_growth_mb: float | None = None

    @property
    def ok(self) -> bool:
        """Whether the study ran."""
        return self.status == "ok" and bool(self.records)

    @property
    def per_toy_s(self) -> float:
        """Median seconds per toy over toys 2..n (toy 1 includes any tracing)."""
        times = [r.seconds for r in self.records[1:]] or [r.seconds for r in self.records]
        return float(np.median(times)) if times else math.nan

    @property
    def first_s(self) -> float:
        """Seconds of the first toy."""
        return self.records[0].seconds if self.records else math.nan

    @property
    def total_s(self) -> float:
        """Seconds for all toys."""
        return float(sum(r.seconds for r in self.records))

    @property
    def n_valid(self) -> int:
        """Number of toy fits Migrad called valid."""
        return sum(r.valid for r in self.records)

    def mean_value(self, name: str) -> float:
        """Mean fitted value of one parameter over the toys (a check that the fits agree)."""
        return float(np.mean([r.values[name] for r in self.records])) if self.records else math.nan


class Fitter:
    """One implementation of the 50k fit: ``fit()`` resets the start point and minimizes.

    The first call of :meth:`fit` may include one-off work (tracing); later calls are the
    warm fits. ``status`` is ``"ok"`` or why the implementation cannot run.
    """

    name: str = "?"
    status: str = "ok"

    def fit(self) -> FitRecord:
        """Reset the parameters to the start point and minimize; return the outcome."""
        raise NotImplementedError


# -- measuring helpers -----------------------------------------------------------------------
class TraceCounter:
    """Counts the TensorFlow graphs traced from eager code while it is active.

    TensorFlow builds every traced graph (``tf.function``, ``tf.cond`` branches, gradient
    functions) in ``func_graph.func_graph_from_py_func``. Only calls made outside any graph
    are counted, so a ``tf.cond`` branch or a nested function inside a trace is part of its
    outer trace and not a trace of its own. This reaches into a private TensorFlow module:
    if the name moves, :attr:`available` is False and nothing is counted.
    """

    def __init__(self) -> None:
        self.count = 0
        self.available = False
        self._module: Any = None
        self._original: Callable[..., Any] | None = None

    def __enter__(self) -> TraceCounter:
        try:
            import tensorflow as tf
            from tensorflow.python.framework import func_graph as module
        except ImportError:
            return self
        original = getattr(module, "func_graph_from_py_func", None)
        if original is None:
            return self

        def counting(*args: Any, **kwargs: Any) -> Any:
            if not tf.inside_function():
                self.count += 1
            return original(*args, **kwargs)

        self._module, self._original = module, original
        module.func_graph_from_py_func = counting
        self.available = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._module is not None:
            self._module.func_graph_from_py_func = self._original
            self._module = None


@contextlib.contextmanager
def count_traces() -> Iterator[TraceCounter]:
    """Context manager form of :class:`TraceCounter`."""
    with TraceCounter() as counter:
        yield counter


def rss_mb() -> float:
    """Resident memory of this process in MiB (NaN where psutil is missing)."""
    try:
        import psutil
    except ImportError:
        return math.nan
    return psutil.Process(os.getpid()).memory_info().rss / 2**20


# -- data ------------------------------------------------------------------------------------
def _sample_gauss(rng: np.random.Generator, n: int, mu: float, sigma: float, low: float, high: float) -> np.ndarray:
    """Truncated Gaussian by rejection (the range holds almost all of it, so one round is typical)."""
    out = np.empty(0)
    while out.size < n:
        draw = rng.normal(mu, sigma, size=int(1.1 * (n - out.size)) + 16)
        out = np.concatenate([out, draw[(draw >= low) & (draw <= high)]])
    return out[:n]


def _sample_exp(rng: np.random.Generator, n: int, lam: float, low: float, high: float) -> np.ndarray:
    """Truncated exponential ``exp(lam x)`` on [low, high] by inverting its CDF."""
    ea, eb = math.exp(lam * low), math.exp(lam * high)
    return np.log(ea + rng.uniform(size=n) * (eb - ea)) / lam


def generate(setup: GaussExpSetup, rng: np.random.Generator, n_events: int | None = None) -> np.ndarray:
    """Draw events from the model at its true values.

    With ``n_events`` the total is fixed and the split between signal and background is
    binomial (sampling the normalized sum pdf); without, exactly the true yields are drawn.

    Returns
    -------
    numpy.ndarray
        Shape ``(N,)``, float64, signal first then background.
    """
    t = setup.truth
    if n_events is None:
        n_sig, n_bkg = int(round(t["nsig"])), int(round(t["nbkg"]))
    else:
        n_sig = int(rng.binomial(n_events, t["nsig"] / (t["nsig"] + t["nbkg"])))
        n_bkg = n_events - n_sig
    return np.concatenate([
        _sample_gauss(rng, n_sig, t["mu"], t["sigma"], setup.low, setup.high),
        _sample_exp(rng, n_bkg, t["lam"], setup.low, setup.high),
    ])


_DATASETS: dict[tuple[Any, ...], np.ndarray] = {}


def dataset(setup: GaussExpSetup = FIT50K) -> np.ndarray:
    """The fixed dataset of a setup (drawn once with ``setup.seed``; read-only)."""
    key = (setup.seed, setup.low, setup.high, *sorted(setup.truth.items()))
    if key not in _DATASETS:
        arr = generate(setup, np.random.default_rng(setup.seed))
        arr.setflags(write=False)
        _DATASETS[key] = arr
    return _DATASETS[key]


# -- numpy + iminuit -------------------------------------------------------------------------
def _phi(z: float) -> float:
    return math.exp(-0.5 * z * z) / _SQRT2PI


def _ncdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / _SQRT2))


class GaussExpNLL:
    """Extended unbinned NLL of Gauss + Exponential, by hand in numpy.

    ``nll = nsig + nbkg - sum_i log(nsig G(x_i) + nbkg E(x_i))`` with ``G`` and ``E``
    normalized analytically over [low, high]. :meth:`grad` is the analytic gradient. This is
    what a careful analyst writes without a framework: the normalizations are scalar ``math``
    calls, the per-event work is five numpy passes over the data.
    """

    errordef = 0.5

    def __init__(self, x: np.ndarray, low: float, high: float) -> None:
        self.x = np.ascontiguousarray(x, dtype=np.float64)
        self.low, self.high = low, high

    def _parts(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
        mu, sigma, lam = float(p[0]), float(p[1]), float(p[2])
        a, b = self.low, self.high
        z = (self.x - mu) / sigma
        norm_g = sigma * _SQRT2PI * (_ncdf((b - mu) / sigma) - _ncdf((a - mu) / sigma))
        g = np.exp(-0.5 * z * z) / norm_g
        ea, eb = math.exp(lam * a), math.exp(lam * b)
        e = np.exp(lam * self.x) * (lam / (eb - ea))
        return z, g, e, ea, eb

    def __call__(self, p: np.ndarray) -> float:
        _, g, e, _, _ = self._parts(p)
        nsig, nbkg = float(p[3]), float(p[4])
        return nsig + nbkg - float(np.sum(np.log(nsig * g + nbkg * e)))

    def grad(self, p: np.ndarray) -> np.ndarray:
        """Analytic gradient with respect to (mu, sigma, lam, nsig, nbkg)."""
        z, g, e, ea, eb = self._parts(p)
        mu, sigma, lam, nsig, nbkg = (float(v) for v in p)
        a, b = self.low, self.high
        w = 1.0 / (nsig * g + nbkg * e)
        gw, ew = g * w, e * w
        sum_gw, sum_ew = float(np.sum(gw)), float(np.sum(ew))
        za, zb = (a - mu) / sigma, (b - mu) / sigma
        big_n = _ncdf(zb) - _ncdf(za)
        dlogn_dmu = -(_phi(zb) - _phi(za)) / sigma / big_n
        dlogn_dsigma = -(zb * _phi(zb) - za * _phi(za)) / sigma / big_n
        d_mu = -nsig * (float(np.sum(gw * z)) / sigma - dlogn_dmu * sum_gw)
        d_sigma = -nsig * (float(np.sum(gw * (z * z - 1.0))) / sigma - dlogn_dsigma * sum_gw)
        c = (b * eb - a * ea) / (eb - ea)
        d_lam = -nbkg * ((1.0 / lam - c) * sum_ew + float(np.sum(ew * self.x)))
        return np.array([d_mu, d_sigma, d_lam, 1.0 - sum_gw, 1.0 - sum_ew])


def iminuit_tol(errordef: float) -> float:
    """iminuit's ``tol`` for :data:`EDM_GOAL` (Migrad stops at edm < 0.002 * tol * errordef)."""
    return EDM_GOAL / (0.002 * errordef)


class NumpyFitter(Fitter):
    """Hand-written numpy NLL + iminuit Migrad, from the setup's start point.

    Parameters
    ----------
    x : numpy.ndarray
        The events.
    setup : GaussExpSetup
        Range, start point and limits.
    gradient : bool
        Give Migrad the analytic gradient (else it differentiates numerically).
    hesse : bool
        Run HESSE after a valid MIGRAD (errors for pulls, as a toy study needs).
    """

    def __init__(self, x: np.ndarray, setup: GaussExpSetup = FIT50K, gradient: bool = False,
                 hesse: bool = False) -> None:
        self.setup, self.gradient, self.hesse = setup, gradient, hesse
        self.nll = GaussExpNLL(x, setup.low, setup.high)
        self.name = "numpy + iminuit, " + ("analytic gradient" if gradient else "Minuit's numerical gradient")

    def set_data(self, x: np.ndarray) -> None:
        """Fit other events next (used by the toy study)."""
        self.nll = GaussExpNLL(x, self.setup.low, self.setup.high)

    def fit(self, start: dict[str, float] | None = None) -> FitRecord:
        """Minimize from ``start`` (default: the setup's start point)."""
        from iminuit import Minuit

        start = start or self.setup.start
        t0 = time.perf_counter()
        # iminuit picks up ``fcn.grad`` and ``fcn.errordef`` by itself: without a gradient it is
        # given a plain function, so that it really differentiates numerically.
        nll = self.nll
        if self.gradient:
            m = Minuit(nll, [start[p] for p in PARAMS], grad=nll.grad, name=PARAMS)
        else:
            m = Minuit(lambda p: nll(p), [start[p] for p in PARAMS], name=PARAMS)
            m.errordef = GaussExpNLL.errordef
        m.tol = iminuit_tol(GaussExpNLL.errordef)
        m.limits = [self.setup.limits[p] for p in PARAMS]
        m.migrad()
        if self.hesse and m.valid:
            m.hesse()
        seconds = time.perf_counter() - t0
        return FitRecord(
            seconds=seconds,
            values={p: float(m.values[p]) for p in PARAMS},
            errors={p: float(m.errors[p]) for p in PARAMS},
            valid=bool(m.valid), fmin=float(m.fval), nfcn=int(m.nfcn), ngrad=int(m.ngrad),
        )


def numpy_toys(n_toys: int, setup: GaussExpSetup = TOY10K, seed: int = 1, gradient: bool = False,
               n_events: int | None = None, hesse: bool = True) -> ToyStudy:
    """Toy study with numpy: draw ``n_events`` (default: the sum of the true yields), fit, repeat.

    Each toy starts its fit at ``setup.start`` (the true values for :data:`TOY10K`); its
    time covers the generation, MIGRAD and (``hesse``) HESSE.
    """
    n_events = n_events or setup.n_events
    rng = np.random.default_rng(seed)
    fitter = NumpyFitter(generate(setup, rng, n_events), setup, gradient=gradient, hesse=hesse)
    study = ToyStudy(name=fitter.name)
    rss0 = math.nan
    for i in range(n_toys):
        t0 = time.perf_counter()
        fitter.set_data(generate(setup, rng, n_events))
        record = fitter.fit()
        record.seconds = time.perf_counter() - t0
        study.records.append(record)
        if i == 0:
            rss0 = rss_mb()
    study.rss_growth_mb = rss_mb() - rss0
    return study


# -- zfit ------------------------------------------------------------------------------------
_ZFIT: dict[str, Any] = {}


def zfit_status() -> str:
    """``"ok"`` with zfit importable, else why not (e.g. ``"not installed"``).

    The first call imports zfit (a few seconds) and silences its warning about TensorFlow's
    log level, which zcache's benchmarks also set.
    """
    if "status" not in _ZFIT:
        os.environ.setdefault("ZFIT_DISABLE_TF_WARNINGS", "1")
        try:
            import zfit
        except ModuleNotFoundError as err:
            _ZFIT["status"] = "not installed" if err.name == "zfit" else f"not importable ({err})"
        except Exception as err:  # noqa: BLE001 - report any import failure in the table instead of failing
            _ZFIT["status"] = f"not importable ({type(err).__name__}: {err})"
        else:
            _ZFIT["status"] = "ok"
            _ZFIT["module"] = zfit
            _ZFIT["version"] = zfit.__version__
    return _ZFIT["status"]


def zfit_version() -> str | None:
    """zfit's version, or None where it is not importable."""
    return _ZFIT.get("version") if zfit_status() == "ok" else None


_COUNTER = iter(range(1, 1 << 62))


class _ZfitModel:
    """zfit's Gauss + Exponential extended model with fresh, uniquely named parameters."""

    def __init__(self, setup: GaussExpSetup, values: dict[str, float]) -> None:
        zfit = _ZFIT["module"]
        tag = next(_COUNTER)
        self.space = zfit.Space("x", limits=(setup.low, setup.high))
        self.params = {
            p: zfit.Parameter(f"{p}_{tag}", values[p], setup.limits[p][0], setup.limits[p][1]) for p in PARAMS
        }
        q = self.params
        gauss = zfit.pdf.Gauss(mu=q["mu"], sigma=q["sigma"], obs=self.space, extended=q["nsig"])
        expo = zfit.pdf.Exponential(lam=q["lam"], obs=self.space, extended=q["nbkg"])
        self.model = zfit.pdf.SumPDF([gauss, expo])

    def data(self, x: np.ndarray) -> Any:
        return _ZFIT["module"].Data.from_numpy(obs=self.space, array=np.asarray(x)[:, None])

    def set_values(self, values: dict[str, float]) -> None:
        _ZFIT["module"].param.set_values([self.params[p] for p in PARAMS], [values[p] for p in PARAMS])

    def record(self, result: Any, seconds: float, hesse: dict[Any, Any] | None = None) -> FitRecord:
        minuit = result.info.get("minuit")
        if hesse:
            errors = {p: float(hesse[self.params[p]]["error"]) for p in PARAMS}
        elif minuit is not None:
            errors = {p: float(minuit.errors[i]) for i, p in enumerate(PARAMS)}
        else:
            errors = {}
        return FitRecord(
            seconds=seconds,
            values={p: float(self.params[p].value()) for p in PARAMS},
            errors=errors,
            valid=bool(result.valid), fmin=float(result.fmin),
            nfcn=int(minuit.nfcn) if minuit is not None else int(result.info.get("n_eval", -1)),
            ngrad=int(minuit.ngrad) if minuit is not None else 0,
        )


def _zfit_minimizer(gradient: str) -> Any:
    zfit = _ZFIT["module"]
    return zfit.minimize.Minuit(tol=EDM_GOAL, gradient="zfit" if gradient == "zfit" else True)


class ZfitFitter(Fitter):
    """zfit 0.28: ``ExtendedUnbinnedNLL`` of a ``SumPDF`` of extended Gauss and Exponential.

    Parameters
    ----------
    x : numpy.ndarray
        The events.
    setup : GaussExpSetup
        Range, start point and limits.
    graph : bool
        ``zfit.run.set_graph_mode(True)`` (traced loss) or ``False`` (eager), entered as a
        ``with`` block around each fit only.
    gradient : {"minuit", "zfit"}
        Minuit's numerical gradient (zfit's default for Minuit) or zfit's TensorFlow gradient.
    hesse : bool
        After a valid minimization, ask the result for HESSE errors (``result.hesse()``, zfit's
        default method, Minuit's HESSE), inside the timed fit.
    """

    def __init__(self, x: np.ndarray, setup: GaussExpSetup = FIT50K, graph: bool = True,
                 gradient: str = "minuit", hesse: bool = False) -> None:
        self.setup, self.graph, self.gradient, self.hesse = setup, graph, gradient, hesse
        grad_text = "TensorFlow gradient" if gradient == "zfit" else "Minuit's numerical gradient"
        self.name = f"zfit {'graph' if graph else 'eager'}, {grad_text}"
        self.status = zfit_status()
        if self.status != "ok":
            return
        zfit = _ZFIT["module"]
        self.model = _ZfitModel(setup, setup.start)
        self.loss = zfit.loss.ExtendedUnbinnedNLL(model=self.model.model, data=self.model.data(x))
        self.minimizer = _zfit_minimizer(gradient)

    def fit(self) -> FitRecord:
        """Reset to the start point (untimed) and minimize in the chosen graph mode."""
        if self.status != "ok":
            raise RuntimeError(f"zfit: {self.status}")
        zfit = _ZFIT["module"]
        self.model.set_values(self.setup.start)
        with zfit.run.set_graph_mode(self.graph):
            t0 = time.perf_counter()
            result = self.minimizer.minimize(self.loss)
            errors = result.hesse() if self.hesse and result.valid else None
            seconds = time.perf_counter() - t0
        return self.model.record(result, seconds, hesse=errors)


def zfit_toys(n_toys: int, setup: GaussExpSetup = TOY10K, seed: int = 1, gradient: str = "minuit",
              n_events: int | None = None, hesse: bool = True) -> ToyStudy:
    """Toy study with zfit in graph mode, the way zfit's documentation sets one up.

    A sampler (``model.create_sampler(n=...)``, fixed number of events) is the loss's data;
    every toy calls ``sampler.resample()``, resets the parameters to ``setup.start`` and
    minimizes with one ``zfit.minimize.Minuit``, then (``hesse``) asks the result for
    HESSE errors (``result.hesse()``, zfit's default method, Minuit's HESSE). The sampler
    keeps the values the model had when it was created, so the fits moving the parameters
    do not change what is drawn.
    """
    grad_text = "TensorFlow gradient" if gradient == "zfit" else "Minuit's numerical gradient"
    study = ToyStudy(name=f"zfit graph, {grad_text}", status=zfit_status())
    if study.status != "ok":
        return study
    zfit = _ZFIT["module"]
    n_events = n_events or setup.n_events
    with zfit.run.set_graph_mode(True):
        zfit.settings.set_seed(seed)
        model = _ZfitModel(setup, setup.truth)
        sampler = model.model.create_sampler(n=n_events)
        loss = zfit.loss.ExtendedUnbinnedNLL(model=model.model, data=sampler)
        minimizer = _zfit_minimizer(gradient)
        rss0, first_traces = math.nan, 0
        with count_traces() as traces:
            for i in range(n_toys):
                t0 = time.perf_counter()
                sampler.resample()
                model.set_values(setup.start)
                result = minimizer.minimize(loss)
                errors = result.hesse() if hesse and result.valid else None
                study.records.append(model.record(result, time.perf_counter() - t0, errors))
                if i == 0:
                    rss0, first_traces = rss_mb(), traces.count
        study.traces_after_first = traces.count - first_traces if traces.available else None
        study.rss_growth_mb = rss_mb() - rss0
    return study
