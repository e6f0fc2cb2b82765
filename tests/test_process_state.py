"""``import zcache`` and a fit leave the user's process as they found it (issue 51, "good citizen").

A fresh interpreter records TensorFlow's and Python's global state (the environment, every logger,
the garbage collector, TensorFlow's gradient registry, pfor's converters and call op, autograph's conversion rules,
hooks, warning filters, numpy's error state and print options, TensorFlow's config, the files
under HOME, the working folder and the cache root) before ``import zcache``, after it, after a small
fit traced and compiled with XLA (``set_jit_mode('auto')``, a line shape through complex sqrt and 1/z:
zcache's own gradients, tf_internals items 10 and 17, and its exact Hessian under XLA) and after a bridged
amplitude model's value and gradient, and finds it unchanged. The one thing zcache may add is its compile cache's folder under
``ZCACHE_CACHE_DIR``. Importing zcache before or after TensorFlow makes no difference.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

TESTS = pathlib.Path(__file__).parent
ROOT = TESTS.parent

# Run as a script: argv[1] is "tf-first" or "zcache-first"; prints one JSON object.
_PROBE = r'''
import gc, json, logging, os, re, signal, sys, threading, warnings
order = sys.argv[1]
sys.path.insert(0, sys.argv[2])
snapshots, numbers = {}, {}

def files(root):
    found = []
    for folder, dirs, names in os.walk(root):
        found += [os.path.relpath(os.path.join(folder, n), root) for n in dirs + names]
    return sorted(found)

def describe(fn):
    return [getattr(fn, "__module__", None), getattr(fn, "__qualname__", repr(fn)), id(fn)]

def snapshot():
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.autograph.core import config as ag_config
    from tensorflow.python.eager.polymorphic_function import atomic_function
    from tensorflow.python.framework import ops
    from tensorflow.python.ops.parallel_for import pfor

    loggers = {}
    for name, logger in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]:
        if isinstance(logger, logging.Logger):
            loggers[name] = [logger.level, logger.propagate, logger.disabled,
                             [[type(h).__name__, h.level, id(h)] for h in logger.handlers]]
    registry = {k: describe(v["type"]) for k, v in ops._gradient_registry._registry.items()
                if not re.fullmatch(r"CustomGradient-\d+", k)}  # a traced tf.custom_gradient's own entry
    umask = os.umask(0o022); os.umask(umask)
    return {
        "environ": dict(os.environ),
        "loggers": loggers,
        "gc": [gc.isenabled(), list(gc.get_threshold()), gc.get_freeze_count()],
        "gradient registry": registry,
        "pfor converters": {k: describe(v) for k, v in pfor._pfor_converter_registry.items()},
        "partitioned_call_op": describe(atomic_function.partitioned_call_op),
        "conversion rules": [id(ag_config.CONVERSION_RULES), [repr(r) for r in ag_config.CONVERSION_RULES]],
        "hooks": [describe(sys.excepthook), describe(threading.excepthook), describe(sys.displayhook),
                  [repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)]],
        "interpreter": [sys.getrecursionlimit(), sys.getswitchinterval(), umask],
        "warnings filters": [repr(f) for f in warnings.filters],
        "numpy": [np.geterr(), {k: repr(v) for k, v in np.get_printoptions().items()}],
        "tf config": [tf.config.optimizer.get_experimental_options(), tf.config.optimizer.get_jit(),
                      tf.config.threading.get_inter_op_parallelism_threads(),
                      tf.config.threading.get_intra_op_parallelism_threads(),
                      tf.config.get_soft_device_placement(), tf.config.functions_run_eagerly(),
                      tf.config.experimental.tensor_float_32_execution_enabled()],
        "stderr": [os.fstat(2).st_dev, os.fstat(2).st_ino],
        "home": files(os.environ["HOME"]),
        "cwd": files(os.getcwd()),
        "cache root": files(os.environ["ZCACHE_CACHE_DIR"]),
    }

# What the libraries zcache uses do when imported is theirs (scipy.special and sympy add a warnings
# filter, networkx makes a logger): the user's process has them imported before the first snapshot.
def import_libraries():
    import iminuit, networkx, numpy, scipy.integrate, scipy.optimize, scipy.special, scipy.stats, sympy, tensorflow

if order == "tf-first":
    import_libraries()
    snapshots["before"] = snapshot()
    import zcache
else:
    import zcache
    import_libraries()
snapshots["import"] = snapshot()

import numpy as np
from helpers import complex_line_shape_loss, gauss_exp_study, small_bridge_loss
from zcache.minimize import Minuit, wait_for_builds

_, loss, _ = gauss_exp_study("citizen", n=400)
result = Minuit().minimize(loss)
# the tiered start builds the compiled program on a thread from a loss's second fit on (this first one builds
# nothing; the wait keeps the snapshot valid if that changes): until a build ends, TensorFlow's gradient registry
# and partitioned_call_op hold zcache's thread-aware wrappers (as during any zcache trace on some thread)
wait_for_builds()
numbers["graph fit"] = [result.fmin, sorted(result.values.items())]
snapshots["graph fit"] = snapshot()

line, line_params = complex_line_shape_loss("citizen")
with zcache.set_jit_mode("auto"):
    result = Minuit().minimize(line)
    value, gradient = line.value_gradient()
with zcache.set_jit_mode(True):  # an exact Hessian vectorizes complex-to-real Casts (pfor's converters)
    hessian = line.hessian_at([p.value().numpy() for p in line_params], line_params, exact=True)
numbers["jit fit"] = [result.fmin, sorted(result.values.items()), float(value), gradient.numpy().tolist(),
                      hessian.numpy().tolist()]
snapshots["jit fit"] = snapshot()

bridge = small_bridge_loss(tag="citizen_bw")
value, gradient = bridge.value_gradient()
numbers["amplitude"] = [float(value), gradient.numpy().tolist()]
snapshots["amplitude"] = snapshot()
print(json.dumps({"snapshots": snapshots, "numbers": numbers}))
'''


def _probe(order: str, tmp_path: pathlib.Path) -> dict:
    home, cache, cwd = tmp_path / "home", tmp_path / "cache", tmp_path / "cwd"
    for folder in (home, cache, cwd):
        folder.mkdir()
    # PYTEST_CURRENT_TEST names the test and phase that started the probe: the tf-first probe is a module
    # fixture's (setup), the zcache-first one a test's (call)
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("ZCACHE_", "TF_CPP_", "XDG_")) and k not in ("PYTHONPATH", "PYTEST_CURRENT_TEST")}
    environ.update(HOME=str(home), ZCACHE_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", _PROBE, order, str(TESTS)], capture_output=True, text=True,
                          env=environ, cwd=cwd, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


#: The compile cache's folder under the cache root (zcache/_engine/compile_cache.py: <root>/xla/<key>/): the
#: one thing zcache may add (its owner decides when it is made).
_COMPILE_CACHE = "xla"
#: A logger made by importing a library, as logging makes it: level NOTSET, propagating, enabled, no
#: handler. Not a change of the process's logging.
_NEW_LOGGER = [0, True, False, []]


def _differences(before: dict, after: dict) -> dict:
    found = {}
    for key, old in before.items():
        new = after[key]
        if key == "cache root":
            new = [p for p in new if p != _COMPILE_CACHE and not p.startswith(_COMPILE_CACHE + os.sep)]
        if key == "loggers":
            new = {k: v for k, v in new.items() if k in old or v != _NEW_LOGGER}
        if new != old:
            if isinstance(old, dict):
                found[key] = {k: (old.get(k), new.get(k)) for k in set(old) | set(new) if old.get(k) != new.get(k)}
            else:
                found[key] = (old, new)
    return found


@pytest.fixture(scope="module")
def tf_first(tmp_path_factory) -> tuple[dict, pathlib.Path]:
    """One ``tf-first`` probe (a fresh process) and its folder, read by both tests: they check different things
    of the same run."""
    folder = tmp_path_factory.mktemp("tf_first")
    return _probe("tf-first", folder), folder


@pytest.mark.slow
def test_import_and_fits_leave_the_process_as_they_found_it(tf_first):
    """After ``import tensorflow``: ``import zcache``, a traced fit, a fit compiled with XLA and a bridged
    amplitude model's value and gradient change none of the recorded global state."""
    out, _ = tf_first
    before = out["snapshots"]["before"]
    for stage in ("import", "graph fit", "jit fit", "amplitude"):
        assert _differences(before, out["snapshots"][stage]) == {}, stage


@pytest.mark.slow
def test_importing_zcache_before_or_after_tensorflow_makes_no_difference(tf_first, tmp_path):
    """The same state after each stage, and the same numbers, whichever is imported first."""
    (first, first_folder), second = tf_first, _probe("zcache-first", tmp_path)
    assert first["numbers"] == second["numbers"]

    def comparable(snapshot: dict, base: pathlib.Path) -> dict:
        # identities (ids) and this run's own folders differ between processes: compare the rest
        def strip(value):
            if isinstance(value, dict):
                return {k: strip(v) for k, v in value.items()}
            if isinstance(value, list):
                return [strip(v) for v in value if not isinstance(v, int) or isinstance(v, bool) or v < 2**32]
            if isinstance(value, str):  # no addresses (reprs), no folders of this run
                return re.sub(r" at 0x[0-9a-f]+", "", value.replace(str(base), "<tmp>"))
            return value

        kept = {k: v for k, v in snapshot.items() if k not in ("stderr",)}
        # filters as a set: the libraries' own filters come in the order they were imported
        kept["warnings filters"] = sorted(kept["warnings filters"])
        kept["cache root"] = [p for p in kept["cache root"] if p.split(os.sep)[0] != _COMPILE_CACHE]
        kept["environ"] = {k: v for k, v in kept["environ"].items() if k not in ("OLDPWD", "PWD")}
        kept["conversion rules"] = kept["conversion rules"][1]
        return strip(kept)

    for stage in ("import", "graph fit", "jit fit", "amplitude"):
        assert (comparable(first["snapshots"][stage], first_folder)
                == comparable(second["snapshots"][stage], tmp_path)), stage
