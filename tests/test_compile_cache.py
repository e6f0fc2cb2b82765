"""zcache's compile cache: TensorFlow's persistent XLA cache in a checked folder (zcache/_engine/compile_cache.py).

Two fresh processes share a temporary cache folder (``ZCACHE_CACHE_DIR``): the second must load
the first's program, which TensorFlow's log says (``Loading cached entry``, with
``TF_CPP_VMODULE=device_executable_persistor=1``); no test reads wall time. The folder checks,
the entry checks and the TensorFlow internals the module relies on are tested in this process.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import textwrap
import warnings

import pytest

import zcache
from zcache._engine import compile_cache as cc
from zcache.exceptions import CompileCacheWarning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent('''
    {before}
    import json, warnings
    warnings.simplefilter("always")
    import tensorflow as tf
    import zcache
    info = zcache.compile_cache_info()

    @tf.function(jit_compile=True)
    def f(x):
        def body(i, y):
            return i + 1, tf.sin(y) * 1.5 + tf.cos(y * 0.5)
        return tf.reduce_sum(tf.while_loop(lambda i, y: i < 5, body, (tf.constant(0), x))[1])

    value = float(f(tf.linspace(0.0, 1.0, 50)))
    print(json.dumps({{"directory": info.directory, "managed": info.managed, "reason": info.reason, "value": value}}))
''')

LOADED = "Loading cached entry for"
SAVED = "Serializing and saving cache entry"


def run_script(cache: str, before: str = "", **env: str) -> tuple[dict, str]:
    """Run SCRIPT in a fresh process with ``cache`` as ZCACHE_CACHE_DIR: (its report, its stderr)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", "ZCACHE_COMPILE_CACHE")}
    environ.update(ZCACHE_CACHE_DIR=cache, ZCACHE_TF_LOGS="1", TF_CPP_MIN_LOG_LEVEL="0",
                   TF_CPP_VMODULE="device_executable_persistor=1", PYTHONPATH=ROOT, **env)
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(before=before)], capture_output=True, text=True,
                          errors="replace", env=environ, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def entries(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".pb"))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One process that compiled SCRIPT's program into a fresh cache: (cache root, report, stderr)."""
    cache = str(tmp_path_factory.mktemp("cache") / "zcache")
    report, err = run_script(cache)
    return cache, report, err


@pytest.fixture
def entry_folder(first_run, tmp_path):
    """A copy of the first run's entry folder (the entry and no record), to damage."""
    folder = tmp_path / "entries"
    folder.mkdir(mode=0o700)
    (name,) = entries(first_run[1]["directory"])
    shutil.copyfile(os.path.join(first_run[1]["directory"], name), folder / name)
    return str(folder), name


@pytest.fixture
def no_root(monkeypatch):
    """Keep the module's folder state as it was (a test calls the set-up with its own environment)."""
    monkeypatch.setattr(cc, "_ROOT", cc._ROOT)


# Across processes ---------------------------------------------------------------------------


def test_second_process_loads_the_first_ones_program(first_run):
    cache, report, err = first_run
    directory = report["directory"]
    assert report["managed"] and directory.startswith(os.path.join(cache, "xla", "tf"))
    assert SAVED in err and LOADED not in err
    (name,) = entries(directory)
    for folder in (cache, os.path.join(cache, "xla"), directory):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    mtime = os.stat(os.path.join(directory, name)).st_mtime_ns

    second, err2 = run_script(cache)
    assert second["directory"] == directory and second["value"] == report["value"]
    assert LOADED in err2 and SAVED not in err2  # TensorFlow ran no XLA compile of its own
    assert entries(directory) == [name] and os.stat(os.path.join(directory, name)).st_mtime_ns == mtime
    assert os.path.exists(os.path.join(directory, name + ".sha256"))  # recorded when the second one started


def test_switched_off(tmp_path):
    cache = str(tmp_path / "zcache")
    report, err = run_script(cache, ZCACHE_COMPILE_CACHE="0")
    assert report["directory"] is None and "ZCACHE_COMPILE_CACHE=0" in report["reason"]
    assert not os.path.exists(os.path.join(cache, "xla")) and SAVED not in err


@pytest.mark.slow
def test_damaged_entry_is_compiled_anew(first_run, tmp_path):
    """One changed byte in the machine code: TensorFlow would load it (a crash or a wrong number)."""
    cache = str(tmp_path / "zcache")
    shutil.copytree(first_run[0], cache)
    directory = first_run[1]["directory"].replace(first_run[0], cache)
    (name,) = entries(directory)
    path = os.path.join(directory, name)
    cc.check_entries(directory)
    assert os.path.exists(path + ".sha256")
    data = bytearray(pathlib.Path(path).read_bytes())
    data[data.find(b"\x7fELF") + 300] ^= 0x01
    pathlib.Path(path).write_bytes(bytes(data))

    report, err = run_script(cache)
    assert report["value"] == first_run[1]["value"]
    assert "CompileCacheWarning" in err and SAVED in err and LOADED not in err
    assert os.listdir(os.path.join(directory, "quarantine")) == [name]
    assert pathlib.Path(path).read_bytes() != bytes(data)  # compiled and written anew


@pytest.mark.slow
def test_too_late_when_tensorflow_ran_first(tmp_path):
    cache = str(tmp_path / "zcache")
    report, err = run_script(cache, before="import tensorflow as tf; tf.constant(1.0) + 1.0")
    assert report["directory"] is None and "had read its XLA flags" in report["reason"]
    assert SAVED not in err and not [n for _, _, names in os.walk(cache) for n in names]


# The folder ---------------------------------------------------------------------------------


def test_this_session_keeps_its_programs_in_a_temporary_folder():
    info = zcache.compile_cache_info()
    assert info.managed and info.directory.startswith(os.environ["ZCACHE_TEST_SESSION_CACHE"])


def test_folders_are_made_private(tmp_path):
    root, directory = str(tmp_path / "c" / "zcache"), str(tmp_path / "c" / "zcache" / "xla" / "key")
    cc.secure_folder(root, directory)
    assert [stat.S_IMODE(os.stat(p).st_mode) for p in (root, os.path.dirname(directory), directory)] == [0o700] * 3


@pytest.mark.parametrize("damage", ["world-writable", "group-writable", "symlink", "foreign", "file"])
def test_unsafe_folder_is_refused(tmp_path, monkeypatch, damage):
    root = tmp_path / "zcache"
    directory = root / "xla" / "key"
    cc.secure_folder(str(root), str(directory))
    if damage == "world-writable":
        directory.chmod(0o777)
    elif damage == "group-writable":
        (root / "xla").chmod(0o770)
    elif damage == "symlink":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        directory.rmdir()
        directory.symlink_to(elsewhere)
    elif damage == "foreign":
        uid = os.getuid()
        monkeypatch.setattr(cc.os, "getuid", lambda: uid + 1)
    else:
        directory.rmdir()
        directory.write_text("")
    with pytest.raises(cc.Refused):
        cc.secure_folder(str(root), str(directory))


def test_refusal_warns_and_turns_the_cache_off(tmp_path, no_root):
    environ = {"ZCACHE_CACHE_DIR": str(tmp_path / "zcache")}
    directory = tmp_path / "zcache" / "xla" / cc.folder_key(environ)
    directory.mkdir(parents=True)
    directory.chmod(0o777)
    with pytest.warns(CompileCacheWarning, match="writable by group or others"):
        info = cc._enable(environ)
    assert info.directory is None and "writable" in info.reason


def test_users_own_flag_is_left_alone(tmp_path, no_root):
    environ = {"TF_XLA_FLAGS": f"--tf_xla_min_cluster_size=2 --tf_xla_persistent_cache_directory={tmp_path}"}
    info = cc._enable(environ)
    assert (info.directory, info.managed) == (str(tmp_path), False) and not os.listdir(tmp_path)


def test_too_late_in_this_process(tmp_path, no_root):
    """This process's TensorFlow read its flags long ago: a new folder is not taken, and the variable is restored."""
    environ = {"ZCACHE_CACHE_DIR": str(tmp_path / "zcache"), "TF_XLA_FLAGS": "--tf_xla_min_cluster_size=4"}
    info = cc._enable(environ)
    assert info.directory is None and "had read its XLA flags" in info.reason
    assert environ["TF_XLA_FLAGS"] == "--tf_xla_min_cluster_size=4"


def test_folder_key_names_what_the_code_depends_on():
    key = cc.folder_key({})
    assert key.startswith(f"tf{__import__('tensorflow').__version__}-")
    assert cc.folder_key({"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"}) != key


def test_clear(tmp_path, monkeypatch):
    monkeypatch.setattr(cc, "_ROOT", str(tmp_path))
    for folder in ("xla/a", "xla/b/quarantine"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "x.pb").write_bytes(b"1")
    assert zcache.clear_compile_cache() == 2 and zcache.clear_compile_cache() == 0
    (tmp_path / "xla" / "a" / "x.pb").write_bytes(b"1")
    (tmp_path / "xla").chmod(0o777)
    with pytest.warns(CompileCacheWarning, match="did not clear"):
        assert zcache.clear_compile_cache() == 0


def test_untested_tensorflow_needs_the_switch(monkeypatch, tmp_path, no_root):
    monkeypatch.setattr(cc, "TESTED_TENSORFLOW", ((1, 0), (1, 1)))
    info = cc._enable({"ZCACHE_CACHE_DIR": str(tmp_path)})
    assert info.directory is None and "ZCACHE_COMPILE_CACHE=1" in info.reason and not os.listdir(tmp_path)
    assert "had read its XLA flags" in cc._enable({"ZCACHE_CACHE_DIR": str(tmp_path), "ZCACHE_COMPILE_CACHE": "1"}).reason


# The entries --------------------------------------------------------------------------------


def test_entry_format_is_what_tensorflow_writes(entry_folder):
    """Pins TensorFlow's file name and XlaSerializedCacheEntry layout (fails loudly if TensorFlow changes them)."""
    folder, name = entry_folder
    data = pathlib.Path(os.path.join(folder, name)).read_bytes()
    assert name.startswith("xla_compile_cache__") and name.endswith("__XLA_CPU_JIT.pb")
    assert cc.well_formed_entry(name, data)
    assert b"\x7fELF" in data  # the machine code is in the entry (what the records protect)


def test_intact_entry_is_recorded_then_checked(entry_folder):
    folder, name = entry_folder
    assert cc.check_entries(folder)["recorded"] == 1
    assert cc.check_entries(folder) == {"checked": 1, "recorded": 0, "quarantined": 0, "removed": 0}
    assert entries(folder) == [name]


@pytest.mark.parametrize("damage", ["truncated", "one byte short", "appended", "empty", "renamed", "garbage"])
def test_damaged_entry_seen_first_is_quarantined(entry_folder, damage):
    folder, name = entry_folder
    path = os.path.join(folder, name)
    data = pathlib.Path(path).read_bytes()
    new = {"truncated": data[: len(data) // 2], "one byte short": data[:-1], "appended": data + b"\x00\x01",
           "empty": b"", "renamed": data, "garbage": os.urandom(len(data))}[damage]
    if damage == "renamed":  # another program's entry under this name: its key does not match
        os.unlink(path)
        name = name.replace("__XLA_CPU_JIT", "1__XLA_CPU_JIT")
        path = os.path.join(folder, name)
    pathlib.Path(path).write_bytes(new)
    assert cc.check_entries(folder)["quarantined"] == 1
    assert entries(folder) == [] and os.listdir(os.path.join(folder, "quarantine")) == [name]


def test_entry_changed_after_its_record_is_quarantined(entry_folder):
    folder, name = entry_folder
    cc.check_entries(folder)
    path = os.path.join(folder, name)
    data = bytearray(pathlib.Path(path).read_bytes())
    data[-100] ^= 0x01  # well formed still: only the record tells
    pathlib.Path(path).write_bytes(bytes(data))
    assert cc.well_formed_entry(name, bytes(data))
    assert cc.check_entries(folder)["quarantined"] == 1 and entries(folder) == []
    assert not os.path.exists(path + ".sha256")


def test_symlinked_entry_is_quarantined(entry_folder, tmp_path):
    folder, name = entry_folder
    os.replace(os.path.join(folder, name), tmp_path / "elsewhere.pb")
    os.symlink(tmp_path / "elsewhere.pb", os.path.join(folder, name))
    assert cc.check_entries(folder)["quarantined"] == 1


def test_leftovers_and_size_bound(entry_folder, monkeypatch):
    folder, name = entry_folder
    path = os.path.join(folder, name)
    for stale in ("old", "new"):
        tmp = path + f"{stale}.tmp"
        pathlib.Path(tmp).touch()
        os.utime(tmp, (1.0, 1.0) if stale == "old" else None)
    pathlib.Path(folder, "gone.pb.sha256").touch()
    report = cc.check_entries(folder)
    assert report["removed"] == 2 and sorted(os.listdir(folder)) == sorted([name, name + ".sha256", name + "new.tmp"])
    monkeypatch.setattr(cc, "MAX_BYTES", os.path.getsize(path) - 1)
    assert cc.check_entries(folder)["removed"] == 1 and entries(folder) == []


# The TensorFlow internals it relies on ------------------------------------------------------


def test_tensorflow_flag_reader_is_there():
    from tensorflow.python import _pywrap_tfe

    value = _pywrap_tfe.TF_GetXlaConstantFoldingDisabled()
    assert value in (False, 0)
    _pywrap_tfe.TF_SetXlaConstantFoldingDisabled(bool(value))


def test_flag_value():
    flags = '--a=1 --tf_xla_persistent_cache_directory="/x y" --b --tf_xla_disable_constant_folding'
    assert cc.flag_value(flags, "tf_xla_persistent_cache_directory") == "/x y"
    assert cc.flag_value(flags, "tf_xla_disable_constant_folding") == "true"
    assert cc.flag_value(flags, "c") is None


def test_enable_never_raises(monkeypatch, no_root):
    monkeypatch.setattr(cc, "_enable", lambda environ: 1 / 0)
    monkeypatch.setattr(cc, "_INFO", cc._INFO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = cc.enable_at_import()
    assert info.directory is None and "ZeroDivisionError" in info.reason
    assert [w.category for w in caught] == [CompileCacheWarning]
