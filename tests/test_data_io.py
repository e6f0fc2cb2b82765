"""Data.from_pandas / from_numpy / from_root against plain numpy selections; bad input creates nothing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import zcache
from zcache._engine.dependencies import GRAPH
from zcache.exceptions import DataDtypeError, DataError, DataShapeError, EmptyDataError
from zcache.models import Space

N = 500


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    """A structured array: two float columns, an int column and a flag."""
    rng = np.random.default_rng(11)
    out = np.zeros(N, dtype=[("x", "f8"), ("y", "f8"), ("n", "i8"), ("ok", "?")])
    out["x"] = rng.normal(0.0, 2.0, N)
    out["y"] = rng.uniform(-1.0, 1.0, N)
    out["n"] = rng.integers(0, 5, N)
    out["ok"] = rng.uniform(size=N) > 0.3
    return out


def _expected(table, obs, lo=None, hi=None, mask=None):
    """The reference selection with numpy only."""
    keep = np.ones(len(table), dtype=bool)
    if lo is not None:
        for o, a, b in zip(obs if isinstance(obs, list) else [obs], lo, hi, strict=True):
            keep &= (table[o] >= a) & (table[o] <= b)
    if mask is not None:
        keep &= mask
    cols = [table[o][keep] for o in (obs if isinstance(obs, list) else [obs])]
    return cols[0] if len(cols) == 1 else np.column_stack(cols)


def _loaders(table, tmp_path):
    """One loader per source: (label, function(obs, space, cut, name) -> Data)."""
    import uproot

    df = pd.DataFrame(table)
    path = tmp_path / "events.root"
    with uproot.recreate(path) as f:
        f["dir/events"] = {name: table[name] for name in table.dtype.names}
    return {
        "pandas": lambda *a, **k: zcache.Data.from_pandas(df, *a, **k),
        "numpy": lambda *a, **k: zcache.Data.from_numpy(table, *a, **k),
        "root": lambda *a, **k: zcache.Data.from_root(path, "dir/events", *a, **k),
    }


@pytest.fixture(scope="module")
def loaders(table, tmp_path_factory):
    return _loaders(table, tmp_path_factory.mktemp("root"))


SOURCES = ["pandas", "numpy", "root"]


@pytest.mark.parametrize("source", SOURCES)
def test_columns_only(loaders, table, source):
    """Without range or cut every event is loaded, columns in the order of obs, obs set."""
    data = loaders[source](["y", "x"], name="xy")
    assert data.obs == ("y", "x") and data.name == "xy" and data.np_dtype == np.float64
    np.testing.assert_array_equal(data.numpy(), _expected(table, ["y", "x"]))
    single = loaders[source]("x")
    assert single.obs == ("x",) and single.numpy().shape == (N,)
    np.testing.assert_array_equal(single.numpy(), table["x"])


@pytest.mark.parametrize("source", SOURCES)
def test_space_drops_events_outside(loaders, table, source):
    """Events outside the space's range (limits inclusive) are dropped, as in zfit."""
    space = Space("x", -1.0, 2.0) * Space("y", 0.0, 1.0)
    data = loaders[source](["x", "y"], space=space)
    np.testing.assert_array_equal(data.numpy(), _expected(table, ["x", "y"], [-1.0, 0.0], [2.0, 1.0]))
    assert 0 < data.nevents < N
    # a range on one observable of two; the space's order need not be obs' order
    part = loaders[source](["y", "x"], space=Space("x", -1.0, 2.0))
    np.testing.assert_array_equal(part.numpy(), _expected(table, ["y", "x"], [-np.inf, -1.0], [np.inf, 2.0]))


def test_space_is_duck_typed_and_inclusive(table):
    """Any object with obs, lower, upper works; events exactly at a limit stay."""

    class Range:
        obs = ("x",)
        lower = (float(table["x"][0]),)
        upper = (float(table["x"][0]),)

    data = zcache.Data.from_numpy(table, "x", space=Range())
    np.testing.assert_array_equal(data.numpy(), table["x"][table["x"] == table["x"][0]])


@pytest.mark.parametrize("source", SOURCES)
def test_cut_string_and_mask(loaders, table, source):
    """A query string over any column (not only obs) and a boolean mask select like numpy."""
    space = Space("x", -3.0, 3.0)
    by_string = loaders[source]("x", space=space, cut="ok and n >= 2 and y < 0.5")
    ref_mask = table["ok"] & (table["n"] >= 2) & (table["y"] < 0.5)
    np.testing.assert_array_equal(by_string.numpy(), _expected(table, "x", [-3.0], [3.0], ref_mask))
    by_mask = loaders[source]("x", space=space, cut=ref_mask)
    np.testing.assert_array_equal(by_mask.numpy(), by_string.numpy())


def test_from_pandas_keeps_ints_and_ignores_the_index(table):
    """Integer columns stay int64; a shuffled index does not matter (positions do)."""
    df = pd.DataFrame(table).sample(frac=1.0, random_state=1)
    data = zcache.Data.from_pandas(df, "n", cut="n > 2")
    assert data.np_dtype == np.int64
    np.testing.assert_array_equal(data.numpy(), df["n"].to_numpy()[df["n"].to_numpy() > 2])
    masked = zcache.Data.from_pandas(df, "x", cut=(df["y"] > 0).to_numpy())
    np.testing.assert_array_equal(masked.numpy(), df["x"].to_numpy()[df["y"].to_numpy() > 0])


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_loaded_data_fits_a_model(table):
    """A loaded dataset plugs into a loss by its obs."""
    from zcache.loss import UnbinnedNLL
    from zcache.models import Gaussian

    space = Space("x", -4.0, 4.0)
    data = zcache.Data.from_numpy(table, ["y", "x"], space=space)
    mu = zcache.Parameter("mu_io", 0.0)
    loss = UnbinnedNLL(Gaussian(space, mu, 2.0), data)
    assert np.isfinite(float(loss.value()))


# -- bad input: named errors, nothing created ---------------------------------------------------
def _nodes():
    return set(GRAPH.nx.nodes)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize(("kwargs", "error", "named"), [
    ({"obs": ["x", "nope"]}, DataShapeError, "nope"),
    ({"obs": "x", "space": Space("zz", 0.0, 1.0)}, DataShapeError, "zz"),
    ({"obs": "x", "cut": "missing_col > 0"}, DataShapeError, "missing_col"),
    ({"obs": "x", "space": Space("x", 100.0, 101.0)}, EmptyDataError, "no event"),
    ({"obs": "x", "cut": "y > 5"}, EmptyDataError, "no event"),
    ({"obs": "x", "cut": np.ones(3, dtype=bool)}, DataShapeError, "mask"),
    ({"obs": "x", "cut": np.ones(N)}, DataDtypeError, "boolean"),
    ({"obs": "x", "cut": "x +"}, DataError, "cannot be evaluated"),
])
def test_bad_input_raises_and_creates_nothing(loaders, source, kwargs, error, named):
    """Missing columns name the column; an empty selection is EmptyDataError; no Data is created."""
    before = _nodes()
    with pytest.raises(error, match=named):
        loaders[source](**kwargs)
    assert not _nodes() - before


def test_space_observable_must_be_loaded(table):
    """A space over a column that exists but is not in obs is refused (the range would be invisible)."""
    with pytest.raises(DataShapeError, match="among obs"):
        zcache.Data.from_numpy(table, "x", space=Space("y", 0.0, 1.0))


def test_bad_containers(table, tmp_path):
    """Plain arrays, non-frames, non-spaces, missing trees and jagged branches are refused by name."""
    import awkward as ak
    import uproot

    with pytest.raises(DataShapeError, match="structured"):
        zcache.Data.from_numpy(np.zeros((3, 2)), "x")
    with pytest.raises(TypeError, match="DataFrame"):
        zcache.Data.from_pandas(table, "x")
    with pytest.raises(TypeError, match="space"):
        zcache.Data.from_numpy(table, "x", space=(0.0, 1.0))
    with pytest.raises(DataShapeError, match="obs"):
        zcache.Data.from_numpy(table, ["x", "x"])
    path = tmp_path / "jagged.root"
    with uproot.recreate(path) as f:
        f["t"] = {"x": np.arange(3.0)}
        f["j"] = {"v": ak.Array([[1.0], [2.0, 3.0], []])}
    with pytest.raises(DataError, match="no tree 'nope'"):
        zcache.Data.from_root(path, "nope", "x")
    with pytest.raises(DataDtypeError, match="jagged"):
        zcache.Data.from_root(path, "j", "v")
    with pytest.raises(FileNotFoundError):
        zcache.Data.from_root(tmp_path / "absent.root", "t", "x")


def test_nan_and_text_columns(table):
    """NaN among the selected events is InvalidDataError; a text column DataDtypeError."""
    from zcache.exceptions import InvalidDataError

    df = pd.DataFrame({"x": [0.0, np.nan, 2.0], "s": ["a", "b", "c"]})
    with pytest.raises(InvalidDataError):
        zcache.Data.from_pandas(df, "x")
    # the range drops the NaN event (NaN fails every comparison)
    assert zcache.Data.from_pandas(df, "x", space=Space("x", -1.0, 3.0)).numpy().tolist() == [0.0, 2.0]
    with pytest.raises(DataDtypeError):
        zcache.Data.from_pandas(df, "s")


def test_from_pandas_weights_follow_the_selection():
    """sWeights from a column (or an array over all rows) are cut with their events."""
    df = pd.DataFrame({"x": [0.5, 1.5, 2.5, 9.0, 1.0], "sw": [1.0, -0.5, 2.0, 3.0, 0.25], "pt": [1, 2, 3, 4, 0]})
    data = zcache.Data.from_pandas(df, "x", space=Space("x", 0.0, 3.0), cut="pt > 0", weights="sw")
    keep = (df.x <= 3.0) & (df.pt > 0)
    np.testing.assert_array_equal(data.numpy(), df.x[keep].to_numpy())
    np.testing.assert_array_equal(data.weights.numpy(), df.sw[keep].to_numpy())
    by_array = zcache.Data.from_pandas(df, "x", space=Space("x", 0.0, 3.0), cut="pt > 0", weights=df.sw.to_numpy())
    np.testing.assert_array_equal(by_array.weights.numpy(), df.sw[keep].to_numpy())
    with pytest.raises(DataShapeError, match="sw2"):
        zcache.Data.from_pandas(df, "x", weights="sw2")
    with pytest.raises(DataShapeError, match="one entry per row"):
        zcache.Data.from_pandas(df, "x", weights=[1.0, 2.0])


def test_a_space_as_obs_names_the_columns(table):
    """zfit users write ``Data(array, obs=space)``: the Space stands for its names, in its order."""
    from zcache.models import Gaussian, ProductPdf

    sx, sy = Space("x", -10.0, 10.0), Space("y", -1.0, 1.0)
    xy = np.stack([table["x"], table["y"]], axis=1)
    ordered = zcache.Data(xy, name="ordered", obs=sx * sy)
    swapped = zcache.Data(xy[:, ::-1].copy(), name="swapped", obs=sy * sx)
    assert ordered.obs == ("x", "y") and swapped.obs == ("y", "x")
    assert zcache.Data(table["x"], name="one", obs=sx).obs == ("x",)
    model = ProductPdf([Gaussian(sx, 0.0, 2.0), Gaussian(sy, 0.0, 0.5)])
    np.testing.assert_allclose(model.pdf(swapped).numpy(), model.pdf(ordered).numpy(), rtol=1e-14)
    nodes = set(GRAPH.nx.nodes)
    for bad in (3.0, sx * sy):  # not names; two names for one column
        with pytest.raises(DataShapeError, match="must name each column once"):
            zcache.Data(table["x"], name="bad", obs=bad)
    assert set(GRAPH.nx.nodes) == nodes
