"""The package as a user meets it: a quiet import, warnings that point at the user's line."""

from __future__ import annotations

import gc
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import venv
import warnings
import zipfile
from importlib.metadata import version

import numpy as np
import pytest
import tensorflow as tf

import zcache
from zcache.exceptions import RetracingWarning, UndeclaredDependencyWarning, ZCacheWarning, warn_at_user_code


def _quiet_environ(**env: str) -> dict[str, str]:
    """This process's environment without the switches of TensorFlow's logs, plus ``env``."""
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "ZCACHE_TF_LOGS")}
    environ.update(env)
    return environ


def _import_stderr(**env: str) -> str:
    # 300 s as the other fresh processes here: on a loaded shared machine TensorFlow's import alone took over 120
    done = subprocess.run([sys.executable, "-c", "import zcache"], capture_output=True, text=True,
                          env=_quiet_environ(**env), timeout=300, check=True)
    return done.stderr


@pytest.mark.slow
def test_tensorflow_logs_on_request():
    """Positive control: the same import with ZCACHE_TF_LOGS=1 shows TensorFlow's start-up lines."""
    assert _import_stderr(ZCACHE_TF_LOGS="1", TF_CPP_MIN_LOG_LEVEL="0").strip() != ""


# ZCACHE_GC_FREEZE unset: the tf-first probe of test_import_leaves_out_what_a_fit_does_not_need traces in its fresh
# process (an interpreter of its own cost a TensorFlow import); set to 0: a process of its own.
@pytest.mark.slow
@pytest.mark.parametrize("setting, frozen", [(None, True), ("0", False)])
def test_traces_freeze_what_was_alive_before_unless_told_not_to(setting, frozen, request):
    """``import zcache`` freezes nothing; a zcache trace keeps the objects alive before it out of the
    collector's full passes, and gives them back when it ends (the freeze count is 0 again);
    ``ZCACHE_GC_FREEZE=0`` leaves the collector alone. A cycle made before the trace is still collected."""
    if setting is None:
        report = request.getfixturevalue("lazy_probes")["tf-first"][0]
        after_import, (in_trace, after, collected) = report["gc"][1], report["freeze"]
    else:
        environ = {**{k: v for k, v in os.environ.items() if k != "ZCACHE_GC_FREEZE"}, "ZCACHE_GC_FREEZE": setting}
        script = ("import gc, weakref, zcache, tensorflow as tf\n"
                  "after_import = gc.get_freeze_count()\n"
                  "class Node: pass\n"
                  "a, b = Node(), Node(); a.b, b.a = b, a; r = weakref.ref(a); del a, b\n"
                  "seen = []\n"
                  "f = zcache.function(lambda x: seen.append(gc.get_freeze_count()) or x * 2.0)\n"
                  "f(tf.constant(1.0))\n"
                  "gc.collect(); print(after_import, seen[0], gc.get_freeze_count(), r() is None)")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environ,
                              timeout=300, check=True, cwd=pathlib.Path(__file__).parents[1])
        after_import, in_trace, after, collected = done.stdout.split()
        collected = collected == "True"
    assert int(after_import) == 0 and int(after) == 0
    assert (int(in_trace) > 100_000) is frozen and (int(in_trace) == 0) is not frozen
    assert collected is True  # frozen during the trace, collected after it


@pytest.mark.slow
def test_a_bad_switch_value_is_refused_at_import_with_what_to_do():
    environ = {**os.environ, "ZCACHE_TF_LOGS": "sometimes"}
    done = subprocess.run([sys.executable, "-c", "import zcache"], capture_output=True, text=True, env=environ,
                          timeout=120, cwd=pathlib.Path(__file__).parents[1])
    assert done.returncode != 0
    assert "EnvironmentSettingError: ZCACHE_TF_LOGS='sometimes' is not a switch value: set it to 1" in done.stderr


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


def test_version_is_the_distributions():
    assert zcache.__version__ == version("zcache")
    assert zcache.__version__ != "0+unknown"


_WHEEL_FIT = """
import pathlib, sys
import numpy as np
import zcache
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import Gaussian, Space

here = pathlib.Path(zcache.__file__).resolve()
assert here.is_relative_to(pathlib.Path(sys.prefix).resolve()), f"zcache came from {here}, not the new virtualenv"
from importlib.metadata import version
assert zcache.__version__ == version("zcache"), zcache.__version__
space = Space("x", -6.0, 6.0)
mu = zcache.Parameter("mu", 0.0, lower=-2.0, upper=2.0)
sigma = zcache.Parameter("sigma", 1.0, lower=0.1, upper=5.0)
model = Gaussian(space, mu, sigma)
data = zcache.Data(np.random.default_rng(1).normal(0.3, 1.2, 2000), name="x")
result = Minuit().minimize(UnbinnedNLL(model, data))
assert result.valid, result
assert abs(result.values["mu"] - 0.3) < 5 * result.errors["mu"], result
print("fit ok", zcache.__version__)
"""


def _tracked_copy(destination: pathlib.Path) -> pathlib.Path:
    """The repository's files that git does not ignore (outside a checkout: all but build outputs) copied to ``destination``.

    A wheel is built from this copy, not from the checkout: setuptools packs whatever its ``build/lib`` holds, so a
    checkout that built a wheel before a module was removed would put the removed module into every later wheel.
    """
    repo = pathlib.Path(__file__).resolve().parent.parent
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                            capture_output=True, timeout=60)
    if listed.returncode == 0 and listed.stdout:
        files = [pathlib.Path(name) for name in listed.stdout.decode().split("\0") if name]
    else:
        skip = {"build", "dist", ".git", ".venv", ".venv-bench"}
        files = [p.relative_to(repo) for p in repo.rglob("*")
                 if p.is_file() and not skip & set(p.relative_to(repo).parts)]
    for name in files:
        if (repo / name).is_file():  # a tracked file deleted in the working tree is not copied
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, destination / name)
    return destination


@pytest.mark.slow  # a wheel, a virtualenv and a fit in a fresh process (the mark sat on _tracked_copy, idle)
def test_wheel_installs_into_a_clean_virtualenv_and_fits(tmp_path):
    """A wheel built from the repository carries every module: installed alone into a new virtualenv, it imports and fits.

    The new virtualenv sees no zcache but the wheel's: its dependencies (TensorFlow, iminuit, ...) are made
    visible from this environment's site-packages through a ``.pth`` path entry, which adds the folder to
    ``sys.path`` without running its ``.pth`` files, so this environment's editable zcache stays out. (Installing
    TensorFlow from the index into the new environment would cost minutes of CI and need a network.)
    """
    source = _tracked_copy(tmp_path / "source")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(source)], check=True, timeout=300, cwd=tmp_path)
    (wheel,) = wheels.glob("zcache-*.whl")
    assert wheel.name.startswith(f"zcache-{zcache.__version__}-")
    names = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("zcache/") and n.endswith(".py")}
    expected = {str(p.relative_to(source)) for p in (source / "zcache").rglob("*.py")}
    assert expected - names == set(), "modules missing from the wheel"
    assert names - expected == set(), "modules in the wheel that the repository does not have"

    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    target = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    pathlib.Path(target, "_zcache_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, timeout=300, cwd=tmp_path)
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([str(python), "-c", _WHEEL_FIT], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"fit ok {zcache.__version__}"


# Run as a script: argv[1] is "tf-first" or "zcache-first"; prints one JSON object.
_LAZY_PROBE = r'''
import gc, json, sys
sys.path.insert(0, sys.argv[2])
if sys.argv[1] == "tf-first":
    import tensorflow
before = set(sys.modules)
import zcache
after_import = set(sys.modules)
names = sorted(dir(zcache))
state = [gc.isenabled(), gc.get_freeze_count(), gc.get_threshold()]
toys = zcache.toys.run_toys.__module__
after_toys = sorted(set(sys.modules) - after_import)
extra = {}
if sys.argv[1] == "tf-first":
    # The same fresh process serves two more checks (each cost a TensorFlow import of its own): the amplitude
    # package's names import no SymPy, and a trace freezes the objects alive before it (ZCACHE_GC_FREEZE unset)
    import weakref
    import zcache.amplitude as amplitude
    from zcache.amplitude import SymbolicModel, from_helicity_model
    extra["amplitude"] = [len(amplitude.__all__), [m for m in ("sympy", "ampform") if m in sys.modules]]
    import tensorflow as tf
    class Node: pass
    a, b = Node(), Node(); a.b, b.a = b, a; r = weakref.ref(a); del a, b
    seen = []
    f = zcache.function(lambda x: seen.append(gc.get_freeze_count()) or x * 2.0)
    f(tf.constant(1.0))
    gc.collect()
    extra["freeze"] = [seen[0], gc.get_freeze_count(), r() is None]
print(json.dumps({"new": sorted(after_import - before), "before": sorted(before), "dir": names, "gc": state,
                  "toys": toys, "after_toys": after_toys, **extra}))
'''

# What a plain fit does not need, and ``import zcache`` leaves out (issue 54): SymPy and the amplitude
# bridge, Dask, ROOT files, plotting, pandas, zcache's toys, scaled-out losses and inference.
_NOT_IMPORTED = ["sympy", "ampform", "dask", "distributed", "uproot", "matplotlib", "pandas", "zcache.toys",
                 "zcache.scale", "zcache.inference", "zcache.amplitude", "zcache.plot", "zcache.shapes",
                 "zcache.binned"]


def _lazy_probe(order: str) -> tuple[dict, str]:
    """The probe's report and its stderr (TensorFlow's log switches unset, as a user's shell has them)."""
    root = str(pathlib.Path(__file__).resolve().parents[1])
    environ = {k: v for k, v in _quiet_environ().items() if k != "ZCACHE_GC_FREEZE"}  # its default, as a user's
    done = subprocess.run([sys.executable, "-c", _LAZY_PROBE, order, root], capture_output=True, text=True,
                          timeout=300, check=True, env=environ)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def lazy_probes() -> dict[str, tuple[dict, str]]:
    """The two fresh processes of ``_LAZY_PROBE`` (report and stderr by order), read by three tests: each checks
    other things of the same runs (a fresh interpreter's TensorFlow import costs several CPU seconds)."""
    return {order: _lazy_probe(order) for order in ("tf-first", "zcache-first")}


def _under(name: str, modules: set[str]) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


# The fresh processes of this test also check, in the same state, what two tests checked in processes of their own:
# that ``import zcache`` prints nothing (test_import_prints_nothing) and that ``import zcache, zcache.scale`` imports
# no Dask (test_distributed.py's test_import_zcache_imports_no_dask).
@pytest.mark.slow
def test_import_leaves_out_what_a_fit_does_not_need(lazy_probes):
    """Fresh processes: ``import zcache`` imports none of ``_NOT_IMPORTED`` beyond what TensorFlow's own import
    brings (pandas and matplotlib, in this TensorFlow), after TensorFlow or before it; ``zcache.toys`` still
    works, imported on first use with ``zcache.scale`` (and no Dask); the collector is as it was (enabled, nothing
    frozen). Imported first, before TensorFlow, zcache prints nothing (TensorFlow's start-up lines stay off)."""
    (tf_first, _), (zcache_first, zcache_first_stderr) = lazy_probes["tf-first"], lazy_probes["zcache-first"]
    assert zcache_first_stderr == ""
    every = set(zcache_first["before"]) | set(zcache_first["new"]) | set(zcache_first["after_toys"])
    assert "zcache.scale" in every and not any(_under(name, every) for name in ("dask", "distributed"))
    by_tensorflow = set(tf_first["before"])
    for seen in (tf_first, zcache_first):
        added = set(seen["new"]) - by_tensorflow
        for name in _NOT_IMPORTED:
            assert not _under(name, added), name
        assert "zcache._engine.cached_tensor" in added and "networkx" in added  # the probe sees zcache's imports
        assert {"toys", "loss", "minimize", "models", "Parameter"} <= set(seen["dir"])
        assert seen["gc"] == [True, 0, list(gc.get_threshold())]
        assert seen["toys"] == "zcache.toys"
        assert {"zcache.toys", "zcache.scale", "zcache.scale._batch"} <= set(seen["after_toys"])
    # Positive control: the probe would see these, were they imported (TensorFlow's own import brings two).
    assert {"pandas", "matplotlib"} <= by_tensorflow or not _under("pandas", set(zcache_first["new"]))


# It had a fresh process of its own (tests/test_amplitude_symbolic.py); the tf-first probe imports the package now.
@pytest.mark.slow
def test_importing_the_amplitude_package_does_not_import_sympy(lazy_probes):
    """``import zcache.amplitude`` (the bridge's names included) leaves SymPy unimported: they import it when called."""
    import zcache.amplitude

    n_names, imported = lazy_probes["tf-first"][0]["amplitude"]
    assert imported == []
    assert n_names == len(zcache.amplitude.__all__)  # the probe imported the package itself


def test_lazy_submodule_access():
    """``zcache.toys`` is the module (PEP 562 ``__getattr__``), ``dir`` lists it, an unknown name is an AttributeError."""
    import zcache.toys as toys_module

    assert zcache.toys is toys_module
    assert "toys" in dir(zcache) and "Parameter" in dir(zcache)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        zcache.no_such_name  # noqa: B018
