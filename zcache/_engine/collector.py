"""Python's cyclic garbage collector during zcache's traces: out of the way, and as it was after.

TensorFlow's modules leave hundreds of thousands of objects that live as long as the process; a
full pass of the collector scans them all, and a trace allocates enough to set one off now and
then (one fell inside the trace of a compiled fit's program, a third of a small fit's first
call). While zcache traces, the objects alive before the trace are frozen (``gc.freeze``): a
full pass then scans only what the trace made. When the outermost trace ends they are
unfrozen (``gc.unfreeze``): the collector's state (enabled, thresholds, freeze count) is the
user's again. The price: objects that were young when the trace began come back in the oldest
generation, collected at the next full pass instead of a young one.

Not done where the user froze objects (``gc.get_freeze_count() > 0``: unfreezing would undo
that), where the collector is disabled, or with ``ZCACHE_GC_FREEZE=0``
(:mod:`zcache._engine.environment`).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

from .environment import switch

__all__ = ["collector_out_of_traces"]

_LOCK = threading.Lock()
_INSIDE = [0]  # threads inside collector_out_of_traces(), counted per entry
_FROZE = [False]  # whether the outermost entry froze (and so the last exit unfreezes)


@contextlib.contextmanager
def collector_out_of_traces() -> Iterator[None]:
    """The block of a zcache trace: the objects alive when it began stay out of the collector's passes.

    Re-entrant and thread-safe (a count under a lock: the first entry freezes, the last exit unfreezes).

    Yields
    ------
    None
    """
    with _LOCK:
        if _INSIDE[0] == 0:
            _FROZE[0] = gc.isenabled() and gc.get_freeze_count() == 0 and switch("ZCACHE_GC_FREEZE") is not False
            if _FROZE[0]:
                gc.freeze()
        _INSIDE[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _INSIDE[0] -= 1
            if _INSIDE[0] == 0 and _FROZE[0]:
                gc.unfreeze()
                _FROZE[0] = False
