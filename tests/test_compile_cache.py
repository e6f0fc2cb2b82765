"""zcache's compile cache: TensorFlow's persistent XLA cache in a checked folder (zcache/_engine/compile_cache.py).

Fresh processes share a temporary cache folder (``ZCACHE_CACHE_DIR``): a later one must load an
earlier one's program, which TensorFlow's log says (``Loading cached entry``, with
``TF_CPP_VMODULE=device_executable_persistor=1``), and must never load an entry that is not the one its
writer recorded; no test reads wall time. The folder checks, the entry checks and the TensorFlow
internals the module relies on are tested in this process.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import tensorflow as tf

import zcache
from zcache._engine import compile_cache as cc
from zcache._engine import xla_cache_format
from zcache.exceptions import CompileCacheWarning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent('''
    {before}
    import json, os, warnings
    warnings.simplefilter("always")
    import tensorflow as tf
    import zcache
    imported = {{"info": zcache.compile_cache_info().reason, "flags": os.environ.get("TF_XLA_FLAGS")}}
    zcache.set_jit_mode(True)

    @zcache.function
    def f(x):
        def body(i, y):
            return i + 1, tf.sin(y) * 1.5 + tf.cos(y * 0.5)
        return tf.reduce_sum(tf.while_loop(lambda i, y: i < 5, body, (tf.constant(0), x))[1])

    x = tf.linspace(0.0, 1.0, 50)
    values = [float(f(x)) for _ in range(3)]  # zcache's jit policy runs the first call eagerly
    {after}
    info = zcache.compile_cache_info()
    print(json.dumps({{"directory": info.directory, "managed": info.managed, "reason": info.reason,
                       "value": values[-1], "imported": imported}}))
''')

LOADED = "Loading cached entry for"
SAVED = "Serializing and saving cache entry"


def expected_value() -> float:
    import numpy as np

    y = np.linspace(0.0, 1.0, 50, dtype=np.float32)
    for _ in range(5):
        y = np.sin(y) * np.float32(1.5) + np.cos(y * np.float32(0.5))
    return float(np.sum(y, dtype=np.float64))


def run_script(cache: str | None, before: str = "", after: str = "", check: bool = True, **env: str) -> tuple[dict, str]:
    """Run SCRIPT in a fresh process with ``cache`` as ZCACHE_CACHE_DIR: (its report, its stderr)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", "ZCACHE_COMPILE_CACHE")}
    environ.update(ZCACHE_CACHE_DIR=cache, ZCACHE_TF_LOGS="1", TF_CPP_MIN_LOG_LEVEL="0",
                   TF_CPP_VMODULE="device_executable_persistor=1", PYTHONPATH=ROOT)
    environ.update(env)
    environ = {k: v for k, v in environ.items() if v is not None}
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(before=before, after=after)], capture_output=True,
                          text=True, errors="replace", env=environ, timeout=300, cwd=ROOT)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    if proc.returncode != 0:
        return {"returncode": proc.returncode}, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def entries(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".pb"))


def copy_cache(first_run, tmp_path) -> tuple[str, str, str]:
    """A copy of the first run's cache (hard links not kept: each file copied): (root, entry folder, entry)."""
    cache = str(tmp_path / "zcache")
    shutil.copytree(first_run[0], cache)
    directory = first_run[1]["directory"].replace(first_run[0], cache)
    (name,) = entries(directory)
    return cache, directory, name


def flip_code_bit(path: str, offset: int = 300) -> None:
    """Flip one bit in the machine code: the entry stays well formed (only a record can tell)."""
    data = bytearray(pathlib.Path(path).read_bytes())
    data[data.find(b"\x7fELF") + offset] ^= 0x01
    os.chmod(path, 0o600)
    pathlib.Path(path).write_bytes(bytes(data))
    assert xla_cache_format.well_formed_entry(os.path.basename(path), bytes(data))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One process that compiled SCRIPT's program into a fresh cache: (cache root, report, stderr)."""
    cache = str(tmp_path_factory.mktemp("cache") / "zcache")
    report, err = run_script(cache)
    return cache, report, err


@pytest.fixture(scope="module")
def second_run(first_run):
    """A second process that ran SCRIPT on the first run's cache, and the entry's mtime before it: (report, stderr,
    mtime), read by the tests of what it loaded and of what it logged (each cost a fresh process of its own)."""
    (name,) = entries(first_run[1]["directory"])
    mtime = os.stat(os.path.join(first_run[1]["directory"], name)).st_mtime_ns
    report, err = run_script(first_run[0])
    return report, err, mtime


@pytest.fixture
def no_root(monkeypatch):
    """Keep the module's state as it was (a test calls the set-up with its own environment)."""
    for name in ("_ROOT", "_SHARED", "_STAGE", "_READY", "_INFO"):
        monkeypatch.setattr(cc, name, getattr(cc, name))


# Across processes ---------------------------------------------------------------------------


@pytest.mark.slow  # about 14 CPU seconds, two fresh processes (CONTRIBUTING.md, "Test times")
def test_second_process_loads_the_first_ones_program(first_run, second_run):
    cache, report, err = first_run
    directory = report["directory"]
    assert report["managed"] and directory.startswith(os.path.join(cache, "xla", "tf"))
    assert report["value"] == pytest.approx(expected_value(), rel=1e-6)
    assert SAVED in err and LOADED not in err
    (name,) = entries(directory)
    for folder in (cache, os.path.join(cache, "xla"), directory):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert os.listdir(os.path.join(directory, "proc")) == []  # the process's own folder went at exit

    second, err2, mtime = second_run
    assert second["directory"] == directory and second["value"] == report["value"]
    assert LOADED in err2 and SAVED not in err2  # TensorFlow ran no XLA compile of its own
    assert entries(directory) == [name] and os.stat(os.path.join(directory, name)).st_mtime_ns == mtime


@pytest.mark.slow  # the second process of test_second_process_loads_the_first_ones_program (a module fixture)
def test_loading_an_entry_logs_no_tensorflow_errors(second_run):
    """TensorFlow's error lines about a load (text parse, tuning features) are left out; its other lines stay."""
    _, err, _ = second_run
    assert LOADED in err  # a VLOG line written during the same call: kept
    assert "Error parsing text-format" not in err and "prefer-no-" not in err


def test_load_noise_filter_keeps_every_other_line():
    noise = [b"E0000 00:00:1.2 1 text_format.cc:378] Error parsing text-format tensorflow.XlaSerializedCacheEntry: x\n",
             b"E0000 00:00:1.2 1 cpu_aot_loader.cc:220] Loading XLA:CPU AOT result. Target machine feature "
             b"+prefer-no-gather is not  supported on the host machine.\n"]
    kept = [b"E0000 00:00:1.2 1 cpu_aot_loader.cc:220] Loading XLA:CPU AOT result. Target machine feature +avx512f "
            b"is not  supported on the host machine.\n", b"E0000 00:00:1.2 1 other.cc:1] Error parsing text-format x\n",
            b"a line of the user's own\n"]
    assert all(cc._LOAD_NOISE.match(line) for line in noise)
    assert not any(cc._LOAD_NOISE.match(line) for line in kept)
    read, write = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(write, 2)
        with cc._loads_quietly():
            for line in noise + kept:
                os.write(2, line)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write)
    with os.fdopen(read, "rb") as f:
        assert f.read() == b"".join(kept)


def test_writer_records_its_entry(first_run):
    """The process that compiled the program recorded it (SHA-256, size, mtime, inode): no later reader trusts bytes."""
    directory = first_run[1]["directory"]
    (name,) = entries(directory)
    path = os.path.join(directory, name)
    digest, size, identity = cc._read_record(path)
    data = pathlib.Path(path).read_bytes()
    assert digest == cc._digest(directory, name, data) and size == len(data)
    assert identity == cc._identity(os.lstat(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o400


@pytest.mark.slow  # about 12 CPU seconds in the fast loop (CONTRIBUTING.md, "Test times")
def test_entry_damaged_before_a_second_process_is_not_loaded(first_run, tmp_path):
    """Issue 51: damage after the writer and before any reader; the reader used to record it as good."""
    cache, directory, name = copy_cache(first_run, tmp_path)
    flip_code_bit(os.path.join(directory, name))

    report, err = run_script(cache)
    assert report["value"] == first_run[1]["value"]
    assert "CompileCacheWarning" in err and SAVED in err and LOADED not in err
    assert os.listdir(os.path.join(directory, "quarantine")) == [name]
    third, err3 = run_script(cache)  # the entry compiled anew is trusted
    assert LOADED in err3 and SAVED not in err3 and third["value"] == first_run[1]["value"]


@pytest.mark.slow  # about 7 CPU seconds, a fresh process (CONTRIBUTING.md, "Test times")
def test_copied_cache_is_hashed_once_then_trusted(first_run, tmp_path):
    """A copied folder: other inodes and mtimes, the same bytes; the record then takes the new stat."""
    cache, directory, name = copy_cache(first_run, tmp_path)
    path = os.path.join(directory, name)
    report, err = run_script(cache)
    assert LOADED in err and SAVED not in err and report["value"] == first_run[1]["value"]
    assert cc._read_record(path)[2] == cc._identity(os.lstat(path))


# unrecorded and foreign are exhaustive: make test keeps replaced and truncated, and the CompileCacheMachine
# draws every kind
# replaced and truncated: slow too (11-14 CPU seconds each, two fresh processes: CONTRIBUTING.md, "Test times");
# the fast loop keeps the in-process checks of damaged entries (test_damaged_entry_is_quarantined, ...)
@pytest.mark.parametrize("damage", [pytest.param("unrecorded", marks=pytest.mark.exhaustive),
                                    pytest.param("replaced", marks=pytest.mark.slow),
                                    pytest.param("truncated", marks=pytest.mark.slow),
                                    pytest.param("foreign", marks=pytest.mark.exhaustive)])
def test_untrusted_entry_is_never_loaded(first_run, tmp_path, damage):
    cache, directory, name = copy_cache(first_run, tmp_path)
    path = os.path.join(directory, name)
    run_script(cache)  # the copy's records take its inodes
    if damage == "unrecorded":  # a writer that died before recording, or another program's entry
        os.unlink(path + ".sha256")
    elif damage == "replaced":  # another valid entry renamed over it: TensorFlow would raise on every call
        other = str(tmp_path / "other.pb")
        shutil.copyfile(path, other)
        data = bytearray(pathlib.Path(other).read_bytes())
        data[-1] ^= 0x01
        pathlib.Path(other).write_bytes(bytes(data))
        os.replace(other, path)
    elif damage == "truncated":
        os.chmod(path, 0o600)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    else:  # another user's file under the name (this user may not be able to chown: a stand-in owner check)
        os.unlink(path)
        shutil.copyfile(os.path.join(first_run[1]["directory"], name), path)
        if os.getuid() == 0:
            os.chown(path, 12345, 12345)
    report, err = run_script(cache)
    assert report["value"] == first_run[1]["value"]
    assert LOADED not in err and SAVED in err
    if damage == "unrecorded":  # young: skipped, left for its writer; never linked
        assert os.path.exists(path)


@pytest.mark.slow  # about 6 CPU seconds, a fresh process (CONTRIBUTING.md, "Test times")
def test_users_own_jit_function_is_not_published(tmp_path):
    """A plain tf.function(jit_compile=True) compiles outside zcache's checks: its entry is not trusted."""
    cache = str(tmp_path / "zcache")
    after = ("g = tf.function(lambda x: tf.reduce_sum(tf.cos(x) * 3.0), jit_compile=True); g(x)\n"
             "f2 = zcache.function(lambda x: tf.reduce_sum(tf.exp(x)))\n"
             "[f2(x) for _ in range(3)]")
    report, _ = run_script(cache, after=after)
    assert len(entries(report["directory"])) == 2  # f's and f2's, not g's


@pytest.mark.slow  # about 6 CPU seconds, a fresh process (CONTRIBUTING.md, "Test times")
def test_switched_off(tmp_path):
    cache = str(tmp_path / "zcache")
    report, err = run_script(cache, ZCACHE_COMPILE_CACHE="0")
    assert report["directory"] is None and "ZCACHE_COMPILE_CACHE=0" in report["reason"]
    assert not os.path.exists(cache) and SAVED not in err


# a fresh process (the first run's, a module fixture, reports what import set: a process of its own did it again)
@pytest.mark.slow  # (CONTRIBUTING.md, "Test times")
def test_import_makes_nothing_and_leaves_the_environment(first_run, tmp_path):
    report = first_run[1]
    assert report["imported"]["flags"] is None and report["imported"]["info"].startswith("on")
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS",)}
    environ.update(ZCACHE_CACHE_DIR=str(tmp_path / "other"), PYTHONPATH=ROOT)
    code = "import os, zcache; print(os.path.exists(os.environ['ZCACHE_CACHE_DIR']), zcache.compile_cache_info().managed)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=300,
                         cwd=ROOT, check=True).stdout.split()
    assert out == ["False", "True"]


@pytest.mark.slow  # about 7 CPU seconds, a fresh process (CONTRIBUTING.md, "Test times")
def test_relative_home_turns_the_cache_off(tmp_path):
    """Issue 51: HOME=relhome gave relhome/.cache/zcache/..., and after a chdir TensorFlow made an unchecked folder."""
    report, err = run_script(None, HOME="relhome", XDG_CACHE_HOME=None, ZCACHE_CACHE_DIR=None,
                             before=f"import os; os.chdir({str(tmp_path)!r})")
    assert report["directory"] is None and "HOME is not an absolute path" in report["reason"]
    assert "CompileCacheWarning" in err
    assert SAVED not in err
    assert not os.path.exists(tmp_path / "relhome" / ".cache" / "zcache")  # (matplotlib and Keras write there)


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


def test_folder_tensorflow_made_is_narrowed(tmp_path):
    """TensorFlow makes a missing folder with the umask's mode (0755) when it compiles before zcache's first check."""
    root, directory = tmp_path / "zcache", tmp_path / "zcache" / "xla" / "key"
    directory.mkdir(parents=True, mode=0o755)
    for p in (root, root / "xla", directory):
        p.chmod(0o755)
    cc.secure_folder(str(root), str(directory))
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700 and stat.S_IMODE(os.stat(root).st_mode) == 0o700


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
    with pytest.raises(cc.Refused):
        cc.check_existing(str(root), str(directory))


@pytest.mark.parametrize("ancestor", ["own, writable by others", "own, group-writable", "another user's",
                                      "another user's, sticky and writable by others", "root's, sticky"])
def test_ancestor_another_user_could_rename_in_is_refused(tmp_path, monkeypatch, ancestor):
    """Issue 51: only root-owned ancestors were checked for others' write access."""
    above = tmp_path / "above"
    above.mkdir()
    uid = os.getuid()
    mode, owner = {"own, writable by others": (0o777, uid), "own, group-writable": (0o770, uid),
                   "another user's": (0o755, uid + 1), "another user's, sticky and writable by others": (0o1777, uid + 1),
                   "root's, sticky": (0o1777, 0)}[ancestor]
    above.chmod(mode)
    real_stat = os.stat

    def fake_stat(path, *args, **kwargs):  # an owner this user cannot give a folder without root
        st = real_stat(path, *args, **kwargs)
        if os.fspath(path) == str(above):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, owner, *tuple(st)[5:]))
        return st

    monkeypatch.setattr(cc.os, "stat", fake_stat)
    root, directory = str(above / "zcache"), str(above / "zcache" / "xla" / "key")
    if ancestor == "root's, sticky":
        cc.secure_folder(root, directory)
    else:
        with pytest.raises(cc.Refused, match="above the cache"):
            cc.secure_folder(root, directory)
        assert not os.path.exists(root)


def test_ancestor_through_a_symbolic_link_is_checked(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    target.chmod(0o777)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(cc.Refused, match="above the cache"):
        cc.secure_folder(str(tmp_path / "link" / "zcache"), str(tmp_path / "link" / "zcache" / "xla"))


def test_cache_root_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = cc._cache_root(cc._settings({"ZCACHE_CACHE_DIR": "rel/cache", "HOME": "/h"}))
    assert root == str(tmp_path / "rel" / "cache")  # relative: made absolute once, at import
    assert cc._cache_root(cc._settings({"XDG_CACHE_HOME": "/x", "HOME": "/h"})) == "/x/zcache"
    assert cc._cache_root(cc._settings({"XDG_CACHE_HOME": "x", "HOME": "/h"})) == "/h/.cache/zcache"
    with pytest.raises(cc.Refused, match="HOME is not an absolute path"):
        cc._cache_root(cc._settings({"HOME": "relhome"}))
    with pytest.raises(cc.Refused, match="HOME"):
        cc._cache_root(cc._settings({"HOME": ""}))


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
    assert environ["TF_XLA_FLAGS"] == "--tf_xla_min_cluster_size=4" and not os.path.exists(tmp_path / "zcache")


def test_folder_key_names_what_the_code_depends_on():
    key = cc.folder_key({})
    assert key.startswith(f"tf{tf.__version__}-")
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


@pytest.fixture
def shared(first_run, tmp_path):
    """A copy of the first run's entry folder (the entry and its record, which then names another inode)."""
    folder = tmp_path / os.path.basename(first_run[1]["directory"])  # the record names the folder's key
    folder.mkdir(mode=0o700)
    (name,) = entries(first_run[1]["directory"])
    for file in (name, name + ".sha256"):
        shutil.copyfile(os.path.join(first_run[1]["directory"], file), folder / file)
    stage = tmp_path / "stage"
    stage.mkdir(mode=0o700)
    return str(folder), str(stage), name


def test_entry_format_is_what_tensorflow_writes(shared):
    """Pins TensorFlow's file name and XlaSerializedCacheEntry layout (fails loudly if TensorFlow changes them)."""
    folder, _, name = shared
    data = pathlib.Path(os.path.join(folder, name)).read_bytes()
    assert name.startswith("xla_compile_cache__") and name.endswith("__XLA_CPU_JIT.pb")
    assert xla_cache_format.well_formed_entry(name, data)
    assert b"\x7fELF" in data  # the machine code is in the entry (what the records protect)


def test_fill_hashes_a_moved_entry_once_then_takes_the_fast_path(shared):
    folder, stage, name = shared
    known: dict = {}
    assert cc.fill_stage(folder, stage, known)["hashed"] == 1
    assert os.path.samefile(os.path.join(folder, name), os.path.join(stage, name))  # a hard link, no copy
    os.unlink(os.path.join(stage, name))
    assert cc.fill_stage(folder, stage, {})["linked"] == 1


def test_entry_changed_after_its_record_is_quarantined(shared):
    folder, stage, name = shared
    cc.fill_stage(folder, stage, {})
    os.unlink(os.path.join(stage, name))
    flip_code_bit(os.path.join(folder, name))
    report = cc.fill_stage(folder, stage, {})
    assert report["quarantined"] == 1 and entries(folder) == [] and entries(stage) == []
    assert not os.path.exists(os.path.join(folder, name + ".sha256"))


def test_entry_damaged_in_place_with_its_stat_kept_is_trusted(shared):
    """The fast path's limit, written down: a change that keeps size, mtime and inode (bit rot below the file
    system, or a deliberate write that resets the mtime) is not seen; design/reliability.md says so."""
    folder, stage, name = shared
    cc.fill_stage(folder, stage, {})
    path = os.path.join(folder, name)
    st = os.stat(path)
    flip_code_bit(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.unlink(os.path.join(stage, name))
    assert cc.fill_stage(folder, stage, {})["linked"] == 1


@pytest.mark.parametrize("damage", ["truncated", "one byte short", "appended", "empty", "garbage", "renamed"])
def test_damaged_entry_is_quarantined(shared, damage):
    folder, stage, name = shared
    path = os.path.join(folder, name)
    data = pathlib.Path(path).read_bytes()
    new = {"truncated": data[: len(data) // 2], "one byte short": data[:-1], "appended": data + b"\x00\x01",
           "empty": b"", "garbage": os.urandom(len(data)), "renamed": data}[damage]
    if damage == "renamed":  # another program's record under this name
        record = pathlib.Path(path + ".sha256").read_text()
        pathlib.Path(path + ".sha256").write_text(("0" * 64) + record[64:])
    pathlib.Path(path).write_bytes(new)
    assert cc.fill_stage(folder, stage, {})["quarantined"] == 1
    assert entries(folder) == [] and entries(stage) == [] and os.listdir(os.path.join(folder, "quarantine")) == [name]


def test_unrecorded_entry_is_skipped_then_quarantined(shared):
    folder, stage, name = shared
    os.unlink(os.path.join(folder, name + ".sha256"))
    assert cc.fill_stage(folder, stage, {})["skipped"] == 1 and entries(stage) == [] and entries(folder) == [name]
    later = time.time() + cc.UNRECORDED_GRACE_S + 1
    assert cc.fill_stage(folder, stage, {}, now=later)["quarantined"] == 1 and entries(folder) == []


def test_symlinked_entry_is_quarantined(shared, tmp_path):
    folder, stage, name = shared
    os.replace(os.path.join(folder, name), tmp_path / "elsewhere.pb")
    os.symlink(tmp_path / "elsewhere.pb", os.path.join(folder, name))
    assert cc.fill_stage(folder, stage, {})["quarantined"] == 1 and entries(stage) == []


def test_leftovers_and_size_bound(shared, monkeypatch):
    folder, stage, name = shared
    path = os.path.join(folder, name)
    for stale in ("old", "new"):
        tmp = path + f"{stale}.tmp"
        pathlib.Path(tmp).touch()
        os.utime(tmp, (1.0, 1.0) if stale == "old" else None)
    pathlib.Path(folder, "gone.pb.sha256").touch()
    report = cc.fill_stage(folder, stage, {})
    assert report["removed"] == 2 and sorted(os.listdir(folder)) == sorted([name, name + ".sha256", name + "new.tmp"])
    monkeypatch.setattr(cc, "MAX_BYTES", os.path.getsize(path) - 1)
    os.unlink(os.path.join(stage, name))
    assert cc.fill_stage(folder, stage, {})["removed"] == 1 and entries(folder) == []


@pytest.fixture
def managed(tmp_path, monkeypatch):
    """This module's state pointed at a fresh folder (TensorFlow itself still uses the session's)."""
    root = tmp_path / "zcache"
    shared_dir = root / "xla" / "key"
    stage = shared_dir / "proc" / f"{cc._host()}-{os.getpid()}-0000"
    for name, value in (("_ROOT", str(root)), ("_SHARED", str(shared_dir)), ("_STAGE", str(stage)), ("_READY", None),
                        ("_INFO", cc._INFO), ("_DEPTH", 0), ("_KNOWN", {})):
        monkeypatch.setattr(cc, name, value)
    monkeypatch.setattr(cc.atexit, "register", lambda *a: None)
    return str(shared_dir), str(stage)


def test_stage_holds_only_what_zcache_put_there(managed, shared):
    """Before each checked call: entries this process did not record or that changed since are dropped."""
    shared_dir, stage = managed
    source, _, name = shared
    with cc.compiling():
        shutil.copyfile(os.path.join(source, name), os.path.join(stage, name))  # as TensorFlow writes it
    assert cc._read_record(os.path.join(shared_dir, name)) is not None and name in cc._KNOWN
    with cc.compiling():
        assert entries(stage) == [name]  # trusted: recorded by this process
        pathlib.Path(stage, "x__1__2__XLA_CPU_JIT.pb").write_bytes(b"written outside")
    assert "x__1__2__XLA_CPU_JIT.pb" not in cc._KNOWN
    flip_code_bit(os.path.join(shared_dir, name))  # in place: the staged hard link is the same file
    with cc.compiling():
        assert entries(stage) == []  # changed since its record: dropped, and quarantined
    assert os.listdir(os.path.join(shared_dir, "quarantine")) == [name]


def test_half_written_or_malformed_new_entry_is_not_published(managed, shared):
    shared_dir, stage = managed
    source, _, name = shared
    with cc.compiling():
        pathlib.Path(stage, name).write_bytes(pathlib.Path(source, name).read_bytes()[:-10])
        pathlib.Path(stage, name + "123.tmp").write_bytes(b"half")
    assert entries(shared_dir) == [] and entries(stage) == []


def test_dead_processes_folders_are_removed(managed):
    shared_dir, stage = managed
    top = pathlib.Path(shared_dir, "proc")
    top.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for name in (f"{cc._host()}-{dead.stdout.strip()}-ab", f"{cc._host()}-{os.getppid()}-cd", "otherhost-1-ef"):
        (top / name).mkdir()
    os.utime(top / "otherhost-1-ef", (1.0, 1.0))
    with cc.compiling():
        pass
    assert sorted(os.listdir(top)) == sorted([f"{cc._host()}-{os.getppid()}-cd", os.path.basename(stage)])


def test_refused_at_the_first_compile_turns_off_and_warns(managed, tmp_path):
    shared_dir, stage = managed
    (tmp_path / "zcache").mkdir(mode=0o700)
    (tmp_path / "zcache").chmod(0o777)
    with pytest.warns(CompileCacheWarning, match="writable by group or others"), cc.compiling():
        pass
    assert cc.compile_cache_info().directory is None and cc._READY is False


def test_first_call_checks_once_per_key(managed):
    seen: set = set()
    calls = []
    real = cc._before
    cc_before = lambda: calls.append(1) or real()  # noqa: E731
    try:
        cc._before = cc_before
        for _ in range(3):
            with cc.first_call(seen, ("f", cc.call_key((tf.constant([1.0]), 2.0)))):
                pass
        with cc.first_call(seen, ("f", cc.call_key((tf.constant([1.0, 2.0]), 2.0)))):
            pass
    finally:
        cc._before = real
    assert len(calls) == 2 and cc.call_key(([1.0],)) is None


# The TensorFlow internals it relies on ------------------------------------------------------


def test_tensorflow_flag_reader_is_there():
    from tensorflow.python import _pywrap_tfe

    value = _pywrap_tfe.TF_GetXlaConstantFoldingDisabled()
    assert value in (False, 0)
    _pywrap_tfe.TF_SetXlaConstantFoldingDisabled(bool(value))


def test_flag_value():
    flags = '--a=1 --tf_xla_persistent_cache_directory="/x y" --b --tf_xla_disable_constant_folding'
    assert xla_cache_format.flag_value(flags, "tf_xla_persistent_cache_directory") == "/x y"
    assert xla_cache_format.flag_value(flags, "tf_xla_disable_constant_folding") == "true"
    assert xla_cache_format.flag_value(flags, "c") is None


def test_enable_never_raises(monkeypatch, no_root):
    monkeypatch.setattr(cc, "_enable", lambda environ: 1 / 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = cc.enable_at_import()
    assert info.directory is None and "ZeroDivisionError" in info.reason
    assert [w.category for w in caught] == [CompileCacheWarning]


def test_hostname_is_a_folder_name():
    assert "/" not in cc._host() and cc._host() == cc._host() and socket.gethostname()


def test_record_from_another_keys_folder_does_not_match(shared, tmp_path):
    """An entry and its record copied from another key's folder (other CPU features, XLA flags): not trusted."""
    folder, stage, name = shared
    other = tmp_path / "tf2.21.0-x86_64-0000000000000000"
    other.mkdir(mode=0o700)
    for file in (name, name + ".sha256"):
        shutil.copy2(os.path.join(folder, file), other / file)
    assert cc.fill_stage(str(other), stage, {})["quarantined"] == 1 and entries(stage) == []


@pytest.mark.parametrize("how", ["run_program", "zcache.function", "plain call"])
def test_first_eager_call_of_a_program_is_published(how):
    """This session's own cache: a program's first call checked by zcache is recorded and published; a plain
    call of a user's tf.function(jit_compile=True) is not (its entry is dropped before the next checked call)."""
    info = zcache.compile_cache_info()
    assert info.managed
    scale = float(time.time_ns() % 1_000_003) + 0.5  # an HLO no earlier test compiled
    program = tf.function(lambda x: tf.reduce_sum(tf.tanh(x) * scale), jit_compile=True)
    x = tf.linspace(0.0, 1.0, 7)
    before = set(entries(info.directory)) if os.path.exists(info.directory) else set()
    if how == "run_program":
        value = cc.run_program(set(), "test", program, x)
    elif how == "zcache.function":  # not compiled itself: its graph calls an XLA program (as a fused model does)
        f = zcache.function(lambda x: program(x) + 0.0)
        value = [f(x) for _ in range(3)][-1]  # (the graph mode may run a first call eagerly)
    else:
        value = program(x)
    with cc.compiling():  # (the next checked call: drops what it did not record)
        pass
    assert float(value) == pytest.approx(float(tf.reduce_sum(tf.tanh(x) * scale)), rel=1e-6)
    new = set(entries(info.directory)) - before
    assert len(new) == (0 if how == "plain call" else 1)
    for name in new:
        digest = cc._read_record(os.path.join(info.directory, name))[0]
        assert digest == cc._digest(info.directory, name, pathlib.Path(info.directory, name).read_bytes())
