"""zcache.inference: the shared interface, the asymptotic calculator and the answers.

References: closed forms of Cowan et al. (arXiv:1007.1727) for counting experiments,
``pyhf.infer.hypotest`` (numpy backend) on the same one- and two-bin models, iminuit MINOS.
"""

from __future__ import annotations

import numpy as np
import pytest

import zcache
from zcache.exceptions import InferenceError, POIError
from zcache.inference import conditional_fit, free_fit, resolve_poi
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Gaussian, Space

#: the compiled fit (default) and MIGRAD call by call
FIT_PATHS = [pytest.param(True, id="compiled"), pytest.param(False, id="eager-migrad")]


def _state(loss):
    """Every parameter's (name, value, floating) and every dataset's values."""
    params = [(p.name, float(p), p.floating) for p in loss.get_params(floating=None)]
    data = [d.numpy().copy() for d in loss.datasets()]
    return params, data


def _same_state(a, b):
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(np.array_equal(x, y) for x, y in zip(a[1], b[1]))


def _gauss_loss(n=400, seed=5, name="mu_g"):
    mu = zcache.Parameter(name, 0.4, lower=-3.0, upper=3.0)
    sigma = zcache.Parameter(f"sigma_{name}", 1.0, lower=0.2, upper=3.0, floating=False)
    x = np.random.default_rng(seed).normal(0.2, 1.0, n)
    return UnbinnedNLL(Gaussian(Space("x", -8.0, 8.0), mu, sigma), zcache.Data(x)), mu, x


# -- the shared interface ---------------------------------------------------------------------


@pytest.mark.parametrize("compiled", FIT_PATHS)
def test_conditional_and_free_fits_give_the_gaussian_likelihood_ratio(compiled):
    loss, mu, x = _gauss_loss()
    before = _state(loss)
    minimizer = Minuit(compiled=compiled)
    free = free_fit(loss, mu, minimizer)
    at = conditional_fit(loss, mu, -0.1, minimizer)
    # -2 ln lambda of a Gaussian mean with sigma = 1: n (xbar - mu)^2
    assert free.values["mu_g"] == pytest.approx(x.mean(), abs=1e-4)
    assert 2 * (at.fmin - free.fmin) == pytest.approx(len(x) * (x.mean() + 0.1) ** 2, rel=1e-4)
    assert "mu_g" not in at.values
    assert _same_state(_state(loss), before)


def test_conditional_fit_profiles_the_nuisance_parameters():
    loss, mu, x = _gauss_loss(name="mu_p")
    sigma = loss.model.get_params(floating=None)[1]
    sigma.floating = True
    before = _state(loss)
    at = conditional_fit(loss, mu, 0.0)
    # the profiled width at mu = 0 is the rms about 0
    assert at.values["sigma_mu_p"] == pytest.approx(np.sqrt(np.mean(x**2)), rel=1e-4)
    assert _same_state(_state(loss), before)


def test_resolve_poi_names_the_parameters_of_the_loss():
    loss, mu, _ = _gauss_loss(name="mu_r")
    assert resolve_poi(loss, "mu_r") is mu
    assert resolve_poi(loss, mu) is mu
    with pytest.raises(POIError, match=r"no parameter 'nope'.*'mu_r', 'sigma_mu_r' \(fixed\)"):
        resolve_poi(loss, "nope")
    with pytest.raises(POIError, match="fixed"):
        resolve_poi(loss, "sigma_mu_r")
    with pytest.raises(POIError, match="not a parameter of this loss"):
        resolve_poi(loss, zcache.Parameter("other", 1.0))
    with pytest.raises(InferenceError, match="zcache loss"):
        resolve_poi("not a loss", "mu_r")


def test_bad_input_to_the_fits_leaves_the_state_unchanged():
    loss, mu, _ = _gauss_loss(name="mu_b")
    before = _state(loss)
    with pytest.raises(POIError, match="outside its limits"):
        conditional_fit(loss, mu, 5.0)
    with pytest.raises(POIError, match="finite"):
        conditional_fit(loss, mu, np.nan)
    mu.floating = False
    with pytest.raises(POIError, match="fixed"):
        free_fit(loss, mu)
    mu.floating = True
    assert _same_state(_state(loss), before)


def test_a_failing_minimizer_leaves_the_state_unchanged():
    loss, mu, _ = _gauss_loss(name="mu_f")
    loss.get_params(floating=None)[1].floating = True  # something to fit at a pinned POI
    before = _state(loss)

    class Broken:
        def minimize(self, loss):
            for p in loss.params:
                p.set_value(1.0)
                p.floating = False
            raise RuntimeError("broken minimizer")

    with pytest.raises(RuntimeError, match="broken"):
        conditional_fit(loss, mu, 0.5, Broken())
    with pytest.raises(RuntimeError, match="broken"):
        free_fit(loss, mu, Broken())
    assert _same_state(_state(loss), before)
