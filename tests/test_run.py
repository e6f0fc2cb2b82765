"""zcache.run: numpy conversion of results; the size of the top-level API."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import tensorflow as tf

import zcache


def test_run_converts_nested_structures():
    p = zcache.Parameter("p", 2.0)
    d = zcache.Data(np.arange(3.0))
    c = zcache.CachedTensor(lambda: d.value() * p.value())
    Pair = namedtuple("Pair", "a b")
    out = zcache.run({"t": tf.constant([1, 2]), "v": tf.Variable(3.0), "nested": [p, (d, c)],
                      "nt": Pair(tf.constant(1.0), 2), "np": np.ones(2), "none": None})
    assert out["t"].tolist() == [1, 2] and float(out["v"]) == 3.0
    assert float(out["nested"][0]) == 2.0
    assert out["nested"][1][0].tolist() == [0.0, 1.0, 2.0]
    assert out["nested"][1][1].tolist() == [0.0, 2.0, 4.0]
    assert isinstance(out["nested"][1], tuple) and isinstance(out["nt"], Pair) and out["nt"].b == 2
    assert out["none"] is None and out["np"].tolist() == [1.0, 1.0]
    assert zcache.run(5) == 5


def test_public_api_is_small():
    """About 20 top-level names besides the submodules (issue 11; issue 25 added the compile cache's two, issue 28
    the cache budget's two)."""
    import types as pytypes

    names = [n for n in zcache.__all__ if not isinstance(getattr(zcache, n), pytypes.ModuleType)]
    assert 15 <= len(names) <= 26, names
    assert all(hasattr(zcache, n) for n in zcache.__all__)
