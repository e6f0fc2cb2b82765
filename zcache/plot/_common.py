"""What the pictures of zcache.plot share: the curve's resolution, the figure size, a new figure or the given axes."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .._engine.tf_internals import leave_to_python

#: Points of a smooth curve (a model, a parabola, a Gaussian).
CURVE_POINTS = 400
#: A new figure's size, in inches (matplotlib's default).
FIGSIZE = (6.4, 4.8)


def figure_and_axes(ax: Axes | None) -> tuple[Figure, Axes]:
    """The figure of ``ax``, or a new figure of ``FIGSIZE`` with one axes when ``ax`` is None."""
    if ax is None:
        fig, ax = plt.subplots(figsize=FIGSIZE)
        return fig, ax
    return ax.figure, ax


leave_to_python(__name__)  # autograph calls this module's code as Python (tf_internals item 3)
