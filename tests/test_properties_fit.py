"""A stateful property test of the fitting layer: fits, floating toggles, MINOS, profiles.

``FitMachine`` drives one extended Gauss + Exponential model (``SumPdf`` with yields on
[0, 10], ``zcache.Parameter`` for mu, sigma, lambda and both yields) through random
sequences of what a zfit user does between fits: fit with Minuit (precompute on / off,
zcache's gradient or Minuit's own), refit, toggle ``floating`` on a parameter, change a
fixed parameter, replace the data (``set_data``), ask a *previous* result for MINOS or a
profile (through :class:`zcache.minimize.FitResult` or directly on ``result.minuit``) and
call :func:`zcache.precompute`.

Every step is checked against references that do not use zcache: a numpy NLL of the same
model and data, minimized (and MINOS-ed) by iminuit.

- after every step, ``loss.value()`` equals the numpy NLL at the current parameter values
  (rtol 1e-10) and ``loss.params`` are the parameters whose flag is set, in model order;
- after a fit, the fitted values equal iminuit's fit of the numpy NLL from the same start
  with the same fixed parameters (to ``VALUE_TOL`` of the errors), the errors agree to 2 %,
  and the fixed parameters did not move;
- MINOS, profiles and scans of a previous result see the state of *its* fit (all parameter
  values and the data then): a scan equals the numpy NLL differences there, a MINOS interval
  equals iminuit's MINOS of the numpy NLL of that fit; afterwards every parameter and the
  data are exactly as before;
- a Hessian in line-shape parameters (the Gaussian's mean and width among its five, or the mass and
  width of a line shape computed through complex 1/z and sqrt, or the masses and widths of a SymPy
  model through the bridge's group programs) compiled with XLA equals the uncompiled one, twice in a
  row, and leaves every parameter where it was; drawn exact (second-order autodiff through the
  caches, valid or bypassed) or by differences;
- a bridged amplitude model with its line shapes and four coupling parts floating (or the third
  coupling toggled fixed), fitted by ``Minuit()`` (the compiled fit's Hessians: the couplings' block
  exact, differences along the line shapes) and with differences throughout, with or without XLA:
  the same minimum and errors, and 8 calls fewer where the block is taken;
- a fit of the same model as a :class:`zcache.scale.ChunkedLoss` over two chunks of the current
  events (split at a drawn point) passes every check of a fit of the whole loss, under whatever cache
  budget the sequence has set.

The model and its loss are built once per process and reset at the start of each sequence
(traces are reused, as in a session of fits): a sequence then costs its fits, not tracing. The
reset asserts that the sequence starts as from a fresh build (values, flags, data, no precompute,
every cache invalid), so that nothing carries over and a failing seed replays in a new process.
``tests/stress.py --machine fit`` runs this machine for many sequences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import iminuit
import networkx as nx
import numpy as np
import pytest
from helpers import HI, LIMITS, LO, NAMES, bridged_line_shape_loss, complex_line_shape_loss, coupling_block_loss, np_extended_nll
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import zcache
from zcache._engine.finite_differences import default_step
from zcache._engine.precompute import _REPORTS as _PRECOMPUTE_REPORTS
from zcache._engine.precompute import precomputed
from zcache.exceptions import FitError
from zcache.inference._asymptotic import shared_asimov_losses
from zcache.loss import ExtendedUnbinnedNLL
from zcache.minimize import FitResult, Minuit
from zcache.models import Exponential, Gaussian, Space, SumPdf
from zcache.scale import BatchedLoss, ChunkedLoss, Chunks

TRUTH = {"mu": 5.0, "sigma": 0.6, "lam": -0.3, "nsig": 250.0, "nbkg": 450.0}
#: values a fixed parameter may be moved to (near the truth, so that fits stay well defined)
MOVES = {"mu": (4.6, 5.4), "sigma": (0.45, 0.8), "lam": (-0.45, -0.18), "nsig": (180.0, 330.0), "nbkg": (350.0, 560.0)}
TOL = 1e-4  # EDM tolerance of every fit, zcache's and the reference's: edm < 2e-7 ...
VALUE_TOL = 2e-3  # ... so the two minima agree to about 1e-3 of the errors
MINOS_REL = 3e-3  # MINOS crossings at TOL are good to ~2e-4; the two minima differ a little too
#: a fit with an undetermined parameter (flat NLL, possibly bumpy): local minima may differ by this much
#: in the NLL (1/2 is one standard deviation) and the determined parameters by this fraction of their error
UNDETERMINED_NLL_TOL = 1e-3
UNDETERMINED_VALUE_TOL = 0.1
#: the floating parameters of a search at a known mass (small_signal_fit), and their start
SEARCH = ("lam", "nsig", "nbkg")
SEARCH_START = {"lam": -0.3, "nsig": 5.0, "nbkg": 450.0}
#: the expected yields at which ``toy_p_value`` throws its toys: its batched fits compile once per floating set
#: and toy size class (``size_class`` of the yield + 6 sigma + 10 rows): this window is one class (896 rows:
#: yields 668-724), where free totals of 300-950 events span thirteen (416-1152 rows); each class more is one
#: more XLA compile of each floating set's batched programs per worker life (8-22 s CPU each)
TOY_YIELD = (668.0, 724.0)
#: the totals of the samples ``new_data`` and ``small_signal_fit`` draw (with the first sample's 700): every
#: program compiled with XLA (compiled fits and Hessians, batched scans and toys) compiles again for each new
#: number of events, so a worker life meets two; and with ``nbkg`` floating ``toy_p_value``'s expected yield is
#: the total within about -60 / +95 events (a 350-event signal tested at 0.8 / 1.3 times it): ``TOY_YIELD``'s
#: class for the smaller shifts, the neighbouring ones at those extremes
DATA_TOTALS = (680, 700)


# -- the independent reference ----------------------------------------------------------------
def np_sample(seed: int, nsig: int, nbkg: int) -> np.ndarray:
    """Events of the TRUTH shapes (numpy only): a truncated normal by rejection, an exponential by inverse CDF."""
    rng = np.random.default_rng(seed)
    sig = rng.normal(TRUTH["mu"], TRUTH["sigma"], 2 * nsig)
    sig = sig[(sig >= LO) & (sig <= HI)][:nsig]
    lam = TRUTH["lam"]
    bkg = LO + np.log1p(rng.uniform(size=nbkg) * np.expm1(lam * (HI - LO))) / lam
    return rng.permutation(np.concatenate([sig, bkg]))


def np_minuit(x: np.ndarray, start: dict[str, float], floating: list[str]) -> iminuit.Minuit:
    """iminuit's fit of the numpy NLL from ``start``, the others fixed there (as zcache's Minuit fits)."""
    m = iminuit.Minuit(lambda v: np_extended_nll(x, *v), [start[n] for n in NAMES], name=NAMES)
    m.errordef = 0.5
    m.limits = [LIMITS[n] for n in NAMES]
    m.tol = TOL
    for n in NAMES:
        m.fixed[n] = n not in floating
    m.migrad()
    if m.valid:
        m.hesse()
    return m


def use_numdiff_tol(minimizer: Minuit) -> bool:
    """Whether the fit's Hessian came from differences (a numerical gradient): its errors are good to ~1e-4."""
    return not minimizer.use_gradient or not zcache.get_autograd_mode()


def curvature_errors(x: np.ndarray, at: dict[str, float], floating: list[str] | tuple[str, ...],
                     scale: np.ndarray) -> np.ndarray | None:
    """The errors zcache documents, from the numpy NLL: sqrt(diag(H^-1)) of its Hessian in the
    floating parameters at ``at`` (numdifftools, in units of ``scale``); None where H is not
    positive definite (zcache then reports Minuit's HESSE)."""
    import numdifftools as nd

    centre = np.array([at[n] for n in floating])

    def nll(u: np.ndarray) -> float:
        return np_extended_nll(x, *{**at, **dict(zip(floating, centre + u * scale, strict=True))}.values())

    hessian = nd.Hessian(nll)(np.zeros(len(floating))) / np.outer(scale, scale)
    if not np.all(np.linalg.eigvalsh(hessian) > 0):
        return None
    return np.sqrt(np.diag(np.linalg.inv(hessian)))


# -- the model, built once per process ------------------------------------------------------------
#: the events of each chunk of the chunked loss when built (chunked_fit sets its own before fitting)
CHUNK_EVENTS = ((0, 100, 200), (0, 100, 200))


def _caches_below(inputs: list[Any]) -> list[zcache.CachedTensor]:
    """Every live cache that depends on one of ``inputs`` (Parameters and Data), from the dependency graph."""
    g = zcache.dependency_graph()
    uids = set()
    for obj in inputs:
        for data in (obj, getattr(obj, "weights_data", None)):
            if data is not None and data.node_id in g:
                uids |= nx.descendants(g, data.node_id)
    caches = (g.nodes[u]["ref"]() for u in sorted(uids) if g.nodes[u]["kind"] == "cache")
    return [c for c in caches if c is not None]


def _as_built(losses: list[Any], inputs: list[Any], undo_precompute: bool = True) -> list[zcache.CachedTensor]:
    """Put the caches under ``inputs`` back as a fresh build of ``losses`` has them: every cache invalid and,
    with ``undo_precompute``, no precompute (what a fit's precompute bypassed is switched back on, the losses'
    remembered precompute forgotten; a zcache.function then runs its graphs traced without the bypass, as
    after PrecomputeReport.undo). Returns them."""
    caches = _caches_below(inputs)
    if undo_precompute:
        for cache in caches:
            if cache.always_dirty:
                cache.set_always_dirty(False)
        for loss in losses:
            for target in (loss, *getattr(loss, "losses", ())):
                _PRECOMPUTE_REPORTS.pop(target, None)  # else the next fit's precompute would skip as done
                assert precomputed(target) is None
    for cache in caches:
        cache.invalidate()
    return caches


def _assert_as_built(caches: list[zcache.CachedTensor], bypass_kept: bool = False) -> None:
    """No cache valid and (unless ``bypass_kept``) none bypassed, as after a fresh build (before its first
    evaluation; a model creates most caches at its first evaluation, so ``caches`` may be few)."""
    valid = [c.name for c in caches if c.is_valid]
    bypassed = [] if bypass_kept else [c.name for c in caches if c.always_dirty]
    assert not valid and not bypassed, f"not as built: valid {valid}, bypassed {bypassed}"


@dataclass
class _World:
    """The machine's model and losses, built once per process and reset to their built state before
    each sequence (a sequence then costs its fits, not tracing; nothing but traced programs carries
    over from the sequence before: :meth:`reset` asserts it)."""

    p: dict[str, zcache.Parameter]
    loss: ExtendedUnbinnedNLL
    chunked: ChunkedLoss  # the same model over two chunks, whose events the chunked_fit rule sets
    modes: tuple = field(default_factory=lambda: (zcache.get_graph_mode(), zcache.get_autograd_mode(),
                                                  zcache.get_jit_mode()))

    def reset(self, x: np.ndarray) -> None:
        for q in self.p.values():
            q.floating = True
        zcache.set_values(list(self.p.values()), [TRUTH[n] for n in NAMES])
        self.loss.data.set_data(x)
        for chunk, sizes in zip(self.chunked.chunks, CHUNK_EVENTS, strict=True):
            chunk.set_data(np_sample(*sizes))
        self.loss.offset = self.chunked.offset = 0.0
        inputs = [*self.p.values(), self.loss.data, *self.chunked.chunks]
        # the calculators' Asimov losses of self.loss are kept with it (their programs too): their precompute
        # is forgotten like the loss's, their data are written before each of their fits
        caches = _as_built([self.loss, self.chunked, *shared_asimov_losses(self.loss)], inputs)
        # each sequence starts as from a fresh build (a failure replays from its seed in a new process)
        assert {n: (q._current(), q.floating, q.lower, q.upper) for n, q in self.p.items()} == {
            n: (TRUTH[n], True, *LIMITS[n]) for n in NAMES}
        np.testing.assert_array_equal(self.loss.data.numpy(), x)
        for chunk, sizes in zip(self.chunked.chunks, CHUNK_EVENTS, strict=True):
            np.testing.assert_array_equal(chunk.numpy(), np_sample(*sizes))
        assert self.loss.offset == self.chunked.offset == 0.0
        assert zcache.cache_budget_info().budget is None
        assert (zcache.get_graph_mode(), zcache.get_autograd_mode(), zcache.get_jit_mode()) == self.modes
        _assert_as_built(caches)


_WORLD: _World | None = None
#: the other losses the rules build once per process: (loss, its parameters, their values and flags as built)
_SIDE_WORLDS: list[tuple[Any, list[zcache.Parameter], list[tuple[float, bool]]]] = []


def _built(loss: Any, params: list[zcache.Parameter]) -> None:
    _SIDE_WORLDS.append((loss, list(params), [(q._current(), q.floating) for q in params]))


def _reset_side_worlds() -> None:
    """The other losses as built: their rules leave their parameters where they found them (asserted
    here) and every cache is invalid. A precompute's bypass is kept with the graphs traced for it: only
    coupling_block_fit precomputes one of these losses (its fits, for the floating set it sets first), so a
    sequence sees the same as after a fresh build, and its programs are not traced again each sequence."""
    for loss, params, built in _SIDE_WORLDS:
        assert [(q._current(), q.floating) for q in params] == built, f"{loss!r} left its parameters moved"
        _assert_as_built(_as_built([loss], params, undo_precompute=False), bypass_kept=True)


_LINE_SHAPE: tuple | None = None  # (loss, [mass, width]) of helpers.complex_line_shape_loss, built once


_BRIDGED: dict[bool | str, tuple] = {}  # fused -> (loss, [m1, g1, m2, g2]) of helpers.bridged_line_shape_loss, built once


_BLOCK: tuple | None = None  # (loss, its parameters, their start) of helpers.coupling_block_loss, built once
#: (fix_c3, jit) -> the block loss's fit by differences from its start (coupling_block_fit's reference)
_BLOCK_REFERENCE: dict[tuple[bool, bool], FitResult] = {}


def _block() -> tuple:
    global _BLOCK
    if _BLOCK is None:
        loss = coupling_block_loss("fm_block")
        _BLOCK = (loss, list(loss.params), [float(q) for q in loss.params])
        _built(loss, _BLOCK[1])
    return _BLOCK


def _line_shape() -> tuple:
    global _LINE_SHAPE
    if _LINE_SHAPE is None:
        _LINE_SHAPE = complex_line_shape_loss("fm_line")
        _built(*_LINE_SHAPE)
    return _LINE_SHAPE


def _bridged(fused: bool | str = False) -> tuple:
    if fused not in _BRIDGED:
        tag = {True: "fm_fused", False: "fm_bridged", "auto": "fm_auto"}[fused]
        loss, params = bridged_line_shape_loss(tag, fused=fused)
        if fused == "auto":
            # the default: the second line shape fixed at the first evaluation (its group stays a
            # plain program), floated afterwards (issue 26: "auto" with floating toggled later)
            for p in params[2:]:
                p.floating = False
            loss.value()
            for p in params[2:]:
                p.floating = True
            assert loss.model.fused_groups == [0], loss.model.fused_groups
        _BRIDGED[fused] = (loss, params)
        _built(loss, params)
    return _BRIDGED[fused]


def _world() -> _World:
    global _WORLD
    if _WORLD is None:
        space = Space("x", LO, HI)
        p = {n: zcache.Parameter(f"fm_{n}", TRUTH[n], *LIMITS[n]) for n in NAMES}
        model = SumPdf([Gaussian(space, p["mu"], p["sigma"]), Exponential(space, p["lam"])],
                       yields=[p["nsig"], p["nbkg"]], name="fm_sum")
        data = zcache.Data(np_sample(0, 250, 450), name="fm_data", obs="x")
        chunks = Chunks([zcache.Data(np_sample(*sizes), name=f"fm_chunk{k}", obs="x")
                         for k, sizes in enumerate(CHUNK_EVENTS)])
        _WORLD = _World(p, ExtendedUnbinnedNLL(model, data), ChunkedLoss(model, chunks, extended=True))
    return _WORLD


@dataclass
class _Fitted:
    """A valid Minuit result and the state of the loss at its end (what MINOS must see)."""

    result: FitResult
    values: dict[str, float]
    floating: list[str]
    x: np.ndarray
    reference: dict[str, tuple[float, float]] = field(default_factory=dict)  # numpy MINOS, filled lazily


class FitMachine(RuleBasedStateMachine):
    """Random sequences of fits, flag toggles, value and data changes, MINOS and profiles."""

    def __init__(self) -> None:
        super().__init__()
        self.world = _world()
        self.p, self.loss = self.world.p, self.world.loss
        self.x = np_sample(0, 250, 450)
        self.world.reset(self.x)
        _reset_side_worlds()
        self.minimizer = Minuit(tol=TOL)
        self.fitted: list[_Fitted] = []

    def teardown(self) -> None:
        zcache.set_cache_budget(None)

    # -- helpers ------------------------------------------------------------------------
    def values(self) -> dict[str, float]:
        return {n: self.p[n]._current() for n in NAMES}

    def floating(self) -> list[str]:
        return [n for n in NAMES if self.p[n].floating]

    def _fit(self, minimizer: Minuit, loss: Any = None) -> None:
        loss = self.loss if loss is None else loss
        before, floating = self.values(), self.floating()
        note(f"fit {minimizer!r} of {type(loss).__name__} precompute={minimizer.precompute} floating={floating} "
             f"from {before}")
        if not floating:
            with pytest.raises(FitError, match="No floating"):
                minimizer.minimize(loss)
            assert self.values() == before
            return
        result = minimizer.minimize(loss)
        after = self.values()
        assert set(result.values) == {self.p[n].name for n in floating}
        for n in NAMES:
            if n not in floating:
                assert after[n] == before[n], f"fixed {n} moved"
            else:
                assert after[n] == result.values[self.p[n].name]
        if result.precompute is not None:  # precompute followed the floating set of this fit
            assert set(result.precompute.floating) == set(result.values)
        if not result.valid:
            note("zcache's fit is not valid: no comparison")
            return
        ref = np_minuit(self.x, before, floating)
        assert ref.valid, "the reference fails where zcache converged"
        undetermined = self._undetermined({**before, **{n: ref.values[n] for n in floating}}, floating)
        # With a parameter the data do not determine, the NLL along it is flat to within 1/2 but may have
        # bumps (a signal of a fraction of an event placed on a fluctuation, its mean floating): the two
        # fits may stop at different local minima (equal to ~1e-4 in the NLL), and the others follow; at the
        # ends of its range it may fall further (_minima): the reference is then the minimum nearest zcache's.
        if undetermined:
            ref = min(self._minima(before, floating, first=ref), key=lambda f: abs(f.fval - result.fmin))
        value_tol = VALUE_TOL if not undetermined else UNDETERMINED_VALUE_TOL
        if not undetermined and any(abs(result.values[self.p[n].name] - ref.values[n]) > value_tol * ref.errors[n]
                                    for n in floating):
            # MIGRAD promises a local minimum, not the deepest: with a small signal the NLL may have two (a narrow
            # peak of a few events, a wide one of more; stress seed 1037585469935: zcache at sigma 0.72, nsig 17,
            # NLL -2383.428; iminuit from the same start at sigma 1.81, nsig 58, -2383.979). zcache's is then
            # checked to be one of the numpy NLL's: iminuit started there stays there, at the same NLL.
            there = np_minuit(self.x, {**before, **{n: result.values[self.p[n].name] for n in floating}}, floating)
            if there.valid and abs(there.fval - result.fmin) < 1e-5:
                note(f"another local minimum than the reference's: NLL {result.fmin} against {ref.fval}")
                ref = there
        for n in floating:
            name = self.p[n].name
            if n in undetermined:
                continue
            assert abs(result.values[name] - ref.values[n]) <= value_tol * ref.errors[n], (
                n, result.values[name], ref.values[n], ref.errors[n])
        if undetermined:
            # Every value of such a parameter is (nearly) a minimum (sigma of a signal whose yield is at its
            # limit 0): the fits agree on the NLL, not on where they stop along it, and no curvature error exists.
            note(f"not determined by the data: {undetermined}; compared the NLL at the minima only")
            assert result.fmin == pytest.approx(ref.fval, abs=UNDETERMINED_NLL_TOL)
            return
        # the errors as documented (the curvature in the parameters themselves; Minuit's HESSE of
        # the numpy NLL agrees away from limits, not next to one)
        errors = np.array([result.errors[self.p[n].name] for n in floating])
        expected = curvature_errors(self.x, after, floating, errors)
        if expected is not None:
            np.testing.assert_allclose(errors, expected, rtol=1e-3 if use_numdiff_tol(minimizer) else 1e-4)
        assert result.fmin == pytest.approx(ref.fval, abs=1e-5)
        self.fitted.append(_Fitted(result, after, floating, self.x.copy()))

    def _undetermined(self, at: dict[str, float], floating: list[str]) -> list[str]:
        """The floating parameters whose whole range (their limits) moves the numpy NLL at ``at`` by less than
        1/2, one standard deviation: the data do not determine them."""
        f0 = np_extended_nll(self.x, **at)
        with np.errstate(divide="ignore", invalid="ignore"):  # a yield at its limit 0: the NLL is infinite there
            return [n for n in floating
                    if max(abs(np_extended_nll(self.x, **{**at, n: v}) - f0) for v in LIMITS[n]) < 0.5]

    def _minima(self, start: dict[str, float], floating: list[str],
                first: iminuit.Minuit | None = None) -> list[iminuit.Minuit]:
        """iminuit's valid fits of the numpy NLL from ``start`` and, where the first leaves a parameter the data do
        not determine (:meth:`_undetermined`), from each end of that parameter's range too: the local minima a
        fit may stop at. Empty if the first fit is not valid.

        Along such a parameter the NLL is flat at the first minimum (sigma of a signal whose yield sits at its
        limit 0), but not everywhere: at an end of the range a yield off its limit may lower it (stress seed 9168:
        a 2-event signal at sigma's lower limit 0.1, 0.125 below, an 18-event one at its upper limit 2.0, 0.093
        below), so a fit that walks along the valley ends at another minimum than one that stops in it.
        ``first``: that fit, if already made."""
        first = np_minuit(self.x, start, floating) if first is None else first
        if not first.valid:
            return []
        at = {**start, **{n: first.values[n] for n in floating}}
        fits = [first]
        for n in self._undetermined(at, floating):
            low, high = LIMITS[n]
            for end in (low + 1e-3 * (high - low), high - 1e-3 * (high - low)):  # inside: the bound transform's
                fits.append(np_minuit(self.x, {**at, n: end}, floating))        # gradient vanishes on a limit
        return [f for f in fits if f.valid]

    # -- rules ----------------------------------------------------------------------------
    @rule(precompute=st.booleans(), use_gradient=st.booleans(), compiled=st.booleans())
    def fit(self, precompute: bool, use_gradient: bool, compiled: bool) -> None:
        self.minimizer = Minuit(tol=TOL, precompute=precompute, use_gradient=use_gradient, compiled=compiled)
        self._fit(self.minimizer)

    @precondition(lambda self: self.floating())
    @rule()
    def compiled_and_migrad(self) -> None:
        """The compiled path (the default) and MIGRAD alone on the same loss from the same start:
        the same verdict, minimum and errors; the later fit of MIGRAD does not change the
        compiled result's MINOS-ready state."""
        params = [self.p[n] for n in NAMES]
        before = [q._current() for q in params]
        compiled = Minuit(tol=TOL).minimize(self.loss)  # (under XLA: test_compiled_fit; a compile per floating set)
        zcache.set_values(params, before)
        migrad = Minuit(tol=TOL, compiled=False).minimize(self.loss)
        note(f"compiled ({compiled.path}, {compiled.fallback}) {compiled.values}; migrad {migrad.values}")
        assert compiled.valid == migrad.valid
        assert migrad.path == "migrad" and compiled.path in ("compiled", "migrad")
        if not migrad.valid:
            return
        for name, value in migrad.values.items():
            assert abs(compiled.values[name] - value) <= VALUE_TOL * migrad.errors[name], name
        floating = self.floating()
        on_limit = [n for n in floating if min(abs(migrad.values[self.p[n].name] - end) for end in LIMITS[n])
                    < 1e-4 * migrad.errors[self.p[n].name]]
        if on_limit:
            # a parameter on its limit (nsig at 2e-8 above 0 after small_signal_fit): both paths end in
            # MIGRAD, whose HESSE errors there go through the bound transform's Jacobian at each run's
            # last step (a factor 2 apart, found by tests/stress.py at seed 680710986187), and a
            # parameter that only enters through it (sigma, with nsig at 0) has no curvature at all
            note(f"{on_limit} on a limit: errors not compared")
            return
        at = {**dict(zip(NAMES, before, strict=True)), **{n: migrad.values[self.p[n].name] for n in floating}}
        if curvature_errors(self.x, at, floating, np.array([migrad.errors[self.p[n].name] for n in floating])) is None:
            # no curvature error exists (a parameter on a limit the loss falls beyond: sigma at 2.0 of a
            # 17-event signal): both report Minuit's HESSE through its bound transform, ~1e-8 there and
            # different for each MIGRAD's last step (documented in FitResult.errors); values agree above
            note("the Hessian at the minimum is not positive definite: errors not compared")
            return
        np.testing.assert_allclose([compiled.errors[n] for n in migrad.names], [migrad.errors[n] for n in migrad.names],
                                   rtol=1e-3)
        # Kept for the MINOS / profile / scan rules only away from limits, as _fit's results are: those
        # rules check a grid of +-1.5 errors around the minimum (after small_signal_fit nsig sits at 0.6 with
        # an error of 10 above its limit 0, and a profile's grid is then not centred on it).
        if all(min(compiled.values[self.p[n].name] - LIMITS[n][0], LIMITS[n][1] - compiled.values[self.p[n].name])
               > 1.5 * compiled.errors[self.p[n].name] for n in floating):
            self.fitted.append(_Fitted(compiled, {n: compiled.values.get(self.p[n].name, before[k])
                                                  for k, n in enumerate(NAMES)}, floating, self.x.copy()))

    @rule()
    def refit(self) -> None:
        """The last minimizer again, from where the parameters are now."""
        self._fit(self.minimizer)

    @rule(split=st.floats(0.1, 0.9))
    def chunked_fit(self, split: float) -> None:
        """The last minimizer on a ChunkedLoss of the same model over two chunks of the current events
        (``set_data`` on each chunk, at a drawn split): every check of a fit of the whole loss (the numpy +
        iminuit reference, the errors, the parameters left at the minimum); MINOS rules may use it later."""
        k = int(split * len(self.x))
        for chunk, events in zip(self.world.chunked.chunks, (self.x[:k], self.x[k:]), strict=True):
            chunk.set_data(events)
        # the chunked loss is the numpy NLL of all its chunks' events (its N was once a stale cache)
        np.testing.assert_allclose(float(self.world.chunked.value()), np_extended_nll(self.x, *self.values().values()),
                                   rtol=1e-10)
        self._fit(self.minimizer, self.world.chunked)

    @rule(name=st.sampled_from(NAMES))
    def toggle_floating(self, name: str) -> None:
        self.p[name].floating = not self.p[name].floating

    @rule(fraction=st.sampled_from([None, 0.0, 0.5]))
    def shrink_budget(self, fraction: float | None) -> None:
        """The cache memory budget set mid-sequence (None, 0, or half of what caches hold), kept for the
        fits that follow: evicted caches are recomputed, so every check after it holds as without it."""
        held = zcache.cache_budget_info().held_bytes
        zcache.set_cache_budget(None if fraction is None else int(held * fraction))

    @precondition(lambda self: any(not q.floating for q in self.p.values()))
    @rule(data=st.data())
    def change_fixed(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from([n for n in NAMES if not self.p[n].floating]), label="fixed")
        value = data.draw(st.floats(*MOVES[name]), label="value")
        self.p[name].set_value(value)

    @rule(seed=st.integers(1, 2**16), nsig=st.integers(150, 350), total=st.sampled_from(DATA_TOTALS))
    def new_data(self, seed: int, nsig: int, total: int | None = None, nbkg: int | None = None) -> None:
        """A new sample: the rule draws its total from DATA_TOTALS (the compiled programs' shapes; the background
        is then 330-550 events); a call with ``nbkg`` instead of ``total`` (a regression's replay) gets that
        background, whatever the total."""
        self.x = np_sample(seed, nsig, nbkg if total is None else total - nsig)
        self.loss.data.set_data(self.x)

    @precondition(lambda self: self.floating())
    @rule(seeds=st.lists(st.integers(1, 2**16), min_size=2, max_size=2),
          scale=st.floats(0.9, 1.1))
    def batched_toys(self, seeds: list[int], scale: float) -> None:
        """A toy study's batched evaluation (the floating parameters per toy, two padded toys):
        each toy's value is the numpy NLL of its events, and neither the parameters nor the
        loss's events change (nothing is written)."""
        before, floating = self.values(), self.floating()
        toys = [np_sample(s, 200, 350 + 40 * k) for k, s in enumerate(seeds)]
        rows = max(len(d) for d in toys) + 3
        events = np.stack([np.concatenate([d, np.full(rows - len(d), d[-1])]) for d in toys])
        weights = np.stack([np.concatenate([np.ones(len(d)), np.zeros(rows - len(d))]) for d in toys])
        x = np.array([[before[n] * (scale if k else 1.0) for n in floating] for k in range(2)])
        batched = BatchedLoss.of(self.loss, [self.p[n] for n in floating])
        f, _, ok = batched.value_and_gradient(x, events, weights)
        assert ok.all()
        for k, d in enumerate(toys):
            at = {**before, **dict(zip(floating, x[k], strict=True))}
            np.testing.assert_allclose(f[k], np_extended_nll(d, *at.values()), rtol=1e-10)
        assert self.values() == before
        np.testing.assert_array_equal(self.loss.data.numpy(), self.x)

    @rule(seed=st.integers(1, 2**16), nsig=st.integers(0, 6), total=st.sampled_from(DATA_TOTALS))
    def small_signal_fit(self, seed: int, nsig: int, total: int) -> None:
        """A search at a known mass (mu, sigma fixed at the truth) on background-only or
        small-signal data: nsig ends at or near its limit 0. zcache's fit is valid where iminuit's
        on the numpy NLL is, at the same minimum, with the documented errors (the curvature of the
        loss in the parameters themselves: numdifftools on the numpy NLL); the batched fit of the
        same events (padded) gives the same values and errors, or declines (a toy at a limit,
        which run_toys refits with MIGRAD)."""
        self.x = np_sample(seed, nsig, total - nsig)  # a background of 674-700 events
        self.loss.data.set_data(self.x)
        for n in NAMES:
            self.p[n].floating = n in SEARCH
        zcache.set_values([self.p[n] for n in NAMES], [TRUTH[n] if n in ("mu", "sigma") else SEARCH_START[n] for n in NAMES])
        before = self.values()
        result = Minuit(tol=TOL).minimize(self.loss)
        ref = np_minuit(self.x, before, list(SEARCH))
        note(f"small signal: zcache {result.values} valid={result.valid}; iminuit {ref.values} valid={ref.valid}")
        assert result.valid == ref.valid
        if not ref.valid:
            return
        best = {**before, **{n: result.values[self.p[n].name] for n in SEARCH}}
        assert np_extended_nll(self.x, *best.values()) == pytest.approx(ref.fval, abs=1e-4)
        errors = np.array([result.errors[self.p[n].name] for n in SEARCH])
        assert np.all(np.isfinite(errors)) and np.all(errors > 0)
        centre = np.array([best[n] for n in SEARCH])
        expected = curvature_errors(self.x, best, SEARCH, errors)
        if expected is not None:  # else: Minuit's HESSE (the documented fallback)
            np.testing.assert_allclose(errors, expected, rtol=1e-4)
        # the batched fit of the same events, padded to a fixed size (one compile per process)
        rows = 1024
        events = np.concatenate([self.x, np.full(rows - len(self.x), self.x[-1])])[None]
        weights = np.concatenate([np.ones(len(self.x)), np.zeros(rows - len(self.x))])[None]
        batched = BatchedLoss.of(self.loss, [self.p[n] for n in SEARCH])
        fit = batched.minimize(np.array([[before[n] for n in SEARCH]]), events, weights)
        note(f"batched: {fit.values[0]} converged={fit.converged[0]} errors={fit.errors[0]}")
        if fit.converged[0]:
            np.testing.assert_allclose(fit.values[0], centre, rtol=0, atol=VALUE_TOL * errors.max())
            np.testing.assert_allclose(fit.errors[0], errors, rtol=2e-3)
        else:
            lower = np.array([LIMITS[n][0] for n in SEARCH])
            assert np.any(np.abs(fit.values[0] - lower) < 1e-6 * (1 + np.abs(lower))) or np.any(centre - lower < 1e-3 * errors)
        zcache.set_values([self.p[n] for n in SEARCH], centre)

    @rule(which=st.sampled_from(["gauss", "complex line shape", "bridged line shapes", "fused bridged line shapes",
                                 "auto bridged line shapes"]),
          jit=st.sampled_from([True, "auto"]), exact=st.booleans())
    def compiled_hessian(self, which: str, jit: bool | str, exact: bool) -> None:
        """The Hessian at the current values with line-shape parameters floating, compiled with XLA
        (three calls: a result that changes between calls is caught) and uncompiled: equal, and no
        parameter moves. ``gauss``: the fit's loss in all five parameters (its mean and width among them),
        whichever float (the caches are those the fits of the moment left, valid or bypassed); ``complex line
        shape``: mass and width of a line shape through complex 1/z and sqrt (issue 23: its
        compiled gradients were wrong); ``bridged line shapes``: masses and widths of a SymPy model
        through the bridge, whose group programs' backward is built outside XLA (issue 26); ``fused
        bridged line shapes``: the same model with ``fused=True`` (XLA group programs, a custom
        backward with its own second-order gradient, nested inside the compiled Hessian); ``auto
        bridged line shapes``: ``fused="auto"`` (the default) with the second line shape fixed at the
        first evaluation and floated since: one fused group, one plain.
        ``exact``: second-order autodiff through the caches, valid or bypassed (issue 26), against
        the differences too; for the bridge its structured Hessian (hessian_at's default there: jets
        of the line shapes, issue 26), against the differences too."""
        if which == "gauss":
            # every parameter, floating or not: its programs are one per sample size and bypass setting (the
            # last precompute's), not also per floating set (up to 24 with mu or sigma, each an XLA compile of
            # 2-12 s CPU, nearly every call a first one); the floating set's Hessian is a block of this one
            loss, params = self.loss, [self.p[n] for n in NAMES]
        elif which == "complex line shape":
            loss, params = _line_shape()
        else:
            loss, params = _bridged(fused={"fused": True, "auto": "auto"}.get(which.split()[0], False))
        # the bridge's "exact" is its structured Hessian (hessian_at's default there; jets of the line
        # shapes), not second-order autodiff (whose trace is test_symbolic's)
        structured = exact and "bridged" in which
        exact = exact and "bridged" not in which
        if structured:
            assert loss.supports_structured_hessian(params)
        before = [p._current() for p in params]
        plain = loss.hessian_at(before, params, exact=None if structured else exact).numpy()
        if exact or structured:
            differences = loss.hessian_at(before, params, exact=False).numpy()
            # not the rows of a parameter within a step of a limit: its differences are one-sided there, off by
            # O(step) times a third derivative (sigma at its limit 0.1 after a fit that walked there: 6e-5)
            step = default_step(np.array(before))
            inside = [k for k, q in enumerate(params)
                      if all(abs(before[k] - end) > step[k] for end in (q.lower, q.upper) if end is not None)]
            np.testing.assert_allclose(plain[np.ix_(inside, inside)], differences[np.ix_(inside, inside)], rtol=1e-5,
                                       atol=1e-6 * max(1.0, np.abs(plain).max()))
        with zcache.set_jit_mode(jit):
            # the first call after new data may run uncompiled (it stores the caches XLA then reads)
            calls = [loss.hessian_at(before, params, exact=None if structured else exact).numpy() for _ in range(3)]
        kind = " (exact)" if exact else " (structured)" if structured else ""
        note(f"{which}{kind}: Hessian {plain.tolist()} compiled {calls[-1].tolist()}")
        np.testing.assert_array_equal(calls[2], calls[1])  # compiled twice: the same numbers
        for got in calls:
            # XLA sums in another order: gradients differ by ~1e-13 relative, their differences
            # over steps of ~1e-5 by ~1e-8 (the bug this guards against was an O(1) error)
            np.testing.assert_allclose(got, plain, rtol=1e-7, atol=1e-8 * max(1.0, np.abs(plain).max()))
        assert [p._current() for p in params] == before
        assert all(fn.jit_fallback is None for fn in loss.functions())

    @rule(fix_c3=st.booleans(), jit=st.booleans())
    def coupling_block_fit(self, fix_c3: bool, jit: bool) -> None:
        """A bridged amplitude model with its line shapes and four coupling parts floating, fitted by
        ``Minuit()`` (the compiled fit's Hessians take the couplings' block exactly and difference the
        line shapes only) and by ``Minuit(structured_hessian=False)`` from the same start: the same
        minimum and errors, 2 x 4 value + gradient calls fewer. ``fix_c3``: the third coupling fixed
        (a user toggling ``floating``; a block of two, below MIN_BLOCK: differences, the same calls),
        floated again after; ``jit``: under XLA."""
        loss, params, start = _block()
        third = params[6:]
        for q in third:
            q.floating = not fix_c3
        try:
            with zcache.set_jit_mode(jit):
                zcache.set_values(params, start)
                block = Minuit(tiered=False).minimize(loss)  # the compiled fit from the first fit
                # The reference, differences throughout: the same model, data and start each time, so
                # fitted once per process and setting (a state that changed it would change the block's
                # fit, compared below, too)
                if (fix_c3, jit) not in _BLOCK_REFERENCE:
                    zcache.set_values(params, start)
                    _BLOCK_REFERENCE[fix_c3, jit] = Minuit(structured_hessian=False, tiered=False).minimize(loss)
            diff = _BLOCK_REFERENCE[fix_c3, jit]
            note(f"coupling block (c3 fixed: {fix_c3}, jit: {jit}): nfcn {block.nfcn} vs {diff.nfcn}, "
                 f"fmin {block.fmin} vs {diff.fmin}")
            assert block.valid and diff.valid and block.path == diff.path == "compiled", (block.fallback, diff.fallback)
            # (BFGS may take a step more or less from a seed that differs by the differences' truncation)
            assert abs(block.nfcn - (diff.nfcn - (0 if fix_c3 else 2 * 4))) <= 2
            assert abs(block.fmin - diff.fmin) < 1e-6
            for name, value in diff.values.items():
                assert abs(block.values[name] - value) < 1e-3 * diff.errors[name], name
                assert abs(block.errors[name] / diff.errors[name] - 1.0) < 1e-4, name
        finally:
            for q in third:
                q.floating = True
            zcache.set_values(params, start)

    @rule()
    def precompute(self) -> None:
        report = zcache.precompute(self.loss)
        # zcache.precompute and Minuit agree on what floats: the flags now (every parameter of
        # this model is below a cache, so the sets are equal)
        assert set(report.floating) == {q.name for q in self.loss.params}

    @precondition(lambda self: self.fitted)
    @rule(data=st.data(),
          kind=st.sampled_from(["minos", "scan", "profile", "minuit.minos", "minuit.mnprofile", "minuit.hesse"]))
    def ask_a_previous_result(self, data: st.DataObject, kind: str) -> None:
        fitted = data.draw(st.sampled_from(self.fitted), label="result")
        n = data.draw(st.sampled_from(fitted.floating), label="parameter")
        name, result = self.p[n].name, fitted.result
        before = self.values()
        note(f"{kind} of {n} on the fit at {fitted.values}")
        if kind == "minos":
            lower, upper, valid = result.minos(name)[name]
            self._check_minos(fitted, n, lower, upper, valid)
        elif kind == "minuit.minos":
            result.minuit.minos(name)
            me = result.minuit.merrors[name]
            self._check_minos(fitted, n, me.lower, me.upper, me.is_valid)
        elif kind == "scan":
            grid, delta, valid = result.profile(name, bins=3, bound=1.5, minimize=False)
            # a scan holds the others at the minimum of result.minuit (a MIGRAD from the fit's)
            at = {**fitted.values, **{k: result.minuit.values[self.p[k].name] for k in fitted.floating}}
            fmin = np_extended_nll(fitted.x, *at.values())
            expected = [np_extended_nll(fitted.x, *{**at, n: g}.values()) - fmin for g in grid]
            np.testing.assert_allclose(delta, expected, rtol=1e-7, atol=1e-7)
            assert valid.all()
        elif kind == "profile":
            grid, delta, valid = result.profile(name, bins=3, bound=1.0)
            # the profile is a minimum over the others: at most the scan, and 0 at the best value
            at = dict(fitted.values)
            fmin = np_extended_nll(fitted.x, *at.values())
            scan = [np_extended_nll(fitted.x, *{**at, n: g}.values()) - fmin for g in grid]
            assert (delta <= np.array(scan) + 1e-5).all() and delta.min() > -1e-5
            # the grid is centred on the best value unless a limit cuts it (a yield at 0: [0, 2 sigma])
            if not (np.isclose(grid[0], LIMITS[n][0]) or np.isclose(grid[-1], LIMITS[n][1])):
                assert grid[1] == pytest.approx(at[n], rel=1e-12, abs=1e-12) and abs(delta[1]) < 1e-5
        elif kind == "minuit.mnprofile":
            result.minuit.mnprofile(name, size=3, bound=1.0)
        else:
            result.minuit.hesse()
        assert self.values() == before, "parameters moved by a call on a previous result"
        np.testing.assert_array_equal(self.loss.data.numpy(), self.x)

    def _check_minos(self, fitted: _Fitted, n: str, lower: float, upper: float, valid: bool) -> None:
        if n not in fitted.reference:
            ref = np_minuit(fitted.x, fitted.values, fitted.floating)
            ref.minos(n)
            me = ref.merrors[n]
            fitted.reference[n] = (me.lower, me.upper) if me.is_valid else None
        reference = fitted.reference[n]
        if reference is None:
            return
        assert valid, f"MINOS of {n} invalid where the reference's is valid: {reference}"
        # relative to the interval's width too: a lower crossing at the limit 0 of a yield fitted at 2e-10
        # is -2.26e-10 on one side and -2.27e-10 on the other (where each fit stopped), both "the limit"
        width = MINOS_REL * (reference[1] - reference[0])
        assert lower == pytest.approx(reference[0], rel=MINOS_REL, abs=width), (n, lower, reference)
        assert upper == pytest.approx(reference[1], rel=MINOS_REL, abs=width), (n, upper, reference)

    @precondition(lambda self: self.floating())
    @rule()
    def value_gradient_is_the_numpy_gradient(self) -> None:
        """``loss.value_gradient()`` (eager for its first two calls under 'auto', traced from the third, and
        retraced after a precompute) against central differences of the numpy NLL."""
        names = {id(self.p[n]): n for n in NAMES}
        order = [names[id(q)] for q in self.loss.params]
        v = self.values()

        def nll(z: np.ndarray) -> float:
            return np_extended_nll(self.x, **{**v, **dict(zip(order, z, strict=True))})

        z0 = np.array([v[n] for n in order])
        steps = 1e-5 * np.maximum(1.0, np.abs(z0))
        expected = np.array([(nll(z0 + h * e) - nll(z0 - h * e)) / (2 * h) for h, e in zip(steps, np.eye(len(z0)),
                                                                                        strict=True)])
        value, grad = self.loss.value_gradient()
        assert float(value) == pytest.approx(nll(z0), rel=1e-10)
        np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-5, atol=1e-5 * len(self.x))

    @rule(parts=st.integers(2, 3), extended=st.booleans(), scale=st.floats(0.9, 1.1), kill=st.integers(0, 31),
          fit=st.integers(0, 7))
    def distributed_parts(self, parts: int, extended: bool, scale: float, kill: int, fit: int) -> None:
        """A DistributedLoss of 2-3 parts of fixed events (extended or not) on the process's one Dask cluster
        (tests/distributed_parts.py) against the same loss of all events in this process and the numpy NLL:
        value and gradient at the machine's current values and at values scaled from them (an extended part's
        yield term counted once); the worker holding part 0, whose answer carries the whole-sample terms, is
        killed between the two calls (kill == 0); an extended fit (fit == 0) equals the in-process MIGRAD fit
        and its yields add up to the events. The losses are built once per process (parts and traces stay on
        the workers): a step costs a few calls, not a cluster."""
        import os
        import signal

        import distributed_parts as dp

        loss, local = dp.losses(parts, extended)
        names = [dp.PREFIX + n for n in NAMES]
        remote, here = ({q.name: q for q in lo.get_params(floating=None)} for lo in (loss, local))
        remote_params, local_params = [remote[n] for n in names], [here[n] for n in names]
        lower, upper = np.array([LIMITS[n][0] for n in NAMES]), np.array([LIMITS[n][1] for n in NAMES])
        now = np.array([self.values()[n] for n in NAMES])
        x = dp.events()
        for k, point in enumerate([np.clip(now, lower, upper), np.clip(now * scale, lower, upper)]):
            if k == 1 and kill == 0:
                victim = dp.client().run(os.getpid)[loss._where[0]]
                note(f"killed the worker of part 0 (pid {victim})")
                os.kill(victim, signal.SIGKILL)
            value, grad = loss.value_gradient_at(point, remote_params, offset=0.0)
            value_here, grad_here = local.value_gradient_at(point, local_params, offset=0.0)
            assert float(value) == pytest.approx(float(value_here), rel=1e-10)
            assert float(value) == pytest.approx(dp.numpy_nll(x, extended, dict(zip(NAMES, point, strict=True))),
                                                 rel=1e-10)
            np.testing.assert_allclose(grad.numpy(), grad_here.numpy(), rtol=1e-9,
                                       atol=1e-9 * np.abs(grad_here.numpy()).max())
        if fit == 0 and extended:
            for q in (*remote_params, *local_params):
                q.floating = True
                q.set_value(dp.START[q.name[len(dp.PREFIX):]])
            result, reference = Minuit(tol=TOL).minimize(loss), Minuit(tol=TOL, compiled=False).minimize(local)
            assert result.valid and reference.valid and result.path == "migrad"
            for n in names:
                assert result.values[n] == pytest.approx(reference.values[n], rel=1e-7, abs=1e-9), n
                assert result.errors[n] == pytest.approx(reference.errors[n], rel=1e-6), n
            total = result.values[dp.PREFIX + "nsig"] + result.values[dp.PREFIX + "nbkg"]
            assert total == pytest.approx(len(x), abs=0.05 * np.sqrt(len(x)))  # not len(x) / parts

    @rule()
    def sweights_at_the_state(self) -> None:
        """sWeights of the machine's loss at whatever state it is in: against the numpy sPlot formula with
        scipy densities where both yields float and sit at the minimum in the yields; else an SPlotError
        naming the fixed yield or the distance. Values and floating flags are as before either way."""
        import scipy.stats

        from zcache.exceptions import SPlotError
        from zcache.inference import sweights

        v, floating = self.values(), self.floating()
        norm = scipy.stats.norm.cdf(HI, v["mu"], v["sigma"]) - scipy.stats.norm.cdf(LO, v["mu"], v["sigma"])
        g = np.stack([scipy.stats.norm.pdf(self.x, v["mu"], v["sigma"]) / norm,
                      v["lam"] * np.exp(v["lam"] * (self.x - LO)) / np.expm1(v["lam"] * (HI - LO))])
        n = np.array([v["nsig"], v["nbkg"]])
        total = n @ g
        inverse = np.linalg.inv((g / total**2) @ g.T)
        distance = np.max(np.abs(n - inverse.sum(axis=1)) / np.sqrt(np.diag(inverse)))
        note(f"sweights: floating={floating}, Newton step {distance:.3g} sigma")
        try:
            sw = sweights(self.loss)
        except SPlotError as error:
            message = str(error)
            # "fm_nsig is fixed" for one fixed yield, "fm_nsig, fm_nbkg are fixed" for both
            assert (re.search(r"\b(is|are) fixed", message) and not {"nsig", "nbkg"} <= set(floating)) or (
                "Newton step" in message and distance > 0.04), message
        else:
            assert {"nsig", "nbkg"} <= set(floating) and distance < 0.06
            expected = (inverse @ g) / total
            np.testing.assert_allclose(sw.weights, expected, rtol=1e-8, atol=1e-10)
            np.testing.assert_allclose(sw.weights.sum(axis=1), n, rtol=1e-9)
        assert self.values() == v and self.floating() == floating

    @precondition(lambda self: self.floating())
    @rule(data=st.data(), batched=st.booleans())
    def profile_scan_agrees(self, data: st.DataObject, batched: bool) -> None:
        """A 3-point profile scan (zcache.inference) of a floating parameter, batched or serial, against
        iminuit's fits of the numpy NLL with that parameter fixed at each point (and free, for the minimum)."""
        from zcache.inference import profile_scan

        n = data.draw(st.sampled_from(self.floating()), label="scanned")
        before, floating = self.values(), self.floating()
        note(f"profile_scan of {n} (batched={batched}) floating={floating} from {before}")
        scan = profile_scan(self.loss, self.p[n].name, bins=3, bound=1.0, minimizer=Minuit(tol=TOL),
                            batched=batched)
        assert self.values() == before and self.floating() == floating, "profile_scan moved a parameter or flag"
        np.testing.assert_array_equal(self.loss.data.numpy(), self.x)
        start = {**before, **{k: scan.best[self.p[k].name] for k in floating}}
        free = np_minuit(self.x, start, floating)
        if not free.valid or self._undetermined(start, floating):
            note("the free reference fit is not valid, or a parameter is not determined: no comparison")
            return
        others = [k for k in floating if k != n]
        for j, value in enumerate(scan.values):
            ref = np_minuit(self.x, {**start, n: value}, others)
            if not (ref.valid and scan.converged[j]):
                note(f"point {value}: reference valid {ref.valid}, scan converged {scan.converged[j]}")
                continue
            assert scan.delta[j] == pytest.approx((ref.fval - free.fval) / 0.5, abs=1e-6), (n, value)
            for k in others:
                got = scan.nuisances[self.p[k].name][j]
                assert abs(got - ref.values[k]) <= 1e-3 * ref.errors[k], (n, value, k, got, ref.values[k])

    @precondition(lambda self: self.p["nsig"].floating)
    @rule(shift=st.floats(0.5, 3.0), compiled=st.booleans())
    def asymptotic_q_is_the_numpy_profile(self, shift: float, compiled: bool) -> None:
        """The asymptotic calculator's observed q of nsig, with the floating set of the moment,
        equals -2 ln lambda of iminuit fits of the numpy NLL (free, and nsig fixed at a value
        ``shift`` errors above the best fit), its CLs+b is 1 - Phi(sqrt q) (Cowan et al. eq. 59),
        and every value, floating flag and the data are as before. Where a reference fit leaves a parameter
        undetermined, the NLL has several local minima (:meth:`_minima`) and q lies between theirs (to the same
        2e-3): at stress seed 9168 zcache's free fit ended at sigma's lower limit, 0.125 below iminuit's, which
        stopped where the signal yield's limit 0 makes sigma flat (both valid; the numpy NLL at zcache's
        minimum is the lower)."""
        from scipy import stats

        from zcache.inference import AsymptoticCalculator

        before, floating = self.values(), self.floating()
        flags = {n: self.p[n].floating for n in NAMES}
        frees = self._minima(before, floating)
        if not frees:
            note("the numpy reference does not converge: no comparison")
            return
        free = frees[0]
        tested = min(free.values["nsig"] + shift * free.errors["nsig"], LIMITS["nsig"][1])
        nuisances = [n for n in floating if n != "nsig"]
        if nuisances:
            at_nlls = [at.fval for at in self._minima({**before, "nsig": tested}, nuisances)]
        else:
            at_nlls = [np_extended_nll(self.x, *{**before, "nsig": tested}.values())]
        # one q per pair of minima: a single one unless a parameter is undetermined at a minimum (_minima), where
        # zcache's fit may end at any of the valley's minima and its q then lies between theirs
        qs = [max(2.0 * (at_nll - f.fval), 0.0) for at_nll in at_nlls for f in frees]
        calc = AsymptoticCalculator(self.loss, self.p["nsig"], minimizer=Minuit(tol=TOL, compiled=compiled),
                                    asimov_bins=200)
        pv = calc.p_values([tested], statistic="q")
        note(f"asymptotic q at nsig = {tested:.6g}: zcache {pv.observed[0]:.8g}, numpy {qs}")
        if qs:
            assert min(qs) - 2e-3 <= pv.observed[0] <= max(qs) + 2e-3, (pv.observed[0], qs)
        assert pv.clsb[0] == pytest.approx(stats.norm.sf(np.sqrt(pv.observed[0])), rel=1e-9)
        assert self.values() == before
        assert {n: self.p[n].floating for n in NAMES} == flags
        np.testing.assert_array_equal(self.loss.data.numpy(), self.x)

    @precondition(lambda self: self.p["nsig"].floating)
    @rule(seed=st.integers(1, 2**16), shift=st.floats(0.8, 1.3))
    def toy_p_value(self, seed: int, shift: float) -> None:
        """A small toy p-value of nsig with the floating set of the moment (4 toys per hypothesis, one batch
        each): every toy's statistic (POI pinned and free) equals the same toy fitted serially with Minuit,
        the CLs+b is the fraction of toys at least as extreme as the observed statistic, and every
        parameter's value and floating flag, and the data, are as before. The tested value is nsig times
        ``shift`` (at least 50); with nbkg fixed it is also clipped so that the expected yield, tested + nbkg,
        stays in ``TOY_YIELD`` (the batched fits' size classes; with nbkg floating ``DATA_TOTALS`` does that)."""
        from zcache.inference import ToyCalculator, _toys

        before, floating = self.values(), self.floating()
        poi = self.p["nsig"]
        low, high = 50.0, LIMITS["nsig"][1]
        if not self.p["nbkg"].floating:  # the expected yield is tested + nbkg: kept in TOY_YIELD where it can be
            low, high = max(low, TOY_YIELD[0] - before["nbkg"]), min(high, TOY_YIELD[1] - before["nbkg"])
            low, high = (low, high) if low <= high else (50.0, LIMITS["nsig"][1])
        tested = float(np.clip(before["nsig"] * shift, low, high))
        kw = dict(n_toys=4, null_value=0.8 * tested, seed=seed)
        batched = _toys.run_hypothesis_toys(self.loss, poi, [tested], batch=4, **kw)
        serial = _toys.run_hypothesis_toys(self.loss, poi, [tested], batch=None, **kw)
        note(f"toy p-value at nsig={tested} floating={floating}: {batched.table} / {serial.table}")
        for kind in (_toys.ALT, _toys.NULL):
            x, y = batched.rows(kind, tested), serial.rows(kind, tested)
            np.testing.assert_array_equal(x["nevents"], y["nevents"])
            ok = x["valid"] & y["valid"]
            np.testing.assert_allclose((x["nll_at_mu"] - x["nll_free"])[ok], (y["nll_at_mu"] - y["nll_free"])[ok],
                                       atol=2e-3)
        calc = ToyCalculator(self.loss, poi, n_toys=4, seed=seed, null_value=0.8 * tested, toys=batched, batch=4)
        pv = calc.p_values([tested], statistic="q")
        alt, _ = calc.toy_statistics(tested, "q")
        assert pv.clsb[0] == pytest.approx(np.mean(alt >= pv.observed[0] - 1e-9 * (1 + pv.observed[0])))
        assert self.values() == before and self.floating() == floating
        np.testing.assert_array_equal(self.loss.data.numpy(), self.x)

    # -- the tiered start (issue 54, h-tiered) ----------------------------------------------
    @precondition(lambda self: self.floating())
    @rule(data=st.data())
    def tiers_agree(self, data: Any) -> None:
        """Which tier serves a fit is drawn: a fitted set's first tiered fit (MIGRAD, Hessians by differences; a
        set fitted before is compiled) against the compiled tier from the same start, in a drawn order: the same
        verdict, minimum and errors, and the parameters left at the last fit's minimum."""
        fitted = data.draw(st.lists(st.sampled_from(self.floating()), min_size=1, unique=True), label="fitted")
        tiered_first = data.draw(st.booleans(), label="tiered first")
        params = [self.p[n] for n in NAMES]
        before = [q._current() for q in params]
        results = {}
        for tiered in (tiered_first, not tiered_first):
            zcache.set_values(params, before)
            results[tiered] = Minuit(tol=TOL, tiered=tiered).minimize(self.loss, [self.p[n] for n in fitted])
        tier, compiled = results[True], results[False]
        note(f"tiers: {fitted}, {tier.path} / {compiled.path} ({compiled.fallback}); {tier.values}; {compiled.values}")
        assert tier.valid == compiled.valid
        assert tier.path in ("migrad", "compiled")
        last = results[not tiered_first]
        assert [self.p[n]._current() for n in fitted] == [last.values[self.p[n].name] for n in fitted]
        if compiled.valid:
            for name, value in compiled.values.items():
                assert abs(tier.values[name] - value) <= VALUE_TOL * compiled.errors[name], name
        zcache.set_values(params, before)

    # -- invariants -----------------------------------------------------------------------
    @invariant()
    def loss_value_is_the_numpy_nll(self) -> None:
        v = self.values()
        np.testing.assert_allclose(float(self.loss.value()), np_extended_nll(self.x, *v.values()), rtol=1e-10)

    @invariant()
    def params_follow_the_flags(self) -> None:
        params = self.loss.params
        assert {id(q) for q in params} == {id(self.p[n]) for n in self.floating()}
        assert params == [q for q in self.loss.get_params(floating=None) if q.floating]  # model order


# slow: about 6 CPU s in the fast loop (one sequence), over its ~1.5 (CONTRIBUTING.md, "Test times")
TestFitMachine = pytest.mark.slow(FitMachine.TestCase)
TestFitMachine.settings = settings(  # the fast loop (profile dev, 2 examples) runs one sequence: 7 s
    max_examples=1 if settings.default.max_examples <= 2 else 2, stateful_step_count=6, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# exhaustive: make test runs TestFitMachine; `make stress` runs thousands of sequences
@pytest.mark.exhaustive
class TestFitMachineLong(FitMachine.TestCase):
    """Longer sequences (``-m slow``); ``make stress`` (``tests/stress.py``) runs thousands more."""

    # 2 x 16 steps: CI's 25 minutes are nearly spent (5 x 16 took 94 s of one worker once a fit traces its
    # compiled program and the compiled-vs-MIGRAD rule fits twice); make stress runs thousands
    settings = settings(
        max_examples=2, stateful_step_count=16, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


@pytest.mark.slow  # fits (the fast loop runs the machine once)
def test_fit_machine_starts_each_sequence_as_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model and losses are shared across sequences: a sequence after fits (whose precompute bypassed
    caches), a new data set, a toggled flag and a moved value starts as from a fresh build: values, flags
    and data as built, no cache bypassed or valid, no precompute remembered, the loss the numpy NLL."""
    monkeypatch.setitem(globals(), "note", lambda *_: None)  # the rules' notes, outside a hypothesis test
    first = FitMachine()
    first.fit(precompute=True, use_gradient=True, compiled=False)
    first.new_data(seed=3, nsig=200, nbkg=400)
    first.toggle_floating("lam")
    first.p["lam"].set_value(-0.25)
    first.compiled_and_migrad()
    loss = first.loss
    assert any(c.always_dirty for c in _caches_below(list(first.p.values())))  # what the reset must undo
    first.teardown()
    second = FitMachine()
    caches = _caches_below([*second.p.values(), loss.data])
    assert caches and not any(c.always_dirty or c.is_valid for c in caches)
    assert precomputed(loss) is None
    assert second.values() == TRUTH and second.floating() == list(NAMES)
    np.testing.assert_array_equal(loss.data.numpy(), np_sample(0, 250, 450))
    np.testing.assert_allclose(float(loss.value()), np_extended_nll(second.x, **TRUTH), rtol=1e-10)


def test_as_built_check_fails_on_a_bypassed_or_valid_cache() -> None:
    """The reset's check is not vacuous: a valid cache, or one a precompute bypassed, fails it."""
    world = _world()
    world.loss.value()  # the model creates its caches at its first evaluation
    FitMachine()  # as built
    caches = _caches_below(list(world.p.values()))
    assert caches
    _assert_as_built(caches)
    world.loss.value()  # fills the caches
    with pytest.raises(AssertionError, match="valid"):
        _assert_as_built(caches)
    zcache.precompute(world.loss)
    with pytest.raises(AssertionError, match="bypassed"):
        _assert_as_built(caches)
    FitMachine()  # and the reset puts it back
    _assert_as_built(caches)


@pytest.mark.slow  # fits, a calculator's compiled fits
def test_asymptotic_q_where_sigma_is_undetermined_seed_9168(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stress seed 9168 (harness fault): after a search on background-only data (nsig at its limit 0) with
    sigma floated, iminuit's free fit of the numpy NLL stops where sigma is flat, zcache's walks to sigma's
    lower limit (2 signal events, 0.125 lower: the better minimum); the rule compares q with the valley's
    minima (FitMachine._minima), of which there are several here, and passes."""
    monkeypatch.setitem(globals(), "note", lambda *_: None)
    machine = FitMachine()
    machine.small_signal_fit(nsig=1, seed=5235, total=680)
    machine.toggle_floating("sigma")
    frees = machine._minima(machine.values(), machine.floating())
    fvals = sorted(f.fval for f in frees)
    assert len(frees) == 3 and fvals[-1] - fvals[0] > 0.1  # the first fit is not the lowest minimum
    machine.asymptotic_q_is_the_numpy_profile(shift=2.754382636617804, compiled=True)
