r"""The toy engine: test statistics of toys thrown at the profiled point, fitted in batches.

For a tested value :math:`\mu` of the parameter of interest (POI), the *conditional* fit of the
loss to the observed data (POI held at :math:`\mu`) gives the profiled nuisance values
:math:`\hat{\hat\theta}(\mu)`. Toys of the hypothesis :math:`\mu` are generated from the model
at :math:`(\mu, \hat{\hat\theta}(\mu))`, those of the background-only (null) hypothesis at
:math:`(\mu_0, \hat{\hat\theta}(\mu_0))` (Cowan et al. arXiv:1007.1727, sec. 3; the profiled
point is what makes the toy p-value depend little on the unknown nuisance values):

- an extended loss's toys have a Poisson number of events around the model's yield at that
  point, a plain one the observed number (a toy that draws 0 events is given one, with a
  :class:`~zcache.exceptions.ZCacheWarning` that counts them: zcache has no unbinned
  likelihood of an empty dataset);
- each :class:`zcache.loss.GaussianConstraint`'s *global observables* (its ``observed``
  centre) are drawn per toy from the constraint's Gaussian around the profiled values, and the
  toy's constraint is centred on its own draw. In the batched fit the centres are Parameters
  of a copy of the loss, pinned per toy (:meth:`zcache.scale.BatchedLoss.minimize`'s
  ``pinned``): one program fits toys with different centres.

Every toy is fitted twice, with the POI pinned at the tested value and with the POI free;
toys of many tested values share one batched program (the tested value is a pinned value per
row). A free fit that ends at the POI's limit is replaced by the fit pinned at that limit
(checked to be the constrained minimum: the gradient points out of the allowed range);
other fits that do not converge are refitted one by one with :class:`zcache.minimize.Minuit`
and flagged (``refit``), as :func:`zcache.toys.run_toys` does.

**Seeds.** A toy's dataset and observables depend only on the seed, the hypothesis (the tested
value, or the null), and the toy's number: events are drawn in blocks of
:data:`zcache.toys.GENERATION_BLOCK` toys, each block seeded by these, so the batch size, the
chunking over Dask workers and the other tested values change nothing.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.data import Data, size_class
from .._engine.parameter import Parameter, set_values
from ..exceptions import InferenceError, ZCacheWarning
from ..loss import BaseLoss, ExtendedUnbinnedNLL, GaussianConstraint, UnbinnedNLL
from ..minimize import Minuit, many_fits
from ..models import set_seed
from ..scale import BatchedLoss, padded_toys
from ..toys import GENERATION_BLOCK
from ._core import conditional_fit, kept_parameters

__all__ = ["ToyFits", "TOY_FIELDS", "run_hypothesis_toys", "toy_loss_parts"]

#: The columns of :attr:`ToyFits.table`, one row per toy and tested value.
TOY_FIELDS: list[tuple[str, str]] = [
    ("kind", "i1"),          # 0: generated at the tested value; 1: at the null value (background-only)
    ("toy", "i8"),           # the toy's number within its hypothesis
    ("tested", "f8"),        # the POI value of the conditional fit
    ("generated", "f8"),     # the POI value the toy was generated at
    ("mu_hat", "f8"),        # the POI at the free minimum
    ("nll_at_mu", "f8"),     # the minimum with the POI at ``tested``
    ("nll_free", "f8"),      # the minimum with the POI free (within its limits)
    ("nll_at_bound", "f8"),  # the minimum with the POI at the bound, where mu_hat < bound (else NaN)
    ("nevents", "i8"),
    ("valid", "?"),          # every fit of the row converged (batched, or refitted)
    ("refit", "?"),          # a fit of the row was refitted with Minuit
]

ALT, NULL = 0, 1

#: Events of generated blocks kept in memory: every pass over the toys (free fits, fits at the
#: POI's limit, pinned fits at each tested value) reads them again, and drawing them again costs
#: more than the fits of a small model.
_BLOCK_BYTES = 512 * 2**20


@dataclass
class ToyFits:
    r"""The fitted toys of hypothesis tests: one row per toy and tested value.

    Attributes
    ----------
    table : ndarray
        Structured array with the columns of ``TOY_FIELDS``: ``kind`` (0: toys of the
        tested value, 1: of the null hypothesis), ``toy``, ``tested``, ``generated``, ``mu_hat``,
        ``nll_at_mu``, ``nll_free``, ``nll_at_bound``, ``nevents``, ``valid``, ``refit``.
    poi : str
        The parameter of interest's name.
    seed : int
        The seed the toys were drawn with.
    errordef : float
        The loss's ``errordef`` (:math:`-2\ln\lambda = \Delta\mathrm{loss}/\mathrm{errordef}`).
    info : dict
        How they ran (``batch``, ``distributed``, ``wall_s``).

    Examples
    --------
    >>> import numpy as np
    >>> fits = ToyFits(np.zeros(3, dtype=TOY_FIELDS), poi="mu", seed=1)
    >>> fits.rows(ALT, 0.0).shape
    (3,)
    """

    table: np.ndarray
    poi: str
    seed: int
    errordef: float = 0.5
    info: dict[str, Any] = field(default_factory=dict)

    def rows(self, kind: int, tested: float, generated: float | None = None) -> np.ndarray:
        """The rows of one hypothesis (``kind`` 0: the tested value's, 1: the null's) at one tested value.

        Parameters
        ----------
        kind : int
            0 (toys generated at ``tested``) or 1 (generated at the null value).
        tested : float
            The tested POI value.
        generated : float, optional
            Only toys generated at this POI value (default: any; the toys of a tested value are
            generated at it, unless fitted elsewhere with ``alt_tested``).

        Returns
        -------
        ndarray
            Those rows, ordered by toy number.
        """
        t = self.table
        mask = (t["kind"] == kind) & (t["tested"] == float(tested))
        if generated is not None:
            mask &= t["generated"] == float(generated)
        elif kind == ALT:
            mask &= t["generated"] == float(tested)
        sel = t[mask]
        return sel[np.argsort(sel["toy"], kind="stable")]

    def __add__(self, other: ToyFits) -> ToyFits:
        if not isinstance(other, ToyFits) or other.poi != self.poi or other.seed != self.seed:
            raise InferenceError("only toys of the same POI and seed can be joined.")
        return ToyFits(np.concatenate([self.table, other.table]), self.poi, self.seed, self.errordef,
                       dict(self.info))

    def to_npz(self, path: Any) -> None:
        """Save the toys to a ``.npz`` file (:meth:`from_npz` reads it back).

        Parameters
        ----------
        path : str or path-like
            The file.

        Examples
        --------
        >>> import numpy as np, tempfile, os
        >>> fits = ToyFits(np.zeros(2, dtype=TOY_FIELDS), poi="mu", seed=4)
        >>> path = os.path.join(tempfile.mkdtemp(), "toys.npz")
        >>> fits.to_npz(path)
        >>> back = ToyFits.from_npz(path)
        >>> back.poi, back.seed, back.table.dtype == fits.table.dtype
        ('mu', 4, True)
        """
        np.savez(path, table=self.table, poi=np.array(self.poi), seed=np.array(self.seed),
                 errordef=np.array(self.errordef))

    @classmethod
    def from_npz(cls, path: Any) -> ToyFits:
        """Read toys saved with :meth:`to_npz`.

        Parameters
        ----------
        path : str or path-like
            The file.

        Returns
        -------
        ToyFits

        Raises
        ------
        InferenceError
            The file does not hold a toy table of these columns.
        """
        with np.load(path, allow_pickle=False) as f:
            table = f["table"]
            if table.dtype != np.dtype(TOY_FIELDS):
                raise InferenceError(f"{path}: not a toy table of zcache.inference (columns {table.dtype.names}).")
            return cls(table=table, poi=str(f["poi"]), seed=int(f["seed"]), errordef=float(f["errordef"]),
                       info={"loaded": str(path)})


# -- the loss the toys are fitted with ----------------------------------------------------------
class _DrawnConstraint(GaussianConstraint):
    """A GaussianConstraint centred on Parameters (fixed): each toy's drawn global observables."""

    def __init__(self, original: GaussianConstraint, centres: list[Parameter]) -> None:
        cov = np.asarray(original.cov, dtype=float)
        super().__init__(original.params, original.mu, cov=cov)
        self.centres = centres
        chol_inv = np.linalg.inv(np.linalg.cholesky(cov))
        inv = chol_inv.T @ chol_inv
        self.weight = 0.5 * (inv + inv.T)

    def value(self) -> tf.Tensor:
        delta = tf.stack([p.value() for p in self.params]) - tf.stack([c.value() for c in self.centres])
        return 0.5 * tf.reduce_sum(delta * tf.linalg.matvec(tf.constant(self.weight, tf.float64), delta))


class _ToyNLL(UnbinnedNLL):
    """The user's loss with constraints centred on Parameters (their centres are its fixed parameters)."""

    def _loss_params(self) -> list[Parameter]:
        return [*super()._loss_params(), *(c for con in self.constraints for c in con.centres)]


class _ToyExtendedNLL(ExtendedUnbinnedNLL):
    def _loss_params(self) -> list[Parameter]:
        return [*super()._loss_params(), *(c for con in self.constraints for c in con.centres)]


#: The toys' copy of each loss, made once while the loss lives: its batched programs (kept by
#: BatchedLoss.of while the copy lives) serve every later question about the same loss.
_TOY_LOSSES: weakref.WeakKeyDictionary[Any, tuple[UnbinnedNLL, list[Parameter], list[GaussianConstraint]]] = \
    weakref.WeakKeyDictionary()


def toy_loss_parts(loss: BaseLoss) -> tuple[UnbinnedNLL, list[Parameter], list[GaussianConstraint]]:
    """A copy of ``loss`` for toys: its own dataset, each constraint centred on fixed Parameters.

    Made once per loss (and kept while the loss lives), so that its compiled programs are too.

    Parameters
    ----------
    loss : zcache.loss.UnbinnedNLL
        The loss (or an ExtendedUnbinnedNLL) of the hypothesis test.

    Returns
    -------
    toy_loss : zcache.loss.UnbinnedNLL
        The same model on a dataset of its own (unweighted), same constraints but centred on
        Parameters.
    centres : list of Parameter
        The centres (the global observables), in the order of the constraints and their parameters.
    constraints : list of GaussianConstraint
        The original constraints, in the same order.

    Raises
    ------
    InferenceError
        ``loss`` is not an unbinned single-dataset loss (binned and simultaneous losses have no toys yet).

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.loss import UnbinnedNLL, GaussianConstraint
    >>> mu = zcache.Parameter("mu_tlp", 0.0)
    >>> con = GaussianConstraint([mu], [0.3], [0.5])
    >>> loss = UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), zcache.Data(np.zeros(4), obs="x"), [con])
    >>> toy, centres, _ = toy_loss_parts(loss)
    >>> [float(c) for c in centres], centres[0].floating
    ([0.3], False)
    """
    if not isinstance(loss, UnbinnedNLL):
        raise InferenceError(
            f"toys need an unbinned single-dataset loss (UnbinnedNLL or ExtendedUnbinnedNLL), got "
            f"{type(loss).__name__}: binned and simultaneous losses are not supported by the toy "
            "calculator yet; use the asymptotic calculator for them."
        )
    kept = _TOY_LOSSES.get(loss)
    if kept is not None and [id(c) for c in kept[2]] == [id(c) for c in loss.constraints]:
        return kept
    centres: list[Parameter] = []
    drawn = []
    for j, con in enumerate(loss.constraints):
        mine = [Parameter(f"{p.name}_observed_{id(loss):x}_{j}", float(m), floating=False)
                for p, m in zip(con.params, con.observed, strict=True)]
        centres += mine
        drawn.append(_DrawnConstraint(con, mine))
    data = loss.data
    own = Data(data.numpy(), name=f"{data.name}_toys", obs=data.obs)
    cls = _ToyExtendedNLL if loss.extended else _ToyNLL
    parts = _TOY_LOSSES[loss] = (cls(loss.model, own, drawn), centres, list(loss.constraints))
    return parts


# -- one process ---------------------------------------------------------------------------------
@dataclass
class _Point:
    """A generation point: the hypothesis's seed key, POI value and profiled parameter values."""

    kind: int
    key: tuple[int, ...]     # entropy of its seeds besides the study's seed and the block
    mu: float
    values: np.ndarray       # every model parameter (``_Engine.model_params``) at the point
    centre: np.ndarray       # the constrained parameters' profiled values (the observables' means)
    nuisance: np.ndarray     # the nuisance parameters' profiled values (the fits' start)


def _value_key(value: float) -> tuple[int, int]:
    """Two non-negative ints from a float's bits: a tested value's part of a seed."""
    bits = int(np.float64(value).view(np.uint64))
    return bits >> 32, bits & 0xFFFFFFFF


class _Engine:
    """The toys of one loss and POI in this process."""

    def __init__(self, loss: UnbinnedNLL, poi: Parameter, nuisances: list[Parameter], minimizer: Minuit,
                 batch: int | None) -> None:
        self.loss, self.poi, self.nuisances = loss, poi, nuisances
        self.minimizer, self.batch = minimizer, batch
        self.toy_loss, self.centres, self.constraints = toy_loss_parts(loss)
        ids = {id(c) for c in self.centres}
        self.model_params = [p for p in self.toy_loss.get_params(floating=None) if id(p) not in ids]
        self.constrained = [p for con in self.constraints for p in con.params]
        self.cov = [np.asarray(con.cov, dtype=float) for con in self.constraints]
        self._blocks: dict[tuple[Any, ...], tuple[list[np.ndarray], np.ndarray]] = {}
        self._scratch: Data | None = None
        self._bytes = 0
        self._hinv: dict[str, np.ndarray] = {}
        self.capacity = 0  # rows of every batch: set by ``expect``, grown by ``_rows``

    def expect(self, points: list[_Point]) -> None:
        """Rows that hold every toy of these points but in rare cases (one shape for all batches)."""
        if self.loss.extended:
            nu = 0.0
            for p in points:
                set_values(self.model_params, p.values)
                nu = max(nu, float(self.loss.model.get_yield()))
            self.capacity = max(self.capacity, size_class(int(math.ceil(nu + 6.0 * math.sqrt(nu) + 10))))
        else:
            self.capacity = max(self.capacity, int(self.loss.data.nevents))

    # -- datasets ------------------------------------------------------------------------------
    def _block(self, seed: int, point: _Point, block: int) -> tuple[list[np.ndarray], np.ndarray]:
        key = (point.kind, point.key, block)
        got = self._blocks.get(key)
        if got is not None:
            return got
        while self._blocks and self._bytes > _BLOCK_BYTES:  # the oldest first: rows come in order
            old = self._blocks.pop(next(iter(self._blocks)))
            self._bytes -= sum(e.nbytes for e in old[0])
        entropy = [int(seed), point.kind, *point.key, int(block)]
        counts = np.maximum(self.counts(seed, point, block), 1)  # an empty toy gets one event (see empty_toys)
        set_values(self.model_params, point.values)
        set_seed(entropy)
        total = int(counts.sum())
        if self._scratch is None:
            self._scratch = self.loss.model.sample(total)
        else:
            self.loss.model.sample(total, data=self._scratch)
        events = np.split(self._scratch.numpy(), np.cumsum(counts)[:-1])
        # the global observables: one draw per toy around the profiled values, per constraint
        rng = np.random.default_rng([*entropy, 2])
        parts, start = [], 0
        for cov in self.cov:
            n = len(cov)
            parts.append(rng.multivariate_normal(point.centre[start: start + n], cov, size=GENERATION_BLOCK,
                                                 method="cholesky"))
            start += n
        observed = np.concatenate(parts, axis=1) if parts else np.zeros((GENERATION_BLOCK, 0))
        self._blocks[key] = (events, observed)
        self._bytes += sum(e.nbytes for e in events)
        return events, observed

    def counts(self, seed: int, point: _Point, block: int) -> np.ndarray:
        """The numbers of events of a block's toys (Poisson around the point's yield, if extended)."""
        if not self.loss.extended:
            return np.full(GENERATION_BLOCK, int(self.loss.data.nevents))
        set_values(self.model_params, point.values)
        entropy = [int(seed), point.kind, *point.key, int(block), 1]
        return np.random.default_rng(entropy).poisson(float(self.loss.model.get_yield()), size=GENERATION_BLOCK)

    def empty_toys(self, seed: int, points: list[_Point], toys: range) -> int:
        """How many of these toys drew 0 events (and were given one: zcache has no likelihood of no events)."""
        if not self.loss.extended:
            return 0
        empty = 0
        for p in points:
            for block in range(toys.start // GENERATION_BLOCK, (toys.stop - 1) // GENERATION_BLOCK + 1):
                numbers = np.arange(block * GENERATION_BLOCK, (block + 1) * GENERATION_BLOCK)
                inside = (numbers >= toys.start) & (numbers < toys.stop)
                empty += int(np.sum(self.counts(seed, p, block)[inside] == 0))
        return empty

    def dataset(self, seed: int, point: _Point, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Toy ``i`` of ``point``: its events and its constraints' centres."""
        block, k = divmod(int(i), GENERATION_BLOCK)
        events, observed = self._block(seed, point, block)
        return events[k], observed[k]

    # -- fits ----------------------------------------------------------------------------------
    def _serial(self, events: np.ndarray, centres: np.ndarray, params: list[Parameter], start: np.ndarray,
                pinned: float | None) -> tuple[float, np.ndarray, bool]:
        """One toy fitted with Minuit: (fmin, values, valid)."""
        self.toy_loss.data.set_data(events)
        if self.centres:
            set_values(self.centres, centres)
        if pinned is not None:
            set_values([self.poi], [pinned])
        if not params:
            return float(self.toy_loss.value()), np.zeros(0), True
        set_values(params, start)
        result = self.minimizer.minimize(self.toy_loss, params)
        return float(result.fmin), np.array([result.values[p.name] for p in params]), bool(result.valid)

    def fit_rows(self, seed: int, rows: list[tuple[_Point, int, float | None, np.ndarray]],
                 free: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Fit toys: rows of (point, toy number, pinned POI value or None, start values).

        ``free``: the POI is fitted (its value comes first in the start and in the result).
        Returns fmin (R,), values (R, n), valid (R,), refit (R,) and at_limit (R,): a free fit
        whose POI ended at a limit (not refitted: the caller pins it there).
        """
        params = ([self.poi] if free else []) + self.nuisances
        r = len(rows)
        fmin, values = np.full(r, np.nan), np.full((r, len(params)), np.nan)
        valid, refit, at_limit = np.zeros(r, bool), np.zeros(r, bool), np.zeros(r, bool)
        if self.batch is not None and not params:  # nothing to fit: the loss at the tested value, batched
            f = self._values_at(seed, rows)
            return f, values, np.isfinite(f), refit, at_limit
        if self.batch is None or not params:
            for j, (point, i, mu, start) in enumerate(rows):
                events, centres = self.dataset(seed, point, i)
                fmin[j], values[j], valid[j] = self._serial(events, centres, params, start, mu)
            return fmin, values, valid, refit, at_limit
        batched = BatchedLoss.of(self.toy_loss, params)
        lower = -np.inf if self.poi.lower is None else self.poi.lower
        upper = np.inf if self.poi.upper is None else self.poi.upper
        for lo in range(0, r, self.batch):
            chunk = rows[lo: lo + self.batch]
            chunk = chunk + [chunk[-1]] * (self.batch - len(chunk))  # the compiled shape stays
            data = [self.dataset(seed, p, i) for p, i, _, _ in chunk]
            events, weights = padded_toys([d[0] for d in data], self._rows(data))
            start = np.array([s for _, _, _, s in chunk])
            pinned: dict[Parameter, Any] = {}
            if not free:
                pinned[self.poi] = np.array([mu for _, _, mu, _ in chunk])
            for c, col in zip(self.centres, np.array([d[1] for d in data]).T, strict=True):
                pinned[c] = col
            kind = "free" if free else "conditional"
            if kind not in self._hinv:
                with set_values([self.poi], [chunk[0][2]]) if not free else contextlib.nullcontext(), \
                        set_values(self.centres, data[0][1]) if self.centres else contextlib.nullcontext():
                    self._hinv[kind] = batched.start_hinv(start[0], data[0][0])
            fit = batched.minimize(start, events, weights, hinv=self._hinv[kind], pinned=pinned or None)
            n = min(self.batch, r - lo)
            fmin[lo: lo + n], values[lo: lo + n] = fit.fmin[:n], fit.values[:n]
            valid[lo: lo + n] = fit.converged[:n]
            for j in range(n):
                if fit.converged[j]:
                    continue
                if free and fit.checks_ok[j] and np.isfinite(fit.fmin[j]) and (
                        np.isclose(fit.values[j, 0], lower, rtol=0, atol=1e-10)
                        or np.isclose(fit.values[j, 0], upper, rtol=0, atol=1e-10)):
                    at_limit[lo + j] = True
                    continue
                p, i, mu, s = chunk[j]
                ev, centres = data[j]
                fmin[lo + j], values[lo + j], valid[lo + j] = self._serial(ev, centres, params, s, mu)
                refit[lo + j] = True
        return fmin, values, valid, refit, at_limit

    def _values_at(self, seed: int, rows: list[tuple[_Point, int, float | None, np.ndarray]]) -> np.ndarray:
        """The loss of each toy with the POI at its row's value, every other parameter fixed."""
        out = np.full(len(rows), np.nan)
        batched = BatchedLoss.of(self.toy_loss, [self.poi])
        assert self.batch is not None
        for lo in range(0, len(rows), self.batch):
            chunk = rows[lo: lo + self.batch]
            chunk = chunk + [chunk[-1]] * (self.batch - len(chunk))
            data = [self.dataset(seed, p, i) for p, i, _, _ in chunk]
            events, weights = padded_toys([d[0] for d in data], self._rows(data))
            pinned = {c: col for c, col in zip(self.centres, np.array([d[1] for d in data]).T, strict=True)}
            f, _, ok = batched.value_and_gradient(np.array([[mu] for _, _, mu, _ in chunk]), events, weights,
                                                  pinned=pinned or None)
            n = min(self.batch, len(rows) - lo)
            out[lo: lo + n] = np.where(ok[:n], f[:n], np.nan)
        return out

    def _rows(self, data: list[tuple[np.ndarray, np.ndarray]]) -> int:
        """One number of rows for every batch (one compiled shape), grown in shape buckets for a rare large toy."""
        longest = max(len(d[0]) for d in data)
        if longest > self.capacity:
            self.capacity = size_class(longest) if self.loss.extended else longest
        return self.capacity

    def limit_ok(self, seed: int, rows: list[tuple[_Point, int, float | None, np.ndarray]],
                 nuisance_values: np.ndarray) -> np.ndarray:
        """Whether each minimum pinned at the POI's limit is the free minimum (the gradient points outward)."""
        out = np.zeros(len(rows), bool)
        params = [self.poi, *self.nuisances]
        x = np.column_stack([[mu for _, _, mu, _ in rows], nuisance_values]) if rows else np.zeros((0, len(params)))
        grads, oks = np.zeros(len(rows)), np.zeros(len(rows), bool)
        if self.batch is None:
            for j, (point, i, _, _) in enumerate(rows):
                events, centres = self.dataset(seed, point, i)
                self.toy_loss.data.set_data(events)
                if self.centres:
                    set_values(self.centres, centres)
                _, grad = self.toy_loss.value_gradient_at(x[j], params)
                grads[j], oks[j] = float(np.asarray(grad)[0]), bool(np.all(np.isfinite(grad)))
        else:
            batched = BatchedLoss.of(self.toy_loss, params)
            for lo in range(0, len(rows), self.batch):
                chunk = list(range(lo, min(len(rows), lo + self.batch)))
                chunk += [chunk[-1]] * (self.batch - len(chunk))
                data = [self.dataset(seed, rows[j][0], rows[j][1]) for j in chunk]
                events, weights = padded_toys([d[0] for d in data], self._rows(data))
                pinned = {c: col for c, col in zip(self.centres, np.array([d[1] for d in data]).T, strict=True)}
                _, grad, ok = batched.value_and_gradient(x[chunk], events, weights, pinned=pinned or None)
                n = min(self.batch, len(rows) - lo)
                grads[lo: lo + n], oks[lo: lo + n] = grad[:n, 0], ok[:n]
        for j, (_, _, mu, _) in enumerate(rows):
            at_lower = self.poi.lower is not None and np.isclose(mu, self.poi.lower, rtol=0, atol=1e-10)
            # at the lower limit the loss must rise inwards (gradient >= 0), at the upper one fall
            out[j] = oks[j] and ((grads[j] >= 0) if at_lower else (grads[j] <= 0))
        return out




def _run_points(engine: _Engine, seed: int, points: list[_Point], tested: list[list[float]],
                starts: dict[float, np.ndarray], toys: range, bound: float | None) -> np.ndarray:
    """The table rows of toys ``toys`` of each point, fitted at its tested values."""
    poi = engine.poi
    engine.expect(points)
    # free fits: one per (point, toy)
    free_rows = [(p, i, None, np.concatenate([[p.mu], p.nuisance])) for p in points for i in toys]
    f_free, x_free, ok_free, refit_free, at_limit = engine.fit_rows(seed, free_rows, free=True)
    # a free fit at the POI's limit: the minimum pinned there, if the gradient says it is the constrained one
    limit_idx = np.flatnonzero(at_limit)
    if limit_idx.size:
        rows = [(free_rows[j][0], free_rows[j][1], float(x_free[j, 0]), free_rows[j][3][1:]) for j in limit_idx]
        f, x, ok, rf, _ = engine.fit_rows(seed, rows, free=False)
        good = ok & engine.limit_ok(seed, rows, x)
        for n, j in enumerate(limit_idx):
            if good[n]:
                f_free[j], x_free[j, 1:], ok_free[j] = f[n], x[n], True
                refit_free[j] |= rf[n]
            else:  # an interior minimum the batched fit missed: Minuit, on its own
                p, i, _, s = free_rows[j]
                events, centres = engine.dataset(seed, p, i)
                f_free[j], x_free[j], ok_free[j] = engine._serial(events, centres, [poi, *engine.nuisances], s, None)
                refit_free[j] = True
    # conditional fits: one per (point, toy, tested value)
    cond_rows, where = [], []
    for a, p in enumerate(points):
        for b, i in enumerate(toys):
            for mu in tested[a]:
                cond_rows.append((p, i, float(mu), starts[float(mu)]))
                where.append(a * len(toys) + b)
    f_cond, _, ok_cond, refit_cond, _ = engine.fit_rows(seed, cond_rows, free=False)
    where = np.array(where, dtype=np.int64)
    table = np.zeros(len(cond_rows), dtype=TOY_FIELDS)
    table["kind"] = [p.kind for p, _, _, _ in cond_rows]
    table["toy"] = [i for _, i, _, _ in cond_rows]
    table["tested"] = [mu for _, _, mu, _ in cond_rows]
    table["generated"] = [p.mu for p, _, _, _ in cond_rows]
    table["mu_hat"] = x_free[where, 0]
    table["nll_at_mu"] = f_cond
    table["nll_free"] = f_free[where]
    table["nll_at_bound"] = np.nan
    table["nevents"] = [len(engine.dataset(seed, p, i)[0]) for p, i, _, _ in cond_rows]
    table["valid"] = ok_cond & ok_free[where]
    table["refit"] = refit_cond | refit_free[where]
    # ttilde / qtilde: the minimum at the bound for toys whose free fit went below it
    if bound is not None:
        below = np.flatnonzero(x_free[:, 0] < bound)
        if below.size:
            rows = [(free_rows[j][0], free_rows[j][1], float(bound), starts.get(float(bound), free_rows[j][3][1:]))
                    for j in below]
            f, _, ok, rf, _ = engine.fit_rows(seed, rows, free=False)
            at_bound = np.full(len(free_rows), np.nan)
            at_bound[below] = f
            bad = np.zeros(len(free_rows), bool)
            bad[below] = ~ok
            table["nll_at_bound"] = at_bound[where]
            table["valid"] &= ~bad[where]
    return table


# -- many processes: Dask ------------------------------------------------------------------------
_BUILT: dict[bytes, Any] = {}


def _chunk_on_worker(factory_bytes: bytes, poi_name: str, nuisance_names: list[str], minimizer: Minuit,
                     batch: int | None, seed: int, points: list[_Point], tested: list[list[float]],
                     starts: dict[float, np.ndarray], first: int, count: int, bound: float | None) -> np.ndarray:
    loss = _BUILT.get(factory_bytes)
    if loss is None:
        out = pickle.loads(factory_bytes)()
        loss = out[1] if isinstance(out, tuple) else out
        _BUILT[factory_bytes] = loss
    params = {p.name: p for p in loss.get_params(floating=None)}
    missing = [n for n in [poi_name, *nuisance_names] if n not in params]
    if missing:
        raise InferenceError(f"the factory's loss has no parameters {missing}: it must build the same loss.")
    poi = params[poi_name]
    nuisances = [params[n] for n in nuisance_names]
    with kept_parameters(loss), many_fits():  # as run_hypothesis_toys: every fit on one path
        engine = _Engine(loss, poi, nuisances, minimizer, batch)
        return _run_points(engine, seed, points, tested, starts, range(first, first + count), bound)


def _dumps(obj: Any) -> bytes:
    try:
        import cloudpickle  # what Dask uses: closures and lambdas pickle too
        return cloudpickle.dumps(obj)
    except ImportError:
        return pickle.dumps(obj)


# -- the entry point -----------------------------------------------------------------------------
def _profile(loss: UnbinnedNLL, poi: Parameter, nuisances: list[Parameter], mu: float,
             minimizer: Minuit) -> np.ndarray:
    """The nuisance values of the conditional fit to the observed data with the POI at ``mu``."""
    result = conditional_fit(loss, poi, mu, minimizer)
    return np.array([result.values[p.name] for p in nuisances])


def run_hypothesis_toys(
    loss: UnbinnedNLL,
    poi: Parameter,
    values: Sequence[float],
    *,
    n_toys: int,
    null_value: float,
    seed: int,
    alt: bool = True,
    null: bool = True,
    alt_tested: float | None = None,
    batch: int | None = 128,
    bound: float | None = None,
    minimizer: Minuit | None = None,
    client: Any = None,
    factory: Callable[[], Any] | None = None,
    chunk: int | None = None,
    first_toy: int = 0,
) -> ToyFits:
    r"""Throw and fit the toys of hypothesis tests of ``poi`` at ``values``.

    Toys of the tested value :math:`\mu` (``alt``) are generated at :math:`(\mu,
    \hat{\hat\theta}(\mu))`, toys of the null hypothesis (``null``) at :math:`(\mu_0,
    \hat{\hat\theta}(\mu_0))`, the profiled points of the observed data; the null toys are the
    same datasets for every tested value. Each toy is fitted with the POI at each tested value
    and with the POI free (see the module docstring). Parameter values and floating flags are
    as before afterwards, success or failure.

    Parameters
    ----------
    loss : zcache.loss.UnbinnedNLL
        The loss on the observed data (its floating parameters other than ``poi`` are the
        nuisance parameters).
    poi : Parameter
        The parameter of interest, floating.
    values : sequence of float
        The tested POI values.
    n_toys : int
        Toys per hypothesis (per tested value, and for the null).
    null_value : float
        The POI's value in the null (background-only) hypothesis.
    seed : int
        Toy ``i``'s dataset depends only on ``seed``, its hypothesis and ``i``.
    alt, null : bool
        Whether to throw the toys of the tested values, of the null hypothesis.
    alt_tested : float, optional
        Fit the toys of each tested value with the POI at ``alt_tested`` instead of at their
        own value (a discovery's signal toys, fitted at the null value).
    batch : int or None
        Toys fitted per compiled program (:class:`zcache.scale.BatchedLoss`); None: one by one
        with ``minimizer``.
    bound : float, optional
        For ``ttilde`` / ``qtilde``: the minimum with the POI at ``bound`` is found for toys
        whose free fit put the POI below it.
    minimizer : zcache.minimize.Minuit, optional
        The observed conditional fits' minimizer and the toys' refitter (default ``Minuit()``).
    client : dask.distributed.Client, optional
        Run chunks of toys on the cluster's workers; needs ``factory``.
    factory : callable, optional
        A picklable callable run once per worker, returning the same loss (or ``(model, loss)``).
    chunk : int, optional
        Toys per Dask task (default: one generation block, 64).
    first_toy : int
        The number of the first toy (more toys for a study: continue where it stopped).

    Returns
    -------
    ToyFits

    Raises
    ------
    InferenceError
        A loss toys do not support, ``client`` without ``factory``, ``n_toys`` or ``batch`` < 1.

    Examples
    --------
    >>> import numpy as np, zcache
    >>> from zcache.models import Space, Exponential, Gaussian, SumPdf
    >>> from zcache.loss import ExtendedUnbinnedNLL
    >>> space = Space("x", 0.0, 1.0)
    >>> s = zcache.Parameter("s_rht", 5.0, lower=0.0, upper=100.0)
    >>> model = SumPdf([Gaussian(space, 0.5, 0.05), Exponential(space, -1.0)], yields=[s, 50.0])
    >>> loss = ExtendedUnbinnedNLL(model, model.sample(55))
    >>> fits = run_hypothesis_toys(loss, s, [10.0], n_toys=8, null_value=0.0, seed=1, batch=8)
    >>> fits.rows(0, 10.0).shape, float(fits.rows(1, 10.0)["generated"][0])
    ((8,), 0.0)
    """
    _check_toy_study(n_toys, batch, client, factory)
    minimizer = minimizer or Minuit()
    values = [float(v) for v in values]
    nuisances = [p for p in loss.params if p is not poi]
    t0 = time.perf_counter()
    # Every fit compiled from the first (zcache.minimize.many_fits): the toys are thrown at the observed
    # conditional fits' values, and a sampler by acceptance turns a difference in the last digits of those
    # (one tier against the other, within the fit's tolerance) into other events, so a seeded study would
    # throw other toys in its first call than in a later one.
    with kept_parameters(loss), many_fits():
        engine = _Engine(loss, poi, nuisances, minimizer, None if batch is None else int(batch))
        profiled, points, tested = _hypothesis_points(engine, loss, poi, nuisances, minimizer, values, null_value,
                                                      bound, alt_tested, alt, null)
        toys = range(int(first_toy), int(first_toy) + int(n_toys))
        if client is None:
            table = _run_points(engine, seed, points, tested, profiled, toys, bound)
        else:
            table = _on_cluster(client, factory, poi, nuisances, minimizer, batch, seed, points, tested, profiled,
                                toys, bound, chunk)
        _warn_empty_toys(engine.empty_toys(seed, points, toys))
    info = {"batch": batch, "distributed": client is not None, "wall_s": time.perf_counter() - t0}
    return ToyFits(table=table, poi=poi.name, seed=int(seed), errordef=float(loss.errordef), info=info)


def _check_toy_study(n_toys: Any, batch: Any, client: Any, factory: Any) -> None:
    """:func:`run_hypothesis_toys`'s checks of the study's size and where it runs."""
    if int(n_toys) < 1:
        raise InferenceError(f"n_toys must be >= 1, got {n_toys!r}.")
    if batch is not None and int(batch) < 1:
        raise InferenceError(f"batch must be >= 1 (or None: one toy at a time), got {batch!r}.")
    if client is not None and factory is None:
        raise InferenceError("toys on a Dask client need factory=: a picklable function that builds the loss.")


def _hypothesis_points(engine: _Engine, loss: Any, poi: Parameter, nuisances: list[Parameter], minimizer: Minuit,
                       values: list[float], null_value: float, bound: float | None, alt_tested: float | None,
                       alt: bool, null: bool) -> tuple[dict[float, np.ndarray], list[_Point], list[list[float]]]:
    """The profiled nuisances at every value, and the points toys are drawn at with the values each tests."""
    profiled: dict[float, np.ndarray] = {}
    extra = [float(v) for v in (bound, alt_tested) if v is not None]
    for mu in sorted({*values, float(null_value), *extra}):
        profiled[mu] = _profile(loss, poi, nuisances, mu, minimizer)

    def point(kind: int, mu: float, key: tuple[int, ...]) -> _Point:
        set_values([poi], [mu])
        set_values(nuisances, profiled[mu]) if nuisances else None
        values_now = np.array([float(p) for p in engine.model_params])
        centre = np.array([float(p) for p in engine.constrained])
        return _Point(kind, key, mu, values_now, centre, profiled[mu])

    points, tested = [], []
    if alt:
        for mu in values:
            points.append(point(ALT, mu, (0, *_value_key(mu))))
            tested.append([mu if alt_tested is None else float(alt_tested)])
    if null:
        points.append(point(NULL, float(null_value), (1, 0, 0)))
        tested.append(values)
    return profiled, points, tested


def _warn_empty_toys(empty: int) -> None:
    """Never silently: a toy of 0 events has no unbinned likelihood here, so it was given one."""
    if empty:
        warnings.warn(f"{empty} toys drew 0 events (expected yields this small make empty toys likely) and were "
                      "given one event each: zcache has no unbinned likelihood of an empty dataset. Their "
                      "p-values are slightly off; a binned (counting) model has no such toys.", ZCacheWarning,
                      stacklevel=4)


def _on_cluster(client: Any, factory: Callable[[], Any], poi: Parameter, nuisances: list[Parameter],
                minimizer: Minuit, batch: int | None, seed: int, points: list[_Point], tested: list[list[float]],
                starts: dict[float, np.ndarray], toys: range, bound: float | None, chunk: int | None) -> np.ndarray:
    try:
        from distributed import as_completed
    except ImportError as err:
        raise ImportError("toys on a Dask client need dask.distributed: pip install zcache[dask]") from err
    try:
        factory_bytes = _dumps(factory)
    except Exception as err:  # noqa: BLE001 - any pickling failure means the same thing
        raise InferenceError(f"the factory {factory!r} cannot be sent to the workers ({type(err).__name__}: {err}); "
                             "use a function defined at module level that builds and returns the loss.") from err
    size = int(chunk or (batch * math.ceil(GENERATION_BLOCK / batch) if batch else GENERATION_BLOCK))
    futures = {}
    for first in range(toys.start, toys.stop, size):
        count = min(size, toys.stop - first)
        future = client.submit(_chunk_on_worker, factory_bytes, poi.name, [p.name for p in nuisances], minimizer,
                               batch, seed, points, tested, starts, first, count, bound, pure=False, retries=2)
        futures[future] = first
    parts = {futures[f]: f.result() for f in as_completed(futures)}
    return np.concatenate([parts[k] for k in sorted(parts)])
