"""The trace store (zcache/_fitting/trace_store.py, issue 54): a compiled fit's traced program reused by a later process.

The key is checked in this process (each thing a trace depends on changes it; a loss built the same way twice
has the same one); the store's entries against damage, truncation, replacement and a foreign folder; the check
after loading against a key that missed something; and, in fresh processes, that a second run traces nothing
and gives the same fit to the bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import zcache
from zcache._engine import compile_cache
from zcache._fitting import trace_store
from zcache._fitting.compiled_fit import CompiledFit
from zcache.loss import UnbinnedNLL
from zcache.models import Gaussian, Model, Space

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Tilted(Model):
    """A user model: a line of slope ``slope`` times a factor set at construction."""

    def __init__(self, space, slope, factor=1.0):
        super().__init__(space, {"slope": slope})
        self.factor = factor

    def _unnormalized_pdf(self, x):
        return 1.0 + self.factor * self.params["slope"].value() * x


class TiltedOtherCode(Tilted):
    def _unnormalized_pdf(self, x):
        return 1.0 + self.factor * self.params["slope"].value() * x * 0.5


def _gauss(n=100, sigma_floats=False, dtype=np.float64, shape=None):
    mu = zcache.Parameter("mu_tsk", 0.1, lower=-2.0, upper=2.0)
    sigma = zcache.Parameter("sigma_tsk", 1.0, lower=0.1, upper=3.0, floating=sigma_floats)
    x = np.random.default_rng(1).normal(0.0, 1.0, n if shape is None else shape).astype(dtype)
    loss = UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, sigma), zcache.Data(x))
    return loss, [mu, sigma] if sigma_floats else [mu]


def _key(loss, params, jit=False, structured=False):
    fit = CompiledFit.of(loss, params)
    return trace_store.program_key(fit, fit._served(np.array([float(p) for p in params])), jit, structured)


def test_key_is_the_same_for_the_same_loss_and_events_axis_left_open():
    """Two losses built alike have one key, also with another number of events (the program leaves it open)."""
    a, b, c = _gauss(), _gauss(), _gauss(n=250)
    assert _key(*a) is not None
    assert _key(*a) == _key(*b) == _key(*c)


def test_key_changes_with_what_a_trace_depends_on():
    """The floating set, the data's dtype and shape past the events axis, options, modes and library versions."""
    base = _key(*_gauss())
    loss, params = _gauss(sigma_floats=True)
    keys = {
        "floating": _key(loss, params),
        "fitted subset": _key(loss, params[:1]),
        "dtype": _key(*_gauss(dtype=np.int64)),
        "shape past the events axis": _key(*_gauss(shape=(100, 1))),
        "structured": _key(*_gauss(), structured=True),
    }
    with zcache.set_autograd_mode(False):
        keys["autograd mode"] = _key(*_gauss())
    with zcache.set_graph_mode({"model": True}):
        keys["graph mode"] = _key(*_gauss())
    assert None not in keys.values()
    assert len({base, *keys.values()}) == len(keys) + 1, keys


def test_key_changes_with_library_versions_and_sources(monkeypatch):
    base = _key(*_gauss())
    monkeypatch.setattr(trace_store.tf, "__version__", "2.99.0")
    other_tf = _key(*_gauss())
    monkeypatch.undo()
    monkeypatch.setattr(trace_store, "_source_digest", lambda: "0" * 64)
    other_source = _key(*_gauss())
    assert len({base, other_tf, other_source}) == 3


def test_key_changes_with_user_code_and_constants():
    """A user's model: another method body, another constant attribute, another limit: another key."""
    def key(cls=Tilted, factor=1.0, upper=5.0):
        slope = zcache.Parameter("slope_tsk", 0.2, lower=-0.5, upper=0.5)
        model = cls(Space("x", 0.0, upper), slope, factor)
        return _key(UnbinnedNLL(model, zcache.Data(np.linspace(0.1, 0.9, 20))), [slope])

    base = key()
    assert base is not None and base == key()
    assert len({base, key(TiltedOtherCode), key(factor=2.0), key(upper=4.0)}) == 4


def test_key_is_none_for_what_it_cannot_describe():
    """An attribute the walk cannot describe (a generator here): no key, the program is traced."""
    loss, params = _gauss()
    loss.model.unknown = (i for i in range(3))
    assert _key(loss, params) is None


# -- the store's entries ---------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    folder = root / "traces" / "tfkey-a"
    monkeypatch.setattr(compile_cache, "_ROOT", str(root))
    monkeypatch.setattr(compile_cache, "_TRACES", str(folder))
    return folder


def test_entry_round_trip_and_folder_made_at_first_write(store):
    assert not store.exists() and compile_cache.read_trace("e.tfprogram") is None
    assert compile_cache.write_trace("e.tfprogram", b"program bytes")
    assert oct(store.stat().st_mode & 0o777) == "0o700"
    assert compile_cache.read_trace("e.tfprogram") == b"program bytes"


@pytest.mark.parametrize("harm", ["damaged", "truncated", "replaced", "foreign", "unrecorded", "link"])
def test_a_harmed_entry_is_refused_and_quarantined(store, tmp_path, harm):
    assert compile_cache.write_trace("e.tfprogram", b"program bytes")
    path = store / "e.tfprogram"
    if harm in ("damaged", "truncated", "replaced"):
        os.chmod(path, 0o600)
        data = {"damaged": b"program bytez", "truncated": b"program", "replaced": b"another program"}[harm]
        if harm == "replaced":
            path.unlink()
        path.write_bytes(data)
    elif harm == "foreign":  # an entry and its record copied from another key's folder
        other = store.parent / "tfkey-b"
        compile_cache._TRACES = str(other)
        assert compile_cache.write_trace("e.tfprogram", b"foreign program")
        compile_cache._TRACES = str(store)
        for name in ("e.tfprogram", "e.tfprogram.sha256"):
            os.chmod(store / name, 0o600)
            (store / name).write_bytes((other / name).read_bytes())
    elif harm == "unrecorded":
        (store / "e.tfprogram.sha256").unlink()
    else:
        target = tmp_path / "elsewhere"
        target.write_bytes(b"program bytes")
        path.unlink()
        path.symlink_to(target)
    assert compile_cache.read_trace("e.tfprogram") is None
    if harm != "unrecorded":  # one without a record may be a writer's that has not finished: left alone
        assert (store / "quarantine" / "e.tfprogram").exists() and not path.exists()


def test_entries_are_bounded(store, monkeypatch):
    monkeypatch.setattr(compile_cache, "MAX_TRACE_BYTES", 25)
    for k in range(4):
        assert compile_cache.write_trace(f"e{k}.tfprogram", b"0123456789")
        os.utime(store / f"e{k}.tfprogram", (1000 + k, 1000 + k))
    kept = sorted(n for n in os.listdir(store) if n.endswith(".tfprogram"))
    assert kept == ["e2.tfprogram", "e3.tfprogram"]


def test_clear_compile_cache_clears_the_traced_programs_too(store):
    assert compile_cache.write_trace("e.tfprogram", b"program bytes")
    assert compile_cache.write_trace("f.tfprogram", b"other bytes")
    assert zcache.clear_compile_cache() == 4  # two entries, two records
    assert compile_cache.read_trace("e.tfprogram") is None and not list(store.iterdir())
    assert zcache.clear_compile_cache() == 0


def test_store_is_off_by_default():
    assert compile_cache.trace_folder() is None or os.environ.get("ZCACHE_TRACE_STORE") in ("1", "true", "yes", "on")


# -- in this process: a loaded program, and the check after loading ------------------------------------


def _fit(loss, params):
    out = CompiledFit.of(loss, params).run(np.array([float(p) for p in params]), edm_max=2e-5 * loss.errordef)
    return out


def test_loaded_program_gives_the_traced_fit_and_a_wrong_one_is_dropped(store, monkeypatch):
    """A program stored by one loss, loaded for an equal one: the same fit to the bit, no trace. Under a key
    that missed something (forced here), the loaded program's loss at the start differs from the eager one:
    the entry is dropped and the fit traced."""
    loss, params = _gauss()
    traced = _fit(loss, params)
    assert CompiledFit.of(loss, params).traces == 1 and len(list(store.glob("*.tfprogram"))) == 1
    loss2, params2 = _gauss()
    loaded = _fit(loss2, params2)
    assert CompiledFit.of(loss2, params2).traces == 0
    np.testing.assert_array_equal(loaded.x, traced.x)
    np.testing.assert_array_equal(loaded.hessian, traced.hessian)
    assert loaded.fmin == traced.fmin and loaded.nfcn == traced.nfcn

    key = trace_store._key_and_variables
    (entry,) = store.glob("*.tfprogram")
    # a loss that differs in a constant of its trace only (the range, in the normalization), under the
    # first loss's key
    mu = zcache.Parameter("mu_tsk", 0.1, lower=-2.0, upper=2.0)
    x = np.random.default_rng(1).normal(0.0, 1.0, 100)
    loss3 = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x))
    monkeypatch.setattr(trace_store, "_key_and_variables",
                        lambda fit, *a: (entry.name.split(".")[0], key(fit, *a)[1]))
    wrong = _fit(loss3, [mu])
    assert CompiledFit.of(loss3, [mu]).traces == 1  # traced after the check failed
    assert (store / "quarantine" / entry.name).exists()
    monkeypatch.undo()
    fresh = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(x))
    np.testing.assert_array_equal(wrong.x, _fit(fresh, [mu]).x)


class TiltedSteeperAwayFromStart(Tilted):
    """Tilted's pdf at the slope 0.2 (every x), another one elsewhere: the loss agrees at that start, its gradient
    (twice Tilted's slope derivative) does not."""

    def _unnormalized_pdf(self, x):
        return 1.0 + self.factor * (2.0 * self.params["slope"].value() - 0.2) * x


@pytest.mark.slow  # about 1.9 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times")
def test_a_loaded_program_whose_gradient_differs_is_dropped(store, monkeypatch):
    """The check after loading covers the gradient: a stored program with the loss's value at the start but another
    gradient (a key that missed the gradient path, forced here) is quarantined and the fit traced."""
    def loss_of(cls):
        slope = zcache.Parameter("slope_tsk", 0.2, lower=-0.5, upper=0.5)
        data = zcache.Data(np.random.default_rng(3).uniform(0.0, 1.0, 200))
        return UnbinnedNLL(cls(Space("x", 0.0, 1.0), slope), data), [slope]

    stored = _fit(*loss_of(Tilted))
    (entry,) = store.glob("*.tfprogram")
    loss, params = loss_of(TiltedSteeperAwayFromStart)
    fit = CompiledFit.of(loss, params)
    x0 = np.array([0.2])
    served = fit._served(x0)
    with zcache._engine.context.run_eagerly():
        f, g, _ = fit._value_gradient(trace_store.tf.constant(x0), served)
    loss_t, params_t = loss_of(Tilted)
    fit_t = CompiledFit.of(loss_t, params_t)
    with zcache._engine.context.run_eagerly():
        f_t, g_t, _ = fit_t._value_gradient(trace_store.tf.constant(x0), fit_t._served(x0))
    # the premise: the value alone cannot tell them apart
    assert trace_store.agrees(float(f), g_t.numpy(), float(f_t), g_t.numpy())
    assert not trace_store.agrees(float(f_t), g_t.numpy(), float(f), g.numpy())

    key = trace_store._key_and_variables
    monkeypatch.setattr(trace_store, "_key_and_variables",
                        lambda fit, *a: (entry.name.split(".")[0], key(fit, *a)[1]))
    got = _fit(loss, params)
    assert fit.traces == 1  # traced after the check failed
    assert (store / "quarantine" / entry.name).exists()
    monkeypatch.undo()
    assert abs(got.x[0] - stored.x[0]) > 1e-3  # the steeper model's own fit, not the stored one's
    np.testing.assert_array_equal(got.x, _fit(*loss_of(TiltedSteeperAwayFromStart)).x)


@pytest.mark.parametrize("harm", ["value", "gradient", "not finite", "shape"])
def test_agrees_refuses_each_difference(harm):
    good = np.array([3.0, -2e-4])
    assert trace_store.agrees(1234.5, good, 1234.5, good + np.array([0.0, 1e-9]))  # rounding: accepted
    f, g, ge = 1234.5, good.copy(), good.copy()
    if harm == "value":
        f = 1234.5 * (1 + 1e-8)
    elif harm == "gradient":
        ge[1] += 1e-6  # the small component, off by more than the tolerance of the largest
    elif harm == "not finite":
        g[0] = np.nan
    else:
        ge = good[:1]
    assert not trace_store.agrees(f, g, 1234.5, ge)


# -- fresh processes ----------------------------------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import zcache
    from zcache._fitting.compiled_fit import CompiledFit
    from zcache.loss import ExtendedUnbinnedNLL
    from zcache.minimize import Minuit
    from zcache.models import Exponential, Gaussian, Space, SumPdf
    width, dtype, high = float(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(2.0, 0.5, 600), rng.exponential(4.0, 1400) - 2.0])
    x = x[(x > -2.0) & (x < high)]
    space = Space("x", -2.0, high)
    mu = zcache.Parameter("mu", 1.8, lower=0.0, upper=4.0)
    sigma = zcache.Parameter("sigma", width, lower=0.1, upper=2.0, floating=dtype != "fixed")
    lam = zcache.Parameter("lam", -0.3, lower=-2.0, upper=-0.01)
    ns = zcache.Parameter("ns", 500.0, lower=0.0, upper=1e4)
    nb = zcache.Parameter("nb", 1400.0, lower=0.0, upper=1e4)
    model = SumPdf([Gaussian(space, mu, sigma), Exponential(space, lam)], yields=[ns, nb])
    loss = ExtendedUnbinnedNLL(model, zcache.Data(x))
    result = Minuit().minimize(loss)
    params = [p for p in (ns, nb, mu, sigma, lam) if p.floating]
    print(json.dumps({"traces": CompiledFit.of(loss, params).traces, "path": result.path,
                      "values": [float(p) for p in params], "fmin": float(result.fmin),
                      "errors": [float(result.errors[p.name]) for p in params]}))
""")


def _run(cache, *args, store="1"):
    env = {**os.environ, "ZCACHE_CACHE_DIR": str(cache), "ZCACHE_TRACE_STORE": store, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, env=env, timeout=900,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.exhaustive  # CI's 25 minutes; the store is opt-in, its keys and refusals are tested in-process above
def test_second_process_traces_nothing_and_refuses_harm(tmp_path):
    cache = tmp_path / "cache"
    first = _run(cache, "0.6", "float64", "8.0")
    second = _run(cache, "0.6", "float64", "8.0")
    assert first["traces"] == 1 and second["traces"] == 0 and first["path"] == second["path"] == "compiled"
    assert second == {**first, "traces": 0}  # the same fit to the bit
    (entry,) = (cache / "traces").glob("*/*.tfprogram")
    os.chmod(entry, 0o600)
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 1
    entry.write_bytes(bytes(data))
    damaged = _run(cache, "0.6", "float64", "8.0")
    assert damaged == first  # refused, traced again, written anew
    assert _run(cache, "0.6", "float64", "8.0")["traces"] == 0
    # another floating set, another constant (the range, in the normalization): never the stored program
    fixed = _run(cache, "0.6", "fixed", "8.0")
    assert fixed["traces"] == 1
    assert _run(cache, "0.6", "float64", "9.0")["traces"] == 1
    # a fixed parameter's value is read from its Variable, not traced: the same program serves another
    other_width = _run(cache, "0.7", "fixed", "8.0")
    assert other_width["traces"] == 0 and other_width["values"] != fixed["values"]
    assert other_width == {**_run(cache, "0.7", "fixed", "8.0", store="0"), "traces": 0}
    # off: nothing read
    assert _run(cache, "0.6", "float64", "8.0", store="0")["traces"] == 1


def test_a_folder_open_to_others_is_not_read(store):
    assert compile_cache.write_trace("e.tfprogram", b"program bytes")
    os.chmod(store, 0o777)
    try:
        assert compile_cache.read_trace("e.tfprogram") is None
        assert (store / "e.tfprogram").exists()  # left where it is
    finally:
        os.chmod(store, 0o700)


# -- more kinds of loss: the bridge, binned, simultaneous with a constraint, weighted -----------------------

def _bridge(expr_factor=1.0, fixed=(), upper=2.0, n_cols=3, dtype=np.float64):
    import sympy as sp

    from zcache.amplitude import SymbolicModel

    x, y, th, m1, g1, c1, c2 = sp.symbols("x y th m1 g1 c1 c2")
    bw = sp.sqrt(m1 * g1) / (m1**2 - x**2 - sp.I * m1 * g1)
    expr = sp.Abs(c1 * bw * sp.cos(th) + c2 * expr_factor * sp.sin(th) ** 2) ** 2
    rng = np.random.default_rng(2)
    cols = {"x": rng.uniform(0.3, 1.5, 200), "y": rng.uniform(0.3, 1.5, 200), "th": rng.uniform(0, np.pi, 200)}
    names = ["x", "y", "th"][:n_cols] if n_cols == 3 else ["x", "th"]
    if n_cols != 3:
        del cols["y"]
    params = {m1: dict(value=0.9, lower=0.3, upper=upper, floating="m1" not in fixed),
              g1: dict(value=0.1, lower=0.01, upper=2.0, floating="g1" not in fixed)}
    model = SymbolicModel(expr, {**params, c1: 1.0 + 0j, c2: 0.5 + 0.5j}, names, cols, name="tsk_bw")
    data = model.to_data({k: v[:80].astype(dtype) for k, v in cols.items()}, name="tsk_bw_data")
    loss = UnbinnedNLL(model, data)
    return loss, [p for p in loss.params if p.floating]


def _binned(edges_high=5.0, fixed=(), upper=2000.0, dtype=np.float64):
    from zcache.binned import BinnedData, ExtendedBinnedNLL
    from zcache.models import Exponential, SumPdf

    space = Space("x", -5.0, edges_high)
    lam = zcache.Parameter("tsk_lam", -0.3, lower=-2.0, upper=2.0, floating="lam" not in fixed)
    n = zcache.Parameter("tsk_n", 400.0, lower=0.0, upper=upper)
    ns = zcache.Parameter("tsk_ns", 100.0, lower=0.0, upper=2000.0)
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.exponential(3.0, 400) - 5.0, rng.normal(0.5, 0.5, 100)])
    counts, edges = np.histogram(x, bins=20, range=(-5.0, edges_high))
    model = SumPdf([Exponential(space, lam), Gaussian(space, 0.5, 0.5)], yields=[n, ns])
    loss = ExtendedBinnedNLL(model, BinnedData(counts.astype(dtype), edges))
    return loss, [p for p in loss.params if p.floating]


def _simultaneous(constraint_mu=1.4, fixed=(), upper=3.0, dtype=np.float64, shape=None):
    from zcache.loss import GaussianConstraint, SimultaneousLoss

    space = Space("x", -5.0, 5.0)
    mu = zcache.Parameter("tsk_smu", 0.1, lower=-2.0, upper=2.0)
    s1 = zcache.Parameter("tsk_s1", 1.0, lower=0.3, upper=upper, floating="s1" not in fixed)
    s2 = zcache.Parameter("tsk_s2", 1.5, lower=0.3, upper=3.0)
    rng = np.random.default_rng(6)
    a = UnbinnedNLL(Gaussian(space, mu, s1), zcache.Data(rng.normal(0.2, 1.0, 100 if shape is None else shape)
                                                          .astype(dtype)))
    b = UnbinnedNLL(Gaussian(space, mu, s2), zcache.Data(rng.normal(0.2, 1.5, 100)),
                    constraints=[GaussianConstraint([s2], [constraint_mu], [0.1])])
    loss = SimultaneousLoss([a, b])
    return loss, [p for p in loss.params if p.floating]


def _weighted(weights=True, fixed=(), upper=3.0, dtype=np.float64):
    mu = zcache.Parameter("tsk_wmu", 0.1, lower=-2.0, upper=2.0)
    sg = zcache.Parameter("tsk_wsg", 1.0, lower=0.3, upper=upper, floating="sg" not in fixed)
    rng = np.random.default_rng(9)
    x = rng.normal(0.2, 1.0, 100).astype(dtype)
    data = zcache.Data(x, weights=rng.uniform(0.5, 1.5, 100) if weights else None)
    loss = UnbinnedNLL(Gaussian(Space("x", -5.0, 5.0), mu, sg), data)
    return loss, [p for p in loss.params if p.floating]


@pytest.mark.slow  # builds 24 losses, the bridge's among them
@pytest.mark.parametrize("make, constant, floating, upper, dtype, shape", [
    # a Data keeps floats as float64, whatever their dtype was: an int64 column is another dtype
    (_bridge, dict(expr_factor=2.0), "g1", 1.9, None, None),  # to_data makes its columns float64
    (_binned, dict(edges_high=6.0), "lam", 1900.0, None, None),  # BinnedData keeps counts as float64
    (_simultaneous, dict(constraint_mu=1.3), "s1", 2.9, np.int64, dict(shape=(100, 1))),
    (_weighted, dict(weights=False), "sg", 2.9, np.int64, None),
], ids=["bridge", "binned", "simultaneous+constraint", "weighted"])
def test_key_of_more_kinds_changes_with_what_their_trace_depends_on(make, constant, floating, upper, dtype, shape,
                                                                    monkeypatch):
    """For each kind: built twice alike, one key; a changed constant (the expression, the edges, the constraint,
    weights or none), floating set, dtype, data shape, limit or zcache source: another key (or none: traced)."""
    base = _key(*make())
    assert base is not None and base == _key(*make())
    keys = {"constant": _key(*make(**constant)), "floating": _key(*make(fixed=(floating,))),
            "limits": _key(*make(upper=upper))}
    if dtype is not None:
        keys["dtype"] = _key(*make(dtype=dtype))
    if shape is not None:
        keys["data shape"] = _key(*make(**shape))
    monkeypatch.setattr(trace_store, "_source_digest", lambda: "1" * 64)
    keys["zcache source"] = _key(*make())
    monkeypatch.undo()
    assert base not in keys.values(), keys
    found = [k for k in keys.values() if k is not None]
    assert len(set(found)) == len(found), keys


KINDS_SCRIPT = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, "tests")
    import zcache
    import test_trace_store as t
    from zcache._fitting.compiled_fit import _KEPT
    from zcache.minimize import Minuit
    out = {}
    for kind in sys.argv[1].split(","):
        loss, params = {"bridge": t._bridge, "binned": t._binned, "simultaneous": t._simultaneous,
                        "weighted": t._weighted}[kind]()
        result = Minuit().minimize(loss)
        out[kind] = {"traces": sum(f.traces for f in _KEPT.get(loss, {}).values()), "path": result.path,
                     "fmin": float(result.fmin), "values": {k: float(v) for k, v in sorted(result.values.items())},
                     "errors": {k: float(v) for k, v in sorted(result.errors.items())}}
    out["cpu"] = time.process_time()
    print(json.dumps(out))
""")


@pytest.mark.slow  # a fit traced and one loaded per kind
@pytest.mark.parametrize("make", [_bridge, _binned, _simultaneous, _weighted],
                         ids=["bridge", "binned", "simultaneous+constraint", "weighted"])
def test_more_kinds_reuse_their_program_in_this_process(make, store):
    """The key before the trace is the key after it (a cache the trace fills is not in it): a loss built alike
    loads the stored program, traces nothing and gives the fit to the bit."""
    traced = _fit(*make())
    loss, params = make()
    loaded = _fit(loss, params)
    assert len(list(store.glob("*.tfprogram"))) == 1 and CompiledFit.of(loss, params).traces == 0
    np.testing.assert_array_equal(loaded.x, traced.x)
    np.testing.assert_array_equal(loaded.hessian, traced.hessian)
    assert loaded.fmin == traced.fmin and loaded.nfcn == traced.nfcn


# CPU: ~18 s for the two children (5 s of imports each; 2026-12-02, at load 15), beyond CI's 25 minutes; the
# in-process test above checks each kind's reuse, this one the fresh process's.
@pytest.mark.exhaustive
def test_second_process_reuses_the_traces_of_more_kinds(tmp_path):
    """A bridged amplitude model, a binned loss, a simultaneous loss with a constraint and a weighted loss: the
    second process traces none of them and gives each fit to the bit. (A ChunkedLoss never runs as a compiled fit:
    nothing to reuse.)"""
    kinds = "bridge,binned,simultaneous,weighted"
    env = {**os.environ, "ZCACHE_CACHE_DIR": str(tmp_path / "cache"), "ZCACHE_TRACE_STORE": "1", "PYTHONPATH": ROOT}
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", KINDS_SCRIPT, kinds], capture_output=True, text=True, env=env,
                             timeout=900, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert len(list((tmp_path / "cache" / "traces").glob("*/*.tfprogram"))) == 4
    for kind in kinds.split(","):
        assert first[kind]["traces"] == 1 and second[kind]["traces"] == 0, kind
        assert second[kind] == {**first[kind], "traces": 0}, kind
