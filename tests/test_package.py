"""The package as a user meets it: a quiet import, warnings that point at the user's line."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

import zcache
from zcache.exceptions import RetracingWarning, UndeclaredDependencyWarning, ZCacheWarning, warn_at_user_code


def _import_stderr(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "ZCACHE_TF_LOGS")}
    environ.update(env)
    done = subprocess.run([sys.executable, "-c", "import zcache"], capture_output=True, text=True, env=environ,
                          timeout=120, check=True)
    return done.stderr


@pytest.mark.slow
def test_import_prints_nothing():
    assert _import_stderr() == ""


@pytest.mark.slow
def test_tensorflow_logs_on_request():
    """Positive control: the same import with ZCACHE_TF_LOGS=1 shows TensorFlow's start-up lines."""
    assert _import_stderr(ZCACHE_TF_LOGS="1", TF_CPP_MIN_LOG_LEVEL="0").strip() != ""


def _caught(action) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
    return [w for w in caught if issubclass(w.category, ZCacheWarning)]


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_undeclared_dependency_warning_points_at_the_users_line(traced):
    p = zcache.Parameter("p_warn", 1.0)
    x = zcache.Data(np.ones(3), name="x_warn")
    c = zcache.CachedTensor(lambda: x.value() * p.value(), deps=[x], name="c_warn")
    read = zcache.function(lambda: c.value()) if traced else c.value
    caught = _caught(lambda: read())
    assert [w.category for w in caught] == [UndeclaredDependencyWarning]
    assert caught[0].filename == __file__


def test_retracing_warning_points_at_the_users_line():
    f = zcache.function(lambda v: v * 2.0, max_traces=2)
    caught = _caught(lambda: [f(tf.constant([1.0] * n)) for n in range(1, 5)])
    assert caught and all(w.category is RetracingWarning for w in caught)
    assert {w.filename for w in caught} == {__file__}


def test_warn_at_user_code_skips_zcache_frames():
    caught = _caught(lambda: warn_at_user_code("here", ZCacheWarning))
    assert caught[0].filename == __file__ and str(caught[0].message) == "here"
