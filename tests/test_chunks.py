"""zcache.scale (Chunks, ChunkedLoss): events in chunks, a loss summed chunk by chunk, files read block by block.

References: the unchunked :class:`zcache.loss.UnbinnedNLL` on all events (itself checked against
scipy elsewhere), scipy.stats for a truncated normal NLL, numpy's own ``np.load`` for the
files, and the unchunked fit.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf
from helpers import slow_modes

import zcache
import zcache.scale._chunks
from zcache.amplitude import AmplitudePdf, CoherentSum, ComplexParameter, DalitzKinematics, NonResonant, Resonance
from zcache.exceptions import DataError, DataRangeError, DataShapeError, IllegalInGraphModeError, ModelError
from zcache.loss import ExtendedUnbinnedNLL, GaussianConstraint, UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf
from zcache.scale import ChunkedLoss, Chunks, npy_blocks, release_freed_memory

SPACE = Space("x", -5.0, 5.0)


def _events(n: int = 3000, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.normal(0.3, 1.0, n // 2), rng.exponential(2.0, n - n // 2)])
    return x[(x > -5) & (x < 5)]


def _gauss_exp(tag: str, extended: bool = True) -> tuple[SumPdf, list[zcache.Parameter]]:
    mu = zcache.Parameter(f"mu_{tag}", 0.2, lower=-1.0, upper=1.0)
    sigma = zcache.Parameter(f"sigma_{tag}", 1.2, lower=0.1, upper=3.0)
    lam = zcache.Parameter(f"lam_{tag}", -0.4, lower=-2.0, upper=-0.01)
    if extended:
        yields = [zcache.Parameter(f"ns_{tag}", 1400.0, lower=0.0, upper=1e4),
                  zcache.Parameter(f"nb_{tag}", 1500.0, lower=0.0, upper=1e4)]
        model = SumPdf([Gaussian(SPACE, mu, sigma), Exponential(SPACE, lam)], yields=yields)
    else:
        frac = zcache.Parameter(f"f_{tag}", 0.5, lower=0.0, upper=1.0)
        model = SumPdf([Gaussian(SPACE, mu, sigma), Exponential(SPACE, lam)], fracs=[frac])
    return model, [mu, sigma, lam]


def _close(a: np.ndarray, b: np.ndarray, rel: float) -> None:
    a, b = np.asarray(a, float), np.asarray(b, float)
    np.testing.assert_allclose(a, b, rtol=rel, atol=rel * max(1.0, float(np.abs(b).max())))


# -- chunks -------------------------------------------------------------------------------------
def test_from_array_splits_in_order_with_weights() -> None:
    x = np.arange(10.0)
    w = np.linspace(0.5, 1.5, 10)
    chunks = Chunks.from_array(x, 4, name="a", obs="x", weights=w)
    assert chunks.sizes == [4, 4, 2] and chunks.nevents == 10 and len(chunks) == 3 and chunks.is_weighted
    assert [d.name for d in chunks] == ["a[0]", "a[1]", "a[2]"] and chunks[1].obs == ("x",)
    np.testing.assert_array_equal(chunks.numpy(), x)
    np.testing.assert_array_equal(np.concatenate([d.weights_data.numpy() for d in chunks]), w)
    assert "3 chunks, 10 events" in repr(chunks)


def test_npy_blocks_and_from_npy_read_the_file_block_by_block(tmp_path) -> None:
    path = tmp_path / "events.npy"
    events = np.random.default_rng(0).uniform(size=(1003, 2))
    np.save(path, events)
    blocks = list(npy_blocks(path, 250))
    assert [len(b) for b in blocks] == [250, 250, 250, 250, 3]
    np.testing.assert_array_equal(np.concatenate(blocks), np.load(path))
    np.testing.assert_array_equal(np.concatenate(list(npy_blocks(path, 100, start=17, stop=433))), events[17:433])
    chunks = Chunks.from_npy(path, 400, obs=("a", "b"), start=3)
    assert chunks.sizes == [400, 400, 200] and chunks.name == "events" and chunks[0].obs == ("a", "b")
    np.testing.assert_array_equal(chunks.numpy(), events[3:])
    # other dtypes and the version-2 header
    ints = tmp_path / "ints.npy"
    np.save(ints, np.arange(7, dtype=np.int32))
    assert [b.tolist() for b in npy_blocks(ints, 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    v2 = tmp_path / "v2.npy"
    with open(v2, "wb") as f:
        np.lib.format.write_array(f, events[:5], version=(2, 0))
    np.testing.assert_array_equal(np.concatenate(list(npy_blocks(v2, 2))), events[:5])


def test_bad_files_and_sizes_are_named_errors(tmp_path) -> None:
    text = tmp_path / "x.npy"
    text.write_text("not numpy")
    with pytest.raises(DataError, match="not a .npy file"):
        list(npy_blocks(text, 10))
    fortran = tmp_path / "f.npy"
    np.save(fortran, np.asfortranarray(np.ones((4, 3))))
    with pytest.raises(DataError, match="Fortran"):
        list(npy_blocks(fortran, 2))
    good = tmp_path / "g.npy"
    np.save(good, np.ones(5))
    with pytest.raises(DataError, match="outside the 5 rows"):
        list(npy_blocks(good, 2, start=3, stop=9))
    truncated = tmp_path / "t.npy"
    truncated.write_bytes(good.read_bytes()[:-8])
    with pytest.raises(DataError, match="ended early"):
        list(npy_blocks(truncated, 2))
    for size in (0, -3, 2.5, True, "7"):
        with pytest.raises(DataError, match="positive whole number"):
            Chunks.from_array(np.ones(5), size)
    with pytest.raises(DataShapeError, match="one weight per event"):
        Chunks.from_array(np.ones(5), 2, weights=np.ones(4))
    with pytest.raises(DataError, match="at least one dataset"):
        Chunks([])
    with pytest.raises(DataError, match="zcache.Data"):
        Chunks([np.ones(3)])
    with pytest.raises(DataShapeError, match="must be alike"):
        Chunks([zcache.Data(np.ones(3)), zcache.Data(np.ones((3, 2)))])
    with pytest.raises(DataShapeError, match="must be alike"):
        Chunks([zcache.Data(np.ones(3)), zcache.Data(np.ones(3), weights=np.ones(3))])


def test_from_root_iterates_the_tree(tmp_path) -> None:
    uproot = pytest.importorskip("uproot")
    path = tmp_path / "t.root"
    rng = np.random.default_rng(5)
    a, b, w = rng.normal(size=905), rng.normal(size=905), rng.uniform(0.5, 1.5, 905)
    with uproot.recreate(path) as f:
        f["events"] = {"a": a, "b": b, "w": w}
    chunks = Chunks.from_root(path, "events", ["b", "a"], 300, weights="w")
    assert chunks.sizes == [300, 300, 300, 5] and chunks[0].obs == ("b", "a") and chunks.name == "events"
    np.testing.assert_array_equal(chunks.numpy(), np.column_stack([b, a]))
    np.testing.assert_array_equal(np.concatenate([d.weights_data.numpy() for d in chunks]), w)
    one = Chunks.from_root(path, "events", "a", 1000)
    np.testing.assert_array_equal(one.numpy(), a)
    with pytest.raises(DataError, match="no tree"):
        Chunks.from_root(path, "nope", "a", 10)
    with pytest.raises(DataError, match="no branch"):
        Chunks.from_root(path, "events", ["a", "zz"], 10)


# -- the loss -------------------------------------------------------------------------------------
def test_value_matches_scipy_truncated_normal() -> None:
    x = _events()
    mu = zcache.Parameter("mu_sp", 0.1)
    loss = ChunkedLoss(Gaussian(SPACE, mu, 1.3), Chunks.from_array(x, 700))
    ref = -scipy.stats.truncnorm.logpdf(x, (-5 - 0.1) / 1.3, (5 - 0.1) / 1.3, loc=0.1, scale=1.3).sum()
    assert loss.factorized  # one shape: sum_i log f(x_i) per chunk, N log Z once
    assert float(loss.value()) == pytest.approx(ref, rel=1e-12)
    value, grad = loss.value_gradient_at([0.1])
    n, z = len(x), 1.3 * np.sqrt(2 * np.pi) * (scipy.stats.norm.cdf(4.9 / 1.3) - scipy.stats.norm.cdf(-5.1 / 1.3))
    dz = 1.3 * (scipy.stats.norm.pdf(-5.1 / 1.3) - scipy.stats.norm.pdf(4.9 / 1.3)) * np.sqrt(2 * np.pi) / 1.3
    assert float(value) == pytest.approx(ref, rel=1e-12)
    assert float(grad[0]) == pytest.approx(-np.sum(x - 0.1) / 1.3**2 + n * dz / z, rel=1e-9)


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not release_freed_memory(), reason="the C library is not glibc")
def test_freed_heap_memory_goes_back_to_the_system() -> None:
    """Freed blocks in the middle of glibc's heap stay resident until release_freed_memory returns them."""
    big = np.ones(8 << 17)  # a freed 8 MiB mapping raises glibc's mmap threshold above 1 MiB
    del big
    blocks = [np.ones(1 << 17) for _ in range(300)]  # 300 x 1 MiB, now from the heap
    keep = blocks[-1]  # the heap's top stays in use: glibc's own trimming cannot reach the rest
    del blocks
    before = _resident_mib()
    release_freed_memory()
    assert before - _resident_mib() > 150, "the freed 299 MiB stayed resident"
    assert keep.sum() == 1 << 17


def test_each_chunk_returns_its_freed_memory(monkeypatch) -> None:
    """ChunkedLoss releases freed memory after every chunk (and the once-terms), value and gradient alike, and
    after each chunk of precompute's evaluation."""
    calls = []
    monkeypatch.setattr(zcache.scale._chunks, "release_freed_memory", lambda: calls.append(1) or True)
    mu = zcache.Parameter("mu_release", 0.1)
    model = Gaussian(Space("x", -5.0, 5.0), mu, 1.0)
    loss = ChunkedLoss(model, Chunks.from_array(np.random.default_rng(3).normal(0.2, 1.0, 500), 200))
    loss.value()
    assert len(calls) == len(loss.parts) + (1 if model.factorizes else 0)
    calls.clear()
    loss.value_gradient_at([0.15], [mu])
    assert len(calls) == len(loss.parts) + (1 if model.factorizes else 0)
    calls.clear()
    loss.__zcache_evaluate__()  # precompute's evaluation, chunk by chunk
    assert len(calls) == len(loss.parts)


@pytest.mark.slow  # about 18 CPU seconds in the fast loop (CONTRIBUTING.md, "Test times")
def test_value_gradient_hessian_equal_the_unchunked_loss() -> None:
    # extended, weighted and constrained at once (two chunks: each traces its own graphs)
    x = _events()
    model, (mu, sigma, _) = _gauss_exp("equal")
    weights = np.random.default_rng(1).uniform(0.2, 1.8, len(x))
    constraints = [GaussianConstraint([mu, sigma], [0.25, 1.1], [0.1, 0.2])]
    whole = ExtendedUnbinnedNLL(model, zcache.Data(x, weights=weights), constraints=constraints)
    chunked = ChunkedLoss(model, Chunks.from_array(x, 1500, weights=weights), extended=True, constraints=constraints)
    assert len(chunked.chunks) == 2 and chunked.is_weighted
    assert [p.name for p in chunked.params] == [p.name for p in whole.params]
    at = np.array([float(p) for p in whole.params]) * 1.01
    for offset in (0.0, 123.5):
        v1, g1 = whole.value_gradient_at(at, offset=offset)
        v2, g2 = chunked.value_gradient_at(at, offset=offset)
        _close(v2, v1, 1e-12)
        _close(g2, g1, 1e-10)
        assert float(chunked.value_at(at, offset=offset)) == pytest.approx(float(v1), rel=1e-12)
    # differences of exact gradients (each chunk's own steps), before precompute
    _close(chunked.hessian_at(at), whole.hessian_at(at), 1e-6)
    # exact, through the chunks' valid caches (no precompute), as through the whole loss's
    _close(chunked.hessian_at(at, exact=True), whole.hessian_at(at, exact=True), 1e-10)
    # after precompute every cache on the fitted parameters' path is bypassed: exact Hessians
    zcache.precompute(whole, floating=whole.params)
    zcache.precompute(chunked, floating=chunked.params)
    exact = whole.hessian_at(at)
    _close(chunked.hessian_at(at, exact=True), exact, 1e-10)
    _close(chunked.hessian_at(at), exact, 1e-6)  # by default differences: one gradient's memory per chunk
    assert not chunked.factorized  # a mixture: each chunk evaluates the normalized density
    assert float(chunked.value()) == pytest.approx(float(whole.value()), rel=1e-12)
    terms_whole = whole.weighted_event_terms()[0]
    terms = chunked.weighted_event_terms()
    _close(np.concatenate([t.numpy() for t, _ in terms]), terms_whole[0].numpy(), 1e-12)
    _close(np.concatenate([w.numpy() for _, w in terms]), terms_whole[1].numpy(), 0.0)


@slow_modes("mode", "graph")  # [graph]: about 6 CPU seconds (CONTRIBUTING.md, "Test times")
def test_new_events_in_the_chunks_are_counted(mode) -> None:
    # set_data on the chunks with another total: the extended term's N (a data-only cache, computed
    # once) follows, in values, gradients, a precomputed objective and a fit (it kept the first N:
    # the FitMachine's chunked fits ended at nsig 179 against 279)
    model, _ = _gauss_exp(f"count_{mode}")
    chunks = Chunks.from_array(_events(1000, seed=5), 500, name=f"count_{mode}")
    chunked = ChunkedLoss(model, chunks, extended=True)
    whole = ExtendedUnbinnedNLL(model, zcache.Data(_events(1000, seed=5)))
    at = np.array([float(p) for p in whole.params])
    obj = chunked.objective(precompute=True)
    for n, seed in ((1000, 5), (600, 6), (1400, 7)):
        x = _events(n, seed=seed)
        k = len(x) // 3
        chunks[0].set_data(x[:k])
        chunks[1].set_data(x[k:])
        whole.data.set_data(x)
        v1, g1 = whole.value_gradient_at(at)
        _close(chunked.value_gradient_at(at)[0], v1, 1e-12)
        _close(chunked.value_gradient_at(at)[1], g1, 1e-10)
        _close(obj.value_gradient(at)[1], g1, 1e-10)
    if not mode:
        return  # an eager fit takes 10 s; the values above are what it would read
    fitted = Minuit(tol=1e-4).minimize(chunked)
    reference = Minuit(tol=1e-4).minimize(whole)
    for name, value in reference.values.items():
        assert fitted.values[name] == pytest.approx(value, abs=2e-3 * reference.errors[name])


@pytest.mark.slow  # about 7 CPU seconds in the fast loop (CONTRIBUTING.md, "Test times")
def test_fit_equals_the_unchunked_fit_and_runs_migrad() -> None:
    x = _events(4000, seed=11)
    model, _ = _gauss_exp("fit")
    whole = ExtendedUnbinnedNLL(model, zcache.Data(x))
    chunked = ChunkedLoss(model, Chunks.from_array(x, 2000), extended=True)
    start = np.array([float(p) for p in whole.params])
    r1 = Minuit().minimize(whole)
    zcache.set_values(whole.params, start)
    r2 = Minuit().minimize(chunked)
    assert r2.valid and r2.path == "migrad" and r2.fallback is None  # never a compiled whole-fit program
    for name in r1.values:
        assert r2.values[name] == pytest.approx(r1.values[name], abs=1e-4 * r1.errors[name])
        assert r2.errors[name] == pytest.approx(r1.errors[name], rel=1e-4)
    assert r2.fmin == pytest.approx(r1.fmin, abs=1e-6)
    # MINOS on the chunked fit, and a refit with a parameter fixed (floating flag toggled)
    minos = r2.minos(["mu_fit"])
    lo, hi, ok = minos["mu_fit"]
    assert ok and lo < 0 < hi and abs(lo) == pytest.approx(r2.errors["mu_fit"], rel=0.1)
    lam = next(p for p in chunked.params if p.name == "lam_fit")
    lam.floating = False
    try:
        r3 = Minuit().minimize(chunked)
        assert "lam_fit" not in r3.values and r3.valid
    finally:
        lam.floating = True


# a chunked loss evaluated eagerly: make test keeps its traced calls (every other test here and the FitMachine's
# chunked_fit) and the eager evaluation of chunk parts (the UnbinnedNLL's, test_loss)
@pytest.mark.exhaustive
def test_eager_mode_gives_the_same_numbers() -> None:
    x = _events(1200)
    model, _ = _gauss_exp("eager")
    chunked = ChunkedLoss(model, Chunks.from_array(x, 500), extended=True)
    at = np.array([float(p) for p in chunked.params])
    traced = [t.numpy() for t in chunked.value_gradient_at(at)]
    with zcache.set_graph_mode(False):
        eager = [t.numpy() for t in chunked.value_gradient_at(at)]
    _close(eager[0], traced[0], 1e-12)
    _close(eager[1], traced[1], 1e-10)


@pytest.mark.slow  # about 3.5 CPU seconds (CONTRIBUTING.md, "Test times")
def test_threads_and_traces() -> None:
    """Two threads fitting at different points get their own sums; a user's GradientTape sees the chunks; a
    user's tf.function is refused by name."""
    x = _events(1000)
    model, _ = _gauss_exp("threads")
    chunked = ChunkedLoss(model, Chunks.from_array(x, 500), extended=True)
    base = np.array([float(p) for p in chunked.params])
    points = [base * (1 + 0.01 * k) for k in range(6)]
    serial = [chunked.value_gradient_at(p)[1].numpy() for p in points]
    with ThreadPoolExecutor(2) as pool:
        threaded = list(pool.map(lambda p: chunked.value_gradient_at(p)[1].numpy(), points * 2))
    for got, want in zip(threaded, serial * 2, strict=True):
        np.testing.assert_array_equal(got, want)

    # a user's GradientTape around value() (eager): the chunks' gradients, as for the unchunked loss
    whole = ExtendedUnbinnedNLL(model, zcache.Data(x))
    variables = [p.variable for p in chunked.params]
    with tf.GradientTape() as tape:
        value = chunked.value()
    with tf.GradientTape() as tape_whole:
        value_whole = whole.value()
    _close(value, value_whole, 1e-12)
    _close(tape.gradient(value, variables), tape_whole.gradient(value_whole, variables), 1e-10)

    @tf.function
    def users_function() -> tf.Tensor:
        return chunked.value()

    with pytest.raises(IllegalInGraphModeError, match="ChunkedLoss"):
        users_function()


def test_bad_input_is_refused() -> None:
    model, _ = _gauss_exp("bad", extended=False)
    chunks = Chunks.from_array(_events(300), 100)
    with pytest.raises(ModelError, match="Model"):
        ChunkedLoss("model", chunks)
    with pytest.raises(ModelError, match="zcache.scale.Chunks"):
        ChunkedLoss(model, zcache.Data(_events(300)))
    with pytest.raises(ModelError, match="not extended"):
        ChunkedLoss(model, chunks, extended=True)
    with pytest.raises(DataRangeError, match="outside"):
        ChunkedLoss(model, Chunks.from_array(np.array([0.0, 1.0, 7.0]), 2))


# -- caches per chunk: an amplitude model -------------------------------------------------------------
@pytest.mark.slow  # about 8 CPU seconds in the fast loop (CONTRIBUTING.md, "Test times")
def test_amplitude_caches_are_per_chunk_and_only_moved_columns_recompute() -> None:
    kin = DalitzKinematics(1.86966, 0.493677, 0.13957039, 0.13957039)
    mc = kin.sample(2000, name="phsp_chunks")
    kst = Resonance(kin, ("12", "13"), 0.8955, 0.0473, 1, name="Kst_chunks")
    k0 = Resonance(kin, ("12", "13"), 1.425, 0.27, 0, name="K0_chunks")
    total = CoherentSum([(1.0, NonResonant(kin, name="NR_chunks")),
                         (ComplexParameter("c_Kst_chunks", 0.3 + 0.2j), kst),
                         (ComplexParameter("c_K0_chunks", 0.5 - 0.5j), k0)])
    pdf = AmplitudePdf(total, mc)
    events = kin.sample(2000, name="data_chunks").numpy()
    whole = UnbinnedNLL(pdf, zcache.Data(events, name="all"))
    chunked = ChunkedLoss(pdf, Chunks.from_array(events, 1000, name="part"))
    at = np.array([float(p) for p in chunked.params])
    v1, g1 = whole.value_gradient_at(at)
    v2, g2 = chunked.value_gradient_at(at)
    _close(v2, v1, 1e-12)
    _close(g2, g1, 1e-10)
    assert chunked.factorized  # |A|^2 per chunk; N log of the phase-space integral once per evaluation
    # line shapes fixed, couplings float: precompute caches every chunk's columns, but holds no value
    # while it evaluates the chunks (the first call fills what stays cached)
    with zcache.set_cache_budget(0):  # empties every cache of the process (they recompute when read)
        pass
    obj = chunked.objective(precompute=True)
    names = {c.name for c in obj.report.cached}
    for amp in (kst, k0):
        assert {f"{amp.name}[part[{k}]]" for k in range(2)} <= names
    assert zcache.cache_budget_info().held_bytes == 0
    obj.value_gradient(obj.start)
    assert zcache.cache_budget_info().held_bytes > 0
    before = {c.name: c.stats["misses"] for c in obj.report.caches}
    kst.width.set_value(0.05)  # a fixed width moved: that resonance's column recomputes in each chunk, nothing else
    obj.value_gradient(obj.start)
    moved = {c.name for c in obj.report.caches if c.stats["misses"] != before[c.name]}
    assert {f"{kst.name}[part[{k}]]" for k in range(2)} <= moved
    assert not any(n.startswith(k0.name) for n in moved)
    _close(chunked.value_gradient_at(at)[0], whole.value_gradient_at(at)[0], 1e-12)
    # a cache budget of half what the chunks' caches hold: the same numbers; visiting the chunks
    # forwards then backwards, the chunk evaluated last is still held when the next call starts
    reference = obj.value_gradient(obj.start * 1.001)
    held = zcache.cache_budget_info().held_bytes
    with zcache.set_cache_budget(held // 2):
        # what a chunk's loss reads: its amplitude matrix (the columns below it are read to build it)
        columns = [c for c in obj.report.cached if c.name.startswith("A_k[part")]
        assert len(columns) == 2
        for _ in range(3):
            hits = sum(c.stats["hits"] for c in columns)
            got = obj.value_gradient(obj.start * 1.001)
            np.testing.assert_array_equal(got[0], reference[0])
            np.testing.assert_array_equal(got[1], reference[1])
            assert zcache.cache_budget_info().held_bytes <= held // 2
        assert sum(c.stats["hits"] for c in columns) > hits  # the last call read the matrix of a chunk still held
        assert zcache.cache_budget_info().evictions > 0
