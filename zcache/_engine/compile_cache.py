"""Compiled XLA programs kept on disk, so that a second run of a script compiles nothing.

TensorFlow's own persistent cache does the work (``TF_XLA_FLAGS=--tf_xla_persistent_cache_directory``):
at each XLA compile it builds the HLO, looks up ``<prefix>__<signature>__<HLO fingerprint>__<device>.pb``
and, when present, loads the machine code stored there instead of running LLVM; it writes a new entry
to ``<entry>.pb<unique>.tmp`` and renames it. An entry is native code that the loading process runs,
and TensorFlow checks its key and HLO but not its code, so zcache trusts an entry only from the moment
its writer recorded it, and TensorFlow never sees one that is not trusted:

- **Where.** ``$ZCACHE_CACHE_DIR`` (a relative one is made absolute once, at import), else
  ``$XDG_CACHE_HOME/zcache`` (a relative one is ignored, as the XDG specification says), else
  ``$HOME/.cache/zcache`` (a relative ``HOME`` turns the cache off); under it ``xla/<key>/`` holds the
  published entries, the key naming the TensorFlow version, the machine and a hash of the CPU's
  features, TensorFlow's build and the user's ``XLA_FLAGS``/``TF_XLA_FLAGS`` (TensorFlow's key holds
  none of them).
- **Whose.** Every folder zcache makes has mode 0700; the cache is off (one warning) when one of them is
  a symbolic link, not the user's, or writable by group or others, or when another user could rename
  in a folder above it (one writable by group or others without the sticky bit, or owned by another
  user than root).
- **Per process.** TensorFlow reads and writes a folder of this process's own, ``xla/<key>/proc/<host>-
  <pid>-<token>``, made at the first compile, not at import. zcache fills it with hard links to the
  published entries that match their records, and empties it of anything it did not put there before
  each call that may compile (:func:`compiling`); after that call it records the SHA-256, size, mtime
  and inode of each entry TensorFlow wrote there (``<entry>.sha256``) and publishes it (a hard link in
  ``xla/<key>/``). An entry whose size, mtime or inode differ from its record is hashed; a mismatch
  is moved to ``quarantine/`` and compiled anew. An entry without a record (another program's, a
  writer that died before recording) is never linked; after :data:`UNRECORDED_GRACE_S` it is
  quarantined. The cost of a check is a ``stat`` and a link per entry, not a read, and the published
  entries are kept under :data:`MAX_BYTES` (oldest first out).
- **When.** TensorFlow reads ``TF_XLA_FLAGS`` once, at its first op (not at ``import tensorflow``). zcache
  sets the flags at import, makes TensorFlow read them at once, restores the variable (child processes
  do not inherit it) and checks that they took effect through a canary flag; if TensorFlow had read its
  flags before ``import zcache``, nothing changes and :func:`compile_cache_info` says so.

The environment is read in one place (:func:`_settings`): ``ZCACHE_COMPILE_CACHE`` (``0`` turns the
cache off, ``1`` turns it on for an untested TensorFlow version), ``ZCACHE_CACHE_DIR``,
``XDG_CACHE_HOME``, ``HOME``, ``XLA_FLAGS`` and ``TF_XLA_FLAGS`` (a
``--tf_xla_persistent_cache_directory`` there is left alone: TensorFlow's cache, unchecked). Every
private TensorFlow detail this needs (flag names, the entry format, ``_pywrap_tfe``) is in this module,
pinned by ``tests/test_compile_cache.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import os
import platform
import pwd
import re
import secrets
import shutil
import socket
import stat
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from ..exceptions import CompileCacheWarning
from .environment import setting, switch
from .xla_cache_format import DIR_FLAG, flag_value, point_tensorflow, well_formed_entry

__all__ = ["MAX_BYTES", "MAX_TRACE_BYTES", "CompileCacheInfo", "clear_compile_cache", "compile_cache_info", "compiling",
           "enable_at_import", "first_call", "forget_trace", "read_trace", "run_program", "trace_folder", "write_trace"]

#: Bound on the published entries' total size; past it the oldest go.
MAX_BYTES = 256 << 20
#: TensorFlow versions whose XLA flags zcache checked, [low, high): an unknown flag in TF_XLA_FLAGS aborts
#: TensorFlow, so a newer one gets the cache only with ZCACHE_COMPILE_CACHE=1.
TESTED_TENSORFLOW = ((2, 16), (2, 22))
#: Leftover temporary files of TensorFlow's writes older than this (seconds) are removed.
STALE_TMP_S = 3600
#: Bound on the traced programs kept on disk (``traces/<key>/``, issue 54), oldest out first.
MAX_TRACE_BYTES = 64 << 20
#: A published entry without a record younger than this (seconds) may be one whose writer is recording
#: it now: it is skipped, not quarantined (it is never linked for TensorFlow either way).
UNRECORDED_GRACE_S = 600
#: Per-process folders of another host (a home on a network file system) older than this are removed.
STALE_STAGE_S = 7 * 86400
QUARANTINE_KEEP = 8
_SUFFIX = ".sha256"
_STAGES = "proc"
_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


@dataclasses.dataclass(frozen=True)
class CompileCacheInfo:
    """Where this process keeps compiled XLA programs, as :func:`zcache.compile_cache_info` reports it.

    Attributes
    ----------
    directory : str or None
        The folder compiled programs are kept in between processes (an absolute path; zcache's is made
        at the first XLA compile); None when the cache is off.
    managed : bool
        Whether it is zcache's folder (every entry checked against its writer's record before
        TensorFlow can load it); False for a folder set by the user's ``TF_XLA_FLAGS`` or when off.
    reason : str
        One sentence: why it is on or off.
    """

    directory: str | None
    managed: bool
    reason: str


_INFO = CompileCacheInfo(None, False, "zcache has not set up its compile cache (zcache is being imported).")
_ROOT: str | None = None  # the cache root (absolute), once the set-up chose it
_SHARED: str | None = None  # xla/<key>: the published entries and their records
_TRACES: str | None = None  # traces/<key>/ under the cache root; None: no traced programs on disk
_STAGE: str | None = None  # this process's folder, TensorFlow's; None when zcache does not manage the cache
_READY: bool | None = None  # None: not prepared yet (no compile so far); False: refused at the first compile
_KNOWN: dict[str, tuple[int, int, int]] = {}  # staged entries zcache trusts: name -> (size, mtime_ns, inode)
_DEPTH = 0  # nesting of compiling() (all threads): the outermost checks before and records after
_LOCK = threading.Lock()


def compile_cache_info() -> CompileCacheInfo:
    """Where compiled XLA programs are kept between processes, and why the cache is on or off.

    Returns
    -------
    zcache.types.CompileCacheInfo
        ``directory`` (None when off), ``managed`` (zcache's own, checked folder) and ``reason``.

    Examples
    --------
    >>> import zcache
    >>> info = zcache.compile_cache_info()
    >>> info.directory is None or info.directory.startswith("/")
    True
    """
    return _INFO


def clear_compile_cache() -> int:
    """Delete zcache's compiled and traced programs on disk (every TensorFlow version's); the next run compiles anew.

    Both folders under the cache root go: ``xla/`` (XLA's machine code) and ``traces/`` (compiled fits'
    traced programs, ``ZCACHE_TRACE_STORE``). Programs this process has compiled or loaded stay in its
    memory; a folder set by the user's ``TF_XLA_FLAGS`` is not touched.

    Returns
    -------
    int
        The number of files removed.

    Examples
    --------
    >>> import zcache
    >>> zcache.clear_compile_cache() >= 0
    True
    """
    if _ROOT is not None:
        root = _ROOT
    else:
        try:
            root = _cache_root(_settings(os.environ))
        except Refused:
            return 0
    tops = [(folder, os.path.join(root, folder)) for folder in ("xla", "traces")]
    tops = [(folder, top) for folder, top in tops if os.path.lexists(top)]
    if not tops:
        return 0
    removed = 0
    try:
        _check_own(root)  # once: a root that is not the user's alone refuses both folders
    except Refused as exc:
        warnings.warn(f"zcache did not clear its compile cache: {exc}", CompileCacheWarning, stacklevel=2)
        return 0
    for folder, top in tops:
        try:
            _check_own(top)
        except Refused as exc:  # not a folder of the user's alone: not deleted from
            warnings.warn(f"zcache did not clear its {folder}/ folder: {exc}", CompileCacheWarning, stacklevel=2)
            continue
        with _LOCK:
            for dirpath, _dirs, files in os.walk(top):
                for name in files:
                    removed += _unlink(os.path.join(dirpath, name))
            if folder == "xla":
                _KNOWN.clear()
    return removed


def enable_at_import() -> CompileCacheInfo:
    """Point TensorFlow's persistent XLA cache at this process's folder (once, from ``import zcache``); never raises.

    Nothing is created on disk here: the folders are made and the entries checked at the first compile.
    """
    global _INFO
    try:
        _INFO = _enable(os.environ)
    except Exception as exc:  # a cache must never break the import
        _INFO = CompileCacheInfo(None, False, f"off: setting it up failed ({type(exc).__name__}: {exc}).")
        warnings.warn(f"zcache's compile cache is off: {exc}", CompileCacheWarning, stacklevel=2)
    return _INFO


@contextlib.contextmanager
def compiling(first: bool = True) -> Iterator[None]:
    """Around a call that may compile (or load) one of zcache's XLA programs for the first time in this process.

    Before the outermost such call, the folder TensorFlow reads holds only entries that match their
    writers' records; after it, the entries TensorFlow wrote during it are recorded and published. A
    call outside it may still compile: it then loads only entries checked at the last such call, and
    what it writes is not published (removed before the next one). Costs nothing when the cache is not
    zcache's; never raises for the cache's sake. ``first``: the call may load an entry (its program's
    first run in this process), so TensorFlow's lines about loading are left out of stderr
    (:func:`_loads_quietly`); a later call of a program already loaded passes False.
    """
    global _DEPTH
    if _STAGE is None:
        yield
        return
    with _LOCK:
        _DEPTH += 1
        outermost = _DEPTH == 1
        if outermost:
            _guarded(_before)
    try:
        with _loads_quietly() if outermost and first and _KNOWN else contextlib.nullcontext():
            yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                _guarded(_after)


#: What TensorFlow 2.21 logs, as errors, for every entry it loads from the cache, though nothing is wrong: it
#: first tries to parse the file as text, and its CPU loader compares tuning features (prefer-no-scatter,
#: prefer-no-gather) that are not instructions. zcache used to hide them by lowering TensorFlow's log level for
#: the whole process (issue 51); now only these lines are left out, and only while a first call may load.
_LOAD_NOISE = re.compile(
    rb"^E\d{4} [^\]]*(?:text_format\.cc:\d+\] Error parsing text-format tensorflow\.XlaSerializedCacheEntry"
    rb"|cpu_aot_loader\.cc:\d+\] Loading XLA:CPU AOT result\. Target machine feature \+prefer-no-(?:scatter|gather) )")


@contextlib.contextmanager
def _loads_quietly() -> Iterator[None]:
    """File descriptor 2 goes to a temporary file for the block; its lines, less :data:`_LOAD_NOISE`, come back after.

    Other lines written to stderr meanwhile (by any thread) are delayed to the block's end, not lost.
    Nothing changes where descriptor 2 is not open.
    """
    import tempfile

    try:
        saved = os.dup(2)
    except OSError:  # no stderr descriptor (an embedded interpreter)
        yield
        return
    with tempfile.TemporaryFile() as sink:
        with contextlib.suppress(Exception):
            import sys

            sys.stderr.flush()
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                import sys

                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = b"".join(line for line in sink.read().splitlines(keepends=True) if not _LOAD_NOISE.match(line))
            if kept:
                os.write(2, kept)


def first_call(seen: set, key: Any) -> contextlib.AbstractContextManager:
    """:func:`compiling` the first time ``key`` (a program and its arguments' shapes) is seen in ``seen``.

    The call sites of zcache's programs keep ``seen``: a later call of the same program and shapes runs
    compiled code TensorFlow holds in memory, and pays nothing here. A key that is None (arguments
    without a stable key) always checks.
    """
    if _STAGE is None or (key is not None and key in seen):
        return contextlib.nullcontext()
    if key is not None:
        seen.add(key)
    return compiling()


def run_program(seen: set, key: Any, program: Any, *args: Any) -> Any:
    """``program(*args)``; outside a trace, its first call per ``key`` and argument shapes is :func:`compiling`.

    For a program called eagerly (a model's fused XLA programs on a cache miss in eager mode); inside a
    trace the call is built into the caller's graph, which compiles when it runs.
    """
    if _STAGE is None or tf.inside_function():
        return program(*args)
    shapes = call_key(tuple(tf.nest.flatten(args)))
    with first_call(seen, None if shapes is None else (key, shapes)):
        return program(*args)


def call_key(args: tuple, kwargs: dict | None = None) -> tuple | None:
    """A key for the arguments of a call as TensorFlow traces them (dtypes and shapes, Python values), or None."""
    try:
        items = list(args) + sorted((kwargs or {}).items())
        key = tuple(_arg_key(a) for a in items)
        hash(key)
    except TypeError:
        return None
    return key


def _arg_key(value: Any) -> Any:
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return (type(value).__name__, str(value.dtype), tuple(shape))
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):  # a keyword argument
        return (value[0], _arg_key(value[1]))
    if isinstance(value, (bool, int, float, complex, str, type(None))):
        return (type(value).__name__, value)
    raise TypeError("no stable key")


# The decision -------------------------------------------------------------------------------


class Refused(Exception):
    """A folder zcache will not keep programs in (the message says why)."""


@dataclasses.dataclass(frozen=True)
class _Settings:
    switch: str  # ZCACHE_COMPILE_CACHE, lower case: "" (default: on), one of _OFF or _ON
    cache_dir: str  # ZCACHE_CACHE_DIR
    xdg_cache_home: str  # XDG_CACHE_HOME
    home: str  # HOME, else the password database's home folder
    xla_flags: str  # XLA_FLAGS: in the folder's key
    tf_xla_flags: str  # TF_XLA_FLAGS: in the folder's key; its cache directory flag leaves the cache to TensorFlow
    traces: bool = False  # ZCACHE_TRACE_STORE: compiled fits' traced programs kept beside the compiled ones


def _settings(environ) -> _Settings:
    """Every environment variable this module reads, read once."""
    home = environ.get("HOME")
    if home is None:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except (KeyError, AttributeError):  # pragma: no cover - a user without a password entry
            home = ""
    on = switch("ZCACHE_COMPILE_CACHE", environ)  # zcache's own variables: through environment.py's table
    return _Settings(switch="" if on is None else ("1" if on else "0"),
                     cache_dir=setting("ZCACHE_CACHE_DIR", environ), xdg_cache_home=environ.get("XDG_CACHE_HOME", ""),
                     home=home, xla_flags=environ.get("XLA_FLAGS", ""), tf_xla_flags=environ.get("TF_XLA_FLAGS", ""),
                     traces=bool(switch("ZCACHE_TRACE_STORE", environ)))


def _enable(environ) -> CompileCacheInfo:
    global _ROOT, _SHARED, _STAGE, _READY, _TRACES
    settings = _settings(environ)
    if settings.switch in _OFF:
        return CompileCacheInfo(None, False, "off: ZCACHE_COMPILE_CACHE=0.")
    user_dir = flag_value(settings.tf_xla_flags, DIR_FLAG)
    if user_dir:
        return CompileCacheInfo(user_dir, False, f"TF_XLA_FLAGS sets --{DIR_FLAG}: TensorFlow's cache, not checked "
                                                 f"by zcache.")
    if os.name != "posix" or not hasattr(os, "getuid"):
        return CompileCacheInfo(None, False, "off: only on POSIX systems (the folder checks need owners and modes).")
    version = tuple(int(p) for p in re.findall(r"\d+", tf.__version__)[:2])
    low, high = TESTED_TENSORFLOW
    if settings.switch not in _ON and not low <= version < high:
        return CompileCacheInfo(None, False, f"off: TensorFlow {tf.__version__} is outside the versions whose XLA "
                                             f"flags zcache checked ({low[0]}.{low[1]} to {high[0]}.{high[1] - 1}); "
                                             f"ZCACHE_COMPILE_CACHE=1 turns it on.")
    try:
        root = _cache_root(settings)
        shared = os.path.join(root, "xla", folder_key(settings))
        stage = os.path.join(shared, _STAGES, f"{_host()}-{os.getpid()}-{secrets.token_hex(4)}")
        if '"' in stage:  # TF_XLA_FLAGS quotes the path
            raise Refused(f"the cache folder's path holds a double quote ({shared!r}).")
        check_existing(root, stage)  # only what exists: nothing is made before the first compile
    except Refused as exc:
        warnings.warn(f"zcache's compile cache is off: {exc}", CompileCacheWarning, stacklevel=3)
        return CompileCacheInfo(None, False, f"off: {exc}")
    took = point_tensorflow(stage, environ)
    if took is None:
        return CompileCacheInfo(None, False, "off: TensorFlow's flag reader (_pywrap_tfe) was not found.")
    if not took:
        return CompileCacheInfo(None, False, "off: TensorFlow had read its XLA flags before zcache was imported (an "
                                             "op ran first); import zcache before running TensorFlow.")
    _ROOT, _SHARED, _STAGE, _READY = root, shared, stage, None
    _KNOWN.clear()
    _TRACES = os.path.join(root, "traces", folder_key(settings)) if settings.traces else None
    return CompileCacheInfo(shared, True, "on: zcache's folder (made at the first XLA compile); each entry is checked "
                                          "against its writer's record before TensorFlow can load it.")


def _cache_root(settings: _Settings) -> str:
    """The cache root, an absolute path (a relative one would move with the working folder)."""
    if settings.cache_dir:  # relative: made absolute once, against the working folder at import
        return os.path.abspath(os.path.expanduser(settings.cache_dir))
    if os.path.isabs(settings.xdg_cache_home):  # a relative one is invalid (XDG base directory specification)
        return os.path.join(os.path.normpath(settings.xdg_cache_home), "zcache")
    if not os.path.isabs(settings.home):
        raise Refused(f"HOME is not an absolute path ({settings.home!r}) and neither ZCACHE_CACHE_DIR nor an absolute "
                      f"XDG_CACHE_HOME is set; set ZCACHE_CACHE_DIR to the folder to keep compiled programs in.")
    return os.path.join(os.path.normpath(settings.home), ".cache", "zcache")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:64] or "host"


def folder_key(settings: _Settings | dict) -> str:
    """``tf<version>-<machine>-<hash>``: what the compiled code depends on and TensorFlow's key lacks."""
    if not isinstance(settings, _Settings):
        settings = _settings(settings)
    parts = [tf.__version__, tf.version.GIT_VERSION, platform.machine(), _cpu_features(), settings.xla_flags,
             settings.tf_xla_flags]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return f"tf{tf.__version__}-{platform.machine() or 'cpu'}-{digest}"


def _cpu_features() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return " ".join(sorted(value.split()))
    except OSError:
        pass
    return platform.processor()


# The folder ---------------------------------------------------------------------------------


def check_existing(root: str, directory: str) -> None:
    """Check, without making anything, the ancestors of ``root`` and the folders down to ``directory`` that exist.

    Raises
    ------
    Refused
        As :func:`secure_folder`.
    """
    _check_ancestors(os.path.dirname(root))
    for path in _chain(root, directory):
        if not os.path.lexists(path):
            return
        _check_own(path)


def secure_folder(root: str, directory: str) -> None:
    """Create ``root`` and the folders down to ``directory`` (mode 0700) and check they are the user's alone.

    A folder of the chain that exists with read or search bits for others (made by TensorFlow with the
    umask's mode) is narrowed to 0700.

    Raises
    ------
    Refused
        A folder is a symbolic link, not a folder, not the user's, or writable by others; or another
        user could rename in an ancestor of ``root``.
    """
    _check_ancestors(os.path.dirname(root))
    os.makedirs(os.path.dirname(root), mode=0o700, exist_ok=True)
    _check_ancestors(os.path.dirname(root))  # what makedirs made, with the umask's modes
    for path in _chain(root, directory):
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # the umask may have taken the owner's bits
        except FileExistsError:
            pass
        _check_own(path)
        if stat.S_IMODE(os.lstat(path).st_mode) != 0o700:
            os.chmod(path, 0o700)


def _chain(root: str, directory: str) -> list[str]:
    chain, path = [root], root
    rel = os.path.relpath(directory, root)
    for part in ([] if rel == "." else rel.split(os.sep)):
        path = os.path.join(path, part)
        chain.append(path)
    return chain


def _check_own(path: str) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise Refused(f"{path} is a symbolic link (to {os.readlink(path)!r}).")
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"{path} is not a folder.")
    if st.st_uid != os.getuid():
        raise Refused(f"{path} is owned by user id {st.st_uid}, not by this user ({os.getuid()}).")
    if st.st_mode & 0o022:
        raise Refused(f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}).")


def _check_ancestors(path: str) -> None:
    """No other user can rename in an existing ancestor, along the path as written and along its real path.

    An ancestor must be this user's or root's, and writable by group or others only with the sticky
    bit (then others can rename only their own names in it; the next folder down is checked too).
    """
    seen = set()
    for start in (os.path.abspath(path), os.path.realpath(path)):
        path = start
        while path not in seen:
            seen.add(path)
            if os.path.exists(path):
                st = os.stat(path)  # a symbolic link is judged by its target; the folder holding it is its parent
                if st.st_uid not in (0, os.getuid()):
                    raise Refused(f"{path} (above the cache) is owned by user id {st.st_uid}, who could rename the "
                                  f"cache's folder; set ZCACHE_CACHE_DIR to a folder of your own.")
                if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
                    raise Refused(f"{path} (above the cache) is writable by group or others without the sticky bit "
                                  f"(mode {stat.S_IMODE(st.st_mode):o}); set ZCACHE_CACHE_DIR to a folder of your own.")
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent


# Before and after a compile ----------------------------------------------------------------


def _guarded(step) -> None:
    """Run a step of :func:`compiling`; a failure turns the cache off for this process (it never breaks a fit)."""
    global _READY, _INFO
    try:
        step()
    except Exception as exc:
        if _READY is not False:
            _READY = False
            _INFO = CompileCacheInfo(None, False, f"off: checking its entries failed ({type(exc).__name__}: {exc}).")
            warnings.warn(f"zcache's compile cache is off for this process: {exc}", CompileCacheWarning, stacklevel=4)
        with contextlib.suppress(Exception):
            _empty_stage()


def _before() -> None:
    """Make TensorFlow's folder hold only trusted entries."""
    if _READY is None:
        _prepare()
    elif _READY:
        _recheck()
    else:
        _empty_stage()


def _after() -> None:
    """Record and publish the entries TensorFlow wrote during the call."""
    if not _READY:
        return
    for name in sorted(_listdir(_STAGE)):
        if name.endswith(".pb") and name not in _KNOWN:
            _publish(name)


def _prepare() -> None:
    """The first compile of this process: make the folders, remove dead processes' folders, fill this one."""
    global _READY, _INFO
    try:
        secure_folder(_ROOT, _STAGE)
    except Refused as exc:
        _READY = False
        _INFO = CompileCacheInfo(None, False, f"off: {exc}")
        warnings.warn(f"zcache's compile cache is off: {exc}", CompileCacheWarning, stacklevel=5)
        _empty_stage()
        return
    atexit.register(_remove_stage, _STAGE, os.getpid())
    _remove_dead_stages()
    _KNOWN.clear()
    _empty_stage()  # what TensorFlow wrote here before (a compile outside compiling()) is not trusted
    report = fill_stage(_SHARED, _STAGE, _KNOWN)
    if report["quarantined"]:
        warnings.warn(f"zcache moved {report['quarantined']} damaged or unrecorded compiled program(s) to "
                      f"{os.path.join(_SHARED, 'quarantine')}; they will be compiled anew.",
                      CompileCacheWarning, stacklevel=5)
    _READY = True


def _recheck() -> None:
    """Drop from TensorFlow's folder what zcache did not put there and what changed since."""
    for name in _listdir(_STAGE):
        if not name.endswith(".pb"):
            continue
        path = os.path.join(_STAGE, name)
        known = _KNOWN.get(name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            _KNOWN.pop(name, None)
            continue
        if known is None or _identity(st) != known:
            _unlink(path)
            _KNOWN.pop(name, None)
            if known is not None:  # changed in place (a hard link: the published file too)
                _quarantine_if(_SHARED, name, st.st_ino)


def _publish(name: str) -> None:
    """Record an entry TensorFlow wrote in this process's folder, and publish it (a hard link)."""
    path = os.path.join(_STAGE, name)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        data = _read_all(fd)
        os.fchmod(fd, 0o400)  # read-only: an accidental write in place fails
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or len(data) != st.st_size
            or (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns) or not well_formed_entry(name, data)):
        _unlink(path)  # not what TensorFlow wrote whole: not trusted, not published
        return
    _KNOWN[name] = _identity(after)
    published = os.path.join(_SHARED, name)
    try:
        os.link(path, published)
    except FileExistsError:  # another process published this program first: its entry stays
        return
    except OSError:  # no hard links here: a copy
        _copy(path, published)
        published_st = os.lstat(published)
        _write_record(published, _digest(_SHARED, name, data), _identity(published_st))
        return
    _write_record(published, _digest(_SHARED, name, data), _identity(after))


def fill_stage(shared: str, stage: str, known: dict[str, tuple[int, int, int]], now: float | None = None) -> dict:
    """Link into ``stage`` each entry of ``shared`` that matches its record; quarantine the others.

    The size, mtime and inode recorded by the writer are the fast path: an entry whose ``stat`` matches
    is not read. One that differs is hashed (a copied cache folder); it is linked when its SHA-256 is
    the recorded one (the record then takes the new ``stat``) and quarantined otherwise.

    Returns
    -------
    dict
        Counts: ``linked``, ``hashed``, ``quarantined``, ``skipped`` (unrecorded, within
        :data:`UNRECORDED_GRACE_S`), ``removed`` (stale temporary files, orphan records, entries over
        :data:`MAX_BYTES`).
    """
    now = time.time() if now is None else now
    report = {"linked": 0, "hashed": 0, "quarantined": 0, "skipped": 0, "removed": 0}
    names = set(_listdir(shared))
    entries = []
    for name in sorted(names):
        path = os.path.join(shared, name)
        if name.endswith((".tmp", ".part")):  # TensorFlow's <entry>.pb<unique>.tmp and our records' half-writes
            if _mtime(path, now) < now - STALE_TMP_S:
                report["removed"] += _unlink(path)
        elif name.endswith(_SUFFIX):
            if name[: -len(_SUFFIX)] not in names:
                report["removed"] += _unlink(path)
        elif name.endswith(".pb"):
            entries.append(name)
    kept, removed = _bounded(shared, entries, MAX_BYTES)
    report["removed"] += removed
    for name in kept:
        record = _read_record(os.path.join(shared, name))
        if record is None:
            if _mtime(os.path.join(shared, name), now) < now - UNRECORDED_GRACE_S:
                report["quarantined"] += _quarantine_if(shared, name) == "quarantined"
            else:
                report["skipped"] += 1
            continue
        verdict = _stage_one(shared, stage, name, record, known)
        report[verdict] = report.get(verdict, 0) + 1
    return report


def _stage_one(shared: str, stage: str, name: str, record: tuple, known: dict) -> str:
    digest, size, identity = record
    src, dst = os.path.join(shared, name), os.path.join(stage, name)
    _unlink(dst)
    try:
        if not stat.S_ISREG(os.lstat(src).st_mode):  # a symbolic link or worse: not read, not followed
            return _quarantine_if(shared, name)
        os.link(src, dst, follow_symlinks=False)  # first the link, then the check: what TensorFlow will read
    except FileNotFoundError:
        return "gone"
    except OSError:  # no hard links here: the check reads the bytes it copies
        with open(src, "rb") as f:
            data = f.read()
        if len(data) != size or _digest(shared, name, data) != digest:
            return _quarantine_if(shared, name)
        _copy_bytes(data, dst)
        known[name] = _identity(os.lstat(dst))
        return "linked"
    st = os.lstat(dst)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        _unlink(dst)
        return _quarantine_if(shared, name, st.st_ino)
    if _identity(st) == identity:
        known[name] = identity
        return "linked"
    with open(dst, "rb") as f:  # moved or copied since its record, or damaged: the bytes decide
        data = f.read()
    after = os.lstat(dst)
    if len(data) == size and _digest(shared, name, data) == digest and _identity(after) == _identity(st):
        _write_record(src, digest, _identity(after))
        known[name] = _identity(after)
        return "hashed"
    _unlink(dst)
    return _quarantine_if(shared, name, st.st_ino)


def _digest(shared: str, name: str, data: bytes) -> str:
    """SHA-256 of the folder's key, the entry's name and its bytes.

    A record copied with its entry from another key's folder (other CPU features, XLA flags or
    TensorFlow), or to another name, does not match.
    """
    head = f"{os.path.basename(os.path.normpath(shared))}\0{name}\0".encode()
    return hashlib.sha256(head + data).hexdigest()


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _read_record(entry: str) -> tuple[str, int, tuple[int, int, int] | None] | None:
    """``(sha256, size, (size, mtime_ns, inode) or None)`` from ``<entry>.sha256``, None when missing or unreadable."""
    try:
        with open(entry + _SUFFIX, encoding="ascii") as f:
            words = f.read().split()
        digest, size = words[0], int(words[1])
        identity = (size, int(words[2]), int(words[3])) if len(words) >= 4 else None
    except (OSError, UnicodeDecodeError, ValueError, IndexError):
        return None
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        return None
    return digest, size, identity


def _write_record(entry: str, digest: str, identity: tuple[int, int, int]) -> None:
    tmp = f"{entry}{_SUFFIX}.{os.getpid()}.{secrets.token_hex(4)}.part"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{digest} {identity[0]} {identity[1]} {identity[2]}\n")
    os.replace(tmp, entry + _SUFFIX)


def _copy(src: str, dst: str) -> None:
    with open(src, "rb") as f:
        _copy_bytes(f.read(), dst)


def _copy_bytes(data: bytes, dst: str) -> None:
    tmp = f"{dst}.{os.getpid()}.{secrets.token_hex(4)}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, dst)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _bounded(directory: str, entries: list[str], limit: int) -> tuple[list[str], int]:
    """The entries kept (sorted by name): the newest first while their total stays within ``limit`` bytes.

    The others are removed with their records (the compile cache's, ``MAX_BYTES``; the traced programs',
    ``MAX_TRACE_BYTES``); the second result is how many were.
    """
    sized = []
    for name in entries:
        try:
            st = os.lstat(os.path.join(directory, name))
        except FileNotFoundError:
            continue
        sized.append((st.st_mtime, st.st_size, name))
    kept, used, removed = [], 0, 0
    for _mtime_s, size, name in sorted(sized, reverse=True):
        if used + size > limit:
            removed += _unlink(os.path.join(directory, name))
            _unlink(os.path.join(directory, name + _SUFFIX))
            continue
        kept.append(name)
        used += size
    return sorted(kept), removed


def _quarantine_if(directory: str, name: str, inode: int | None = None) -> str:
    """Move ``directory/name`` to ``quarantine/`` (when ``inode`` is given: only if it is still that file)."""
    path = os.path.join(directory, name)
    try:
        if inode is not None and os.lstat(path).st_ino != inode:
            return "gone"  # replaced meanwhile: the new file is judged at the next check
    except FileNotFoundError:
        return "gone"
    folder = os.path.join(directory, "quarantine")
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    try:
        os.replace(path, os.path.join(folder, name))
    except FileNotFoundError:
        return "gone"
    _unlink(path + _SUFFIX)
    kept = sorted(os.listdir(folder), key=lambda n: _mtime(os.path.join(folder, n), 0.0), reverse=True)
    for old in kept[QUARANTINE_KEEP:]:
        _unlink(os.path.join(folder, old))
    return "quarantined"


def _empty_stage() -> None:
    """Remove every entry from this process's folder (TensorFlow then compiles what it needs)."""
    _KNOWN.clear()
    if _STAGE is not None:
        for name in _listdir(_STAGE):
            if name.endswith(".pb"):
                _unlink(os.path.join(_STAGE, name))


def _remove_stage(stage: str, pid: int | None = None) -> None:
    """Remove a process's folder (at exit: only by that process, not by a forked child that exits normally)."""
    if pid is None or pid == os.getpid():
        shutil.rmtree(stage, ignore_errors=True)


def _remove_dead_stages(now: float | None = None) -> int:
    """Remove the folders of this host's processes that ended (and other hosts' old ones)."""
    now = time.time() if now is None else now
    top = os.path.join(_SHARED, _STAGES)
    host, removed = _host(), 0
    for name in _listdir(top):
        path = os.path.join(top, name)
        if path == _STAGE:
            continue
        match = re.fullmatch(r"(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]+", name)
        if match is None:
            dead = True
        elif match["host"] == host:
            dead = not _alive(int(match["pid"]))
        else:
            dead = _mtime(path, now) < now - STALE_STAGE_S
        if dead:
            _remove_stage(path)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's process of that id
        return True
    return True


def _listdir(path: str | None) -> list[str]:
    try:
        return os.listdir(path) if path is not None else []
    except FileNotFoundError:
        return []


def _unlink(path: str) -> int:
    try:
        os.unlink(path)
        return 1
    except FileNotFoundError:
        return 0


def _mtime(path: str, default: float) -> float:
    try:
        return os.lstat(path).st_mtime
    except FileNotFoundError:
        return default


# Traced programs (issue 54) -----------------------------------------------------------------------
# A compiled fit's traced program (``zcache/_fitting/trace_store.py``) kept beside the compiled ones,
# under the same rules: the folders of :func:`secure_folder`, made at the first write; each entry
# written whole (a temporary file renamed) with its writer's record (:func:`_digest`, the folder's key
# and the entry's name in the hash); the bytes hashed and compared with the record before every load,
# a mismatch quarantined. Off unless ``ZCACHE_TRACE_STORE=1`` (and the compile cache is on).


def trace_folder() -> str | None:
    """The folder of traced programs (``<root>/traces/<key>``), None when they are not kept.

    Returns
    -------
    str or None
    """
    return _TRACES


def write_trace(name: str, data: bytes) -> bool:
    """Keep ``data`` as the traced program ``name`` (made whole, then recorded); never raises.

    Parameters
    ----------
    name : str
        The entry's file name (letters, digits, ``.``, ``_``, ``-``).
    data : bytes

    Returns
    -------
    bool
        Whether it was written (False: the store is off, or its folder refused).
    """
    if _TRACES is None or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        return False
    try:
        with _LOCK:
            secure_folder(_ROOT, _TRACES)
            path = os.path.join(_TRACES, name)
            _unlink(path + _SUFFIX)  # no record while the entry changes: a reader refuses it meanwhile
            _copy_bytes(data, path)
            _write_record(path, _digest(_TRACES, name, data), _identity(os.lstat(path)))
            entries = [n for n in _listdir(_TRACES) if not n.endswith((_SUFFIX, ".part")) and n != "quarantine"]
            _bounded(_TRACES, entries, MAX_TRACE_BYTES)
    except (Refused, OSError) as exc:
        warnings.warn(f"zcache did not keep a traced program: {exc}", CompileCacheWarning, stacklevel=2)
        return False
    return True


def read_trace(name: str) -> bytes | None:
    """The bytes of the traced program ``name`` if they match their writer's record, else None; never raises.

    An entry without a record (another program's file, a writer that has not finished) is not read;
    one whose bytes differ from the record (damaged, truncated, replaced, copied from another key's
    folder or renamed) is moved to ``quarantine/``.

    Parameters
    ----------
    name : str

    Returns
    -------
    bytes or None
    """
    if _TRACES is None or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        return None
    path = os.path.join(_TRACES, name)
    try:
        if not os.path.lexists(path):
            return None
        check_existing(_ROOT, _TRACES)
        record = _read_record(path)
        if record is None:
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            st = os.fstat(fd)
            data = _read_all(fd) if stat.S_ISREG(st.st_mode) else b""
        finally:
            os.close(fd)
    except Refused:  # a folder not the user's alone: nothing read, nothing moved
        return None
    except OSError:  # a symbolic link (O_NOFOLLOW), a file that cannot be read
        with contextlib.suppress(OSError):
            _quarantine_if(_TRACES, name)
        return None
    digest, size, _ = record
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or len(data) != size \
            or _digest(_TRACES, name, data) != digest:
        with contextlib.suppress(OSError):
            _quarantine_if(_TRACES, name, st.st_ino)
        return None
    return data


def forget_trace(name: str) -> None:
    """Move the traced program ``name`` to ``quarantine/`` (it failed its check after loading); never raises.

    Parameters
    ----------
    name : str
    """
    if _TRACES is not None and re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        with contextlib.suppress(OSError):
            _quarantine_if(_TRACES, name)
