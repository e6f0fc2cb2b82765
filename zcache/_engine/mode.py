"""The mode policy: what is traced into a graph, what runs eagerly, which gradients.

Every function decorated with :func:`zcache.function` carries an *identifier*
(``wraps=``). The graph policy maps identifiers to "trace" or "run eagerly":

=========  ======  =======  ======  ===========
wraps      True    False    'auto'  dict
=========  ======  =======  ======  ===========
tensor     trace   eager    trace   as given, else 'auto'
loss       trace   eager    trace   as given, else 'auto'
sample     trace   eager    trace   as given, else 'auto'
gradient   trace   eager    trace   as given, else 'auto'
model      trace   eager    eager   as given, else 'auto'
=========  ======  =======  ======  ===========

A decorated function called while another function is being traced is inlined
into that trace: there are never nested ``tf.function`` objects.

The setters double as context managers, restoring the previous setting on exit::

    with zcache.set_graph_mode(False):
        ...  # everything eager, handy for debugging

The jit policy (:func:`zcache.set_jit_mode`, same settings) picks which *traced* functions are
compiled with XLA; ``'auto'`` compiles ``loss`` only, and the default is ``False``.

Changing the policy inside a trace raises :class:`IllegalInGraphModeError`.
"""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf

from ..exceptions import GraphModeError, UnknownIdentifierError
from .restorer import Restorer
from .trace import forbid_in_trace

__all__ = [
    "IDENTIFIERS",
    "auto_decides",
    "executing_eagerly",
    "JIT_AUTO",
    "compiles",
    "get_autograd_mode",
    "get_graph_mode",
    "get_jit_mode",
    "set_autograd_mode",
    "set_graph_mode",
    "set_jit_mode",
    "traces",
]

#: Identifiers a :func:`zcache.function` may carry, with whether ``'auto'`` traces them.
IDENTIFIERS: dict[str, bool] = {
    "tensor": True,
    "loss": True,
    "sample": True,
    "gradient": True,
    "model": False,
}

#: Identifiers whose traced functions ``set_jit_mode('auto')`` compiles with XLA.
JIT_AUTO: dict[str, bool] = {
    "tensor": False,
    "loss": True,
    "sample": False,
    "gradient": False,
    "model": False,
}

#: The jit setting zcache starts with.
_JIT_DEFAULT: bool | str = False


class _State:
    """The process-wide mode state (one setting for all threads; see ``_context``)."""

    graph_setting: bool | str | dict[str, bool] = "auto"
    policy: dict[str, bool] = dict(IDENTIFIERS)
    autograd: bool = True
    jit_setting: bool | str | dict[str, bool] = _JIT_DEFAULT
    jit_policy: dict[str, bool] = {}  # set below, from _JIT_DEFAULT


_state = _State()


def executing_eagerly() -> bool:
    """True if code runs eagerly right now (not inside any ``tf.function`` trace)."""
    return not tf.inside_function()


def _parse_policy(setting: object, auto: Mapping[str, bool], mode: str, usage: str) -> dict[str, bool]:
    """The per-identifier policy of a mode setting (True, False, 'auto' or a dict over 'auto').

    ``mode`` names the mode in messages ("graph", "jit"); ``usage`` lists the settings.
    """
    if setting is True or setting is False:
        return {key: bool(setting) for key in IDENTIFIERS}
    if isinstance(setting, str):
        if setting == "auto":
            return dict(auto)
        raise GraphModeError(f"Unknown {mode} mode {setting!r}. Use {usage}.")
    if isinstance(setting, Mapping):
        policy = dict(auto)
        for key, value in setting.items():
            if key not in IDENTIFIERS:
                raise UnknownIdentifierError(
                    f"Unknown identifier {key!r} in the {mode}-mode dict; known identifiers "
                    f"are {sorted(IDENTIFIERS)}."
                )
            if not isinstance(value, bool):
                raise GraphModeError(
                    f"The {mode}-mode dict maps identifiers to True/False, got {key!r}: {value!r}."
                )
            policy[key] = value
        return policy
    raise GraphModeError(
        f"{mode.capitalize()} mode must be True, False, 'auto' or a dict, got {setting!r} "
        f"({type(setting).__name__})."
    )


def _policy_for(graph: object) -> dict[str, bool]:
    return _parse_policy(graph, IDENTIFIERS, "graph",
                         "True (trace every zcache.function), False (everything eager), 'auto' (trace all "
                         "but 'model'), or a dict such as {'loss': True, 'model': False}")


def set_graph_mode(graph: bool | str | Mapping[str, bool], set_backend: bool | None = None) -> Restorer:
    """Set which :func:`zcache.function`-decorated functions are traced.

    Parameters
    ----------
    graph : bool, 'auto' or dict of str to bool
        ``True`` traces every identifier, ``False`` runs everything eagerly, ``'auto'``
        traces all identifiers but ``'model'``, and a dict such as ``{'model': True}``
        overrides single identifiers of ``'auto'``.
    set_backend : bool, optional
        With ``graph=False``, also call ``tf.config.run_functions_eagerly(True)`` so that
        plain ``tf.function`` code runs eagerly too (the default, ``None``). Pass ``False``
        to leave TensorFlow alone.

    Returns
    -------
    Restorer
        As a context manager it restores the previous mode.

    Raises
    ------
    GraphModeError
        For an unknown setting (state unchanged).
    IllegalInGraphModeError
        When called inside a trace.

    Examples
    --------
    >>> import zcache
    >>> with zcache.set_graph_mode(False):
    ...     zcache.get_graph_mode()
    False
    >>> zcache.get_graph_mode()
    'auto'
    """
    forbid_in_trace("set_graph_mode")
    policy = _policy_for(graph)
    if set_backend is not None and not isinstance(set_backend, bool):
        raise GraphModeError(f"set_backend must be True, False or None, got {set_backend!r}.")
    old_setting, old_policy = _state.graph_setting, _state.policy
    old_backend = tf.config.functions_run_eagerly()
    _state.graph_setting = dict(graph) if isinstance(graph, Mapping) else graph
    _state.policy = policy
    if set_backend is not False:
        tf.config.run_functions_eagerly(graph is False)

    def restore() -> None:
        _state.graph_setting, _state.policy = old_setting, old_policy
        if set_backend is not False:
            tf.config.run_functions_eagerly(old_backend)

    return Restorer(restore)


def get_graph_mode() -> bool | str | dict[str, bool]:
    """The current graph-mode setting, as it was given to :func:`zcache.set_graph_mode`."""
    setting = _state.graph_setting
    return dict(setting) if isinstance(setting, dict) else setting


def set_autograd_mode(autograd: bool) -> Restorer:
    """Choose automatic (``True``) or numerical (``False``) gradients in :func:`zcache.gradient`.

    Parameters
    ----------
    autograd : bool
        ``True`` for automatic differentiation, ``False`` for numerical differences.

    Returns
    -------
    Restorer
        As a context manager it restores the previous mode.

    Raises
    ------
    GraphModeError
        If ``autograd`` is not a bool (state unchanged).
    IllegalInGraphModeError
        When called inside a trace.

    Examples
    --------
    >>> import zcache
    >>> with zcache.set_autograd_mode(False):
    ...     zcache.get_autograd_mode()
    False
    """
    forbid_in_trace("set_autograd_mode")
    if not isinstance(autograd, bool):
        raise GraphModeError(
            f"Autograd mode must be True (automatic) or False (numerical), got {autograd!r}."
        )
    old = _state.autograd
    _state.autograd = autograd

    def restore() -> None:
        _state.autograd = old

    return Restorer(restore)


def get_autograd_mode() -> bool:
    """True if :func:`zcache.gradient` uses automatic differentiation."""
    return _state.autograd


def traces(wraps: str) -> bool:
    """Whether the current policy traces functions with identifier ``wraps``."""
    return _state.policy[wraps]


def auto_decides(wraps: str) -> bool:
    """Whether the graph mode for ``wraps`` is ``'auto'``'s (the setting is ``'auto'``, or a dict without it).

    Only then may a :class:`zcache.Function` with ``eager_calls`` run its first calls eagerly:
    an explicit ``True`` traces from the first call.
    """
    setting = _state.graph_setting
    return setting == "auto" or (isinstance(setting, dict) and wraps not in setting)


def _jit_policy_for(jit: object) -> dict[str, bool]:
    return _parse_policy(jit, JIT_AUTO, "jit",
                         "True (compile every traced zcache.function with XLA), False (no XLA), 'auto' "
                         "(compile the 'loss' functions), or a dict such as {'loss': True}")


def set_jit_mode(jit: bool | str | Mapping[str, bool]) -> Restorer:
    """Set which traced :func:`zcache.function`-decorated functions are compiled with XLA.

    A function picks ``jit_compile`` when it is traced (its graphs are kept per setting), so
    a change takes effect at the next call, without ``clear_graph_cache``. Functions that
    the graph mode runs eagerly stay eager. In a compiled graph every in-graph check of
    zcache is an output, not an Assert op: a refused input still raises the zcache error
    and leaves parameters, data and caches as they were. A graph that XLA cannot compile
    (or that holds a check in a nested graph) runs uncompiled; ``Function.jit_fallback``
    says why.

    Parameters
    ----------
    jit : bool, 'auto' or dict of str to bool
        ``True`` compiles every identifier, ``False`` none, ``'auto'`` the ``'loss'``
        functions (a loss's value, gradient and Hessian), and a dict such as
        ``{'tensor': True}`` overrides single identifiers of ``'auto'``.

    Returns
    -------
    Restorer
        As a context manager it restores the previous mode.

    Raises
    ------
    GraphModeError
        For an unknown setting (state unchanged).
    UnknownIdentifierError
        For an unknown identifier in a dict (state unchanged).
    IllegalInGraphModeError
        When called inside a trace.

    Examples
    --------
    >>> import zcache
    >>> with zcache.set_jit_mode("auto"):
    ...     zcache.get_jit_mode()
    'auto'
    >>> zcache.get_jit_mode()
    False
    """
    forbid_in_trace("set_jit_mode")
    policy = _jit_policy_for(jit)
    old_setting, old_policy = _state.jit_setting, _state.jit_policy
    _state.jit_setting = dict(jit) if isinstance(jit, Mapping) else jit
    _state.jit_policy = policy

    def restore() -> None:
        _state.jit_setting, _state.jit_policy = old_setting, old_policy

    return Restorer(restore)


def get_jit_mode() -> bool | str | dict[str, bool]:
    """The current jit-mode setting, as it was given to :func:`zcache.set_jit_mode`.

    Returns
    -------
    bool, str or dict
        ``True``, ``False``, ``'auto'`` or a dict of identifiers.

    Examples
    --------
    >>> import zcache
    >>> zcache.get_jit_mode()
    False
    """
    setting = _state.jit_setting
    return dict(setting) if isinstance(setting, dict) else setting


def compiles(wraps: str) -> bool:
    """Whether the current jit policy compiles traced functions with identifier ``wraps``."""
    return _state.jit_policy[wraps]


_state.jit_policy = _jit_policy_for(_JIT_DEFAULT)
