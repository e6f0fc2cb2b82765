"""The ampform factory: a :class:`~._symbolic_model.SymbolicModel` from a ``HelicityModel``, and its phase space."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from numbers import Integral
from typing import Any

from .._engine.parameter import Parameter
from .._engine.tf_internals import leave_to_python
from ..exceptions import SymbolicError
from ._couplings import ComplexParameter
from ._kinematics import HelicityKinematics
from ._symbolic_model import SymbolicModel, refuse_unknown

__all__ = ["from_helicity_model", "phasespace_generator"]


def phasespace_generator(model: Any) -> Any:
    r"""Fresh phase-space events of an ampform three-body ``HelicityModel``: its kinematic columns.

    The masses come from ``model.reaction_info``. Each event is uniform in the Dalitz plot
    (:meth:`zcache.amplitude.DalitzKinematics.sample_tensor`) with a uniform orientation of
    the decay plane (Euler angles :math:`\alpha, \gamma` uniform, :math:`\cos\beta` uniform):
    uniform three-body phase space. Its four-momenta in the parent's rest frame become the
    columns by ampform's own ``model.kinematic_variables`` (:class:`zcache.amplitude.HelicityKinematics`).
    Random numbers come from :func:`zcache.models.rng`, so :func:`zcache.models.set_seed`
    reproduces the events and the generator runs in traced samplers (its numpy part as a
    ``tf.numpy_function``: a sampler compiled with XLA falls back to running uncompiled).

    :func:`zcache.amplitude.from_helicity_model` uses it by default when its phase-space sample is
    a number of events or four-momenta of the reaction; give it as ``generator=`` (or
    ``generator="phasespace"``) where you computed the columns yourself from uniform phase space,
    and draw the phase-space sample from it too, so that the two come from one distribution (the
    model's density is relative to its phase-space sample).

    Parameters
    ----------
    model : ampform.helicity.HelicityModel
        A model of a decay of one particle into three.

    Returns
    -------
    callable
        ``generator(n)`` for an int or int64 tensor ``n``: a dict of column name -> float64
        tensor of shape (n,), one per key of ``model.kinematic_variables``.

    Raises
    ------
    SymbolicError
        The reaction is not a decay into three particles.

    Examples
    --------
    >>> import ampform, qrules, zcache
    >>> from zcache.amplitude import from_helicity_model, phasespace_generator
    >>> reaction = qrules.generate_transitions(
    ...     initial_state="D0", final_state=["K-", "pi+", "pi0"], formalism="helicity",
    ...     allowed_intermediate_particles=["K*(892)0"], allowed_interaction_types=["strong", "weak"])
    >>> model = ampform.get_builder(reaction).formulate()
    >>> generate = phasespace_generator(model)
    >>> zcache.models.set_seed(0)
    >>> phsp = {name: column.numpy() for name, column in generate(20_000).items()}
    >>> bridged = from_helicity_model(model, phsp, generator=generate)
    >>> events = bridged.sample(1000)
    >>> events.nevents, len({tuple(row) for row in events.numpy()})        # no event twice
    (1000, 1000)
    """
    _require_three_body(model.reaction_info, "phasespace_generator")
    return HelicityKinematics(model).generator()


def from_helicity_model(model: Any, phasespace: Any, *, expression: Any = None, parameters: Mapping[Any, Any] | None = None,
                        floating: Iterable[Any] | None = None, name: str | None = None, cache: bool = True,
                        generator: Any = "auto", **kwargs: Any) -> SymbolicModel:
    r"""A :class:`SymbolicModel` from an ampform ``HelicityModel``, with its kinematics.

    Parameters are ``model.parameter_defaults`` (complex couplings: real and imaginary part),
    updated by ``parameters``; masses (``m_{...}``) and widths (``\Gamma_{...}``) get a lower
    limit of 0 unless given one (a negative value then raises ParameterValueError). By default
    the couplings float except the first one.

    The data columns are the keys of ``model.kinematic_variables``, sorted by name (the model's
    ``space.obs``). The model's
    ``SymbolicModel.kinematics`` (a :class:`zcache.amplitude.HelicityKinematics`) computes
    them from four-momenta with ampform's own expressions, for the phase-space sample and for
    :meth:`~SymbolicModel.to_data` alike, so that data, phase space and generated events go
    through one path; columns computed elsewhere (tensorwaves' ``SympyDataTransformer``) are
    accepted too.

    Sampling draws independent events. The rule for the default ``generator="auto"``: the
    density is relative to the phase-space sample, so fresh events must follow its
    distribution. When the bridge drew the phase-space sample itself (``phasespace`` a number of
    events) or was given four-momenta of the reaction's phase space (parent mass and rest frame,
    final-state masses: checked), and the reaction is a three-body decay, generated events are
    fresh phase space (:func:`phasespace_generator`); four-momenta of another phase space raise
    (say ``generator=None`` or give your own). Columns computed elsewhere, or a reaction that is
    not three-body, keep drawing from the phase-space sample without replacement (see
    :meth:`SymbolicModel.sample`; a sample it cannot fill raises): the bridge cannot tell what
    distribution they follow.

    Parameters
    ----------
    model : ampform.helicity.HelicityModel
        The model.
    phasespace : int, four-momenta, zcache.Data or mapping of str to array_like
        The phase-space sample: a number of fresh uniform phase-space events to draw (three-body
        decays; from :func:`zcache.models.rng`, so :func:`zcache.models.set_seed` reproduces
        them), four-momenta (``{"p0": (n, 4), "p1": ..., ...}``, ampform's names, or a sequence
        of (n, 4) arrays (E, px, py, pz) in final-state order, in the parent's rest frame), or
        the kinematic columns.
    expression : sympy.Expr, optional
        ``model.expression.doit()`` when already computed (it takes seconds for large models).
    parameters : mapping, optional
        Overrides of ``parameter_defaults`` (see :class:`SymbolicModel`).
    floating : iterable of sympy.Symbol or str, optional
        The floating parameters (see :class:`SymbolicModel`).
    name : str, optional
        A label.
    cache : bool
        ``False``: no caches (a reference).
    generator : "auto", "phasespace", callable or None
        ``"auto"``: the rule above. ``"phasespace"``: fresh phase space
        (:func:`phasespace_generator`) whatever the phase-space sample is (you say that your
        columns are uniform phase space). A callable: fresh events of your own (see
        :class:`SymbolicModel`). ``None``: draw from the phase-space sample without replacement.
    **kwargs
        Passed to :class:`SymbolicModel` (``phasespace_volume``, ``limits``, ``extended``).

    Returns
    -------
    SymbolicModel

    Raises
    ------
    SymbolicError
        A name in ``parameters`` or ``floating`` that is not a parameter of the model (close
        matches named); four-momenta that miss a particle, are not (n, 4) or not finite;
        four-momenta that are not the reaction's phase space with ``generator="auto"``; a number
        of events, or ``generator="phasespace"``, for a reaction that is not a three-body decay;
        and as :class:`SymbolicModel`.
    ParameterValueError
        A negative mass or width (outside the limits given).

    Examples
    --------
    >>> import ampform, numpy as np, qrules, zcache
    >>> from zcache.amplitude import from_helicity_model
    >>> reaction = qrules.generate_transitions(
    ...     initial_state="D0", final_state=["K-", "pi+", "pi0"], formalism="helicity",
    ...     allowed_intermediate_particles=["K*(892)0", "rho(770)+"], allowed_interaction_types=["strong", "weak"])
    >>> model = ampform.get_builder(reaction).formulate()
    >>> zcache.models.set_seed(0)
    >>> bridged = from_helicity_model(model, 5000)           # 5000 fresh phase-space events
    >>> bridged.is_coherent_sum, len(bridged.couplings), bridged.space.obs
    (True, 2, ('theta_0^01', 'theta_1^12'))
    >>> momenta = bridged.kinematics.sample_momenta(200)   # or your data's four-momenta
    >>> data = bridged.to_data(momenta)                     # columns by ampform's kinematics
    >>> events = bridged.sample(8000)                       # fresh phase space: more than the 5000
    >>> data.nevents, events.nevents, len({tuple(row) for row in events.numpy()})
    (200, 8000, 8000)

    Columns computed elsewhere are taken as they are (and sampled from without replacement):

    >>> rng = np.random.default_rng(0)
    >>> columns = {"theta_0^01": np.arccos(rng.uniform(-1, 1, 2000)), "theta_1^12": np.arccos(rng.uniform(-1, 1, 2000))}
    >>> from_helicity_model(model, columns).generator is None
    True
    """
    kinematics = HelicityKinematics(model)
    phasespace, generator = _phasespace_and_generator(kinematics, phasespace, generator)
    expr = model.expression.doit() if expression is None else expression
    read = {s.name for s in expr.free_symbols}
    values: dict[str, Any] = {}
    for symbol, value in model.parameter_defaults.items():
        values[symbol.name] = complex(value) if isinstance(value, complex) else float(value)
    overrides = {(k.name if hasattr(k, "name") else str(k)): v for k, v in (parameters or {}).items()}
    # a misspelt name would otherwise leave its parameter at the default, silently
    refuse_unknown(overrides, values, "parameters=", "a parameter of the model")
    values = {key: _with_physical_limit(key, overrides.get(key, value)) for key, value in values.items()}
    if floating is not None:
        floating = [f.name if hasattr(f, "name") else str(f) for f in floating]
        refuse_unknown(floating, values, "floating=", "a parameter of the model")
        floating = [f for f in floating if f in read]
    # parameters the expression does not read (e.g. the meson radius of a spin-0 resonance)
    values = {k: v for k, v in values.items() if k in read}
    # sorted (kinematics.names): ampform's kinematic_variables come out in an order that changes with Python's
    # string hashing (PYTHONHASHSEED), and the columns' order is the group programs' argument order: unsorted,
    # each new process traced other XLA programs and missed the compile cache (every first call compiled again)
    return SymbolicModel(expr, values, list(kinematics.names), phasespace,
                         floating=floating, name=name or "HelicityModel", cache=cache, doit=False,
                         generator=generator, kinematics=kinematics, **kwargs)


def _phasespace_and_generator(kinematics: HelicityKinematics, phasespace: Any, generator: Any) -> tuple[Any, Any]:
    """The phase-space sample's columns and the generator, by from_helicity_model's rule."""
    if isinstance(generator, str) and generator not in ("auto", "phasespace"):
        raise SymbolicError(f"generator= must be 'auto', 'phasespace', a callable n -> columns or None, "
                            f"got {generator!r}.")
    why_not = "the phase-space sample is kinematic columns computed outside the bridge"
    if isinstance(phasespace, Integral) and not isinstance(phasespace, bool):
        if not kinematics.is_three_body:
            raise SymbolicError(f"phasespace={phasespace!r}: a number of fresh phase-space events is drawn for "
                                f"three-body decays only; this reaction's final state is {list(kinematics.momenta)}. "
                                "Give four-momenta or kinematic columns.")
        phasespace = kinematics.columns(kinematics.sample_momenta(int(phasespace)), "the phase-space sample")
        why_not = None
    elif kinematics.is_momenta(phasespace):
        four = kinematics.four_momenta(phasespace, "the phase-space sample")
        phasespace = kinematics.columns(four, "the phase-space sample")
        why_not = kinematics.matches_reaction(four) if kinematics.is_three_body else "not a three-body decay"
        if why_not is not None and generator == "auto" and kinematics.is_three_body:
            raise SymbolicError(
                f"the phase-space four-momenta are not the reaction's phase space: {why_not}. Fresh events "
                "(generator='auto') would follow another distribution than the phase-space sample, to which "
                "the density is relative: give generator=None (draw from the phase-space sample without "
                "replacement) or a generator= of your own."
            )
    if generator == "phasespace" or (generator == "auto" and why_not is None):
        return phasespace, kinematics.generator()
    return phasespace, None if generator == "auto" else generator


def _with_physical_limit(name: str, value: Any) -> Any:
    r"""An ampform mass (``m_{...}``) or width (``\Gamma_{...}``) with lower limit 0 unless given one."""
    if not (name.startswith("m_{") or name.startswith("\\Gamma_{")):
        return value
    if isinstance(value, (Parameter, ComplexParameter)):
        return value
    spec = dict(value) if isinstance(value, Mapping) else {"value": value}
    if "lower" not in spec:
        spec["lower"] = 0.0
    return spec


def _require_three_body(info: Any, what: str) -> None:
    initial, final = dict(info.initial_state), dict(info.final_state)
    if len(initial) != 1 or sorted(final) != [0, 1, 2]:
        raise SymbolicError(
            f"{what}: only decays of one particle into three (final-state ids 0, 1, 2) are "
            f"generated; this reaction has {len(initial)} initial and {len(final)} final-state particles. "
            "Give generator= your own function of n."
        )


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
