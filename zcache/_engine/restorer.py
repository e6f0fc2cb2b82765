"""Restorer: what every zcache setter returns; the change is made, a ``with`` block reverts it.

``set_value``, ``set_data``, ``set_values``, ``set_graph_mode`` and ``set_autograd_mode``
act at once and return a :class:`Restorer`. Ignore it to keep the change, or use it as a
context manager (or call :meth:`Restorer.restore`) to put back what was there before,
as zfit's setters do.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Restorer"]


class Restorer:
    """A change already made; :meth:`zcache.types.Restorer.restore` (or leaving a ``with`` block) reverts it, once.

    Parameters
    ----------
    restore : callable
        Puts back the previous value, data or mode.

    Examples
    --------
    >>> import zcache
    >>> mu = zcache.Parameter("mu_r", 1.0)
    >>> with mu.set_value(2.0):
    ...     float(mu.value())
    2.0
    >>> float(mu.value())
    1.0
    """

    def __init__(self, restore: Callable[[], object]) -> None:
        self._restore = restore
        self._restored = False

    def restore(self) -> None:
        """Put back what was there before the setter was called (only the first call acts)."""
        if not self._restored:
            self._restored = True
            self._restore()

    def __enter__(self) -> Restorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
