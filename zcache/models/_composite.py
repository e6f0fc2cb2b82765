"""Models of models: the mixture :class:`~zcache.models.SumPdf` and the product :class:`~zcache.models.ProductPdf`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from .._engine.cachable import cached
from .._engine.data import Data
from .._engine.parameter import Parameter
from ..exceptions import ModelError
from ._base import Model, as_parameter, density
from ._sampling import rng


class SumPdf(Model):
    r"""A mixture :math:`\sum_k f_k\, p_k(x)` of models over the same space.

    Give either ``fracs`` (K-1 fractions; the last is :math:`1-\sum f_k`) or
    ``yields`` (K yields; the sum is extended with yield :math:`\sum_k N_k`). With
    neither, extended components lend their yields.

    Each component's ``pdf(data)`` is its own cache, so moving one component's
    parameter recomputes only that component.

    Parameters
    ----------
    pdfs : sequence of Model
        At least two models over the same space.
    fracs : sequence of Parameter or float, optional
        K-1 fractions; the last is one minus their sum.
    yields : sequence of Parameter or float, optional
        K yields; the sum is then extended.
    name : str, optional
        A label for reports; default ``'Sum'``.

    Raises
    ------
    ModelError
        Fewer than two models, different spaces, both or neither of ``fracs`` and ``yields``
        (unless every component is extended), or the wrong number of them.

    Examples
    --------
    >>> import zcache
    >>> from zcache.models import Space, Gaussian, SumPdf
    >>> s = Space("x", -5.0, 5.0)
    >>> n1, n2 = zcache.Parameter("n1_s", 300.0), zcache.Parameter("n2_s", 100.0)
    >>> m = SumPdf([Gaussian(s, -1.0, 0.5), Gaussian(s, 1.0, 0.5)], yields=[n1, n2])
    >>> m.is_extended, float(m.get_yield())
    (True, 400.0)
    """

    def __init__(
        self,
        pdfs: Sequence[Model],
        fracs: Sequence[Any] | None = None,
        yields: Sequence[Any] | None = None,
        *,
        name: str | None = None,
    ):
        pdfs = list(pdfs)
        if len(pdfs) < 2 or not all(isinstance(p, Model) for p in pdfs):
            raise ModelError("SumPdf needs at least two zcache models.")
        space = pdfs[0].space
        if any(p.space != space for p in pdfs):
            raise ModelError(f"SumPdf components must share one space; got {[p.space for p in pdfs]}.")
        if fracs is not None and yields is not None:
            raise ModelError("SumPdf takes fracs or yields, not both.")
        name = name or "Sum"
        if fracs is None and yields is None:
            if not all(p.is_extended for p in pdfs):
                raise ModelError("SumPdf needs fracs (K-1 fractions) or yields (K), or extended components.")
            # Each component lends its yield: its Parameter, or (a SumPdf with yields) its sum.
            coefs = [p.yield_parameter if p.yield_parameter is not None else _ComponentYield(p) for p in pdfs]
        elif yields is not None:
            if len(yields) != len(pdfs):
                raise ModelError(f"SumPdf got {len(pdfs)} models but {len(yields)} yields; give one per model.")
            coefs = [as_parameter(y, f"{name}_yield{k}") for k, y in enumerate(yields)]
        else:
            if len(fracs) != len(pdfs) - 1:
                raise ModelError(
                    f"SumPdf got {len(pdfs)} models and {len(fracs)} fractions; give K-1 = {len(pdfs) - 1} "
                    "fractions (the last one is 1 minus their sum)."
                )
            coefs = [as_parameter(f, f"{name}_frac{k}") for k, f in enumerate(fracs)]
        super().__init__(space, {p.name: p for p in coefs if isinstance(p, Parameter)}, name=name)
        self.pdfs = pdfs
        self._coefs = coefs
        self._yields = fracs is None
        if self._yields:
            self._yield = _SumOfYields(coefs)

    def _own_params(self) -> list[Parameter]:
        return [c for c in self._coefs if isinstance(c, Parameter)]

    def _submodels(self) -> list[Model]:
        return list(self.pdfs)

    @property
    def component_yields(self) -> list[Parameter | None] | None:
        """The yield of each component, in the order of ``pdfs`` (None for a sum with fractions).

        A component that lends a yield that is no single Parameter (itself a SumPdf with
        yields) gives None in its place.
        """
        if not self._yields:
            return None
        return [c if isinstance(c, Parameter) else None for c in self._coefs]

    def get_yield(self) -> tf.Tensor:
        """The sum of the yields (SumPdf with yields; else the model's own yield).

        Returns
        -------
        tf.Tensor
            float64 scalar.

        Raises
        ------
        ModelError
            The sum is not extended.
        """
        if not self._yields:
            return super().get_yield()
        return tf.add_n([c.value() for c in self._coefs])

    def fractions(self) -> tf.Tensor:
        """The K mixture fractions.

        Returns
        -------
        tf.Tensor
            float64, shape (K,); they sum to one.
        """
        values = [c.value() for c in self._coefs]
        if self._yields:
            total = tf.add_n(values)
            return tf.stack([v / total for v in values])
        return tf.stack([*values, 1.0 - tf.add_n(values)])

    def _pdf(self, data: Any) -> tf.Tensor:
        fr = self.fractions()
        return tf.add_n([fr[k] * p.pdf(data, raw=True) for k, p in enumerate(self.pdfs)])

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        return self._pdf(x)

    def normalization(self) -> tf.Tensor:
        """1: a mixture of normalized densities.

        Returns
        -------
        tf.Tensor
            float64 scalar 1.
        """
        return tf.constant(1.0, tf.float64)

    def _raw_integral(self, lower: Sequence[float], upper: Sequence[float]) -> tf.Tensor:
        fr = self.fractions()
        return tf.add_n([fr[k] * p.integrate(lower, upper) for k, p in enumerate(self.pdfs)])

    def _integrate_bins(self, edges: tuple[float, ...]) -> tf.Tensor:
        # Each component's bin probabilities are its own cache: moving one component's
        # parameter recomputes only that component's bins.
        fr = self.fractions()
        return tf.add_n([fr[k] * p.integrate_bins(edges) for k, p in enumerate(self.pdfs)])

    def _sample(self, n: tf.Tensor) -> tf.Tensor:
        # Each event picks its component by the fractions; every component draws n
        # candidates (K x n work, fixed shapes, a single trace).
        cum = tf.cumsum(self.fractions())
        u = rng().uniform([n], dtype=tf.float64) * cum[-1]
        idx = tf.minimum(tf.searchsorted(cum, u, side="right"), len(self.pdfs) - 1)
        candidates = tf.stack([p._sample_tensor(n) for p in self.pdfs], axis=1)  # (n, K, ...)
        return tf.gather(candidates, idx, axis=1, batch_dims=1)


class _ComponentYield:
    """A component's yield that is no single Parameter (a SumPdf with yields), as a coefficient."""

    def __init__(self, model: Model) -> None:
        self.model = model

    def value(self) -> tf.Tensor:
        return self.model.get_yield()


class _SumOfYields:
    """Stands in for a yield Parameter of an extended SumPdf (``is_extended`` only)."""

    def __init__(self, coefs: list[Parameter]) -> None:
        self.coefs = coefs

    def value(self) -> tf.Tensor:
        return tf.add_n([c.value() for c in self.coefs])


class ProductPdf(Model):
    r"""A product :math:`\prod_k p_k` of models.

    Over disjoint observables (e.g. mass x decay time) the product is normalized
    when its factors are, and samples factor by factor. Over one shared
    one-dimensional space the product is normalized numerically.

    Parameters
    ----------
    pdfs : sequence of Model
        At least two models, over disjoint observables or all over one 1-D space.
    name : str, optional
        A label for reports; default ``'Product'``.
    extended : Parameter or float, optional
        A yield makes the model extended.

    Raises
    ------
    ModelError
        Fewer than two models, or observables neither disjoint nor one shared 1-D space.

    Examples
    --------
    >>> from zcache.models import Space, Gaussian, Exponential, ProductPdf
    >>> m = ProductPdf([Gaussian(Space("m", 0.0, 2.0), 1.0, 0.2), Exponential(Space("t", 0.0, 5.0), -1.0)])
    >>> m.space.obs, round(float(m.integrate()), 12)
    (('m', 't'), 1.0)
    """

    def __init__(self, pdfs: Sequence[Model], *, name: str | None = None, extended: Any = None):
        pdfs = list(pdfs)
        if len(pdfs) < 2 or not all(isinstance(p, Model) for p in pdfs):
            raise ModelError("ProductPdf needs at least two zcache models.")
        obs = [o for p in pdfs for o in p.space.obs]
        self._disjoint = len(set(obs)) == len(obs)
        if self._disjoint:
            space = pdfs[0].space
            for p in pdfs[1:]:
                space = space * p.space
        elif all(p.space == pdfs[0].space for p in pdfs) and pdfs[0].space.n_obs == 1:
            space = pdfs[0].space
        else:
            raise ModelError(
                "ProductPdf factors must have disjoint observables, or all share one 1-D space; got "
                f"{[p.space for p in pdfs]}."
            )
        super().__init__(space, {}, name=name or "Product", extended=extended)
        self.pdfs = pdfs

    def _submodels(self) -> list[Model]:
        return list(self.pdfs)

    def _split(self, x: tf.Tensor) -> list[tf.Tensor]:
        """The columns of each factor, from a tensor in this model's observable order."""
        out, start = [], 0
        for p in self.pdfs:
            width = p.space.n_obs
            cols = x[:, start:start + width] if x.shape.rank == 2 else x
            out.append(cols[:, 0] if width == 1 and cols.shape.rank == 2 else cols)
            start += width
        return out

    def _pdf(self, data: Any) -> tf.Tensor:
        if self._disjoint and isinstance(data, Data) and data.obs is not None:  # each factor caches its columns
            return _product([p.pdf(data, raw=True) for p in self.pdfs])
        if self._disjoint:
            return self._unnormalized_pdf(self.space.select(data))
        return density(_product([p.pdf(data, raw=True) for p in self.pdfs]), self.normalization())

    def _unnormalized_pdf(self, x: tf.Tensor) -> tf.Tensor:
        if self._disjoint:
            return _product([p.pdf(c, raw=True) for p, c in zip(self.pdfs, self._split(x), strict=True)])
        return _product([p.pdf(x, raw=True) for p in self.pdfs])

    def _raw_integral(self, lower: Sequence[float], upper: Sequence[float]) -> tf.Tensor:
        if not self._disjoint:
            return super()._raw_integral(lower, upper)
        out, start = [], 0
        for p in self.pdfs:
            width = p.space.n_obs
            out.append(p.integrate(lower[start:start + width], upper[start:start + width]))
            start += width
        return _product(out)

    @cached
    def normalization(self) -> tf.Tensor:
        """1 over disjoint observables; else the numerical integral of the product.

        Returns
        -------
        tf.Tensor
            float64 scalar.
        """
        if self._disjoint:
            return tf.constant(1.0, tf.float64)
        return super()._raw_integral(self.space.lower, self.space.upper)

    def _sample(self, n: tf.Tensor) -> Any:
        if not self._disjoint:
            return NotImplemented
        cols = []
        for p in self.pdfs:
            s = p._sample_tensor(n)
            cols.append(s[:, None] if s.shape.rank == 1 else s)
        return tf.concat(cols, axis=1)



def _product(parts: list[tf.Tensor]) -> tf.Tensor:
    out = parts[0]
    for part in parts[1:]:
        out = out * part
    return out
