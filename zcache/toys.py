r"""Toy studies: generate from a model, fit, repeat.

Each toy sets the generating values, samples into the loss's own
:class:`zcache.Data` with ``set_data`` (so no function retraces), resets the
starting values and fits. Results come back as a numpy structured array, one row
per toy, with values, errors and pulls :math:`(\hat\theta - \theta_0)/\sigma_{\hat\theta}`.

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
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._parameter import Parameter, set_values
from .exceptions import ModelError
from .loss import UnbinnedNLL
from .minimize import Minuit
from .models import Model, set_seed

__all__ = ["run_toys", "ToyResult"]


@dataclass
class ToyResult:
    """Results of :func:`run_toys`.

    Attributes
    ----------
    table : ndarray
        Structured array, one row per toy: ``<name>``, ``<name>_err``, ``<name>_pull`` per
        parameter, and ``valid``, ``fmin``, ``nfcn``, ``nevents``, ``time`` (seconds for
        generation + fit).
    truth : dict of str to float
        The generating values.
    """

    table: np.ndarray
    truth: dict[str, float]

    @property
    def names(self) -> list[str]:
        """The fitted parameters' names."""
        return list(self.truth)

    @property
    def time_per_toy(self) -> float:
        """Median wall time of one toy (generation + fit), the first (tracing) toy excluded."""
        times = self.table["time"]
        return float(np.median(times[1:] if len(times) > 1 else times))

    def pull_summary(self) -> dict[str, tuple[float, float]]:
        """The pulls' mean and standard deviation per parameter, over valid toys.

        Returns
        -------
        dict of str to (float, float)
            Name -> (mean, standard deviation); the deviation is NaN with fewer than two valid toys.
        """
        ok = self.table["valid"]
        out = {}
        for name in self.names:
            pulls = self.table[f"{name}_pull"][ok]
            out[name] = (float(np.mean(pulls)), float(np.std(pulls, ddof=1)) if len(pulls) > 1 else float("nan"))
        return out

    def to_pandas(self) -> Any:
        """The table as a ``pandas.DataFrame``, one row per toy (needs ``pip install zcache[pandas]``).

        Returns
        -------
        pandas.DataFrame
            The columns of :attr:`table` (``<name>``, ``<name>_err``, ``<name>_pull`` per parameter,
            ``valid``, ``fmin``, ``nfcn``, ``nevents``, ``time``), indexed by the toy number
            (index name ``"toy"``); the generating values are in ``df.attrs["truth"]``.

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
        lines = [f"{len(self.table)} toys, {ok} valid, {self.time_per_toy * 1e3:.1f} ms per toy (median)"]
        for name, (mean, std) in self.pull_summary().items():
            lines.append(f"  {name}: pull mean {mean:+.3f}, width {std:.3f}")
        return "\n".join(lines)


def _progress(iterable: Any, total: int, enabled: bool | None) -> Any:
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional
        return iterable
    return tqdm(iterable, total=total, desc="toys")


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
        Default ``Minuit()``.
    start : sequence of float, optional
        Starting values for each fit (default: the generating values).
    seed : int, optional
        Seeds zcache's sampling first, for reproducible toys.
    progress : bool, optional
        Show a tqdm bar (default: when stderr is a terminal and tqdm is installed).

    Returns
    -------
    ToyResult
        One row per toy; the parameters are left at the generating values, and the loss's
        dataset holds its own events (and weights) again.

    Raises
    ------
    ModelError
        ``loss`` is not a single-dataset loss.
    ValueError
        ``n_toys`` < 1.
    """
    if not isinstance(loss, UnbinnedNLL):
        raise ModelError("run_toys needs a single-dataset loss (UnbinnedNLL or ExtendedUnbinnedNLL).")
    if int(n_toys) < 1:
        raise ValueError(f"n_toys must be >= 1, got {n_toys!r}.")
    params = list(loss.params if params is None else params)
    minimizer = minimizer or Minuit()
    truth = np.array([float(p) for p in params])
    start_values = truth if start is None else np.asarray(start, dtype=float)
    if seed is not None:
        set_seed(seed)
    names = [p.name for p in params]
    fields = [(n, "f8") for n in names] + [(f"{n}_err", "f8") for n in names] + [(f"{n}_pull", "f8") for n in names]
    fields += [("valid", "?"), ("fmin", "f8"), ("nfcn", "i8"), ("nevents", "i8"), ("time", "f8")]
    table = np.zeros(int(n_toys), dtype=fields)
    # The loss's dataset is refilled for every toy: keep the user's events (and weights) to put back.
    data = loss.data
    events = data.numpy()
    weights = data.weights_data.numpy() if data.is_weighted else None
    try:
        for i in _progress(range(int(n_toys)), int(n_toys), progress):
            t0 = time.perf_counter()
            set_values(params, truth)
            model.sample(n_events, data=loss.data)
            set_values(params, start_values)
            result = minimizer.minimize(loss, params)
            row = table[i]
            for n, t in zip(names, truth, strict=True):
                row[n] = result.values[n]
                row[f"{n}_err"] = result.errors[n]
                row[f"{n}_pull"] = (result.values[n] - t) / result.errors[n]
            row["valid"], row["fmin"], row["nfcn"] = result.valid, result.fmin, result.nfcn
            row["nevents"] = loss.data.nevents
            row["time"] = time.perf_counter() - t0
    finally:
        set_values(params, truth)
        data.set_data(events, weights=weights)
    return ToyResult(table=table, truth=dict(zip(names, map(float, truth), strict=True)))
