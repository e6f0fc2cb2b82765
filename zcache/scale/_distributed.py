r"""A likelihood whose events live on Dask workers: each worker sums its part, the client sums the parts.

:class:`DistributedLoss` is a :class:`zcache.loss.BaseLoss` whose events never come to this
process. The events are cut into parts; a picklable ``build(part)`` builds the model and the loss
of one part **on a worker**, which keeps it (its data, caches and traced functions) between calls.
A minimizer on the client calls :meth:`DistributedLoss.value_at`,
:meth:`~DistributedLoss.value_gradient_at` and :meth:`~DistributedLoss.hessian_at` as for any loss;
each call sends every parameter's value to every part, and the client adds the parts' values,
gradients and Hessians (the negative log-likelihood is a sum over events). So a fit's data can
exceed one machine's memory; ``pip install zcache[dask]``.

**Protocol.** One Dask task per part and call (``pure=False``), submitted to the worker that holds
the part (``workers=[that worker], allow_other_workers=True``: where it is gone, another worker
runs it). A call carries the values of *all* parameters (a fixed parameter set on the client
reaches the workers; a worker writes only what changed, so only the caches that depend on it are
invalidated) and the names of the differentiated ones, in order; it returns the part's value
(with the gradient, or the Hessian) and the worker's address. The first call of a fit precomputes
each part for the fitted parameters (``zcache.precompute`` through the part's own
``ensure_precomputed``), so a part's caches behave as in a local fit.

**Whole-sample terms, once.** A part's loss is its sum over events plus the terms of the whole
sample (:meth:`zcache.loss.BaseLoss.whole_sample_terms`: an extended likelihood's expected yield
:math:`\nu`, constraints). Part 0 answers with its whole loss, every other part with its sum over
events (its whole-sample terms, evaluated as a small loss of their own on the worker, subtracted),
so the client's sum counts them once and equals the loss of all events in one process: value,
gradient and Hessian (added once per part, :math:`K\nu - N\log\nu` would put an extended fit's
yields at :math:`N/K`). The payload is unchanged. At construction every part's whole-sample terms
are evaluated at part 0's parameter values (value, gradient and Hessian) and must agree: the parts
must carry the same yield and constraints. A loss with no such split (a binned loss) is refused
with :class:`~zcache.exceptions.WholeSampleTermError`.

**Failures.** A task whose worker dies is rescheduled by Dask; a worker that does not hold the
part (a replacement, or the other worker) answers that it is missing, and the client sends the
task again with ``build`` and the part, so that worker builds it and evaluates: the call's result
is unchanged. An array part is scattered from the client's copy to the worker that builds it
(once per build, never with every call). An error raised by a part's loss (a
:class:`~zcache.exceptions.FitError` for a NaN value, say) comes back as the same exception.

**Cost.** ``DistributedLoss.stats`` (a :class:`CallStats`) counts calls, the payload bytes sent and received (the
pickled arguments and results; Dask's own framing comes on top) and the wall time of each call.

Examples
--------
>>> import numpy as np, distributed, zcache
>>> from zcache.scale import DistributedLoss
>>> from zcache.toys import local_cluster
>>> def build(events):                               # runs on a worker, once per part
...     from zcache.models import Space, Gaussian
...     from zcache.loss import UnbinnedNLL
...     mu = zcache.Parameter("mu_d", 0.2, lower=-1.0, upper=1.0)
...     return UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, 1.0), zcache.Data(events))
>>> events = np.random.default_rng(1).normal(0.0, 1.0, 3000)
>>> with local_cluster(2) as cluster, distributed.Client(cluster) as client:   # doctest: +SKIP
...     with DistributedLoss(build, np.array_split(events, 3), client) as loss:
...         result = zcache.minimize.Minuit().minimize(loss)
...         bool(abs(result.values["mu_d"] - events.mean()) < 1e-3)    # the MLE of a Gaussian's mean
True
"""

from __future__ import annotations

import contextlib
import pickle
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.parameter import Parameter, set_values
from .._engine.precompute import ensure_precomputed
from .._engine.tables import REAL_KINDS, dtype_advice
from .._engine.tf_internals import leave_to_python
from .._engine.trace import forbid_in_trace
from ..exceptions import DataDtypeError, ModelError, WholeSampleTermError
from ..loss import BaseLoss, Objective

__all__ = ["DistributedLoss", "CallStats"]

#: Per worker process: the parts built here, by (loss token, part index).
_PARTS: dict[tuple[str, int], _Part] = {}
_BUILDING = threading.Lock()  # a worker with several threads builds a part once

#: What a worker answers when it does not hold the part (a replacement worker, or another one).
_MISSING = "zcache-distributed: part missing"

#: Tries of one part in one call: a lost worker, then a lost scattered part, then a third loss.
_ATTEMPTS = 4


# -- on the workers --------------------------------------------------------------------------
class _WholeSample(BaseLoss):
    """A part's whole-sample terms (its yield, its constraints) as a loss of their own: cheap, no events."""

    def __init__(self, loss: BaseLoss, terms: list[Callable[[], tf.Tensor]]) -> None:
        self._of = loss
        self._terms = terms
        super().__init__()

    def _loss_params(self) -> list[Parameter]:
        return self._of.get_params(floating=None)  # any of the part's parameters may be differentiated

    def _value(self) -> tf.Tensor:
        return tf.add_n([tf.cast(term(), tf.float64) for term in self._terms])


@dataclass
class _Part:
    """What a worker keeps of one part: its loss and its whole-sample terms (None where it has none)."""

    loss: BaseLoss
    whole: _WholeSample | None


def _describe(loss: BaseLoss) -> list[tuple[str, float, float | None, float | None, bool]]:
    return [(p.name, float(p), p.lower, p.upper, bool(p.floating)) for p in loss.get_params(floating=None)]


def _build(build_bytes: bytes, part: Any, index: int) -> _Part:
    loss = pickle.loads(build_bytes)(part)
    if not isinstance(loss, BaseLoss):
        raise ModelError(f"DistributedLoss: build(part) must return a zcache loss (a BaseLoss), got "
                         f"{type(loss).__name__} for part {index}.")
    if isinstance(loss, DistributedLoss):
        raise ModelError("DistributedLoss: build(part) returned a DistributedLoss; it must build a local loss.")
    # Weighted fits need per-event terms on the client.
    if loss.is_weighted:
        raise ModelError("DistributedLoss: weighted events are not supported yet (the error correction of a "
                         "weighted fit needs the per-event terms on the client).")
    try:
        terms = loss.whole_sample_terms()
    except WholeSampleTermError as err:
        raise WholeSampleTermError(f"DistributedLoss: part {index}: {err}") from None
    return _Part(loss, _WholeSample(loss, terms) if terms else None)


def _evaluate(part: _Part, index: int, request: tuple) -> Any:
    what, names, values, diff_names, keep_floating = request
    loss = part.loss
    by_name = {p.name: p for p in loss.get_params(floating=None)}
    unknown = [n for n in (*names, *diff_names) if n not in by_name]
    if unknown:
        raise ModelError(f"DistributedLoss: part {index} has no parameter(s) {sorted(set(unknown))}; its loss has "
                         f"{sorted(by_name)}.")
    if what == "describe":
        return _describe(loss), float(loss.errordef), part.whole is not None
    # All values: a fixed parameter moved on the client moves here (set_values writes only what changed).
    set_values([by_name[n] for n in names], values)
    diff = tuple(by_name[n] for n in diff_names)
    x = np.array([float(p) for p in diff])
    if what == "whole":  # the construction's check that the parts agree on them
        if part.whole is None:
            return None
        value, grad = part.whole.value_gradient_at(x, diff, offset=0.0)
        return float(value), grad.numpy(), part.whole.hessian_at(x, diff, exact=True).numpy()
    # Part 0 answers with its whole loss, the others with their sums over events: the client's sum
    # then counts the whole-sample terms once. Subtracted here (a second, tiny traced call; no pass
    # over the events), so the payload is one loss's, as without such terms.
    whole = part.whole if index > 0 else None
    if not diff:
        return float(loss.value()) - (0.0 if whole is None else float(whole.value()))
    if keep_floating is not None:
        ensure_precomputed(loss, diff, keep_floating)
    if what == "value":
        value = float(loss.value_at(x, diff, offset=0.0))
        return value if whole is None else value - float(whole.value_at(x, diff, offset=0.0))
    if what == "value_gradient":
        value, grad = loss.value_gradient_at(x, diff, offset=0.0)
        if whole is None:
            return float(value), grad.numpy()
        whole_value, whole_grad = whole.value_gradient_at(x, diff, offset=0.0)
        return float(value) - float(whole_value), grad.numpy() - whole_grad.numpy()
    hess = loss.hessian_at(x, diff).numpy()
    # exact: the yield and constraints are a tiny graph (no events), whatever the part's own setting
    return hess if whole is None else hess - whole.hessian_at(x, diff, exact=True).numpy()


def _call_part(token: str, index: int, request: tuple, build_bytes: bytes | None = None, part: Any = None) -> Any:
    """One part's answer to one call (run by Dask on a worker): ``(worker address, result)`` or ``_MISSING``."""
    from distributed import get_worker

    key = (token, index)
    held = _PARTS.get(key)
    if held is None:
        if build_bytes is None:
            return _MISSING
        with _BUILDING:
            held = _PARTS.get(key)
            if held is None:
                held = _PARTS[key] = _build(build_bytes, part, index)
    return get_worker().address, _evaluate(held, index, request)


def _drop(token: str) -> int:
    """Forget the parts of one DistributedLoss in this worker (run by ``client.run``); how many."""
    keys = [k for k in _PARTS if k[0] == token]
    for k in keys:
        del _PARTS[k]
    return len(keys)


# -- on the client ---------------------------------------------------------------------------
@dataclass
class CallStats:
    """What the calls of a :class:`DistributedLoss` cost.

    Attributes
    ----------
    calls : int
        Calls (one task per part each), construction included.
    bytes_sent, bytes_received : int
        Payload bytes, all parts and calls together: the pickled arguments and results (Dask's
        framing, the task's key and function reference, comes on top).
    seconds : list of float
        The wall time of each call, submission to the last part's answer.
    rebuilt : int
        Parts built again after their worker was lost.
    """

    calls: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    seconds: list[float] = field(default_factory=list)
    rebuilt: int = 0

    def per_call(self) -> dict[str, float]:
        """Means per call: bytes sent and received, and the median latency.

        Returns
        -------
        dict of str to float
            ``bytes_sent``, ``bytes_received``, ``latency_s`` (median) and ``calls``.
        """
        n = max(self.calls, 1)
        return {"calls": float(self.calls), "bytes_sent": self.bytes_sent / n, "bytes_received": self.bytes_received / n,
                "latency_s": float(np.median(self.seconds)) if self.seconds else float("nan")}


def _dumps(obj: Any) -> bytes:
    import cloudpickle  # what Dask itself uses: closures and lambdas pickle too

    return cloudpickle.dumps(obj)


def _retriable() -> tuple[type[BaseException], ...]:
    """The errors of a task lost with its worker or its scattered input: sent again, not raised."""
    from asyncio import CancelledError

    from distributed import KilledWorker
    from distributed.client import FutureCancelledError

    return (KilledWorker, FutureCancelledError, CancelledError)


class DistributedLoss(BaseLoss):
    """The sum of part losses that live on Dask workers (see the module's documentation).

    Parameters
    ----------
    build : callable
        ``build(part) -> BaseLoss``, picklable with cloudpickle: run on a worker, it builds the
        model and the loss of one part of the events (unweighted). Every part's loss must have
        the same parameters (by name) and the same whole-sample terms (an extended yield,
        constraints), which are counted once.
    parts : sequence
        What describes each part, passed to ``build``: a small spec such as ``(path, start, stop)``
        of a file (any worker can then rebuild a lost part), or a numpy array of events (scattered
        to the worker that builds it; the client keeps its copy to rebuild a lost part).
    client : distributed.Client
        The cluster's client. Parts are assigned to its workers round-robin.
    name : str, optional
        A label for messages.

    Attributes
    ----------
    stats : CallStats
        Calls, payload bytes and latencies.

    Raises
    ------
    DataDtypeError
        An array part that does not hold real numbers (complex, bool, text...); nothing is sent.
    ModelError
        No parts; a ``build`` that cannot be pickled, does not return a loss, returns one with
        weighted events; parts with different parameters or ``errordef``.
    WholeSampleTermError
        A part's loss cannot tell its whole-sample terms apart (a binned loss), or the parts'
        whole-sample terms differ.

    Notes
    -----
    The client holds :class:`zcache.Parameter` mirrors of the parts' parameters (same names,
    values, limits and floating flags as part 0's at construction): fit them, fix them, set them
    here. ``errordef`` is the parts'. ``datasets()`` is empty (the events are on the workers), so a ``FitResult`` restores
    parameters only. Gradients, graph and jit modes are those of the worker processes (set them in
    ``build``). ``close()`` (or ``with``) drops the parts from the workers.
    """

    #: Evaluated by parts elsewhere: a minimizer must not compile the whole fit in this process.
    evaluates_in_parts = True

    def __init__(self, build: Callable[[Any], BaseLoss], parts: Sequence[Any], client: Any, *,
                 name: str | None = None) -> None:
        forbid_in_trace("DistributedLoss")
        self.parts = list(parts)
        if not self.parts:
            raise ModelError("DistributedLoss needs at least one part.")
        for i, part in enumerate(self.parts):  # before anything is sent: an array part holds events
            if isinstance(part, np.ndarray) and part.dtype.kind not in REAL_KINDS:
                raise DataDtypeError(f"DistributedLoss: part {i} is an array of dtype {part.dtype}; an array part "
                                     f"holds events, real numbers: {dtype_advice(part.dtype)}. Nothing was sent.")
        try:
            self._build_bytes = _dumps(build)
        except Exception as err:  # noqa: BLE001 - any pickling failure means the same thing
            raise ModelError(
                f"DistributedLoss: build {build!r} cannot be sent to the workers ({type(err).__name__}: {err}). Use "
                "a function defined at module level (or a picklable callable) that builds the loss of one part."
            ) from err
        self.client = client
        self._token = uuid.uuid4().hex
        self.name = name or f"DistributedLoss_{self._token[:8]}"
        self.stats = CallStats()
        self._keep_floating: bool | None = None  # no precompute on the workers until an objective asks
        workers = self._workers()
        self._where = [workers[i % len(workers)] for i in range(len(self.parts))]
        super().__init__()
        self._params: list[Parameter] = []
        try:
            self._describe_parts()
        except BaseException:
            with contextlib.suppress(Exception):  # the parts built before the error: nothing stays on the workers
                self.close()
            raise

    def _describe_parts(self) -> None:
        """The parameters' mirrors and ``errordef`` from part 0; every part must agree, whole-sample terms too."""
        answers = self._call(("describe", [], np.empty(0), [], None), build=True)
        description, errordef, has_whole = answers[0]
        names = [d[0] for d in description]
        for i, (other, other_errordef, other_whole) in enumerate(answers):
            if [d[0] for d in other] != names:
                raise ModelError(f"DistributedLoss: part {i} has parameters {[d[0] for d in other]}, part 0 "
                                 f"{names}; every part's loss must have the same parameters.")
            if other_errordef != errordef:
                raise ModelError(f"DistributedLoss: part {i}'s loss has errordef {other_errordef}, part 0's "
                                 f"{errordef}; build every part as the same kind of loss.")
            if other_whole != has_whole:
                raise WholeSampleTermError(
                    f"DistributedLoss: part {i} {'has' if other_whole else 'has no'} whole-sample terms (an extended "
                    f"yield, constraints), part 0 {'has' if has_whole else 'has none'}; the sum counts them once, "
                    "so every part must carry the same ones: build every part the same way."
                )
        self.errordef = errordef  # a part's (a chi-square's is 1)
        if has_whole:
            self._check_whole_sample_terms(names, np.array([d[1] for d in description]))
        self._params = [Parameter(n, value, lower=lower, upper=upper, floating=floating)
                        for n, value, lower, upper, floating in description]

    def _check_whole_sample_terms(self, names: list[str], values: np.ndarray) -> None:
        """Every part's whole-sample terms equal part 0's at part 0's values (value, gradient, Hessian).

        The sum takes them from part 0 only; parts that differ (a constraint in one part only, another
        width, a yield of its own) would be fitted as part 0's, silently.
        """
        answers = self._call(("whole", names, values, names, None))
        reference = answers[0]
        for i, answer in enumerate(answers[1:], start=1):
            same = all(np.allclose(a, b, rtol=1e-10, atol=1e-12) for a, b in zip(answer, reference, strict=True))
            if not same:
                raise WholeSampleTermError(
                    f"DistributedLoss: part {i}'s whole-sample terms (an extended yield, constraints) are {answer[0]!r} "
                    f"at part 0's parameter values, part 0's {reference[0]!r} (or their derivatives differ); the sum "
                    "counts them once, so every part must carry the same ones: build every part the same way."
                )

    def __repr__(self) -> str:
        return f"DistributedLoss({self.name!r}, {len(self.parts)} parts)"

    # -- the cluster -------------------------------------------------------------------------
    def _workers(self) -> list[str]:
        workers = sorted(self.client.scheduler_info()["workers"])
        if not workers:
            self.client.wait_for_workers(1)
            workers = sorted(self.client.scheduler_info()["workers"])
        return workers

    def _submit(self, index: int, request: tuple, build: bool) -> Any:
        where = self._where[index]
        args: tuple = ()
        if build:
            alive = self._workers()
            if where not in alive:  # its worker is gone: the next alive one, round-robin
                where = self._where[index] = alive[index % len(alive)]
            part = self.parts[index]
            if isinstance(part, np.ndarray):  # shipped once, to the worker that builds it
                try:
                    part = self.client.scatter(part, workers=[where], hash=False)
                except (OSError, TimeoutError):  # that worker went away meanwhile: the array goes with the task
                    pass
            args = (self._build_bytes, part)
        return self.client.submit(_call_part, self._token, index, request, *args, pure=False, workers=[where],
                                  allow_other_workers=True)

    def _call(self, request: tuple, build: bool = False) -> list[Any]:
        """Every part's answer to ``request``, in part order (parts missing on their worker rebuilt)."""
        forbid_in_trace("DistributedLoss")
        t0 = time.perf_counter()
        n = len(self.parts)
        self.stats.bytes_sent += n * len(pickle.dumps((self._token, 0, request)))
        pending = {i: self._submit(i, request, build) for i in range(n)}
        results: list[Any] = [None] * n
        retriable = _retriable()
        for _ in range(_ATTEMPTS):
            again = {}
            for i, future in pending.items():
                try:
                    out = future.result()
                except retriable:  # lost with its worker (or its scattered part): build it again elsewhere
                    out = _MISSING
                if isinstance(out, str) and out == _MISSING:
                    self.stats.rebuilt += 0 if build else 1
                    again[i] = self._submit(i, request, build=True)
                    continue
                self.stats.bytes_received += len(pickle.dumps(out))
                self._where[i], results[i] = out
            if not again:
                break
            self.stats.bytes_sent += len(again) * (len(pickle.dumps((self._token, 0, request)))
                                                   + len(self._build_bytes))
            pending = again
        else:
            raise ModelError(f"DistributedLoss: parts {sorted(pending)} were lost {_ATTEMPTS} times in one call.")
        self.stats.calls += 1
        self.stats.seconds.append(time.perf_counter() - t0)
        return results

    def _request(self, what: str, params: Sequence[Parameter]) -> list[Any]:
        values = np.array([float(p) for p in self._params])
        return self._call((what, [p.name for p in self._params], values, [p.name for p in params],
                           self._keep_floating))

    def close(self) -> None:
        """Drop the parts from the workers (their data, caches and traced functions).

        A call after ``close`` builds the parts again.
        """
        self.client.run(_drop, self._token)

    def __enter__(self) -> DistributedLoss:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- BaseLoss ----------------------------------------------------------------------------
    def _loss_params(self) -> list[Parameter]:
        return list(self._params)

    def _param_list(self, params: Sequence[Parameter] | None) -> tuple[Parameter, ...]:
        params = super()._param_list(params)
        mine = {id(p) for p in self._params}
        foreign = [p.name for p in params if id(p) not in mine]
        if foreign:
            raise ModelError(f"{self.name}: {foreign} are not its parameters (Parameters of this process, not the "
                             "client-side mirrors); fit loss.get_params(floating=None), by name.")
        return params

    def _set(self, params: tuple[Parameter, ...], x: Any) -> None:
        set_values(params, np.asarray(x, dtype=np.float64).reshape(-1))

    def _value(self) -> tf.Tensor:
        return tf.constant(float(np.sum(self._request("value", ()))), tf.float64)

    def __zcache_evaluate__(self) -> tuple[()]:
        """The precompute protocol: nothing to classify here (the parts precompute on the workers).

        Returns
        -------
        tuple
            Empty.
        """
        return ()

    def value(self) -> tf.Tensor:
        """The sum of the parts' values at the client's parameter values.

        Returns
        -------
        tf.Tensor
            float64 scalar.

        Raises
        ------
        FitError
            A part's value is NaN or infinite.
        """
        return self._value()

    def value_gradient(self, params: Sequence[Parameter] | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """The loss and its gradient at the client's parameter values (sums over the parts).

        Parameters
        ----------
        params : sequence of Parameter, optional
            The client-side parameters to differentiate by; default ``self.params`` (the floating parameters now).

        Returns
        -------
        value : tf.Tensor
            float64 scalar.
        gradient : tf.Tensor
            float64, one entry per parameter.
        """
        params = self._param_list(params)
        answers = self._request("value_gradient", params)
        return (tf.constant(float(np.sum([a[0] for a in answers])), tf.float64),
                tf.constant(np.sum([a[1] for a in answers], axis=0), tf.float64))

    def value_at(self, x: Any, params: Sequence[Parameter] | None = None, offset: float | None = None) -> tf.Tensor:
        """Set ``params`` to ``x`` and return the sum of the parts' values minus ``offset``.

        Parameters
        ----------
        x : array_like
            One value per parameter.
        params : sequence of Parameter, optional
            Client-side parameters; default ``self.params`` (the floating parameters now).
        offset : float, optional
            Subtracted once from the sum; default ``self.offset``.

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        params = self._param_list(params)
        self._set(params, x)
        total = float(np.sum(self._request("value", params)))
        return tf.constant(total - (self._offset if offset is None else float(offset)), tf.float64)

    def value_gradient_at(self, x: Any, params: Sequence[Parameter] | None = None,
                          offset: float | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """Like :meth:`value_at`, with the gradient (the sum of the parts' gradients).

        Parameters
        ----------
        x : array_like
            One value per parameter.
        params : sequence of Parameter, optional
            Client-side parameters; default ``self.params`` (the floating parameters now).
        offset : float, optional
            Subtracted once from the sum; default ``self.offset``.

        Returns
        -------
        value : tf.Tensor
            float64 scalar, the loss minus ``offset``.
        gradient : tf.Tensor
            float64, one entry per parameter.
        """
        params = self._param_list(params)
        self._set(params, x)
        answers = self._request("value_gradient", params)
        total = float(np.sum([a[0] for a in answers]))
        return (tf.constant(total - (self._offset if offset is None else float(offset)), tf.float64),
                tf.constant(np.sum([a[1] for a in answers], axis=0), tf.float64))

    def hessian_at(self, x: Any, params: Sequence[Parameter] | None = None) -> tf.Tensor:
        """Set ``params`` to ``x`` and return the sum of the parts' Hessians.

        Each part's is :meth:`zcache.loss.BaseLoss.hessian_at`: exact once the parts are
        precomputed for ``params`` (a minimizer's objective does it), else central differences.

        Parameters
        ----------
        x : array_like
            One value per parameter; the parameters are left there.
        params : sequence of Parameter, optional
            Client-side parameters; default ``self.params`` (the floating parameters now).

        Returns
        -------
        tf.Tensor
            float64, shape (n, n), symmetric.
        """
        params = self._param_list(params)
        self._set(params, x)
        hess = np.sum(self._request("hessian", params), axis=0)
        return tf.constant(0.5 * (hess + hess.T), tf.float64)

    def objective(self, params: Sequence[Parameter] | None = None, *, precompute: bool = True,
                  keep_floating: bool = False, who: str = "minimize") -> Objective:
        """The loss as a minimizer sees it; the parts precompute on the workers, at the first call.

        Parameters
        ----------
        params : sequence of Parameter, optional
            Client-side parameters to fit; default ``self.params`` (the floating parameters now).
        precompute : bool
            Precompute each part for ``params`` (``ensure_precomputed`` on its worker).
        keep_floating : bool
            As for :meth:`zcache.loss.BaseLoss.objective`.
        who : str
            The minimizer, for error messages.

        Returns
        -------
        zcache.loss.Objective
            Its ``report`` is None: the reports stay on the workers.
        """
        if params is not None:
            self._param_list(params)
        self._keep_floating = bool(keep_floating) if precompute else None
        return Objective(self, params, precompute=False, keep_floating=keep_floating, who=who)


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
