"""Compiled XLA programs kept on disk, so that a second run of a script compiles nothing.

TensorFlow's own persistent cache does the work (``TF_XLA_FLAGS=--tf_xla_persistent_cache_directory``):
at each XLA compile it builds the HLO, looks up ``<prefix>__<signature>__<HLO fingerprint>__<device>.pb``
and, when present, loads the machine code stored there instead of running LLVM. zcache points it, at
import, at a folder of its own and makes it safe, because an entry is code the next process runs:

- **Where.** ``$ZCACHE_CACHE_DIR``, else ``$XDG_CACHE_HOME/zcache``, else ``~/.cache/zcache``; under it
  ``xla/<key>/``, the key naming the TensorFlow version, the machine and a hash of the CPU's features,
  TensorFlow's build and the user's ``XLA_FLAGS``/``TF_XLA_FLAGS``: TensorFlow's key holds none of them,
  and a program built for other CPU features or other XLA options must not be loaded.
- **Whose.** Every folder zcache makes is created with mode 0700; the cache is refused (off, one
  warning) when one of them is a symbolic link, not owned by the current user, or writable by group
  or others, or when an ancestor could be renamed by another user.
- **Intact.** TensorFlow checks an entry's key and HLO exactly, but not its machine code: one flipped
  bit there crashed the process or returned a wrong number in our trials; a damaged file makes every
  call of that program fail (TensorFlow does not recompile). So at import zcache checks every entry:
  one seen for the first time must be a complete entry whose key matches its name (TensorFlow writes a
  file and renames it into place, so a complete file is what it wrote); its SHA-256 is then recorded
  beside it (``<entry>.sha256``), and an entry whose bytes no longer match is moved to
  ``quarantine/`` (TensorFlow compiles it anew). The cache is kept under :data:`MAX_BYTES` (oldest
  entries go first).
- **When.** TensorFlow reads ``TF_XLA_FLAGS`` once, at its first op (not at ``import tensorflow``). zcache
  sets the flags, makes TensorFlow read them at once, restores the variable (child processes do not
  inherit it) and checks that they took effect through a canary flag; if TensorFlow had read its flags
  before ``import zcache``, nothing changes and :func:`compile_cache_info` says so.

``ZCACHE_COMPILE_CACHE=0`` turns it off; a ``--tf_xla_persistent_cache_directory`` in the user's
``TF_XLA_FLAGS`` is left alone (TensorFlow's cache, unchecked). Every private TensorFlow detail this
needs (flag names, the entry format, ``_pywrap_tfe``) is in this module, pinned by
``tests/test_compile_cache.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import platform
import re
import shlex
import stat
import time
import warnings

import tensorflow as tf

from ..exceptions import CompileCacheWarning, TensorFlowInternalsWarning

__all__ = ["MAX_BYTES", "CompileCacheInfo", "clear_compile_cache", "compile_cache_info", "enable_at_import"]

#: Bound on the entries' total size; past it the oldest go (each check at import reads them all).
MAX_BYTES = 256 << 20
#: TensorFlow versions whose XLA flags zcache checked, [low, high): an unknown flag in TF_XLA_FLAGS aborts
#: TensorFlow, so a newer one gets the cache only with ZCACHE_COMPILE_CACHE=1.
TESTED_TENSORFLOW = ((2, 16), (2, 22))
#: Leftover temporary files of TensorFlow's writes older than this (seconds) are removed.
STALE_TMP_S = 3600
QUARANTINE_KEEP = 8
_SUFFIX = ".sha256"
_DIR_FLAG = "tf_xla_persistent_cache_directory"
_CANARY_FLAG = "tf_xla_disable_constant_folding"
_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


@dataclasses.dataclass(frozen=True)
class CompileCacheInfo:
    """Where this process keeps compiled XLA programs, as :func:`zcache.compile_cache_info` reports it.

    Attributes
    ----------
    directory : str or None
        The folder TensorFlow reads and writes compiled programs in; None when the cache is off.
    managed : bool
        Whether it is zcache's folder (checked at import); False for a folder set by the user's
        ``TF_XLA_FLAGS`` or when off.
    reason : str
        One sentence: why it is on or off.
    """

    directory: str | None
    managed: bool
    reason: str


_INFO = CompileCacheInfo(None, False, "zcache has not set up its compile cache (zcache is being imported).")
_ROOT: str | None = None


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
    """Delete zcache's compiled programs on disk (every TensorFlow version's); the next run compiles anew.

    Programs this process has compiled stay in its memory; a folder set by the user's ``TF_XLA_FLAGS``
    is not touched.

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
    root = _ROOT if _ROOT is not None else _cache_root(os.environ)
    top = os.path.join(root, "xla")
    removed = 0
    if not os.path.lexists(top):
        return 0
    try:
        _check_own(root)
        _check_own(top)
    except Refused as exc:  # not a folder of the user's alone: not deleted from
        warnings.warn(f"zcache did not clear its compile cache: {exc}", CompileCacheWarning, stacklevel=2)
        return 0
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            try:
                os.unlink(os.path.join(dirpath, name))
                removed += 1
            except OSError:  # pragma: no cover - a file another process removed first
                pass
    return removed


def enable_at_import() -> CompileCacheInfo:
    """Point TensorFlow's persistent XLA cache at zcache's folder (once, from ``import zcache``); never raises."""
    global _INFO
    try:
        _INFO = _enable(os.environ)
    except Exception as exc:  # a cache must never break the import
        _INFO = CompileCacheInfo(None, False, f"off: setting it up failed ({type(exc).__name__}: {exc}).")
        warnings.warn(f"zcache's compile cache is off: {exc}", CompileCacheWarning, stacklevel=2)
    return _INFO


# The decision -------------------------------------------------------------------------------


class Refused(Exception):
    """A folder zcache will not keep programs in (the message says why)."""


def _enable(environ: os._Environ | dict) -> CompileCacheInfo:
    global _ROOT
    switch = environ.get("ZCACHE_COMPILE_CACHE", "").strip().lower()
    if switch in _OFF:
        return CompileCacheInfo(None, False, "off: ZCACHE_COMPILE_CACHE=0.")
    user_flags = environ.get("TF_XLA_FLAGS", "")
    user_dir = flag_value(user_flags, _DIR_FLAG)
    if user_dir:
        return CompileCacheInfo(user_dir, False, f"TF_XLA_FLAGS sets --{_DIR_FLAG}: TensorFlow's cache, not checked "
                                                 f"by zcache.")
    if os.name != "posix" or not hasattr(os, "getuid"):
        return CompileCacheInfo(None, False, "off: only on POSIX systems (the folder checks need owners and modes).")
    version = tuple(int(p) for p in re.findall(r"\d+", tf.__version__)[:2])
    low, high = TESTED_TENSORFLOW
    if switch not in _ON and not low <= version < high:
        return CompileCacheInfo(None, False, f"off: TensorFlow {tf.__version__} is outside the versions whose XLA "
                                             f"flags zcache checked ({low[0]}.{low[1]} to {high[0]}.{high[1] - 1}); "
                                             f"ZCACHE_COMPILE_CACHE=1 turns it on.")
    _ROOT = _cache_root(environ)
    directory = os.path.join(_ROOT, "xla", folder_key(environ))
    if '"' in directory:  # TF_XLA_FLAGS quotes the path
        return CompileCacheInfo(None, False, f"off: the cache folder's path holds a double quote ({directory!r}).")
    try:
        secure_folder(_ROOT, directory)
    except Refused as exc:
        warnings.warn(f"zcache's compile cache is off: {exc}", CompileCacheWarning, stacklevel=3)
        return CompileCacheInfo(None, False, f"off: {exc}")
    report = check_entries(directory)
    if report["quarantined"]:
        warnings.warn(f"zcache moved {report['quarantined']} damaged compiled program(s) to "
                      f"{os.path.join(directory, 'quarantine')}; they will be compiled anew.",
                      CompileCacheWarning, stacklevel=3)
    took = point_tensorflow(directory, environ)
    if took is None:
        return CompileCacheInfo(None, False, "off: TensorFlow's flag reader (_pywrap_tfe) was not found.")
    if not took:
        return CompileCacheInfo(None, False, "off: TensorFlow had read its XLA flags before zcache was imported (an "
                                             "op ran first); import zcache before running TensorFlow.")
    return CompileCacheInfo(directory, True, "on: zcache's folder, checked at import.")


def _cache_root(environ) -> str:
    if environ.get("ZCACHE_CACHE_DIR"):
        return os.path.abspath(os.path.expanduser(environ["ZCACHE_CACHE_DIR"]))
    xdg = environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")  # a relative one is invalid
    return os.path.join(base, "zcache")


def folder_key(environ) -> str:
    """``tf<version>-<machine>-<hash>``: what the compiled code depends on and TensorFlow's key lacks."""
    parts = [tf.__version__, tf.version.GIT_VERSION, platform.machine(), _cpu_features(),
             environ.get("XLA_FLAGS", ""), environ.get("TF_XLA_FLAGS", "")]
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


def secure_folder(root: str, directory: str) -> None:
    """Create ``root`` and the folders down to ``directory`` (mode 0700) and check they are the user's alone.

    Raises
    ------
    Refused
        A folder is a symbolic link, not a folder, not the user's, or writable by others; or an
        ancestor of ``root`` lets another user rename it.
    """
    _check_ancestors(os.path.dirname(root))
    os.makedirs(os.path.dirname(root), mode=0o700, exist_ok=True)
    path = root
    chain = [root]
    for part in os.path.relpath(directory, root).split(os.sep):
        path = os.path.join(path, part)
        chain.append(path)
    for path in chain:
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # the umask may have taken the owner's bits
        except FileExistsError:
            pass
        _check_own(path)


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
    """Each existing ancestor is the user's or root's, and others may not rename in it (else sticky)."""
    path = os.path.realpath(path)
    while True:
        if os.path.exists(path):
            st = os.stat(path)
            if st.st_uid not in (0, os.getuid()):
                raise Refused(f"{path} (above the cache) is owned by user id {st.st_uid}.")
            if st.st_uid == 0 and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
                raise Refused(f"{path} (above the cache) is writable by others without the sticky bit.")
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


# The entries --------------------------------------------------------------------------------


def check_entries(directory: str, now: float | None = None) -> dict[str, int]:
    """Check every entry of ``directory``; move damaged ones to ``quarantine/``; keep the total bounded.

    Returns
    -------
    dict
        Counts: ``checked``, ``recorded`` (first seen, SHA-256 written), ``quarantined``, ``removed``
        (stale temporary files, orphan records, entries over :data:`MAX_BYTES`).
    """
    now = time.time() if now is None else now
    report = {"checked": 0, "recorded": 0, "quarantined": 0, "removed": 0}
    names = set(os.listdir(directory))
    entries = []
    for name in sorted(names):
        path = os.path.join(directory, name)
        if name.endswith((".tmp", ".part")):  # TensorFlow's <entry>.pb<unique>.tmp and our records' half-writes
            if _mtime(path, now) < now - STALE_TMP_S:
                report["removed"] += _unlink(path)
        elif name.endswith(_SUFFIX):
            if name[: -len(_SUFFIX)] not in names:
                report["removed"] += _unlink(path)
        elif name.endswith(".pb"):
            entries.append(name)
    entries = _bounded(directory, entries, report)
    for name in entries:
        report["checked"] += 1
        verdict = _check_entry(directory, name)
        if verdict in report:
            report[verdict] += 1
    return report


def _bounded(directory: str, entries: list[str], report: dict[str, int]) -> list[str]:
    """The entries kept: the newest first while their total stays within :data:`MAX_BYTES`."""
    sized = []
    for name in entries:
        try:
            st = os.lstat(os.path.join(directory, name))
        except FileNotFoundError:
            continue
        sized.append((st.st_mtime, st.st_size, name))
    kept, used = [], 0
    for _mtime_s, size, name in sorted(sized, reverse=True):
        if used + size > MAX_BYTES:
            report["removed"] += _unlink(os.path.join(directory, name))
            _unlink(os.path.join(directory, name + _SUFFIX))
            continue
        kept.append(name)
        used += size
    return sorted(kept)


def _check_entry(directory: str, name: str) -> str:
    path = os.path.join(directory, name)
    record = path + _SUFFIX
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return _quarantine(directory, name)
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:  # another process moved it meanwhile
        return "gone"
    digest = hashlib.sha256(data).hexdigest()
    try:
        with open(record, encoding="ascii") as f:
            recorded = f.read().split()
    except (FileNotFoundError, UnicodeDecodeError):
        recorded = []
    if recorded:
        return "intact" if recorded[0] == digest else _quarantine(directory, name)
    if not well_formed_entry(name, data):
        return _quarantine(directory, name)
    tmp = f"{record}.{os.getpid()}.part"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{digest} {len(data)}\n")
    os.replace(tmp, record)
    return "recorded"


def _quarantine(directory: str, name: str) -> str:
    folder = os.path.join(directory, "quarantine")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    try:
        os.replace(os.path.join(directory, name), os.path.join(folder, name))
    except FileNotFoundError:
        return "gone"
    _unlink(os.path.join(directory, name + _SUFFIX))
    kept = sorted(os.listdir(folder), key=lambda n: _mtime(os.path.join(folder, n), 0.0), reverse=True)
    for old in kept[QUARANTINE_KEEP:]:
        _unlink(os.path.join(folder, old))
    return "quarantined"


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


# TensorFlow's entry format (tensorflow/compiler/jit/xla_compilation_cache.proto) -------------
# XlaSerializedCacheEntry {1: XlaSerializedCacheKey key, 2: HloModuleProto hlo_module, 3: bytes executable}
# XlaSerializedCacheKey {1: uint64 signature_fingerprint, 2: uint64 cluster_fingerprint,
#                        3: string device_type, 4: string prefix, 5: bool compiled_using_pjrt}
# The file name is <prefix>__<signature_fingerprint>__<cluster_fingerprint>__<device_type>[...].pb.

_NAME = re.compile(r"^(?P<prefix>.*?)__(?P<signature>\d+)__(?P<cluster>\d+)__(?P<device>[A-Za-z0-9_]+?)(__\w+)?\.pb$")


def _fields(data: bytes) -> dict[int, bytes | int] | None:
    """The top-level fields of a protocol buffer message, or None if ``data`` is not exactly one."""
    out: dict[int, bytes | int] = {}
    i, n = 0, len(data)
    while i < n:
        tag, i = _varint(data, i)
        if tag is None:
            return None
        field, wire = tag >> 3, tag & 7
        if field == 0:  # not a field number
            return None
        if wire == 0:
            value, i = _varint(data, i)
            if value is None:
                return None
        elif wire == 2:
            length, i = _varint(data, i)
            if length is None or i + length > n:
                return None
            value, i = data[i: i + length], i + length
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if i + width > n:
                return None
            value, i = data[i: i + width], i + width
        else:
            return None
        out[field] = value
    return out


def _varint(data: bytes, i: int) -> tuple[int | None, int]:
    value = shift = 0
    while i < len(data) and shift < 70:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
    return None, i


def well_formed_entry(name: str, data: bytes) -> bool:
    """Whether ``data`` is a complete cache entry (key, HLO, machine code) whose key matches ``name``."""
    match = _NAME.match(name)
    entry = _fields(data)
    if match is None or entry is None:
        return False
    key, hlo, executable = entry.get(1), entry.get(2), entry.get(3)
    if not (isinstance(key, bytes) and isinstance(hlo, bytes) and isinstance(executable, bytes)):
        return False
    fields = _fields(key)
    if fields is None or not hlo or not executable:
        return False
    return (str(fields.get(1)) == match["signature"] and str(fields.get(2)) == match["cluster"]
            and fields.get(3) == match["device"].encode() and fields.get(4, b"") == match["prefix"].encode())


# TensorFlow's flags -------------------------------------------------------------------------


def flag_value(flags: str, name: str) -> str | None:
    """The value of ``--name=value`` in a TF_XLA_FLAGS string (the last one wins, as in TensorFlow)."""
    value = None
    try:
        words = shlex.split(flags)
    except ValueError:
        words = flags.split()
    for word in words:
        if word.startswith(f"--{name}="):
            value = word.split("=", 1)[1]
        elif word == f"--{name}":
            value = "true"
    return value


def point_tensorflow(directory: str, environ) -> bool | None:
    """Set TensorFlow's cache flags, make it read them now, restore ``TF_XLA_FLAGS``.

    Returns True when TensorFlow took them, False when it had read its flags before (they are
    then ignored for the rest of the process), None when its flag reader is missing. The canary:
    ``tf_xla_disable_constant_folding`` is set to the opposite of its value and read back (then
    set back), which tells whether this parse read our string.
    """
    try:
        from tensorflow.python import _pywrap_tfe  # TF_GetXlaConstantFoldingDisabled parses TF_XLA_FLAGS once

        get, put = _pywrap_tfe.TF_GetXlaConstantFoldingDisabled, _pywrap_tfe.TF_SetXlaConstantFoldingDisabled
    except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow layout
        warnings.warn("zcache could not find TensorFlow's TF_GetXlaConstantFoldingDisabled; its compile cache is off.",
                      TensorFlowInternalsWarning, stacklevel=3)
        return None
    before = environ.get("TF_XLA_FLAGS")
    user = (flag_value(before or "", _CANARY_FLAG) or "false").lower() in ("true", "1")
    canary = not user
    ours = [f'--{_DIR_FLAG}="{directory}"', "--tf_xla_persistent_cache_device_types=CPU",
            f"--{_CANARY_FLAG}={'true' if canary else 'false'}"]
    environ["TF_XLA_FLAGS"] = " ".join([before, *ours] if before else ours)
    try:
        took = bool(get()) == canary
        if took:
            put(user)
    finally:
        if before is None:
            del environ["TF_XLA_FLAGS"]
        else:
            environ["TF_XLA_FLAGS"] = before
    return took
