"""The tiered start of :class:`zcache.minimize.Minuit`: which tier serves a fit, and the compiled program's build.

A compiled fit (:class:`zcache._fitting.compiled_fit.CompiledFit`) pays, once per loss and fitted set, for its
program's trace and its first call, most of a small loss's first fit. With the *tiered start* (``Minuit()``'s
default, ``tiered=True``) the first two fits of a loss and fitted set are MIGRAD + HESSE on traced value + gradient (the cheap
tier: one smaller trace, Hessians by central differences of exact gradients, no second-order program). The first
builds nothing: a script that fits once would otherwise pay the build at its exit, which waits for it, and end
later than with the compiled first fit (``benchmarks/RESULTS.md``, "Tiered start"). The second, a sign that more
fits will follow, starts a daemon thread that traces the compiled program and calls it once so that TensorFlow's
runtime prepares it (:meth:`CompiledFit.builder`), and runs its own MIGRAD meanwhile without waiting for it.
Every later fit of that loss and set runs compiled; one that starts before the build ends waits for it (it would
have paid the trace itself). Not beside the first fit: on two cores a trace on another thread slowed the
foreground fit by more than the build saved (both are Python holding the GIL most of the time); the second fit,
whose value + gradient is traced already, is short.

Under XLA (:func:`zcache.set_jit_mode`) every fit is compiled: the cheap tier would compile its value +
gradient with XLA besides the program's, which was not measured to pay.

Which tier serves a fit depends on how many fits of that loss and set came before, never on timing: the first two
MIGRAD, the others compiled, so a seeded study gives the same numbers to the last digit in every run. The two tiers
agree within the fit's tolerance (the same minimum to a small fraction of the errors, the same errors, the same
verdicts; ``tests/test_tiers.py``), not to the last bit.

The build reads no cache through the engine and writes no Variable: a trace builds graphs, and the program's one
call reads the Variables it reads in any fit (a ``set_value`` meanwhile can only change the dropped outcome). It
leaves Python's collector as it is (no ``gc.freeze`` around its trace, unlike a trace in the foreground): the
user's code runs meanwhile. Its
errors are never lost: one of the kinds that make the compiled fit refuse a loss in the foreground refuses it here
the same way (``CompiledFit.refused``, then ``FitResult.fallback``); any other is raised by the next fit that needs
the program. Builds still running when Python exits are waited for (``atexit``), not left inside TensorFlow during
the interpreter's shutdown. :func:`wait_for_builds` waits for every build in flight (benchmarks and tests);
``Minuit(tiered=False)`` runs every fit compiled, the first one tracing in the foreground as before.

Examples
--------
>>> import numpy as np, zcache
>>> from zcache.models import Space, Gaussian
>>> from zcache.loss import UnbinnedNLL
>>> from zcache.minimize import Minuit, wait_for_builds
>>> mu = zcache.Parameter("mu_tier", 0.5, lower=-2.0, upper=2.0)
>>> loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), zcache.Data(np.random.default_rng(4).normal(0, 1, 500)))
>>> first = Minuit().minimize(loss)                # MIGRAD, and nothing built: a script that fits once pays no program
>>> _ = mu.set_value(0.5)
>>> again = Minuit().minimize(loss)                # MIGRAD, the compiled program built on a thread meanwhile
>>> wait_for_builds()
True
>>> _ = mu.set_value(0.5)
>>> third = Minuit().minimize(loss)
>>> [r.path for r in (first, again, third)], again.values == first.values
(['migrad', 'migrad', 'compiled'], True)
>>> bool(abs(first.values["mu_tier"] - third.values["mu_tier"]) < 0.01 * third.errors["mu_tier"])
True
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from ..exceptions import ZCacheError
from .compiled_fit import CompiledFit

__all__ = ["CHEAP_FITS", "REFUSING", "Build", "in_many_fits", "many_fits", "refusal", "start_build", "tier",
           "wait_for_builds"]

#: The fits of a compiled fit and setting that the cheap tier serves; the last of them starts the program's build.
#: A script that fits a loss once never pays for a program it would not use (its exit would wait for the build:
#: ``benchmarks/RESULTS.md``, "Tiered start"); a second fit says more will follow.
CHEAP_FITS = 2

#: The errors of a compiled fit's trace that refuse the loss (MIGRAD fits it from then on), in the foreground or
#: in a build: not every loss traces with its parameters replaced by a vector.
REFUSING = (ZCacheError, tf.errors.OpError, ValueError, TypeError, NotImplementedError, LookupError)

#: Builds still running (or finished but not yet looked at), per compiled fit, per setting.
_BUILDS: weakref.WeakKeyDictionary[CompiledFit, dict[Any, Build]] = weakref.WeakKeyDictionary()
#: Fits served so far, per compiled fit and setting (the first is the cheap tier's).
_SERVED: weakref.WeakKeyDictionary[CompiledFit, dict[Any, int]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
#: Depth of :func:`many_fits` blocks, per thread.
_LOOP = threading.local()


@contextlib.contextmanager
def many_fits() -> Iterator[None]:
    """Inside the block, ``Minuit``'s fits on this thread are compiled from the first (as ``tiered=False``).

    For a loop of many fits of one loss (toys, the points of a scan): the cheap tier saves a script that fits
    once the program's build, which a loop pays anyway, and its first fits would be MIGRAD's and the others
    compiled, so the same seeded loop run twice in a process would differ within the fit's tolerance. zcache's
    serial toys, hypothesis-toy studies and serial scans fit inside such a block.

    Examples
    --------
    >>> import numpy as np
    >>> import zcache
    >>> from zcache.models import Gaussian, Space
    >>> from zcache.loss import UnbinnedNLL
    >>> from zcache.minimize import Minuit, many_fits
    >>> mu = zcache.Parameter("mu_loop", 0.5, lower=-2.0, upper=2.0)
    >>> data = zcache.Data(np.random.default_rng(5).normal(0, 1, 300))
    >>> loss = UnbinnedNLL(Gaussian(Space("x", -6.0, 6.0), mu, 1.0), data)
    >>> with many_fits():
    ...     paths = []
    ...     for seed in range(3):
    ...         _ = data.set_data(np.random.default_rng(seed).normal(0, 1, 300))
    ...         _ = mu.set_value(0.5)
    ...         paths.append(Minuit().minimize(loss).path)
    >>> paths
    ['compiled', 'compiled', 'compiled']
    """
    _LOOP.depth = getattr(_LOOP, "depth", 0) + 1
    try:
        yield
    finally:
        _LOOP.depth -= 1


def in_many_fits() -> bool:
    """Whether this thread is inside a :func:`many_fits` block.

    Returns
    -------
    bool
    """
    return getattr(_LOOP, "depth", 0) > 0


def refusal(err: BaseException) -> str:
    """The reason a compiled fit refuses a loss, from the error of its trace (``CompiledFit.refused``).

    Parameters
    ----------
    err : BaseException

    Returns
    -------
    str
    """
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


class Build:
    """One build of a compiled fit's program on a daemon thread.

    Parameters
    ----------
    work : callable
        What :meth:`zcache._fitting.compiled_fit.CompiledFit.builder` returned.
    name : str
        The thread's name.

    Attributes
    ----------
    error : BaseException or None
        What the build raised.
    """

    def __init__(self, work: Callable[[], None], name: str) -> None:
        self.error: BaseException | None = None
        self._work: Callable[[], None] | None = work
        self._done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            assert self._work is not None
            self._work()
        except BaseException as err:  # noqa: BLE001 - kept, and raised or turned into a refusal by the next fit
            self.error = err
        finally:
            self._work = None  # the program's closure (served caches) not kept by a finished build
            self._done.set()

    def done(self) -> bool:
        """Whether the build has ended (with or without an error).

        Returns
        -------
        bool
        """
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the build to end; whether it has.

        Parameters
        ----------
        timeout : float, optional
            Seconds; None: as long as it takes.

        Returns
        -------
        bool
        """
        return self._done.wait(timeout)


def tier(fit: CompiledFit, setting: Any, tiered: bool = True) -> str:
    """Which tier serves this fit of ``fit`` and ``setting``: ``"cheap"``, ``"cheap+build"`` or ``"compiled"``.

    Counted per compiled fit and setting: the first fit is the cheap tier's (MIGRAD), the second too, and it
    starts the compiled program's build (:func:`start_build`, before its MIGRAD); every later fit is compiled,
    after waiting for a build still running (never two traces of one program at once). With ``tiered=False``
    every fit is compiled. A build that failed with one of :data:`REFUSING` refuses the loss as the foreground
    trace would (``fit.refused``: :class:`zcache.minimize.Minuit` then fits it with MIGRAD and says why in
    ``FitResult.fallback``); any other error is raised here.

    Parameters
    ----------
    fit : CompiledFit
    setting : hashable
        What selects the program (XLA or not, the Hessian's plan).
    tiered : bool
        ``Minuit(tiered=...)``: False serves every fit compiled.

    Returns
    -------
    str

    Raises
    ------
    BaseException
        What a build of this program raised, other than :data:`REFUSING`.
    """
    with _LOCK:
        served = _SERVED.setdefault(fit, {})
        count = served.get(setting, 0)
        served[setting] = count + 1
        build = None if tiered and count < CHEAP_FITS else _BUILDS.get(fit, {}).pop(setting, None)
    if tiered and count < CHEAP_FITS:
        return "cheap+build" if count == CHEAP_FITS - 1 else "cheap"
    if build is not None:
        build.wait()
        if build.error is not None:
            if not isinstance(build.error, REFUSING):
                raise build.error
            fit.refused = refusal(build.error)
    return "compiled"


def start_build(fit: CompiledFit, setting: Any, builder: Callable[[], Callable[[], None]]) -> None:
    """Build the program of ``fit`` and ``setting`` on a daemon thread, for the fits after the cheap tier's.

    ``builder()`` runs here, on the calling thread (it reads the caches the program is served); its work on
    the thread. Nothing is started for a refused loss, a program traced already or a build in flight; an
    error of ``builder()`` itself is kept as a build's would be.

    Parameters
    ----------
    fit : CompiledFit
    setting : hashable
    builder : callable
        :meth:`zcache._fitting.compiled_fit.CompiledFit.builder` with the fit's arguments.
    """
    with _LOCK:
        if fit.refused is not None or setting in _BUILDS.get(fit, {}):
            return
    try:
        work = builder()
    except BaseException as err:  # noqa: BLE001 - the next fit raises it or refuses the loss
        def work(err: BaseException = err) -> None:
            raise err
    build = Build(work, name=f"zcache-build-{type(fit.loss).__name__}")
    with _LOCK:
        _BUILDS.setdefault(fit, {})[setting] = build


def wait_for_builds(timeout: float | None = None) -> bool:
    """Wait for every compiled program being built for a later fit (``Minuit``'s tiered start).

    Parameters
    ----------
    timeout : float, optional
        Seconds for all of them together; None: as long as it takes.

    Returns
    -------
    bool
        Whether every build has ended (errors are kept for the fit that needs the program).

    Examples
    --------
    >>> from zcache.minimize import wait_for_builds
    >>> wait_for_builds(timeout=60.0)
    True
    """
    import time

    with _LOCK:
        builds = [b for per in _BUILDS.values() for b in per.values()]
    end = None if timeout is None else time.monotonic() + float(timeout)
    for build in builds:
        if not build.wait(None if end is None else max(0.0, end - time.monotonic())):
            return False
    return True


# A build left inside TensorFlow while the interpreter shuts down could crash it: exit waits for them.
atexit.register(wait_for_builds)
