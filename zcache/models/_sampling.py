r"""Sampling: zcache's random generator and its one accept-reject sampler.

Every sampler of zcache draws from one ``tf.random.Generator`` (:func:`rng`), seeded
in place by :func:`set_seed`, so traced samplers are never retraced by a new seed.

:func:`accept_reject` is the sampler of every density without an exact one: models
(:class:`zcache.models.Model`), phase space (:class:`zcache.amplitude.DalitzKinematics`)
and amplitude PDFs (:class:`zcache.amplitude.AmplitudePdf`). Proposals are uniform in a
box, optionally restricted to a region (``inside``); with a density :math:`f` and an
envelope :math:`F \ge f` a proposal :math:`x` is kept when :math:`u F < f(x)`,
:math:`u \sim U(0, 1)`. A batch with a proposal above the envelope is never used: the
sample either restarts under a raised envelope (``max_raises`` times at most, as
RooFit's accept-reject generator does) or stops with :class:`~zcache.exceptions.ModelError`.

:func:`accept_reject_pool` is the sampler where only a finite sample of proposals exists
(a phase-space sample): each pool event is kept with probability :math:`f/f_{max}` and
used at most once per sample, so the events of one sample are independent; a pool that
accepts too few refuses with ModelError rather than repeat events.

Examples
--------
>>> import tensorflow as tf
>>> from zcache.models import accept_reject, set_seed
>>> set_seed(1)
>>> x = accept_reject(tf.constant(500, tf.int64), -1.0, 1.0, lambda x: 1.0 + x, 2.0)
>>> x.shape, bool(tf.reduce_all(tf.abs(x) <= 1.0))
(TensorShape([500]), True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._engine.traced_checks import require
from ..exceptions import ModelError

__all__ = ["accept_reject", "accept_reject_pool", "adaptive_batch", "rng", "set_seed", "truncated_normal"]

# accept-reject proposals per batch (adaptive_batch): at least _AR_MIN_BATCH, at most
# _AR_MAX_BATCH, else sized from the acceptance rate seen so far to finish in about one more batch.
_AR_MIN_BATCH, _AR_MAX_BATCH = 1024, 1 << 20

# Created at import, eagerly: a generator created during a first trace would make
# tf.function trace that function twice.
with tf.init_scope():
    _RNG = tf.random.Generator.from_non_deterministic_state()


def rng() -> tf.random.Generator:
    """The generator all zcache sampling draws from.

    Returns
    -------
    tf.random.Generator
        One generator for the process; :func:`set_seed` reseeds it in place.
    """
    return _RNG


def truncated_normal(n: tf.Tensor, mu: Any, sigma: Any, lower: float, upper: float) -> tf.Tensor:
    """``n`` draws of a normal distribution truncated to ``[lower, upper]``, by inverse CDF.

    Always from the lower tail, where the normal CDF and its inverse are accurate: a range
    above the mean is mirrored below it first (so a range many sigma above the mean samples
    correctly too). One uniform draw per event from :func:`rng`.

    Parameters
    ----------
    n : tf.Tensor
        The number of draws (int64 scalar).
    mu, sigma : tf.Tensor or float
        Mean and width: scalars, or one per draw (shape (n,)).
    lower, upper : float
        The truncation range.

    Returns
    -------
    tf.Tensor
        float64, shape (n,), inside ``[lower, upper]``.

    Examples
    --------
    >>> import tensorflow as tf
    >>> from zcache.models import set_seed, truncated_normal
    >>> set_seed(3)
    >>> x = truncated_normal(tf.constant(1000, tf.int64), 0.0, 1.0, 5.0, 6.0)
    >>> bool(tf.reduce_min(x) >= 5.0), bool(tf.reduce_mean(x) < 5.3)
    (True, True)
    """
    mu = tf.convert_to_tensor(mu, tf.float64)
    sigma = tf.convert_to_tensor(sigma, tf.float64)
    above = lower > mu
    a = tf.where(above, 2.0 * mu - upper, lower)
    b = tf.where(above, 2.0 * mu - lower, upper)
    root2 = math.sqrt(2.0)
    cdf_a = 0.5 * tf.math.erfc(-(a - mu) / (sigma * root2))
    cdf_b = 0.5 * tf.math.erfc(-(b - mu) / (sigma * root2))
    u = rng().uniform([n], dtype=tf.float64) * (cdf_b - cdf_a) + cdf_a
    y = mu + sigma * tf.math.ndtri(u)
    return tf.clip_by_value(tf.where(above, 2.0 * mu - y, y), lower, upper)


def set_seed(seed: int | Sequence[int]) -> None:
    """Seed zcache's sampling, in place: traced samplers are not retraced.

    Parameters
    ----------
    seed : int or sequence of int
        Any non-negative integer, or several (``(study seed, block)``: a toy study seeds each
        block of toys on its own); equal seeds give equal samples.

    Examples
    --------
    >>> import zcache
    >>> from zcache.models import Space, Gaussian
    >>> from zcache.models import set_seed
    >>> g = Gaussian(Space("x", -3.0, 3.0), 0.0, 1.0)
    >>> set_seed(7); a = g.sample(5).numpy()
    >>> set_seed(7); b = g.sample(5).numpy()
    >>> bool((a == b).all())
    True
    """
    # reset_from_seed puts the seed in Philox's counter with key 0, so seeds s and s + 1 give
    # the same stream shifted by one block; a SeedSequence spreads seeds over key and counter.
    entropy = [int(s) for s in seed] if isinstance(seed, (list, tuple)) else int(seed)
    state = np.random.SeedSequence(entropy).generate_state(3, dtype=np.uint64).view(np.int64)
    rng().reset(tf.constant(state))


def adaptive_batch(n: tf.Tensor, accepted: tf.Tensor, proposed: tf.Tensor) -> tf.Tensor:
    """The default batch size of :func:`accept_reject`: enough to finish in about one more batch.

    Parameters
    ----------
    n : int64 tensor
        The number of events wanted.
    accepted : int64 tensor
        Events accepted so far (since the last raise of the envelope).
    proposed : int64 tensor
        Proposals made so far (since the last raise of the envelope).

    Returns
    -------
    int64 tensor
        1.2 times the proposals the missing events need at the acceptance rate seen so far
        (twice the proposals so far while none was accepted), at least ``2 n``, clipped to
        [1024, 2**20].
    """
    need = tf.cast(n - accepted, tf.float64)
    rate = tf.cast(accepted, tf.float64) / tf.maximum(tf.cast(proposed, tf.float64), 1.0)
    guess = tf.where(accepted > 0, 1.2 * need / tf.maximum(rate, 1e-300), 2.0 * tf.cast(proposed, tf.float64))
    guess = tf.maximum(guess, 2.0 * tf.cast(n, tf.float64))
    return tf.cast(tf.clip_by_value(guess, _AR_MIN_BATCH, _AR_MAX_BATCH), tf.int64)


def _proposals(gen: tf.random.Generator, size: tf.Tensor, lows: list[float], highs: list[float], columns: bool,
               propose: Callable[[tf.Tensor], tf.Tensor] | None,
               inside: Callable[[tf.Tensor], tf.Tensor] | None) -> tf.Tensor:
    """One batch of :func:`accept_reject`'s proposals: ``size`` drawn, those outside ``inside`` dropped."""
    if propose is None:
        draws = [gen.uniform([size], lo, hi, dtype=tf.float64) for lo, hi in zip(lows, highs, strict=True)]
        x = tf.stack(draws, axis=1) if columns else draws[0]
    else:
        x = tf.reshape(tf.convert_to_tensor(propose(size), tf.float64), [-1, len(lows)] if columns else [-1])
    if inside is not None:
        x = tf.boolean_mask(x, inside(x))
    return x


def _accepted(gen: tf.random.Generator, x: tf.Tensor, density: Callable[[tf.Tensor], tf.Tensor], fmax: tf.Tensor,
              raises: tf.Tensor, raise_factor: float, max_raises: int, over_message: str,
              nonfinite_message: str | None) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """The proposals ``x`` that :func:`accept_reject` keeps under the envelope ``fmax``.

    Returns ``(keep, over, fmax, raises)``: ``over`` where the batch's largest density is above
    the envelope (or NaN; nothing is kept then), the envelope raised to ``raise_factor`` times
    it, and the raises counted (checked against ``max_raises``).
    """
    u = gen.uniform(tf.shape(x)[:1], 0.0, 1.0, dtype=tf.float64) * fmax
    f = tf.broadcast_to(tf.convert_to_tensor(density(x), tf.float64), tf.shape(x)[:1])  # a constant: a scalar
    top = tf.reduce_max(tf.concat([f, tf.zeros([1], tf.float64)], 0))  # an empty batch: 0
    over = tf.logical_not(top <= fmax)  # NaN counts as over: refused below
    new_raises = raises + tf.cast(over, tf.int32)
    checks = [] if nonfinite_message is None else require(tf.math.is_finite(top), ModelError, nonfinite_message)
    checks = checks + require(new_raises <= max_raises, ModelError, over_message)
    with tf.control_dependencies(checks):
        keep = tf.boolean_mask(x, tf.logical_and(tf.logical_not(over), u < f))
    return keep, over, tf.where(over, raise_factor * top, fmax), new_raises


def accept_reject(
    n: Any,
    lower: float | Sequence[float],
    upper: float | Sequence[float],
    density: Callable[[tf.Tensor], tf.Tensor] | None = None,
    envelope: Any = None,
    *,
    inside: Callable[[tf.Tensor], tf.Tensor] | None = None,
    propose: Callable[[tf.Tensor], tf.Tensor] | None = None,
    batch: Callable[[tf.Tensor, tf.Tensor, tf.Tensor], tf.Tensor] | None = None,
    raise_factor: float = 1.0,
    max_raises: int = 0,
    over_message: str = "accept-reject sampling: the density exceeded the envelope.",
    nonfinite_message: str | None = None,
) -> tf.Tensor:
    r"""``n`` events by accept-reject from uniform proposals in a box (eager or inside a trace).

    Each batch draws, per coordinate in turn, ``batch(n, accepted, proposed)`` uniform
    proposals in ``[lower, upper]`` (or ``propose(size)`` of them: fresh draws of any
    proposal distribution, e.g. a phase-space generator; the density is then relative to
    it), drops those outside ``inside`` (if given) and, with a
    density, draws one :math:`u \sim U(0, 1)` per remaining proposal and keeps those with
    ``u * envelope < density(x)``. Without a density every proposal left is kept (a uniform
    sample of the region). The random stream depends only on the seed (:func:`set_seed`),
    the arguments and the density's values.

    A batch whose largest density is above the envelope (or NaN) is never used. Up to
    ``max_raises`` times per call everything accepted so far is discarded, the envelope
    becomes ``raise_factor`` times that largest density, and the sample starts again, so
    every event comes from proposals under the final envelope; once more raises
    :class:`~zcache.exceptions.ModelError` with ``over_message``.

    Parameters
    ----------
    n : int or int64 tensor
        The number of events.
    lower, upper : float or sequence of float
        The box of the proposals: numbers give events of shape (n,), sequences of ``d``
        numbers events of shape (n, d).
    density : callable, optional
        ``density(x)`` for proposals ``x`` of shape (m,) or (m, d): a non-negative float64
        tensor of shape (m,). ``None``: accept every proposal inside the region.
    envelope : float or float64 tensor, optional
        An upper bound of ``density`` (needed with a density).
    inside : callable, optional
        ``inside(x)``: a bool tensor of shape (m,), where proposals are allowed (e.g. the
        Dalitz boundary inside its bounding box).
    propose : callable, optional
        ``propose(size)`` for an int64 scalar ``size``: ``size`` independent proposals of shape
        (size,) or (size, d) as ``lower`` says, float64, drawn from :func:`rng` (so that
        :func:`set_seed` reproduces them). Replaces the uniform draws in ``[lower, upper]``.
    batch : callable, optional
        ``batch(n, accepted, proposed) -> int64 tensor``, the proposals of the next batch;
        default :func:`adaptive_batch`.
    raise_factor : float
        The new envelope, in units of the largest density seen, after a raise.
    max_raises : int
        How often the envelope may be raised in one call; 0 refuses any density above it.
    over_message : str
        The message of the ModelError raised past ``max_raises``.
    nonfinite_message : str, optional
        If given, a NaN or infinite density raises ModelError with this message first.

    Returns
    -------
    tf.Tensor
        float64, shape (n,) or (n, d).

    Raises
    ------
    ModelError
        The density exceeded the envelope more than ``max_raises`` times, or is not finite
        (with ``nonfinite_message``). Inside a trace the checks fail when the graph runs
        and ``zcache.function`` raises the same error.

    Examples
    --------
    A uniform sample of the unit disc, then a density :math:`1 + x` on [-1, 1] under
    the envelope 2:

    >>> import tensorflow as tf
    >>> from zcache.models import accept_reject, set_seed
    >>> set_seed(3)
    >>> disc = accept_reject(100, [-1.0, -1.0], [1.0, 1.0], inside=lambda x: tf.reduce_sum(x * x, axis=1) <= 1.0)
    >>> disc.shape, bool(tf.reduce_all(tf.reduce_sum(disc * disc, axis=1) <= 1.0))
    (TensorShape([100, 2]), True)
    >>> x = accept_reject(2000, -1.0, 1.0, lambda x: 1.0 + x, 2.0)
    >>> bool(abs(float(tf.reduce_mean(x)) - 1.0 / 3.0) < 0.05)       # E[x] = 1/3
    True
    """
    n = tf.cast(n, tf.int64)
    columns = np.ndim(lower) > 0
    lows = [float(v) for v in np.atleast_1d(lower)]
    highs = [float(v) for v in np.atleast_1d(upper)]
    if len(lows) != len(highs):
        raise ValueError(f"accept_reject: lower {lower!r} and upper {upper!r} differ in length.")
    if density is not None and envelope is None:
        raise ValueError("accept_reject: a density needs an envelope (an upper bound of it).")
    batch = adaptive_batch if batch is None else batch
    gen = rng()
    zero = tf.constant(0, tf.int64)
    start = tf.constant(np.inf, tf.float64) if envelope is None else tf.convert_to_tensor(envelope, tf.float64)

    def body(count, parts, i, offset, written, proposed, fmax, raises):
        size = batch(n, count, proposed)
        x = _proposals(gen, size, lows, highs, columns, propose, inside)
        over = tf.constant(False)
        new_raises = raises
        if density is None:
            keep = x
        else:
            keep, over, fmax, new_raises = _accepted(gen, x, density, fmax, raises, raise_factor, max_raises,
                                                     over_message, nonfinite_message)
        taken = tf.shape(keep, out_type=tf.int64)[0]
        # above the envelope: discard everything accepted so far, raise it, start again
        return (
            tf.where(over, zero, count + taken),
            parts.write(i, keep),
            i + 1,
            tf.where(over, written + taken, offset),
            written + taken,
            tf.where(over, zero, proposed + size),
            fmax,
            new_raises,
        )

    shape = [None, len(lows)] if columns else [None]
    parts = tf.TensorArray(tf.float64, size=0, dynamic_size=True, infer_shape=False, element_shape=shape)
    _, parts, _, offset, *_ = tf.while_loop(
        lambda count, *_: count < n,
        body,
        [zero, parts, tf.constant(0), zero, zero, zero, start, tf.constant(0)],
    )
    return parts.concat()[offset:offset + n]


def accept_reject_pool(n: Any, weights: tf.Tensor, too_few_message: str, error: type[Exception] = ModelError) -> tf.Tensor:
    r"""Indices of ``n`` distinct pool events, accepted with probability :math:`w_i / \max w`.

    The pool's events are independent draws of some distribution :math:`g`; keeping each
    with probability :math:`w_i/\max_j w_j` (one uniform draw per event) leaves
    independent draws of :math:`w\,g`, and the first ``n`` of them in a random order are
    the sample: no pool event is used twice in one sample (resampling with replacement
    would repeat events, and a toy with repeated events has the wrong variance). The
    envelope is the pool's own maximum, so it is exact. Two samples drawn from one pool
    share events.

    Parameters
    ----------
    n : int or int64 tensor
        The number of events.
    weights : tf.Tensor
        float64, shape (N,): the non-negative, finite density of each pool event (relative to
        the pool's distribution).
    too_few_message : str
        The message of the error raised when fewer than ``n`` pool events are accepted.
    error : type
        The zcache error raised then (default ModelError).

    Returns
    -------
    tf.Tensor
        int64, shape (n,): distinct indices into the pool, in random order.

    Raises
    ------
    error
        Fewer than ``n`` events accepted (about ``N mean(w) / max(w)`` are); inside a trace
        the check fails when the graph runs.

    Examples
    --------
    >>> import numpy as np, tensorflow as tf
    >>> from zcache.models import accept_reject_pool, set_seed
    >>> set_seed(2)
    >>> pool = np.random.default_rng(0).uniform(-1.0, 1.0, 10_000)
    >>> idx = accept_reject_pool(2000, tf.constant(1.0 + pool), "the pool is too small.")
    >>> len(set(idx.numpy().tolist())), bool(abs(pool[idx.numpy()].mean() - 1.0 / 3.0) < 0.05)
    (2000, True)
    """
    n = tf.cast(n, tf.int64)
    weights = tf.convert_to_tensor(weights, tf.float64)
    gen = rng()
    size = tf.shape(weights, out_type=tf.int64)[:1]
    u = gen.uniform(size, 0.0, 1.0, dtype=tf.float64) * tf.reduce_max(weights)
    accepted = tf.where(u < weights)[:, 0]
    # a random order of the accepted events: the first n of it are n independent draws
    order = tf.argsort(gen.uniform(tf.shape(accepted, out_type=tf.int64), 0.0, 1.0, dtype=tf.float64))
    checks = require(tf.shape(accepted, out_type=tf.int64)[0] >= n, error, too_few_message)
    with tf.control_dependencies(checks):
        return tf.gather(accepted, order[:n])
