r"""Toy studies: generate from a model, fit, repeat — one by one, in batches, or on a Dask cluster.

**Datasets.** Toy ``i`` of a study with seed ``s`` is the ``i mod 64``-th piece of the
sample drawn for block ``i // 64`` (64 toys per block), with zcache's sampling seeded by
``(s, block)``; the numbers of events of an extended study are Poisson draws seeded the same
way. So a toy's dataset depends only on the seed and its number: the serial study, a batched
one of any batch size and a distributed one of any chunking fit the same datasets. One
sampler call per block (not per toy) keeps generation far below the fit's cost.

**Fits.** ``batch=None`` fits one toy after another with :class:`zcache.minimize.Minuit`
(MIGRAD + HESSE). ``batch=B`` fits ``B`` toys in one XLA-compiled program
(:class:`zcache.scale.BatchedLoss`: BFGS in lockstep, then HESSE by differences of exact
gradients and a Newton step); a toy that does not converge there is refitted with MIGRAD on
its own and flagged (column ``refit``). ``client=`` (a ``dask.distributed.Client``) runs
chunks of toys on the cluster's workers, each of which builds the model once with the
``factory`` it is given.

Results come back as a numpy structured array, one row per toy, with values, errors and pulls
:math:`(\hat\theta - \theta_0)/\sigma_{\hat\theta}`.

Examples
--------
>>> import zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> from zcache.toys import run_toys
>>> mu = zcache.Parameter("mu_toy", 0.0, lower=-1.0, upper=1.0)
>>> model = Gaussian(Space("x", -4.0, 4.0), mu, 1.0)
>>> loss = UnbinnedNLL(model, model.sample(200))
>>> toys = run_toys(model, loss, n_toys=5, n_events=200, seed=3)
>>> toys.table.shape, sorted(toys.table.dtype.names)[:3]
((5,), ['fmin', 'mu_toy', 'mu_toy_err'])
>>> batched = run_toys(model, loss, n_toys=5, n_events=200, seed=3, batch=5)
>>> bool(abs(batched.table["mu_toy"] - toys.table["mu_toy"]).max() < 1e-2 * toys.table["mu_toy_err"].min())
True
"""

from __future__ import annotations

import math
import pickle
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._engine.data import Data, size_class
from ._engine.parameter import Parameter, set_values
from ._engine.tables import real_numbers
from ._engine.tf_internals import leave_to_python
from ._engine.trace import forbid_in_trace
from .exceptions import ModelError, ToyStudyError, ZCacheWarning
from .loss import UnbinnedNLL
from .minimize import Minuit, many_fits
from .models import Model, set_seed
from .scale import BatchedLoss, padded_toys

__all__ = ["run_toys", "ToyResult", "GENERATION_BLOCK", "local_cluster"]

#: Toys per generation block: one sampler call draws the events of 64 toys.
GENERATION_BLOCK = 64


@dataclass
class ToyResult:
    """Results of :func:`run_toys`.

    Attributes
    ----------
    table : ndarray
        Structured array, one row per toy: ``<name>``, ``<name>_err``, ``<name>_pull`` per
        parameter, and ``valid``, ``fmin``, ``nfcn``, ``nevents``, ``time`` (seconds for
        generation + fit; a batch's time shared by its toys) and ``refit`` (fitted again
        with MIGRAD after the batched fit did not converge).
    truth : dict of str to float
        The generating values.
    seed : int or None
        The study's seed (drawn at random when none was given: the study can be repeated).
    info : dict
        How the study ran: ``batch``, ``distributed`` and ``wall_s`` (seconds in all).
    """

    table: np.ndarray
    truth: dict[str, float]
    seed: int | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """The fitted parameters' names."""
        return list(self.truth)

    @property
    def time_per_toy(self) -> float:
        """Median wall time of one toy (generation + fit), the first (tracing) toy excluded."""
        times = self.table["time"]
        return float(np.median(times[1:] if len(times) > 1 else times))

    def _valid(self, what: str) -> np.ndarray:
        # Leaving out invalid toys biases a study (a yield at its limit is the typical invalid
        # one): never silently.
        ok = np.asarray(self.table["valid"], dtype=bool)
        if not ok.all():
            warnings.warn(f"ToyResult.{what}: {int((~ok).sum())} of {len(ok)} toys are not valid fits and are left out "
                          "(which biases pulls and coverage); see table['valid'] and table['refit'].",
                          ZCacheWarning, stacklevel=3)
        return ok

    def pull_summary(self) -> dict[str, tuple[float, float]]:
        """The pulls' mean and standard deviation per parameter, over valid toys.

        Invalid toys are left out with a :class:`~zcache.exceptions.ZCacheWarning` that counts them.

        Returns
        -------
        dict of str to (float, float)
            Name -> (mean, standard deviation); the deviation is NaN with fewer than two valid toys.
        """
        ok = self._valid("pull_summary")
        out = {}
        for name in self.names:
            pulls = self.table[f"{name}_pull"][ok]
            out[name] = (float(np.mean(pulls)), float(np.std(pulls, ddof=1)) if len(pulls) > 1 else float("nan"))
        return out

    def coverage(self, widths: Sequence[float] = (1.0, 2.0)) -> dict[str, dict[float, tuple[float, float]]]:
        r"""How often the interval :math:`\hat\theta \pm k\,\sigma_{\hat\theta}` holds the truth, over valid toys.

        Invalid toys are left out with a :class:`~zcache.exceptions.ZCacheWarning` that counts them.

        Parameters
        ----------
        widths : sequence of float
            The ``k`` to check (expected coverage for Gaussian errors: 68.3 % for 1, 95.4 % for 2).

        Returns
        -------
        dict
            Name -> {k: (fraction covered, its binomial standard error)}.

        Examples
        --------
        >>> import numpy as np
        >>> table = np.zeros(4, dtype=[("mu", "f8"), ("mu_err", "f8"), ("mu_pull", "f8"), ("valid", "?")])
        >>> table["mu_pull"] = [0.5, -1.5, 0.2, 2.5]; table["valid"] = True
        >>> ToyResult(table, {"mu": 0.0}).coverage()["mu"][1.0]
        (0.5, 0.25)
        """
        ok = self._valid("coverage")
        out: dict[str, dict[float, tuple[float, float]]] = {}
        for name in self.names:
            pulls = self.table[f"{name}_pull"][ok]
            n = len(pulls)
            row = {}
            for k in widths:
                frac = float(np.mean(np.abs(pulls) <= k)) if n else float("nan")
                row[float(k)] = (frac, math.sqrt(frac * (1 - frac) / n) if n else float("nan"))
            out[name] = row
        return out

    def to_pandas(self) -> Any:
        """The table as a ``pandas.DataFrame``, one row per toy (needs ``pip install zcache[pandas]``).

        Returns
        -------
        pandas.DataFrame
            The columns of ``table`` (``<name>``, ``<name>_err``, ``<name>_pull`` per parameter,
            ``valid``, ``fmin``, ``nfcn``, ``nevents``, ``time``, ``refit``), indexed by the toy
            number (index name ``"toy"``); the generating values are in ``df.attrs["truth"]``.

        Raises
        ------
        ImportError
            pandas is not installed.

        Examples
        --------
        >>> import numpy as np
        >>> table = np.zeros(2, dtype=[("mu", "f8"), ("mu_err", "f8"), ("mu_pull", "f8"), ("valid", "?"),
        ...                             ("fmin", "f8"), ("nfcn", "i8"), ("nevents", "i8"), ("time", "f8")])
        >>> df = ToyResult(table, {"mu": 0.0}).to_pandas()
        >>> df.shape, df.index.name, df.attrs["truth"]
        ((2, 8), 'toy', {'mu': 0.0})
        """
        try:
            import pandas as pd
        except ImportError as err:
            raise ImportError("ToyResult.to_pandas needs pandas, which is not installed: "
                              "pip install zcache[pandas]") from err
        df = pd.DataFrame(self.table, index=pd.RangeIndex(len(self.table), name="toy"))
        df.attrs["truth"] = dict(self.truth)
        return df

    def __str__(self) -> str:
        ok = int(np.sum(self.table["valid"]))
        refit = int(np.sum(self.table["refit"])) if "refit" in (self.table.dtype.names or ()) else 0
        lines = [f"{len(self.table)} toys, {ok} valid, {refit} refitted with MIGRAD, "
                 f"{self.time_per_toy * 1e3:.2f} ms per toy (median)"]
        with warnings.catch_warnings():  # the first line counts the valid toys already
            warnings.simplefilter("ignore", ZCacheWarning)
            cover, summary = self.coverage((1.0,)), self.pull_summary()
        for name, (mean, std) in summary.items():
            frac, err = cover[name][1.0]
            lines.append(f"  {name}: pull mean {mean:+.3f}, width {std:.3f}, 1-sigma coverage "
                         f"{100 * frac:.1f} +- {100 * err:.1f} %")
        return "\n".join(lines)


def _bar(total: int, enabled: bool | None) -> Any:
    """A tqdm bar over ``total`` toys, or None (default: when stderr is a terminal and tqdm is installed)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional
        return None
    return tqdm(total=total, desc="toys")


# -- datasets ----------------------------------------------------------------------------------
class _Generator:
    """The toys' datasets by toy number (see the module docstring), one block in memory."""

    def __init__(self, model: Model, seed: int, n_events: int | None, truth_params: list[Parameter],
                 truth: np.ndarray) -> None:
        if n_events is None and not model.is_extended:
            raise ModelError(f"{model!r} is not extended: give run_toys the number of events n_events.")
        self.model, self.seed, self.n_events = model, seed, n_events
        self.params, self.truth = truth_params, truth
        self._block: tuple[int, list[np.ndarray]] | None = None
        self._scratch: Data | None = None  # filled in place: no new Variables or graph nodes per block

    def _expected(self) -> float:
        """The expected number of events at the truth (the model's yield)."""
        set_values(self.params, self.truth)
        return float(self.model.get_yield())

    def counts(self, block: int) -> np.ndarray:
        if self.n_events is not None:
            return np.full(GENERATION_BLOCK, int(self.n_events))
        return np.random.default_rng([self.seed, block, 1]).poisson(self._expected(), size=GENERATION_BLOCK)

    def expected_max(self) -> int:
        """A number of rows that holds every toy but in rare cases (for one shape bucket)."""
        if self.n_events is not None:
            return int(self.n_events)
        nu = self._expected()
        return int(math.ceil(nu + 6.0 * math.sqrt(nu) + 10))

    def dataset(self, i: int) -> np.ndarray:
        block, k = divmod(int(i), GENERATION_BLOCK)
        if self._block is None or self._block[0] != block:
            counts = self.counts(block)
            counts = np.maximum(counts, 1)  # a toy needs at least one event
            set_values(self.params, self.truth)
            set_seed((self.seed, block))
            total = int(counts.sum())
            if self._scratch is None:
                self._scratch = self.model.sample(total)
            else:
                self.model.sample(total, data=self._scratch)
            events = self._scratch.numpy()
            self._block = (block, np.split(events, np.cumsum(counts)[:-1]))
        return self._block[1][k]


# -- one process -----------------------------------------------------------------------------
def _fields(names: list[str]) -> list[tuple[str, str]]:
    fields = [(n, "f8") for n in names] + [(f"{n}_err", "f8") for n in names] + [(f"{n}_pull", "f8") for n in names]
    return fields + [("valid", "?"), ("fmin", "f8"), ("nfcn", "i8"), ("nevents", "i8"), ("time", "f8"), ("refit", "?")]


def _fill(row: Any, names: list[str], truth: np.ndarray, values: Sequence[float], errors: Sequence[float]) -> None:
    for n, t, v, e in zip(names, truth, values, errors, strict=True):
        row[n], row[f"{n}_err"], row[f"{n}_pull"] = v, e, (v - t) / e


def _fit_serially(loss: UnbinnedNLL, params: list[Parameter], minimizer: Minuit, events: np.ndarray,
                  start: np.ndarray, row: Any, names: list[str], truth: np.ndarray) -> None:
    loss.data.set_data(events)
    set_values(params, start)
    with many_fits():  # a study: compiled from its first toy, so a seeded study repeats to the bit in a process
        result = minimizer.minimize(loss, params)
    _fill(row, names, truth, [result.values[n] for n in names], [result.errors[n] for n in names])
    row["valid"], row["fmin"], row["nfcn"] = result.valid, result.fmin, result.nfcn
    row["nevents"] = len(events)




def _run_local(model: Model, loss: UnbinnedNLL, params: list[Parameter], toys: range, n_events: int | None,
               minimizer: Minuit, truth: np.ndarray, start: np.ndarray, seed: int, batch: int | None,
               hinv: np.ndarray | None, progress: bool | None) -> tuple[np.ndarray, np.ndarray | None]:
    """The rows of toys ``toys`` (and the shared starting inverse Hessian of batched fits)."""
    names = [p.name for p in params]
    table = np.zeros(len(toys), dtype=_fields(names))
    generator = _Generator(model, seed, n_events, params, truth)
    if batch is None:
        bar = _bar(len(toys), progress)
        for j in range(len(toys)):
            t0 = time.perf_counter()
            _fit_serially(loss, params, minimizer, generator.dataset(toys[j]), start, table[j], names, truth)
            table[j]["time"] = time.perf_counter() - t0
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return table, None
    batched = BatchedLoss.of(loss, params)
    rows = size_class(generator.expected_max()) if n_events is None else int(n_events)
    bar = _bar(len(toys), progress)
    for lo in range(0, len(toys), batch):
        t0 = time.perf_counter()
        chunk = list(toys[lo: lo + batch])
        datasets = [generator.dataset(i) for i in chunk]
        datasets += [datasets[-1]] * (batch - len(datasets))  # a short last batch keeps the compiled shape
        longest = max(len(d) for d in datasets)
        if longest > rows:
            rows = size_class(longest)  # a rare large toy: a new shape bucket (one compile)
        events, weights = padded_toys(datasets, rows)
        if hinv is None:  # one exact Hessian, of the study's first toy at the start, seeds every BFGS
            hinv = batched.start_hinv(start, datasets[0])
        fit = batched.minimize(start, events, weights, hinv=hinv)
        for j in range(len(chunk)):
            row = table[lo + j]
            _fill(row, names, truth, fit.values[j], fit.errors[j])
            row["valid"], row["fmin"], row["nfcn"] = fit.converged[j], fit.fmin[j], fit.nfcn[j]
            row["nevents"] = len(datasets[j])
            if not fit.converged[j]:  # refit with MIGRAD, on its own, and say so
                _fit_serially(loss, params, minimizer, datasets[j], start, row, names, truth)
                row["refit"] = True
        per_toy = (time.perf_counter() - t0) / len(chunk)
        table["time"][lo: lo + len(chunk)] = per_toy
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return table, hinv


# -- many processes: Dask ----------------------------------------------------------------------
#: Per worker process: the (model, loss, params) each factory built, by the factory's pickle.
_BUILT: dict[bytes, tuple[Model, UnbinnedNLL, list[Parameter]]] = {}


def _built(factory_bytes: bytes) -> tuple[Model, UnbinnedNLL, list[Parameter]]:
    built = _BUILT.get(factory_bytes)
    if built is None:
        factory = pickle.loads(factory_bytes)
        out = factory()
        if not isinstance(out, tuple) or len(out) not in (2, 3):
            raise ToyStudyError(f"the factory must return (model, loss) or (model, loss, params), got {type(out).__name__}.")
        model, loss = out[0], out[1]
        params = list(out[2]) if len(out) == 3 else list(loss.params)
        built = _BUILT[factory_bytes] = (model, loss, params)
    return built


def _chunk_on_worker(factory_bytes: bytes, names: list[str], truth: np.ndarray, start: np.ndarray, first: int,
                     count: int, n_events: int | None, seed: int, batch: int | None, hinv: np.ndarray | None,
                     minimizer: Minuit) -> np.ndarray:
    """Run toys ``first .. first + count - 1`` in this worker process (called by Dask)."""
    model, loss, params = _built(factory_bytes)
    got = [p.name for p in params]
    if got != names:
        raise ToyStudyError(f"the factory's fitted parameters {got} differ from the study's {names}.")
    try:
        table, _ = _run_local(model, loss, params, range(first, first + count), n_events, minimizer, truth,
                              start, seed, batch, hinv, progress=False)
    finally:
        set_values(params, truth)
    return table


def _run_on_cluster(client: Any, factory: Callable[[], Any], names: list[str], truth: np.ndarray,
                    start: np.ndarray, n_toys: int, n_events: int | None, seed: int, batch: int | None,
                    hinv: np.ndarray | None, minimizer: Minuit, chunk: int, progress: bool | None) -> np.ndarray:
    try:
        from distributed import as_completed
    except ImportError as err:
        raise ImportError("run_toys(client=...) needs dask.distributed: pip install zcache[dask]") from err
    try:
        factory_bytes = _dumps(factory)
    except Exception as err:  # noqa: BLE001 - any pickling failure means the same thing
        raise ToyStudyError(
            f"the factory {factory!r} cannot be sent to the workers ({type(err).__name__}: {err}). Use a "
            "function defined at module level (or a picklable callable) that builds and returns (model, loss)."
        ) from err
    futures = {}
    for first in range(0, n_toys, chunk):
        count = min(chunk, n_toys - first)
        future = client.submit(_chunk_on_worker, factory_bytes, names, truth, start, first, count, n_events,
                               seed, batch, hinv, minimizer, pure=False, retries=2)
        futures[future] = first
    parts: dict[int, np.ndarray] = {}
    bar = _bar(n_toys, progress)
    for future in as_completed(futures):
        part = future.result()
        parts[futures[future]] = part
        if bar is not None:
            bar.update(len(part))
    if bar is not None:
        bar.close()
    return np.concatenate([parts[k] for k in sorted(parts)])


def _dumps(obj: Any) -> bytes:
    try:
        import cloudpickle  # what Dask itself uses: closures and lambdas pickle too
        return cloudpickle.dumps(obj)
    except ImportError:
        return pickle.dumps(obj)


# -- the entry point ---------------------------------------------------------------------------
def run_toys(
    model: Model,
    loss: UnbinnedNLL,
    n_toys: int,
    n_events: int | None = None,
    *,
    params: Sequence[Parameter] | None = None,
    minimizer: Minuit | None = None,
    start: Sequence[float] | None = None,
    seed: int | None = None,
    progress: bool | None = None,
    batch: int | None = None,
    client: Any = None,
    factory: Callable[[], Any] | None = None,
    chunk: int | None = None,
) -> ToyResult:
    """Generate ``n_toys`` datasets from ``model`` at the current values, fit each with ``loss``.

    Parameters
    ----------
    model : zcache.models.Model
        The generating model (its current parameter values are the truth).
    loss : zcache.loss.UnbinnedNLL
        The loss to minimize (or an ExtendedUnbinnedNLL); its dataset is refilled for every toy.
    n_toys : int
        Number of toys.
    n_events : int, optional
        Events per toy; ``None`` draws a Poisson number (extended models).
    params : sequence of Parameter, optional
        The parameters to fit (default: ``loss.params``, the parameters floating at this call).
    minimizer : zcache.minimize.Minuit, optional
        Default ``Minuit()``: the fitter of serial toys, and of batched toys that did not converge.
    start : sequence of float, optional
        Starting values for each fit (default: the generating values).
    seed : int, optional
        The study's seed (see the module docstring); default: drawn at random, and reported in
        ``ToyResult.seed``.
    progress : bool, optional
        Show a tqdm bar (default: when stderr is a terminal and tqdm is installed).
    batch : int, optional
        Fit this many toys per compiled call (:class:`zcache.scale.BatchedLoss`); ``None``
        (default): one by one with ``minimizer``.
    client : dask.distributed.Client, optional
        Run the study on this Dask cluster (``pip install zcache[dask]``), in chunks of
        ``chunk`` toys; needs ``factory``. A chunk whose worker dies is run again elsewhere.
    factory : callable, optional
        With ``client``: a picklable callable, run once per worker, that builds and returns
        ``(model, loss)`` or ``(model, loss, params)`` equal to the ones given here (the truth
        and the starting values are sent with every chunk).
    chunk : int, optional
        Toys per Dask task (default: 64 rounded up to a multiple of ``batch``).

    Returns
    -------
    ToyResult
        One row per toy; the parameters are left at the generating values, and the loss's
        dataset holds its own events (and weights) again. The same seed gives the same
        datasets whatever ``batch``, ``client`` and ``chunk``.

    Raises
    ------
    ModelError
        ``loss`` is not a single-dataset loss, a model that is not extended gets no ``n_events``,
        or ``start`` has not one value per fitted parameter.
    DataDtypeError
        ``start`` is not real numbers (complex, bool, text...); nothing ran.
    ValueError
        ``n_toys`` < 1.
    ToyStudyError
        ``batch`` or ``chunk`` < 1, ``client`` without ``factory`` (or a factory that cannot be pickled).
    BatchingError
        ``batch`` is given and the loss cannot be vectorized.
    IllegalInGraphModeError
        Called while a graph is traced (inside a ``tf.function`` or ``zcache.function``).
    """
    forbid_in_trace("run_toys")
    n_toys, batch = _checked_study(loss, n_toys, batch, client, factory, chunk)
    params = list(loss.params if params is None else params)
    minimizer = minimizer or Minuit()
    truth = np.array([float(p) for p in params])
    start_values = _start_values(start, truth)
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    # The loss's dataset is refilled for every toy: keep the user's events (and weights) to put back.
    data = loss.data
    events, weights = data.numpy(), data.weights_data.numpy() if data.is_weighted else None
    t0 = time.perf_counter()
    try:
        if client is not None:
            table = _study_on_cluster(model, loss, params, n_toys, n_events, minimizer, truth, start_values, seed,
                                      batch, client, factory, chunk, progress)
        else:
            table, _ = _run_local(model, loss, params, range(n_toys), n_events, minimizer, truth, start_values,
                                  seed, batch, None, progress)
    finally:
        set_values(params, truth)
        data.set_data(events, weights=weights)
    info = {"batch": batch, "wall_s": time.perf_counter() - t0, "distributed": client is not None}
    truth_by_name = {p.name: float(v) for p, v in zip(params, truth, strict=True)}
    return ToyResult(table=table, truth=truth_by_name, seed=seed, info=info)


def _checked_study(loss: Any, n_toys: Any, batch: Any, client: Any, factory: Any, chunk: Any) -> tuple[int, int | None]:
    """``run_toys``'s arguments checked: ``(n_toys, batch)`` as integers, or the named error."""
    if not isinstance(loss, UnbinnedNLL):
        raise ModelError("run_toys needs a single-dataset loss (UnbinnedNLL or ExtendedUnbinnedNLL).")
    if int(n_toys) < 1:
        raise ValueError(f"n_toys must be >= 1, got {n_toys!r}.")
    if batch is not None and (not float(batch).is_integer() or int(batch) < 1):
        raise ToyStudyError(f"batch must be a whole number >= 1 (or None: one toy at a time), got {batch!r}.")
    if client is not None and factory is None:
        raise ToyStudyError(
            "run_toys(client=...) needs factory=: a picklable function that builds (model, loss) on each worker."
        )
    if chunk is not None and (not float(chunk).is_integer() or int(chunk) < 1):
        raise ToyStudyError(f"chunk must be a whole number >= 1, got {chunk!r}.")
    return int(n_toys), None if batch is None else int(batch)


def _start_values(start: Sequence[float] | None, truth: np.ndarray) -> np.ndarray:
    """Each fit's starting values: ``start`` checked (one real number per parameter), default the truth."""
    start_values = truth if start is None else real_numbers(start, "run_toys: start").astype(np.float64)
    if start_values.shape != truth.shape:
        raise ModelError(f"run_toys: start needs one value per fitted parameter ({len(truth)}), got shape "
                         f"{start_values.shape}.")
    return start_values


def _study_on_cluster(model: Model, loss: UnbinnedNLL, params: list[Parameter], n_toys: int, n_events: int | None,
                      minimizer: Minuit, truth: np.ndarray, start_values: np.ndarray, seed: int, batch: int | None,
                      client: Any, factory: Callable[[], Any], chunk: int | None, progress: bool | None) -> Any:
    """``run_toys`` on a Dask cluster: the table of every chunk."""
    hinv = None
    if batch is not None:  # every worker starts BFGS from the same inverse Hessian: identical results
        first = _Generator(model, seed, n_events, params, truth).dataset(0)
        hinv = BatchedLoss.of(loss, params).start_hinv(start_values, first)
    # Default chunk: one generation block, rounded up to whole batches.
    size = chunk or (batch * math.ceil(GENERATION_BLOCK / batch) if batch else GENERATION_BLOCK)
    return _run_on_cluster(client, factory, [p.name for p in params], truth, start_values, n_toys, n_events, seed,
                           batch, hinv, minimizer, int(size), progress)


def local_cluster(workers: int) -> Any:
    """A ``dask.distributed.LocalCluster`` of ``workers`` single-threaded processes, on this machine only.

    The scheduler, the workers and the dashboard listen on 127.0.0.1 (the dashboard on a free
    port): a toy study on a laptop opens no port to the network. A cluster others may reach is
    the user's own choice (``LocalCluster(host=..., dashboard_address=...)``).

    Parameters
    ----------
    workers : int
        Number of worker processes.

    Returns
    -------
    distributed.LocalCluster
    """
    from distributed import LocalCluster

    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                        dashboard_address="127.0.0.1:0")


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
