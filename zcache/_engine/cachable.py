"""Caching for model classes: the ``@zcache.cached`` decorator and the ``Cachable`` mixin.

``@zcache.cached`` turns a method into "one :class:`CachedTensor` per instance and
per distinct argument values". Arguments must be hashable: numbers, strings,
tuples, or zcache objects (keyed by identity, and added as dependencies). Raw
tensors and numpy arrays cannot be tracked, so they are refused: wrap them in
:class:`zcache.Data`.

The caches an instance owns (from ``@cached`` methods and :meth:`Cachable.cache_value`)
are listed by :func:`caches_of`.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import numpy as np
import tensorflow as tf

from ..exceptions import InvalidDependencyError, UncacheableArgumentError
from .cached_tensor import CachedTensor
from .data import Data
from .parameter import Parameter
from .tensorlike import TensorLike

__all__ = ["cached", "Cachable", "caches_of", "cache_of"]

_ZOBJ = (Parameter, Data, CachedTensor)
_CACHES_ATTR = "_zcache_caches"


def _key(arg: Any, where: str) -> Any:
    """A hashable key for ``arg`` that changes exactly when its meaning changes."""
    if isinstance(arg, TensorLike):
        return arg  # identity hash: value changes are tracked by the dependency graph
    if isinstance(arg, (tf.Tensor, tf.Variable, np.ndarray)):
        raise UncacheableArgumentError(
            f"{where}: got a {type(arg).__name__}, whose changes zcache cannot track. Wrap "
            "arrays in zcache.Data and numbers in zcache.Parameter (or pass plain Python values)."
        )
    if isinstance(arg, (list, tuple)):
        return (type(arg).__name__, tuple(_key(a, where) for a in arg))
    if isinstance(arg, dict):
        return ("dict", tuple(sorted((k, _key(v, where)) for k, v in arg.items())))
    if not isinstance(arg, Hashable):
        raise UncacheableArgumentError(
            f"{where}: argument {arg!r} is not hashable, so it cannot key a cache; pass a tuple, a number, "
            "a string or a zcache object instead."
        )
    return arg


def _zcache_objects(obj: Any) -> list[Any]:
    if isinstance(obj, _ZOBJ):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [o for a in obj for o in _zcache_objects(a)]
    if isinstance(obj, dict):
        return [o for a in obj.values() for o in _zcache_objects(a)]
    return []


def _instance_caches(instance: Any) -> dict[Any, CachedTensor]:
    caches = instance.__dict__.get(_CACHES_ATTR)
    if caches is None:
        caches = instance.__dict__[_CACHES_ATTR] = {}
    return caches


def caches_of(obj: Any, methods: Iterable[Callable[..., Any]] | None = None) -> list[CachedTensor]:
    """The caches ``obj`` owns: one per ``@cached`` method and argument values, and per ``cache_value`` key.

    Parameters
    ----------
    obj : object
        Any instance (a :class:`Cachable` or an object with ``@cached`` methods).
    methods : iterable of callable, optional
        Only the caches of these ``@cached`` methods (bound or not); default every cache.

    Returns
    -------
    list of CachedTensor
        A new list, in the order the caches were created; empty for an object without caches.

    Examples
    --------
    >>> import tensorflow as tf, zcache
    >>> from zcache._engine.cachable import caches_of
    >>> class Box:
    ...     def __init__(self):
    ...         self.a = zcache.Parameter("a_box", 2.0)
    ...     @zcache.cached
    ...     def area(self):
    ...         return self.a.value() ** 2
    >>> box = Box()
    >>> caches_of(box), float(box.area())
    ([], 4.0)
    >>> [c.name for c in caches_of(box)]
    ['Box.area']
    """
    caches = vars(obj).get(_CACHES_ATTR, {}) if hasattr(obj, "__dict__") else {}
    if methods is None:
        return list(caches.values())
    # a @cached method's caches are keyed by (its qualified name, arguments): see cached()
    names = {m.__qualname__ for m in methods}
    return [cache for key, cache in caches.items() if key[0] in names]


def cache_of(obj: Any, method: Callable[..., Any], *args: Any) -> CachedTensor | None:
    """The cache of ``obj``'s ``@cached`` method for these arguments, if it was made; nothing is created.

    Parameters
    ----------
    obj : object
        The instance.
    method : callable
        The ``@cached`` method (bound or not).
    *args
        Its positional arguments, as it was called with them.

    Returns
    -------
    CachedTensor or None

    Examples
    --------
    >>> import zcache
    >>> from zcache._engine.cachable import cache_of
    >>> class Box:
    ...     def __init__(self):
    ...         self.a = zcache.Parameter("a_cache_of", 2.0)
    ...     @zcache.cached
    ...     def scaled(self, k):
    ...         return k * self.a.value()
    >>> box = Box()
    >>> cache_of(box, Box.scaled, 3) is None
    True
    >>> _ = box.scaled(3)
    >>> cache_of(box, Box.scaled, 3).name, cache_of(box, Box.scaled, 4)
    ('Box.scaled', None)
    """
    caches = vars(obj).get(_CACHES_ATTR, {}) if hasattr(obj, "__dict__") else {}
    where = f"{type(obj).__name__}.{method.__name__}"
    return caches.get((method.__qualname__, _key(args, where), _key({}, where)))


def cached(method: Callable[..., Any] | None = None, *, deps: Any = None, name: Callable[..., str] | None = None) -> Any:
    """Cache a method's result per instance and per distinct argument values.

    Parameters
    ----------
    method : callable, optional
        The method (when used as ``@zcache.cached`` without arguments).
    deps : None, sequence of str or callable, optional
        ``None`` (discover what the method reads), a sequence of attribute names, or a
        callable ``deps(self) -> list``. zcache objects passed as arguments are always
        dependencies.
    name : callable, optional
        ``name(self, *args, **kwargs) -> str`` labelling each cache (reports,
        ``zcache.to_dot``); default ``'<Class>.<method>'``.

    Returns
    -------
    callable
        The wrapped method (or, without ``method``, a decorator). Each call returns the
        cached value, a tensor.

    Raises
    ------
    InvalidDependencyError
        ``deps`` is none of the above, or names an attribute the instance lacks.
    UncacheableArgumentError
        A call passes an argument that cannot key a cache (a tensor, an array, an unhashable value).

    Examples
    --------
    >>> import numpy as np, tensorflow as tf, zcache
    >>> class Gauss:
    ...     def __init__(self):
    ...         self.mu = zcache.Parameter("mu_g", 0.0)
    ...         self.sigma = zcache.Parameter("sigma_g", 1.0, lower=0.01)
    ...     @zcache.cached
    ...     def shape(self, x):
    ...         z = (x.value() - self.mu.value()) / self.sigma.value()
    ...         return tf.exp(-0.5 * z * z)
    >>> g, x = Gauss(), zcache.Data(np.array([0.0, 1.0]), name="xg")
    >>> np.round(g.shape(x).numpy(), 4).tolist()
    [1.0, 0.6065]
    >>> _ = g.shape(x); _ = g.sigma.set_value(2.0)
    >>> np.round(g.shape(x).numpy(), 4).tolist()
    [1.0, 0.8825]
    """
    if method is None:
        return lambda m: cached(m, deps=deps, name=name)
    if not callable(method):
        raise TypeError(f"zcache.cached decorates methods, got {method!r}.")
    if not (deps is None or callable(deps) or (
        isinstance(deps, (list, tuple)) and all(isinstance(name, str) for name in deps)
    )):
        raise InvalidDependencyError(
            f"@zcache.cached(deps=...) takes None, a list of attribute names (e.g. deps=['mu']) or a "
            f"callable deps(self) -> list of zcache objects; got {deps!r}."
        )

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> tf.Tensor:
        where = f"{type(self).__name__}.{method.__name__}"
        key = (method.__qualname__, _key(args, where), _key(kwargs, where))
        caches = _instance_caches(self)
        cache = caches.get(key)
        if cache is None:
            label = where if name is None else str(name(self, *args, **kwargs))
            cache = caches[key] = _make_cache(self, method, args, kwargs, deps, label)
        return cache.value()

    wrapper.__zcache_cached__ = True  # type: ignore[attr-defined]
    return wrapper


def _make_cache(self: Any, method: Callable[..., Any], args: tuple, kwargs: dict, deps: Any, where: str) -> CachedTensor:
    # The closure holds the instance weakly: the instance owns its caches, not the reverse.
    ref = weakref.ref(self)

    def compute() -> Any:
        return method(ref(), *args, **kwargs)

    if deps is None:
        declared = None
    elif callable(deps):
        declared = deps(self)
        if not isinstance(declared, Iterable):
            raise InvalidDependencyError(
                f"{where}: deps(self) must return a list of zcache objects, got {declared!r}."
            )
        declared = list(declared)
    else:
        missing = [name for name in deps if not hasattr(self, name)]
        if missing:
            raise InvalidDependencyError(
                f"{where}: deps names {missing}, which {type(self).__name__} does not have; list the "
                "names of attributes that hold zcache objects, or pass deps=None to discover them."
            )
        declared = [getattr(self, name) for name in deps]
    cache = CachedTensor(compute, deps=declared, name=where)
    cache.add_dependencies(_zcache_objects((args, kwargs)))
    return cache


class Cachable:
    """Mixin for model classes: dependency listing and ad-hoc caching.

    Examples
    --------
    >>> import tensorflow as tf, zcache
    >>> class Model(zcache.Cachable):
    ...     def __init__(self):
    ...         self.c = zcache.Parameter("c_m", 2.0)
    ...     def norm(self):
    ...         return self.cache_value(lambda: tf.sqrt(self.c.value()))
    >>> m = Model()
    >>> round(float(m.norm()), 6), [p.name for p in m.get_deps()]
    (1.414214, ['c_m'])
    """

    def get_deps(self) -> list[Any]:
        """Parameters, Data and CachedTensors held in attributes (also of nested Cachables), in order.

        Returns
        -------
        list
            Each object once, in attribute order (the caches the instance owns left out).
        """
        found: dict[int, Any] = {}

        def walk(obj: Any, seen: set[int]) -> None:
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if isinstance(obj, _ZOBJ):
                found.setdefault(id(obj), obj)
            elif isinstance(obj, Cachable):
                for name, attr in vars(obj).items():
                    if name != _CACHES_ATTR:
                        walk(attr, seen)
            elif isinstance(obj, (list, tuple, set, frozenset)):
                for item in obj:
                    walk(item, seen)
            elif isinstance(obj, dict):
                for item in obj.values():
                    walk(item, seen)

        walk(self, set())
        return list(found.values())

    def cache_value(self, func: Callable[[], Any], deps: Iterable[Any] | None = None, key: Hashable | None = None) -> tf.Tensor:
        """Return ``func()`` through a cache owned by this instance.

        The cache is keyed by ``key`` or, by default, by ``func``'s code and the
        values it closes over, so calling this again from the same line reuses it.

        Parameters
        ----------
        func : callable
            Zero-argument callable returning a tensor.
        deps : iterable of Parameter, Data or CachedTensor, optional
            Declared dependencies; ``None`` discovers them (see :class:`zcache.CachedTensor`).
        key : hashable, optional
            What identifies the cache among this instance's; default: ``func``'s code and
            closure values.

        Returns
        -------
        tf.Tensor
            The cached value.

        Raises
        ------
        UncacheableArgumentError
            Without ``key``, ``func`` closes over a value that cannot key a cache.
        """
        if key is None:
            cells = tuple(c.cell_contents for c in (getattr(func, "__closure__", None) or ()))
            key = (getattr(func, "__code__", func), _key(cells, f"{type(self).__name__}.cache_value"))
        key = ("cache_value", key)
        caches = _instance_caches(self)
        cache = caches.get(key)
        if cache is None:
            cache = caches[key] = CachedTensor(func, deps=deps, name=f"{type(self).__name__}.cache_value")
        return cache.value()

    def invalidate_caches(self) -> None:
        """Invalidate every cache this instance owns."""
        for cache in _instance_caches(self).values():
            cache.invalidate()
