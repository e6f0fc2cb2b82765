"""Helpers shared by several test modules (``from helpers import ...``: pytest puts tests/ on sys.path).

- ``save_modes``: the graph / autograd modes and TensorFlow's run_functions_eagerly, to put back;
- ``GRAPH_MODES``, ``graph_mode_params``, ``slow_modes``: conftest's ``graph_mode`` / ``mode``
  parameters, some marked slow or exhaustive;
- ``traced``: a function as a ``zcache.function`` of tensors;
- numpy references of the Dalitz plot (test_amplitude_phasespace, test_amplitude_models);
- the extended Gauss + Exponential NLL on [LO, HI] in numpy (test_minimize, test_properties_fit);
- an NLL of a line shape computed through complex 1/z, sqrt and rsqrt (test_jit, test_properties_fit);
- NLLs of SymPy coherent sums through the bridge (test_amplitude_symbolic, test_properties_fit).

The numpy references use no zcache (they are what zcache is checked against).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import scipy.special
import tensorflow as tf

import zcache


# == modes =====================================================================================
def save_modes() -> Callable[[], None]:
    """The graph, autograd and jit modes and ``tf.config.functions_run_eagerly()`` now; call the
    result to put them back."""
    graph, autograd, jit = zcache.get_graph_mode(), zcache.get_autograd_mode(), zcache.get_jit_mode()
    backend = tf.config.functions_run_eagerly()

    def restore() -> None:
        zcache.set_graph_mode(graph, set_backend=False)
        zcache.set_autograd_mode(autograd)
        zcache.set_jit_mode(jit)
        tf.config.run_functions_eagerly(backend)

    return restore


#: id -> graph mode: the parameters of conftest's ``graph_mode`` fixture (``mode``: the first two)
GRAPH_MODES = {"graph": True, "eager": False, "auto": "auto"}


def _marks(i: str, slow, exhaustive) -> list:
    return [*([pytest.mark.slow] if i in slow else []), *([pytest.mark.exhaustive] if i in exhaustive else [])]


def graph_mode_params(*slow: str, exhaustive: tuple[str, ...] = ()) -> list:
    """The ``graph_mode`` parameters, those named in ``slow`` marked slow and those named in ``exhaustive``
    exhaustive (which conftest makes slow too). 'auto' always is slow: it is the default mode, which every
    test without the fixture runs in (and traces like True but for 'model'), so ``-m "not slow"`` leaves out
    the [auto] copies."""
    return [pytest.param(m, id=i, marks=_marks(i, {"auto", *slow}, exhaustive)) for i, m in GRAPH_MODES.items()]


def slow_modes(fixture: str, *slow: str, exhaustive: tuple[str, ...] = ()) -> pytest.MarkDecorator:
    """Parametrize conftest's ``graph_mode`` (or ``mode``) fixture with its own parameters and
    ids, the modes named in ``slow`` (ids: "graph", "eager", "auto") marked slow, those named in
    ``exhaustive`` marked exhaustive (left out of `make test`: a costlier repeat of what another mode checks)."""
    assert set(slow) | set(exhaustive) <= set(GRAPH_MODES), (slow, exhaustive)
    if fixture == "graph_mode":
        params = graph_mode_params(*slow, exhaustive=exhaustive)
    else:
        params = [pytest.param(GRAPH_MODES[i], id=i, marks=_marks(i, slow, exhaustive)) for i in ("graph", "eager")]
    return pytest.mark.parametrize(fixture, params, indirect=True)


# == traced functions ==========================================================================
def traced(func: Callable) -> zcache.Function:
    """``func`` as a zcache.function of tensors: traced unless the graph mode is False; call it repeatedly."""
    return zcache.function(func, wraps="tensor")


# == numpy references of the Dalitz plot =======================================================
#: channel -> (a, b, c): the pair (ab) and the bachelor c
CHANNELS = {"12": (1, 2, 3), "13": (1, 3, 2), "23": (2, 3, 1)}


def lam_np(x, y, z):
    """Källén function, written out again (not zcache.amplitude.kallen)."""
    return (x - y - z) ** 2 - 4.0 * y * z


def pair_limits(s, masses, channel):
    r"""PDG range of :math:`s_{bc}` at fixed :math:`s = s_{ab}` (energies of b and c in the (ab) frame)."""
    a, b, c = CHANNELS[channel]
    m = masses
    e_b = (s - m[a] ** 2 + m[b] ** 2) / (2.0 * np.sqrt(s))
    e_c = (m[0] ** 2 - s - m[c] ** 2) / (2.0 * np.sqrt(s))
    p_b = np.sqrt(np.maximum(e_b**2 - m[b] ** 2, 0.0))
    p_c = np.sqrt(np.maximum(e_c**2 - m[c] ** 2, 0.0))
    return (e_b + e_c) ** 2 - (p_b + p_c) ** 2, (e_b + e_c) ** 2 - (p_b - p_c) ** 2


def total_sq(masses):
    """s12 + s13 + s23 = the sum of the four masses squared."""
    return float(np.sum(np.square(masses)))


def inside_np(x, masses):
    """Inside the Dalitz plot: s12 in its range and s23 between the PDG limits at that s12."""
    s12, s13 = x[:, 0], x[:, 1]
    m = masses
    lo, hi = (m[1] + m[2]) ** 2, (m[0] - m[3]) ** 2
    ok = (s12 >= lo) & (s12 <= hi)
    with np.errstate(invalid="ignore", divide="ignore"):
        s23_lo, s23_hi = pair_limits(np.clip(s12, lo, hi), masses, "12")
    s23 = total_sq(masses) - s12 - s13
    return ok & (s23 >= s23_lo) & (s23 <= s23_hi)


def box(masses):
    """The ranges of s12 and s13: the bounding box of the Dalitz plot."""
    m = masses
    return ((m[1] + m[2]) ** 2, (m[0] - m[3]) ** 2), ((m[1] + m[3]) ** 2, (m[0] - m[2]) ** 2)


def uniform_np(n, masses, seed):
    """``n`` events uniform in the Dalitz plot: numpy accept-reject in the bounding box."""
    rng = np.random.default_rng(seed)
    (lo12, hi12), (lo13, hi13) = box(masses)
    out = []
    while sum(len(o) for o in out) < n:
        x = np.column_stack([rng.uniform(lo12, hi12, 4 * n), rng.uniform(lo13, hi13, 4 * n)])
        out.append(x[inside_np(x, masses)])
    return np.concatenate(out)[:n]


# == Dask clusters of the tests ================================================================
#: Dask's periodic work that a test cluster does not need, made rare: the workers' statistical profiler (a sample
#: every 10 ms), the event loops' tick monitor (20 ms), the system and memory monitors (0.5 s, 0.1 s). An idle
#: cluster took 0.073-0.12 CPU seconds a second with the defaults and 0.012-0.013 without them (design/reliability.md's
#: issue-51 rows; the session cluster's commit). Nothing the tests check uses them (heartbeats, work stealing and
#: the nannies are as they were). Dask's dotted keys, for ``dask.config.set``; :func:`dask_environment` gives the
#: same as environment variables, for a cluster started in a child process.
QUIET_DASK = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.nanny.memory.monitor-interval": "1s",
}


def dask_environment(settings: dict) -> dict[str, str]:
    """Dask settings as the environment variables Dask reads at import (``DASK_A__B__C_D`` for ``a.b.c-d``)."""
    return {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value) for key, value in settings.items()}


# == the extended Gauss + Exponential fit problem on [LO, HI] ==================================
LO, HI = 0.0, 10.0
NAMES = ("mu", "sigma", "lam", "nsig", "nbkg")
LIMITS = {"mu": (3.0, 7.0), "sigma": (0.1, 2.0), "lam": (-2.0, -0.01), "nsig": (0.0, 1e4), "nbkg": (0.0, 1e4)}


def np_extended_nll(x: np.ndarray, mu: float, sigma: float, lam: float, nsig: float, nbkg: float) -> float:
    """Extended NLL nu - sum log(nsig g + nbkg e), g and e truncated to [LO, HI] (numpy / scipy only)."""
    norm = scipy.special.ndtr((HI - mu) / sigma) - scipy.special.ndtr((LO - mu) / sigma)
    gauss = np.exp(-0.5 * ((x - mu) / sigma) ** 2) / (sigma * math.sqrt(2.0 * math.pi) * norm)
    expo = lam * np.exp(lam * (x - LO)) / np.expm1(lam * (HI - LO))
    return float(nsig + nbkg - np.sum(np.log(nsig * gauss + nbkg * expo)))


def gauss_exp_study(tag: str, n: int = 1000, seed: int = 1) -> tuple:
    """An extended Gauss + Exp on [0, 10] (30 % signal) for toy studies: ``(model, loss, params)``.

    ``params`` in the order mu, sigma, lambda, nsig, nbkg; every name ends in ``_<tag>``; the
    loss holds ``n`` events drawn with zcache's sampling seeded ``seed``.
    """
    from zcache.loss import ExtendedUnbinnedNLL
    from zcache.models import Exponential, Gaussian, Space, SumPdf

    space = Space("x", 0.0, 10.0)
    mu = zcache.Parameter(f"mu_{tag}", 5.0, lower=3.0, upper=7.0)
    sigma = zcache.Parameter(f"sigma_{tag}", 0.6, lower=0.1, upper=2.0)
    lam = zcache.Parameter(f"lam_{tag}", -0.3, lower=-2.0, upper=-0.01)
    nsig = zcache.Parameter(f"nsig_{tag}", 0.3 * n, lower=0.0, upper=5.0 * n)
    nbkg = zcache.Parameter(f"nbkg_{tag}", 0.7 * n, lower=0.0, upper=5.0 * n)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[nsig, nbkg])
    zcache.models.set_seed(seed)
    return model, ExtendedUnbinnedNLL(model, model.sample(n)), [mu, sigma, lam, nsig, nbkg]


# == a line shape through complex arithmetic (issue 23) =========================================
def complex_line_shape_loss(tag: str) -> tuple:
    """An NLL of a line shape computed through a complex 1/z, sqrt and rsqrt; mass and width float.

    XLA's kernels of the fused gradients of these ops dropped the conjugate: values were right
    and every compiled gradient, hence the Hessian, was wrong (``zcache._engine.tf_internals``, item 10).

    Returns
    -------
    (UnbinnedNLL, [mass, width])
    """
    from zcache.loss import UnbinnedNLL
    from zcache.models import FunctionPdf, Space

    space = Space("x", 0.3, 1.5)
    mass = zcache.Parameter(f"{tag}_mass", 0.9, lower=0.45, upper=1.35)
    width = zcache.Parameter(f"{tag}_width", 0.1, lower=0.05, upper=0.15)

    def density(x, mass, width):
        d = tf.complex(mass * mass - x * x, -mass * width)  # m^2 - s - i m Gamma
        root = tf.sqrt(mass * width)
        amp = tf.math.reciprocal(d) * tf.complex(root, tf.zeros_like(root))
        amp += 0.2 * tf.math.rsqrt(d) * tf.sqrt(d + 1.0)
        return tf.math.real(amp) ** 2 + tf.math.imag(amp) ** 2

    model = FunctionPdf(density, space, {"mass": mass, "width": width}, name=f"{tag}_line_shape")
    x = np.random.default_rng(3).uniform(0.3, 1.5, 300)
    return UnbinnedNLL(model, zcache.Data(x, name=f"{tag}_x")), [mass, width]


def bridged_line_shape_loss(tag: str, fused: bool = False) -> tuple:
    """An NLL of a SymPy coherent sum of two Breit-Wigners through the bridge; masses and widths float.

    Each group's amplitudes are one tf.function (the bridge's group programs, issue 26), whose
    backward is built once, outside any XLA context, and reused inside compiled losses. ``fused``:
    SymbolicModel's option (XLA group programs, zcache.amplitude._fused).

    Returns
    -------
    (UnbinnedNLL, [m1, g1, m2, g2])
    """
    import sympy as sp

    from zcache.amplitude import SymbolicModel
    from zcache.loss import UnbinnedNLL

    x, y, m1, g1, m2, g2, c1, c2 = sp.symbols("x y m1 g1 m2 g2 c1 c2")
    expr = sp.Abs(c1 * sp.sqrt(m1 * g1) / (m1**2 - x**2 - sp.I * m1 * g1) * sp.cos(y)
                  + c2 * sp.sqrt(m2 * g2) / (m2**2 - x**2 - sp.I * m2 * g2) * sp.sin(y) ** 2) ** 2
    rng = np.random.default_rng(4)
    cols = {"x": rng.uniform(0.3, 1.5, 800), "y": rng.uniform(0.0, np.pi, 800)}
    shapes = {m1: (0.9, 0.45, 1.35), g1: (0.1, 0.05, 0.15), m2: (0.77, 0.4, 1.2), g2: (0.15, 0.075, 0.225)}
    params = {s: dict(value=v, lower=lo, upper=hi, floating=True) for s, (v, lo, hi) in shapes.items()}
    model = SymbolicModel(expr, {**params, c1: 1.0 + 0j, c2: 0.5 + 0.5j}, ["x", "y"], cols, name=f"{tag}_bridged",
                          floating=[], fused=fused)
    loss = UnbinnedNLL(model, model.to_data({k: v[:300] for k, v in cols.items()}, name=f"{tag}_bridged_data"))
    by_name = {p.name: p for p in model.get_params(None)}
    return loss, [by_name[n] for n in ("m1", "g1", "m2", "g2")]


def small_bridge_loss(fused: bool = False, tag: str = "small_bw", n_phsp: int = 600, n_data: int = 200, seed: int = 1):
    """An NLL of a hand-written coherent sum of two Breit-Wigners through the SymPy bridge (1/z of a complex:
    tf.math.reciprocal), masses and widths floating with one complex coupling: six parameters.

    ``fused``: :class:`zcache.amplitude.SymbolicModel`'s option; ``tag`` names the model and its data.
    """
    import sympy as sp

    from zcache.amplitude import SymbolicModel
    from zcache.loss import UnbinnedNLL

    x, y, th, m1, g1, m2, g2, c1, c2 = sp.symbols("x y th m1 g1 m2 g2 c1 c2")
    bw1 = sp.sqrt(m1 * g1) / (m1**2 - x**2 - sp.I * m1 * g1)
    bw2 = sp.sqrt(m2 * g2) / (m2**2 - y**2 - sp.I * m2 * g2)
    expr = sp.Abs(c1 * bw1 * sp.cos(th) + c2 * bw2 * sp.sin(th) ** 2) ** 2
    rng = np.random.default_rng(seed)
    cols = {"x": rng.uniform(0.3, 1.5, n_phsp), "y": rng.uniform(0.3, 1.5, n_phsp), "th": rng.uniform(0, np.pi, n_phsp)}
    limits = {m1: (0.9, 0.45, 1.35), g1: (0.1, 0.05, 0.15), m2: (0.77, 0.4, 1.2), g2: (0.15, 0.075, 0.225)}
    params = {s: dict(value=v, lower=lo, upper=hi, floating=True) for s, (v, lo, hi) in limits.items()}
    model = SymbolicModel(expr, {**params, c1: 1.0 + 0j, c2: 0.5 + 0.5j}, ["x", "y", "th"], cols, name=tag,
                          fused=fused)
    loss = UnbinnedNLL(model, model.to_data({k: v[:n_data] for k, v in cols.items()}, name=f"{tag}_data"))
    assert len(loss.params) == 6  # four line-shape parameters, one complex coupling
    return loss


def coupling_block_loss(tag: str, *, extra: dict | None = None):
    """An NLL of three coupling groups through the SymPy bridge: two Breit-Wigners (masses and widths
    floating) and a flat term; the second and third couplings free (4 real parts: the couplings' block of
    ``Minuit(structured_hessian="auto")``), the first fixed; 1500 events drawn at the start values.

    Returns
    -------
    UnbinnedNLL
        Its parameters: m1, g1, m2, g2, then ``{tag}_c2_mag``, ``_phase``, ``{tag}_c3_re``, ``_im``.
    """
    import sympy as sp

    from zcache.amplitude import ComplexParameter, SymbolicModel
    from zcache.loss import UnbinnedNLL

    x, y, th, m1, g1, m2, g2, c1, c2, c3 = sp.symbols("x y th m1 g1 m2 g2 c1 c2 c3")
    bw1 = sp.sqrt(m1 * g1) / (m1**2 - x**2 - sp.I * m1 * g1)
    bw2 = sp.sqrt(m2 * g2) / (m2**2 - y**2 - sp.I * m2 * g2)
    expr = sp.Abs(c1 * bw1 * sp.cos(th) + c2 * bw2 * sp.sin(th) ** 2 + c3 * sp.sin(th) * sp.cos(th)) ** 2
    rng = np.random.default_rng(8)
    n = 3000
    cols = {"x": rng.uniform(0.3, 1.5, n), "y": rng.uniform(0.3, 1.5, n), "th": rng.uniform(0, np.pi, n)}
    limits = {m1: (0.95, 0.45, 1.35), g1: (0.12, 0.05, 0.2), m2: (0.8, 0.4, 1.2), g2: (0.14, 0.075, 0.225)}
    params = {s: dict(value=v, lower=lo, upper=hi, floating=True) for s, (v, lo, hi) in limits.items()}
    model = SymbolicModel(expr, {**params, c1: 1.0 + 0j, c2: ComplexParameter(f"{tag}_c2", 0.6 + 0.5j),
                                 c3: ComplexParameter(f"{tag}_c3", 0.3 - 0.2j, polar=False)},
                          ["x", "y", "th"], cols, name=tag)
    pool = np.stack([rng.uniform(0.3, 1.5, 60_000), rng.uniform(0.3, 1.5, 60_000), rng.uniform(0, np.pi, 60_000)],
                    axis=1)
    intensity = model.intensity(pool).numpy()
    sample = pool[rng.uniform(0, intensity.max(), len(pool)) < intensity][:1500]
    assert len(sample) == 1500
    return UnbinnedNLL(model, zcache.Data(sample, name=f"{tag}_data", obs=["x", "y", "th"]), **(extra or {}))


def wait_for_replaced_worker(client, before: set[str], timeout: float = 300.0) -> None:
    """Wait until the cluster of ``client`` has as many workers as the addresses in ``before`` again, one of them
    new: the nanny's replacement of a worker a test killed (tests/conftest.py's ``dask_client`` is shared)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        now = set(client.scheduler_info()["workers"])
        if len(now) == len(before) and now != before:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no replacement worker after {timeout} s: {sorted(before)} -> {sorted(now)}")
        time.sleep(0.2)
