"""Shared fixtures: every test starts in the default modes with no traced graphs."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import tensorflow as tf

import zcache


@pytest.fixture(autouse=True)
def _restore_modes():
    """Restore graph/autograd modes and drop traced graphs around every test."""
    graph, autograd = zcache.get_graph_mode(), zcache.get_autograd_mode()
    backend = tf.config.functions_run_eagerly()
    yield
    zcache.set_graph_mode(graph, set_backend=False)
    zcache.set_autograd_mode(autograd)
    tf.config.run_functions_eagerly(backend)
    zcache.clear_graph_cache()


@pytest.fixture(params=[True, False, "auto"], ids=["graph", "eager", "auto"])
def graph_mode(request):
    """Run a test under each graph mode."""
    with zcache.set_graph_mode(request.param):
        yield request.param


@pytest.fixture(params=[True, False], ids=["graph", "eager"])
def mode(request):
    """Graph or eager, for tests whose traces are expensive ('auto' traces 'tensor' and 'loss'
    exactly like True)."""
    with zcache.set_graph_mode(request.param):
        yield request.param


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def collect():
    """Run the garbage collector (for weak-reference tests)."""

    def run():
        for _ in range(3):
            gc.collect()

    return run
