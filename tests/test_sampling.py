"""zcache.models' sampling: the one accept-reject sampler (models, phase space and amplitude PDFs use it)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

import zcache
from zcache.exceptions import ModelError
from zcache.models import accept_reject, adaptive_batch, set_seed

KS_MIN_P = 1e-3


def test_uniform_in_a_region_and_seeded():
    """Without a density: uniform in the box, restricted to ``inside``; equal seeds, equal samples."""
    def disc(x):
        return tf.reduce_sum(x * x, axis=1) <= 1.0

    set_seed(4)
    a = accept_reject(3000, [-1.0, -1.0], [1.0, 1.0], inside=disc).numpy()
    set_seed(4)
    b = accept_reject(3000, [-1.0, -1.0], [1.0, 1.0], inside=disc).numpy()
    assert a.shape == (3000, 2) and (np.sum(a * a, axis=1) <= 1.0).all()
    np.testing.assert_array_equal(a, b)
    r2 = np.sum(a * a, axis=1)  # uniform in the disc: r^2 is uniform on [0, 1]
    assert scipy.stats.kstest(r2, scipy.stats.uniform(0.0, 1.0).cdf).pvalue > KS_MIN_P


def test_density_under_an_envelope_and_a_constant_density(mode):
    """Accepted with probability f / envelope (also traced); a density may return a scalar."""
    set_seed(5)
    run = zcache.function(lambda: accept_reject(tf.constant(4000, tf.int64), 0.0, 1.0, lambda x: 2.0 * x, 2.0),
                          wraps="sample")
    x = run().numpy()
    assert x.shape == (4000,)
    assert scipy.stats.kstest(x, lambda v: v * v).pvalue > KS_MIN_P  # CDF of 2x on [0, 1]
    flat = accept_reject(500, -2.0, 2.0, lambda x: tf.constant(0.5, tf.float64), 1.0).numpy()
    assert flat.shape == (500,) and (np.abs(flat) <= 2.0).all()


def test_a_density_above_the_envelope_raises_it_or_is_refused():
    """Above the envelope: restart under raise_factor x the largest density (max_raises times),
    else ModelError with the caller's message; a NaN density is refused with its own message."""
    set_seed(6)
    x = accept_reject(4000, 0.0, 1.0, lambda x: 2.0 * x, 0.5, raise_factor=1.25, max_raises=8).numpy()
    assert scipy.stats.kstest(x, lambda v: v * v).pvalue > KS_MIN_P  # unbiased by the low start
    with pytest.raises(ModelError, match="too low, caller's words"):
        accept_reject(100, 0.0, 1.0, lambda x: 2.0 * x, 0.5, over_message="too low, caller's words")
    with pytest.raises(ModelError, match="not finite, caller's words"):
        accept_reject(100, -1.0, 1.0, tf.sqrt, 2.0, max_raises=8, nonfinite_message="not finite, caller's words")


def test_adaptive_batch_and_argument_errors():
    n = tf.constant(100, tf.int64)
    assert int(adaptive_batch(n, tf.constant(0, tf.int64), tf.constant(0, tf.int64))) == 1024
    # half accepted so far: 1.2 x 50 missing / 0.5 = 120 -> at least 2 n = 200 -> at least 1024
    assert int(adaptive_batch(n, tf.constant(50, tf.int64), tf.constant(100, tf.int64))) == 1024
    big = tf.constant(10**7, tf.int64)
    assert int(adaptive_batch(big, tf.constant(0, tf.int64), tf.constant(0, tf.int64))) == 1 << 20
    with pytest.raises(ValueError, match="needs an envelope"):
        accept_reject(10, 0.0, 1.0, lambda x: x)
    with pytest.raises(ValueError, match="differ in length"):
        accept_reject(10, [0.0, 0.0], [1.0])


# -- independent events: no sampler repeats an event (issue 23) ---------------------------------
def _n_repeated(events):
    events = np.asarray(events)
    return len(events) - len(np.unique(events.reshape(len(events), -1), axis=0))


def test_pool_sampler_uses_each_event_once_and_refuses_a_small_pool(mode):
    """accept_reject_pool: distinct indices, the weighted distribution, seeded; too few accepted: the caller's error."""
    from zcache.models import accept_reject_pool

    pool = np.random.default_rng(8).uniform(0.0, 1.0, 100_000)
    run = zcache.function(lambda n: accept_reject_pool(n, tf.constant(2.0 * pool), "pool too small"), wraps="sample")
    set_seed(9)
    idx = run(tf.constant(20_000, tf.int64)).numpy()
    set_seed(9)
    np.testing.assert_array_equal(run(tf.constant(20_000, tf.int64)).numpy(), idx)
    assert len(np.unique(idx)) == len(idx) == 20_000
    assert scipy.stats.kstest(pool[idx], lambda v: v * v).pvalue > KS_MIN_P  # density 2x
    with pytest.raises(ModelError, match="pool too small"):
        run(tf.constant(60_000, tf.int64))  # about 50,000 accepted


def test_proposals_from_a_generator(mode):
    """accept_reject(propose=...): fresh draws of the proposal distribution, weighted by the density."""
    from zcache.models import rng

    set_seed(10)
    x = accept_reject(4000, [0.0], [1.0], lambda x: 2.0 * x[:, 0], 2.0,
                      propose=lambda size: rng().uniform([size, 1], dtype=tf.float64)).numpy()
    assert x.shape == (4000, 1) and _n_repeated(x) == 0
    assert scipy.stats.kstest(x[:, 0], lambda v: v * v).pvalue > KS_MIN_P


def _samplers():
    from zcache.amplitude import AmplitudePdf, CoherentSum, ComplexParameter, DalitzKinematics, NonResonant, Resonance
    from zcache.models import Exponential, Gaussian, Space, SumPdf
    from zcache.shapes import KDE1D, Chebyshev, CrystalBall, HistogramPdf

    space = Space("x", -3.0, 3.0)
    kin = DalitzKinematics(1.86966, 0.493677, 0.13957, 0.13957)
    set_seed(1)
    amp = CoherentSum([(ComplexParameter("nr", 1.0, floating=False), NonResonant(kin)),
                       (ComplexParameter("c_r", 0.5 + 0.2j),
                        Resonance(kin, ("12", "13"), mass=0.89555, width=0.0473, spin=1, name="Kst"))])
    return {
        "Gaussian": lambda n: Gaussian(space, 0.0, 1.0).sample(n),
        "SumPdf": lambda n: SumPdf([Gaussian(space, 0.0, 1.0), Exponential(space, -0.5)], [0.5]).sample(n),
        "Chebyshev (accept-reject)": lambda n: Chebyshev(space, [0.3, 0.1]).sample(n),
        "CrystalBall": lambda n: CrystalBall(space, 0.0, 1.0, 1.5, 3.0).sample(n),
        "KDE1D": lambda n: KDE1D(space, np.random.default_rng(0).normal(0.0, 1.0, 200)).sample(n),
        "HistogramPdf": lambda n: HistogramPdf(space, [1.0, 3.0, 2.0], [-3.0, -1.0, 1.0, 3.0]).sample(n),
        "DalitzKinematics": lambda n: kin.sample(n),
        "AmplitudePdf": lambda n: AmplitudePdf(amp, kin.sample(20_000)).sample(n),
    }


@pytest.mark.parametrize("which", [
    "Gaussian", "SumPdf", "Chebyshev (accept-reject)", "CrystalBall", "KDE1D", "HistogramPdf",
    "DalitzKinematics", pytest.param("AmplitudePdf", marks=pytest.mark.slow)])  # AmplitudePdf: 3.4 s
@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_samplers_never_repeat_an_event(which):
    """Every event generator of zcache gives distinct events (0 repeated in 20,000)."""
    set_seed(2)
    events = _samplers()[which](20_000).numpy()
    assert len(events) == 20_000 and _n_repeated(events) == 0
