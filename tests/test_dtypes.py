"""Issue 51 (symptom 4): values that are not real numbers are refused at every door, with a named error.

A Gaussian NLL on ``x + 0.5j`` used to equal the NLL of ``x`` (the cast to float64 dropped the
imaginary part without a word), and a boolean mask was read as 0/1 events. Every door that reads
events, weights, counts or edges now raises :class:`DataDtypeError` whose message says what to do,
and leaves the state (values, caches' validity, traces) unchanged. A model of one's own that
computes with complex inputs gets them with ``Data(..., dtype=complex)``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

import zcache
from zcache.binned import BinnedData, BinnedNLL, Template
from zcache.exceptions import DataDtypeError, DataError
from zcache.loss import UnbinnedNLL
from zcache.models import Gaussian, Space
from zcache.scale import ChunkedLoss, Chunks

N = 400
X = np.random.default_rng(51).normal(0.3, 1.2, N)

#: Arrays of every dtype that is not a real number, and the words their message must hold.
BAD = {
    "complex": (lambda n: X[:n] + 0.5j, ".real"),
    "bool": (lambda n: X[:n] > 0.0, "astype(float)"),
    "object": (lambda n: X[:n].astype(object), "convert them to floats"),
    "string": (lambda n: X[:n].astype(str), "convert them to floats"),
    "datetime": (lambda n: np.arange(n).astype("datetime64[s]"), "timedelta64"),
    "timedelta": (lambda n: np.arange(n).astype("timedelta64[s]"), "timedelta64"),
}
BAD_TENSORS = {  # what a traced set_data can receive (tensors have no object or date dtypes)
    "complex": (lambda n: tf.constant(X[:n] + 0.5j), ".real"),
    "bool": (lambda n: tf.constant(X[:n] > 0.0), "astype(float)"),
    "string": (lambda n: tf.constant(X[:n].astype(str)), "convert them to floats"),
}


def _nll_reference(x: np.ndarray, mu: float, sigma: float, lo: float, hi: float) -> float:
    """The truncated Gaussian NLL with scipy."""
    norm = scipy.stats.norm.cdf(hi, mu, sigma) - scipy.stats.norm.cdf(lo, mu, sigma)
    return float(-np.sum(scipy.stats.norm.logpdf(x, mu, sigma) - np.log(norm)))


def _loss(tag: str, data: zcache.Data) -> tuple[UnbinnedNLL, zcache.Parameter]:
    mu = zcache.Parameter(f"mu_{tag}", 0.3, lower=-2.0, upper=2.0)
    return UnbinnedNLL(Gaussian(Space("x", -8.0, 8.0), mu, 1.2), data), mu


class _State:
    """What a refusal must leave as it was: the events, the weights, the loss's value and caches' flags."""

    def __init__(self, data: zcache.Data, loss: UnbinnedNLL) -> None:
        self.data, self.loss = data, loss
        self.events = data.numpy().copy()
        self.weights = None if data.weights_data is None else data.weights_data.numpy().copy()
        self.value = float(loss.value())
        self.flags = self._flags()

    def _flags(self) -> list[bool]:
        from zcache._engine.dependencies import GRAPH

        return [bool(c.is_valid) for c in GRAPH.objects(GRAPH.dependent_caches(self.data.node_id))]

    def assert_unchanged(self) -> None:
        np.testing.assert_array_equal(self.data.numpy(), self.events)
        if self.weights is not None:
            np.testing.assert_array_equal(self.data.weights_data.numpy(), self.weights)
        assert self._flags() == self.flags, "a refused write changed the validity of caches"
        assert float(self.loss.value()) == self.value


# -- the symptom -------------------------------------------------------------------------------
def test_complex_events_are_refused_not_read_as_their_real_part():
    """The symptom: Data(x + 0.5j) gave the NLL of x. Now refused; x itself still equals scipy."""
    loss, _ = _loss("sym", zcache.Data(X, obs="x", name="x_sym"))
    assert float(loss.value()) == pytest.approx(_nll_reference(X, 0.3, 1.2, -8.0, 8.0), rel=1e-12)
    with pytest.raises(DataDtypeError, match=r"imaginary part.*\.real or abs\(\).*two observables"):
        zcache.Data(X + 0.5j, obs="x", name="x_sym_c")


@pytest.mark.parametrize("kind", sorted(BAD))
def test_data_constructor_refuses_values_that_are_not_real_numbers(kind):
    make, words = BAD[kind]
    with pytest.raises(DataDtypeError, match="x_new") as raised:
        zcache.Data(make(N), name="x_new")
    assert words in str(raised.value)


@pytest.mark.parametrize("kind", sorted(BAD))
def test_weights_that_are_not_real_numbers_are_refused(kind):
    make, words = BAD[kind]
    with pytest.raises(DataDtypeError, match="weights") as raised:
        zcache.Data(X, name="x_w_new", weights=make(N))
    assert words in str(raised.value)


@pytest.mark.parametrize("kind", sorted(BAD))
@pytest.mark.parametrize("padded", [False, True])
def test_set_data_refuses_values_that_are_not_real_numbers_and_changes_nothing(kind, padded):
    make, words = BAD[kind]
    data = zcache.Data(X, obs="x", name=f"x_set_{kind}", capacity="auto" if padded else None)
    loss, _ = _loss(f"set_{kind}_{padded}", data)
    state = _State(data, loss)
    with pytest.raises(DataDtypeError, match="data unchanged") as raised:
        data.set_data(make(N // 2))
    assert words in str(raised.value)
    state.assert_unchanged()


@pytest.mark.parametrize("kind", sorted(BAD))
def test_set_data_of_weighted_data_refuses_bad_events_or_weights_and_changes_nothing(kind):
    make, words = BAD[kind]
    data = zcache.Data(X, obs="x", name=f"x_setw_{kind}", weights=np.full(N, 0.5))
    loss, _ = _loss(f"setw_{kind}", data)
    state = _State(data, loss)
    with pytest.raises(DataDtypeError):
        data.set_data(make(N // 2), weights=np.ones(N // 2))
    with pytest.raises(DataDtypeError) as raised:
        data.set_data(X[: N // 2], weights=make(N // 2))
    assert words in str(raised.value)
    state.assert_unchanged()


@pytest.mark.parametrize("kind", sorted(BAD_TENSORS))
@pytest.mark.parametrize("what", ["events", "weights"])
def test_traced_set_data_refuses_tensors_that_are_not_real_numbers_and_changes_nothing(kind, what):
    make, words = BAD_TENSORS[kind]
    data = zcache.Data(X, obs="x", name=f"x_tr_{kind}_{what}", weights=np.ones(N))
    loss, mu = _loss(f"tr_{kind}_{what}", data)

    @zcache.function
    def write_and_evaluate(events, weights):
        data.set_data(events, weights=weights)
        return loss.value()

    good = write_and_evaluate(tf.constant(X[: N // 2]), tf.ones(N // 2, tf.float64))  # traced once, works
    assert float(good) == pytest.approx(_nll_reference(X[: N // 2], 0.3, 1.2, -8.0, 8.0), rel=1e-12)
    data.set_data(X, weights=np.ones(N))
    state = _State(data, loss)
    traces = write_and_evaluate.trace_count
    bad = make(N // 2)
    args = (bad, tf.ones(N // 2, tf.float64)) if what == "events" else (tf.constant(X[: N // 2]), bad)
    with pytest.raises(DataDtypeError) as raised:
        write_and_evaluate(*args)
    assert words in str(raised.value)
    state.assert_unchanged()
    assert write_and_evaluate.trace_count <= traces + 1  # the refused signature's own trace, nothing else
    assert float(write_and_evaluate(tf.constant(X[: N // 2]), tf.ones(N // 2, tf.float64))) == pytest.approx(
        float(good), rel=1e-12)


# -- tables and files --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(BAD))
def test_from_pandas_refuses_a_column_that_is_not_real_numbers(kind):
    pd = pytest.importorskip("pandas")
    make, words = BAD[kind]
    df = pd.DataFrame({"x": make(N), "y": X})
    with pytest.raises(DataDtypeError, match="column 'x'") as raised:
        zcache.Data.from_pandas(df, obs=["y", "x"], name="pd_bad")
    assert ("holds objects" if df["x"].dtype.kind == "O" else words) in str(raised.value)  # pandas: text is objects
    with pytest.raises(DataDtypeError, match="weights"):
        zcache.Data.from_pandas(df, obs="y", weights="x", name="pd_bad_w")


@pytest.mark.parametrize("kind", ["complex", "bool", "datetime"])
def test_from_numpy_refuses_a_field_that_is_not_real_numbers(kind):
    make, words = BAD[kind]
    bad = make(N)
    table = np.zeros(N, dtype=[("x", bad.dtype), ("y", np.float64)])
    table["x"], table["y"] = bad, X
    with pytest.raises(DataDtypeError, match="column 'x'") as raised:
        zcache.Data.from_numpy(table, obs="x", name="np_bad")
    assert words in str(raised.value)
    assert zcache.Data.from_numpy(table, obs="y", name="np_good").numpy().tolist() == X.tolist()


@pytest.mark.parametrize("kind", ["complex", "bool", "datetime", "timedelta"])
def test_chunks_from_npy_refuses_an_array_that_is_not_real_numbers_before_reading(tmp_path, kind):
    make, words = BAD[kind]
    path = os.path.join(tmp_path, f"{kind}.npy")
    np.save(path, make(N))
    with pytest.raises(DataDtypeError, match="nothing read") as raised:
        Chunks.from_npy(path, 100)
    assert words in str(raised.value)


def test_chunked_loss_of_complex_npy_was_the_real_parts_loss_and_is_now_refused(tmp_path):
    """The symptom through the chunk reader: a file of x + 0.5j summed as x."""
    real, cplx = os.path.join(tmp_path, "x.npy"), os.path.join(tmp_path, "xc.npy")
    np.save(real, X)
    np.save(cplx, X + 0.5j)
    mu = zcache.Parameter("mu_npy", 0.3, lower=-2.0, upper=2.0)
    loss = ChunkedLoss(Gaussian(Space("x", -8.0, 8.0), mu, 1.2), Chunks.from_npy(real, 150))
    assert float(loss.value()) == pytest.approx(_nll_reference(X, 0.3, 1.2, -8.0, 8.0), rel=1e-12)
    with pytest.raises(DataDtypeError, match=r"\.real"):
        Chunks.from_npy(cplx, 150)


@pytest.mark.parametrize("kind", ["complex", "bool"])
def test_chunks_from_array_and_batches_refuse_values_that_are_not_real_numbers(kind):
    make, _ = BAD[kind]
    with pytest.raises(DataDtypeError):
        Chunks.from_array(make(N), 100)
    with pytest.raises(DataDtypeError):
        Chunks.from_batches([X[:100], make(100)])


# -- complex inputs where they are legitimate -------------------------------------------------
def test_complex_data_by_request_feed_a_cache_and_are_refused_as_an_observable():
    """dtype=complex: a model of one's own computes with them; a zcache model's observable refuses them."""
    z = zcache.Data(X + 0.5j, name="z_ok", dtype=complex)
    assert z.np_dtype == np.complex128
    norm2 = zcache.CachedTensor(lambda: tf.reduce_sum(tf.math.real(z.value() * tf.math.conj(z.value()))),
                                name="norm2")
    assert float(norm2.value()) == pytest.approx(float(np.sum(X**2 + 0.25)), rel=1e-12)
    _ = z.set_data(X[:10] + 1j)  # reals and complex numbers both go in
    assert float(norm2.value()) == pytest.approx(float(np.sum(X[:10] ** 2 + 1.0)), rel=1e-12)
    with pytest.raises(DataDtypeError, match=r"real observables.*\.real"):
        _loss("cplx_obs", zcache.Data(X + 0.5j, obs="x", name="z_obs", dtype=complex))
    with pytest.raises(DataDtypeError, match="bool"):
        zcache.Data(X > 0, name="z_bool", dtype=complex)
    with pytest.raises(DataError, match="dtype must be None, float or complex"):
        zcache.Data(X, name="z_int", dtype=np.int32)
    assert zcache.Data(np.arange(3), name="i_as_f", dtype=float).np_dtype == np.float64


def test_integer_events_are_legal_and_read_as_floats():
    k = np.arange(-3, 4)
    loss, _ = _loss("int", zcache.Data(k, obs="x", name="k_int"))
    assert float(loss.value()) == pytest.approx(_nll_reference(k.astype(float), 0.3, 1.2, -8.0, 8.0), rel=1e-12)
    _ = loss.data.set_data(np.arange(5, dtype=np.uint8))  # unsigned too
    ref = _nll_reference(np.arange(5.0), 0.3, 1.2, -8.0, 8.0)
    assert float(loss.value()) == pytest.approx(ref, rel=1e-12)


# -- binned data -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(BAD))
@pytest.mark.parametrize("what", ["counts", "edges", "variances"])
def test_binned_data_refuse_counts_edges_variances_that_are_not_real_numbers(kind, what):
    make, words = BAD[kind]
    args = {"counts": np.array([3.0, 4.0, 5.0]), "edges": np.array([0.0, 1.0, 2.0, 3.0]), "variances": None}
    args[what] = make(4 if what == "edges" else 3)
    with pytest.raises(DataDtypeError, match=f"the {'bin edges' if what == 'edges' else what}") as raised:
        BinnedData(args["counts"], args["edges"], variances=args["variances"], name="h_bad")
    assert words in str(raised.value)


@pytest.mark.parametrize("kind", ["complex", "bool", "string"])
def test_set_counts_refuses_values_that_are_not_real_numbers_eager_and_traced(kind):
    make, _ = BAD[kind]
    tmake, _ = BAD_TENSORS[kind]
    h = BinnedData([3.0, 4.0, 5.0], [0.0, 1.0, 2.0, 3.0], name=f"h_set_{kind}")
    mu = zcache.Parameter(f"mu_h_{kind}", 1.5, lower=0.0, upper=3.0)
    loss = BinnedNLL(Gaussian(Space("x", 0.0, 3.0), mu, 1.0), h)
    before = float(loss.value())
    with pytest.raises(DataDtypeError, match="the counts"):
        h.set_counts(make(3))
    with pytest.raises(DataDtypeError, match="the variances"):
        h.set_counts([1.0, 2.0, 3.0], variances=make(3))

    @zcache.function
    def write(c):
        h.set_counts(c)
        return loss.value()

    with pytest.raises(DataDtypeError, match="the counts"):
        write(tmake(3))
    assert h.counts.tolist() == [3.0, 4.0, 5.0] and h.variances.tolist() == [3.0, 4.0, 5.0]
    assert float(loss.value()) == before


class _ComplexHist:
    """A histogram duck type whose values are complex (what from_hist must not cast)."""

    class _Axis:
        edges = np.array([0.0, 1.0, 2.0])
        name = "x"

    axes = (_Axis(),)

    def values(self):
        return np.array([1.0 + 2j, 3.0])

    def variances(self):
        return None


def test_from_hist_and_templates_refuse_complex_values():
    with pytest.raises(DataDtypeError, match=r"\.real"):
        BinnedData.from_hist(_ComplexHist())
    with pytest.raises(DataDtypeError, match=r"\.real"):
        BinnedData.from_numpy(X + 0.5j, bins=4)
    with pytest.raises(DataDtypeError, match=r"\.real"):
        BinnedData.from_numpy(zcache.Data(X + 0.5j, name="z_hist", dtype=complex), bins=4)
    data = BinnedData([3.0, 4.0], [0.0, 1.0, 2.0])
    with pytest.raises(DataDtypeError, match=r"\.real"):
        Template(data, [np.array([1.0, 2.0]), np.array([1.0 + 1j, 2.0])])


# -- batched and toy losses, distributed parts ---------------------------------------------------
@pytest.mark.parametrize("kind", ["complex", "bool", "string"])
def test_batched_loss_refuses_events_weights_and_starts_that_are_not_real_numbers(kind):
    from zcache.scale import BatchedLoss

    make, words = BAD[kind]
    data = zcache.Data(X, obs="x", name=f"x_b_{kind}")
    loss, mu = _loss(f"b_{kind}", data)
    state = _State(data, loss)
    batched = BatchedLoss.of(loss, [mu])
    events = np.stack([X[:50], X[50:100]])
    with pytest.raises(DataDtypeError, match="events") as raised:
        batched.value_and_gradient(np.full((2, 1), 0.3), np.stack([make(50), make(50)]))
    assert words in str(raised.value)
    with pytest.raises(DataDtypeError, match="weights"):
        batched.value_and_gradient(np.full((2, 1), 0.3), events, np.stack([make(50), make(50)]))
    with pytest.raises(DataDtypeError, match="start"):
        batched.minimize(np.array([0.3 + 1j]) if kind == "complex" else make(1), events)
    state.assert_unchanged()


def test_run_toys_refuses_complex_start_values():
    from zcache.toys import run_toys

    data = zcache.Data(X, obs="x", name="x_toys")
    loss, mu = _loss("toys", data)
    state = _State(data, loss)
    with pytest.raises(DataDtypeError, match=r"run_toys: start.*\.real"):
        run_toys(loss.model, loss, 2, 50, start=[0.3 + 0.1j], seed=1)
    state.assert_unchanged()
    assert float(mu) == 0.3


@pytest.mark.parametrize("kind", ["complex", "bool", "object"])
def test_distributed_loss_refuses_array_parts_that_are_not_real_numbers_before_sending(kind):
    from zcache.scale import DistributedLoss

    make, words = BAD[kind]

    def build(events):  # pragma: no cover - never runs: the parts are refused first
        raise AssertionError("a bad part reached build")

    with pytest.raises(DataDtypeError, match="part 1.*Nothing was sent") as raised:
        DistributedLoss(build, [X[:100], make(100)], client=None)
    assert words in str(raised.value)


def test_from_root_refuses_a_branch_that_is_not_real_numbers(tmp_path):
    uproot = pytest.importorskip("uproot")
    path = os.path.join(tmp_path, "flags.root")
    with uproot.recreate(path) as f:
        f["t"] = {"x": X[:50], "flag": X[:50] > 0.0}
    with pytest.raises(DataDtypeError, match=r"column 'flag'.*astype\(float\)"):
        zcache.Data.from_root(path, "t", ["x", "flag"], name="root_bad")
    assert zcache.Data.from_root(path, "t", "x", cut="flag", name="root_cut").nevents == int((X[:50] > 0).sum())
