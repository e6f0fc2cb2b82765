"""Every ``ZCACHE_*`` environment variable the library reads, in one place.

=========================  ==========  ===============================================================
name                       default     meaning
=========================  ==========  ===============================================================
``ZCACHE_TF_LOGS``         ``0``       ``1``: TensorFlow's start-up lines (absl, oneDNN, CPU features)
                                       reach stderr during ``import zcache``; ``0``: file descriptor 2
                                       points to the null device while TensorFlow is imported, and
                                       back after. Read once, at import.
``ZCACHE_GC_FREEZE``       ``1``       ``0``: zcache's traces leave Python's cyclic collector alone;
                                       ``1``: while zcache traces a graph, the objects alive before it
                                       are out of the collector's full passes (``gc.freeze``), and back
                                       in when the trace ends (``gc.unfreeze``). Read at each trace.
``ZCACHE_COMPILE_CACHE``   (empty)     ``0``: no compiled programs on disk; ``1``: on, also with a
                                       TensorFlow version zcache did not check; empty: on for the
                                       checked versions. Read once, at import
                                       (``zcache/_engine/compile_cache.py``).
``ZCACHE_CACHE_DIR``       (empty)     the folder of zcache's files on disk (the compile cache), made
                                       absolute at import; empty: ``$XDG_CACHE_HOME/zcache`` (an
                                       absolute one only), else ``$HOME/.cache/zcache`` (a relative
                                       ``HOME`` turns the cache off). Read once, at import; the folder
                                       is made at the first compile.
``ZCACHE_TRACE_STORE``     ``0``       ``1``: a compiled fit's traced program is kept in the cache
                                       folder (``traces/``, with the compile cache's checks) and a later
                                       process with the same loss loads it instead of tracing (issue
                                       54); only while the compile cache is on. Read once, at import.
=========================  ==========  ===============================================================

Switches accept ``1``/``true``/``yes``/``on`` and ``0``/``false``/``no``/``off`` (any case); an empty
value is the default. Anything else raises :class:`~zcache.exceptions.EnvironmentSettingError`, naming
the variable and the values it takes. Tests and benchmarks read variables of their own
(``ZCACHE_TEST_*``, ...): those are not the library's and are not listed here.

Examples
--------
>>> from zcache._engine.environment import SETTINGS, switch
>>> sorted(SETTINGS)
['ZCACHE_CACHE_DIR', 'ZCACHE_COMPILE_CACHE', 'ZCACHE_GC_FREEZE', 'ZCACHE_TF_LOGS', 'ZCACHE_TRACE_STORE']
>>> switch("ZCACHE_GC_FREEZE", {"ZCACHE_GC_FREEZE": "off"})
False
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

from ..exceptions import EnvironmentSettingError

__all__ = ["SETTINGS", "Setting", "setting", "switch"]


class Setting(NamedTuple):
    """One ``ZCACHE_*`` variable: its default (a string, as the environment holds it) and what it does."""

    default: str
    meaning: str
    is_switch: bool


#: name -> Setting: the table of the module docstring.
SETTINGS: dict[str, Setting] = {
    "ZCACHE_TF_LOGS": Setting("0", "TensorFlow's start-up lines on stderr during import zcache", True),
    "ZCACHE_GC_FREEZE": Setting("1", "objects alive before a zcache trace stay out of its full collections", True),
    "ZCACHE_COMPILE_CACHE": Setting("", "compiled XLA programs on disk (empty: on for checked TensorFlow versions)",
                                    True),
    "ZCACHE_CACHE_DIR": Setting("", "the folder of zcache's files on disk", False),
    "ZCACHE_TRACE_STORE": Setting("0", "compiled fits' traced programs kept on disk and reused by later processes",
                                  True),
}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def setting(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of the ``ZCACHE_*`` variable ``name``: the environment's, else its default.

    Parameters
    ----------
    name : str
        A name of :data:`SETTINGS`.
    environ : mapping, optional
        Where to look (default: ``os.environ``, read now).

    Returns
    -------
    str
        The value, stripped; the default where unset or empty.

    Raises
    ------
    EnvironmentSettingError
        ``name`` is not one of zcache's variables.
    """
    known = SETTINGS.get(name)
    if known is None:
        raise EnvironmentSettingError(f"{name!r} is not one of zcache's environment variables "
                                      f"({', '.join(sorted(SETTINGS))}); see zcache._engine.environment.")
    value = (os.environ if environ is None else environ).get(name, "").strip()
    return value if value else known.default


def switch(name: str, environ: Mapping[str, str] | None = None) -> bool | None:
    """The ``ZCACHE_*`` switch ``name`` as a bool; None where it is empty and its default is too.

    Parameters
    ----------
    name : str
        A switch of :data:`SETTINGS`.
    environ : mapping, optional
        Where to look (default: ``os.environ``, read now).

    Returns
    -------
    bool or None
        True for ``1``/``true``/``yes``/``on``, False for ``0``/``false``/``no``/``off`` (any case),
        None for an empty value whose default is empty (the switch's own rule decides).

    Raises
    ------
    EnvironmentSettingError
        ``name`` is not a switch, or its value is none of those.
    """
    value = setting(name, environ).lower()
    if not SETTINGS[name].is_switch:
        raise EnvironmentSettingError(f"{name} is a value, not a switch; read it with setting().")
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    if value == "":
        return None
    raise EnvironmentSettingError(
        f"{name}={value!r} is not a switch value: set it to 1 (or true/yes/on) or 0 (or false/no/off), "
        f"or unset it for the default ({SETTINGS[name].default or 'empty'}).")
