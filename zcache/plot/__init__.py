"""Fit plots: data with the fitted model, projections, likelihood profiles and toy pulls."""

try:
    import matplotlib  # noqa: F401  (an optional extra: checked here, before any of the package's modules)
except ImportError as err:
    raise ImportError("zcache.plot needs matplotlib, which is not installed: pip install zcache[plot]") from err

from ._fit import (
    CLsPlot,
    ContourPlot,
    FitPlot,
    ProfilePlot,
    PullPlot,
    ScanPlot,
    plot_cls,
    plot_contour,
    plot_fit,
    plot_profile,
    plot_projections,
    plot_pulls,
    plot_scan,
)

__all__ = ["FitPlot", "ProfilePlot", "PullPlot", "plot_fit", "plot_projections", "plot_profile", "plot_pulls",
           "ScanPlot", "ContourPlot", "plot_scan", "plot_contour", "CLsPlot", "plot_cls"]
