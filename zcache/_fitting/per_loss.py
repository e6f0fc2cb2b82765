"""Objects made once per loss and set of parameters, kept while the loss lives.

A batched toy study (:class:`zcache.scale.BatchedLoss`) and a compiled fit
(:class:`zcache._fitting.compiled_fit.CompiledFit`) each own compiled programs that are worth
keeping across calls: a second study or fit on the same loss compiles nothing. They are kept in a
registry keyed weakly by the loss (the registry must not keep the loss alive) and by the node ids
of the parameters, and hold the loss itself weakly.

Examples
--------
>>> import weakref
>>> class Loss: ...
>>> class P:
...     def __init__(self, node_id): self.node_id = node_id
>>> registry = weakref.WeakKeyDictionary()
>>> loss, params = Loss(), [P(1), P(2)]
>>> first = kept(registry, loss, params, lambda loss, params: object())
>>> first is kept(registry, loss, params, lambda loss, params: object())
True
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["kept", "alive"]

T = TypeVar("T")


def kept(registry: weakref.WeakKeyDictionary, loss: Any, params: Sequence[Any], make: Callable[[Any, Any], T]) -> T:
    """The object of ``loss`` and ``params`` in ``registry``, made by ``make(loss, params)`` the first time.

    Parameters
    ----------
    registry : weakref.WeakKeyDictionary
        Loss -> {parameter node ids -> object}.
    loss : object
        The loss (a weak key).
    params : sequence of Parameter
        The parameters (keyed by node id, in order).
    make : callable
        Builds the object.

    Returns
    -------
    object
    """
    per_loss = registry.setdefault(loss, {})
    key = tuple(p.node_id for p in params)
    found = per_loss.get(key)
    if found is None:
        found = per_loss[key] = make(loss, params)
    return found


def alive(ref: weakref.ref, owner: str, error: type[Exception]) -> Any:
    """The loss behind ``ref``; ``error`` once it has been garbage collected.

    Parameters
    ----------
    ref : weakref.ref
        A weak reference to the loss.
    owner : str
        The holder's class name, for the message.
    error : type
        The exception to raise.

    Returns
    -------
    object
        The loss.
    """
    loss = ref()
    if loss is None:
        raise error(f"the loss of this {owner} no longer exists.")
    return loss
