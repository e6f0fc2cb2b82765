"""TensorFlow's persistent XLA cache seen from outside: its entry format and the flags that point it.

:mod:`zcache._engine.compile_cache` decides where programs are kept and checks every entry; this module
knows only what TensorFlow writes (``tensorflow/compiler/jit/xla_compilation_cache.proto``) and how its
``TF_XLA_FLAGS`` are read, so that the cache's rules and TensorFlow's formats change apart.
"""

from __future__ import annotations

import re
import shlex
import warnings

from ..exceptions import TensorFlowInternalsWarning

__all__ = ["CANARY_FLAG", "DIR_FLAG", "flag_value", "point_tensorflow", "well_formed_entry"]

DIR_FLAG = "tf_xla_persistent_cache_directory"
CANARY_FLAG = "tf_xla_disable_constant_folding"


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
    user = (flag_value(before or "", CANARY_FLAG) or "false").lower() in ("true", "1")
    canary = not user
    ours = [f'--{DIR_FLAG}="{directory}"', "--tf_xla_persistent_cache_device_types=CPU",
            f"--{CANARY_FLAG}={'true' if canary else 'false'}"]
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
