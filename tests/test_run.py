"""zcache.run: callable numpy conversion and the mode functions it carries."""

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


def test_run_module_carries_the_mode_api():
    assert zcache.run.set_graph_mode is zcache.set_graph_mode
    assert zcache.run.get_autograd_mode is zcache.get_autograd_mode
    assert zcache.run.clear_graph_cache is zcache.clear_graph_cache
    assert callable(zcache.run)
