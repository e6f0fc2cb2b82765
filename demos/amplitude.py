r"""``python -m demos.amplitude`` (``make demo``): an amplitude fit of a three-body decay, end to end.

A :math:`D^+ \to K^-\pi^+\pi^+`-like decay with five components (non-resonant,
:math:`K^*(892)`, :math:`K_0^*(1430)`, :math:`K_2^*(1430)`, :math:`K^*(1410)`, all in
the two :math:`K\pi` channels with Bose symmetry): the demo

1. generates a phase-space (integration) sample and the data from the model;
2. fits the complex couplings three ways from the same start: with no caches at all,
   with caches but no precompute step, and with :func:`zcache.precompute` (what
   :class:`zcache.minimize.Minuit` does by default), and checks they agree;
3. prints the fit results, fit fractions, a table of timings and per-cache
   statistics (status, hits, misses, bytes);
4. runs the simulation pipeline (new data, parameters fixed) and shows that the
   parameter-only caches (the integral matrix) survive;
5. writes ``dalitz.png`` (the Dalitz plot of the fitted data and of the fitted model),
   ``fit_projections.png`` (the fit plot, made with :func:`zcache.plot.plot_projections`:
   the data's invariant-mass projections with the fitted model, its components and pulls)
   and ``dependency_graph.dot`` / ``.png`` into ``demo_output/``.

``python -m demos.amplitude --events 20000`` runs a smaller version; ``python -m
demos.basics`` is the engine's tour on a small Gauss + Exponential model.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

import zcache
from demos.basics import median_ms
from zcache.amplitude import AmplitudePdf, CoherentSum, ComplexParameter, DalitzKinematics, NonResonant, Resonance, fit_fractions
from zcache.loss import UnbinnedNLL
from zcache.minimize import Minuit
from zcache.models import set_seed

M_D, M_K, M_PI = 1.86966, 0.493677, 0.13957039

# name, mass, width, spin, true coupling (the NR coupling is the fixed reference)
RESONANCES = [
    ("K*(892)", 0.89555, 0.0473, 1, 0.21 * np.exp(-0.9j)),
    ("K0*(1430)", 1.425, 0.270, 0, 0.55 * np.exp(1.2j)),
    ("K2*(1430)", 1.4324, 0.109, 2, 0.20 * np.exp(-1.5j)),
    ("K*(1410)", 1.414, 0.232, 1, 0.30 * np.exp(0.5j)),
]


def _say(text: str = "", end: str = "\n") -> None:
    print(text, end=end, flush=True)


def build_model(n_mc: int) -> dict[str, Any]:
    """Kinematics, amplitudes, couplings, the phase-space sample and two PDFs (cached, uncached).

    Parameters
    ----------
    n_mc : int
        Events of the phase-space (integration) sample.

    Returns
    -------
    dict
        ``kinematics``, ``mc``, ``sum`` (the cached CoherentSum), ``pdf``, ``pdf_uncached``
        (the same amplitude without caches) and ``couplings``.
    """
    kin = DalitzKinematics(M_D, M_K, M_PI, M_PI, names=("K-", "pi+", "pi+"))
    mc = kin.sample(n_mc, name="phsp")
    components = [(ComplexParameter("NR", 1.0, floating=False), NonResonant(kin))]
    for name, mass, width, spin, coupling in RESONANCES:
        res = Resonance(kin, ("12", "13"), mass, width, spin, name=name)
        components.append((ComplexParameter(f"c[{name}]", coupling), res))
    cached = CoherentSum(components, cache=True)
    uncached = CoherentSum(components, cache=False)  # same parameters and amplitudes, no caches
    return {
        "kinematics": kin,
        "mc": mc,
        "sum": cached,
        "pdf": AmplitudePdf(cached, mc, name="D+ -> K- pi+ pi+"),
        "pdf_uncached": AmplitudePdf(uncached, mc, name="uncached"),
        "couplings": [c for c, _ in components],
    }


def _fit(loss: UnbinnedNLL, start: np.ndarray, precompute: bool) -> Any:
    zcache.set_values(loss.params, start)
    return Minuit(precompute=precompute).minimize(loss)


def _cache_table(report: Any) -> str:
    lines = [f"    {'cache':<32}{'status':<17}{'hits':>7}{'misses':>8}{'MB':>9}"]
    for node in report.nodes:
        cache = next(c for c in report.caches if c.name == node.name)
        s = cache.stats
        lines.append(f"    {node.name:<32}{node.status:<17}{s['hits']:>7}{s['misses']:>8}{cache.nbytes / 1e6:>9.2f}")
    return "\n".join(lines)


# The fit plot's projections (of events (s12, s13)): the two K pi masses squared, ordered (the
# pions are identical, so s12 and s13 alone each mix both), and the pi pi mass squared.
PROJECTIONS = {
    r"$m^2_{K\pi,\ \mathrm{low}}$ [GeV$^2$]": lambda v: np.minimum(v[:, 0], v[:, 1]),
    r"$m^2_{K\pi,\ \mathrm{high}}$ [GeV$^2$]": lambda v: np.maximum(v[:, 0], v[:, 1]),
    r"$m^2_{\pi\pi}$ [GeV$^2$]": lambda v: M_D**2 + M_K**2 + 2 * M_PI**2 - v[:, 0] - v[:, 1],
}


def _plot_sample(model: dict[str, Any], n_events: int) -> tuple[np.ndarray, np.ndarray]:
    """A phase-space sample for the plots (10 x the data, at least 200k, at most 1M) and |A|^2 on it.

    Larger than the fit's integration sample, so that the model's projections (its events
    weighted by |A|^2) fluctuate much less than the data and the pulls show the data's. An
    array, not a zcache.Data: nothing is cached for it.
    """
    n = int(np.clip(10 * n_events, 200_000, 1_000_000))
    events = model["kinematics"].sample_tensor(n).numpy()
    return events, model["sum"].intensity(events).numpy()


def _plot_dalitz(path: Path, events: np.ndarray, mc: np.ndarray, intensity: np.ndarray) -> None:
    """The Dalitz plot (lower vs higher K pi mass) of the data and of the fitted model, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    to_low, to_high = list(PROJECTIONS.values())[:2]
    cells = int(np.clip(np.sqrt(len(events)) / 2, 40, 150))
    low, high, mc_low, mc_high = to_low(events), to_high(events), to_low(mc), to_high(mc)
    bins = [np.linspace(mc_low.min(), mc_low.max(), cells + 1), np.linspace(mc_high.min(), mc_high.max(), cells + 1)]
    occupied = np.histogram2d(mc_low, mc_high, bins=bins)[0] > 0  # cells inside the kinematic boundary
    counts = np.histogram2d(low, high, bins=bins)[0]
    expected = np.histogram2d(mc_low, mc_high, bins=bins, weights=intensity)[0] * len(events) / intensity.sum()
    vmax = max(counts.max(), expected.max())
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    for ax, (values, title) in zip(axes, [(counts, f"data ({len(events):,} events)"), (expected, "fitted model")],
                                   strict=True):
        mesh = ax.pcolormesh(bins[0], bins[1], np.where(occupied, values, np.nan).T, cmap="viridis", vmin=0.0,
                             vmax=vmax)
        fig.colorbar(mesh, ax=ax, label="events / cell")
        ax.set_xlabel(r"$m^2_{K\pi,\ \mathrm{low}}$ [GeV$^2$]")
        ax.set_ylabel(r"$m^2_{K\pi,\ \mathrm{high}}$ [GeV$^2$]")
        ax.set_title(rf"$D^+\to K^-\pi^+\pi^+$ Dalitz plot: {title}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_fit(path: Path, model: dict[str, Any], events: np.ndarray, mc: np.ndarray) -> None:
    """The fit plot by zcache.plot: three invariant-mass projections with the fitted model and pulls.

    The model and its components are projected from the phase-space sample ``mc``, weighted by |A|^2.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zcache.plot import plot_projections  # matplotlib is optional: imported only here

    bins = int(np.clip(np.sqrt(len(events)) / 4, 20, 80))
    drawn = plot_projections(model["pdf"], events, bins=bins, mc=mc, variables=PROJECTIONS, label="fit",
                             data_label=f"data ({len(events):,} events)")
    fig = drawn[0].figure
    fig.suptitle(r"$D^+\to K^-\pi^+\pi^+$: amplitude fit (dashed: components $|c_k A_k|^2$)")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _plot_graph(path: Path, report: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    g = zcache.dependency_graph()
    keep = {c.node_id for c in report.caches}
    keep |= {a for uid in list(keep) for a in nx.ancestors(g, uid)}
    sub = g.subgraph(keep).copy()
    status = {c.node_id: n.status for n in report.nodes for c in report.caches if c.name == n.name}
    for layer, nodes in enumerate(nx.topological_generations(sub)):
        for n in nodes:
            sub.nodes[n]["layer"] = layer
    pos = nx.multipartite_layout(sub, subset_key="layer")
    colors = {"cached": "#2ca02c", "cached (inner)": "#98df8a", "always dirty": "#d62728",
              "cached (floating)": "#ff7f0e"}
    node_color = [colors.get(status.get(n), "#1f77b4" if sub.nodes[n]["kind"] == "parameter" else "#9467bd")
                  for n in sub.nodes]
    labels = {n: sub.nodes[n].get("name", str(n)) for n in sub.nodes}
    fig, ax = plt.subplots(figsize=(18, 11))
    nx.draw_networkx(sub, pos, ax=ax, labels=labels, node_color=node_color, node_size=260, font_size=6,
                     arrowsize=6, width=0.4, edge_color="#888888")
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=k) for k, c in colors.items()]
    handles += [plt.Line2D([], [], marker="o", ls="", color="#1f77b4", label="parameter"),
                plt.Line2D([], [], marker="o", ls="", color="#9467bd", label="data")]
    ax.legend(handles=handles, loc="lower right")
    ax.set_title("zcache dependency graph of the amplitude loss (inputs left, loss right)")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(n_events: int = 100_000, n_mc: int = 200_000, out_dir: str | Path = "demo_output",
         n_simulation: int = 3, plots: bool = True) -> dict[str, Any]:
    """Run the amplitude demo, printing each step.

    Parameters
    ----------
    n_events : int
        Events of the generated data.
    n_mc : int
        Events of the phase-space sample.
    out_dir : str or Path
        Folder for the DOT file and the PNGs.
    n_simulation : int
        New datasets of the simulation pipeline (step 5).
    plots : bool
        Write the PNGs (needs matplotlib).

    Returns
    -------
    dict
        The fit results and timings, the precompute report, fit fractions, the truth, the
        files written and the integral caches' misses over the simulation (for tests).
    """
    t_start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _say(f"zcache demo: amplitude fit of D+ -> K- pi+ pi+, {n_events:,} events, {n_mc:,} phase-space "
         f"events, TensorFlow {tf.__version__}, graph mode\n")
    set_seed(2026)

    _say("[1/6] building the model and the phase-space sample ... ", end="")
    t0 = time.perf_counter()
    model = build_model(n_mc)
    _say(f"{time.perf_counter() - t0:.1f} s")
    truth = {c.name: complex(c) for c in model["couplings"]}

    _say(f"[2/6] generating {n_events:,} events (accept-reject on |A|^2) ... ", end="")
    t0 = time.perf_counter()
    data = model["pdf"].sample(n_events)
    data = zcache.Data(data.value(), name="data", obs=data.obs)
    _say(f"{time.perf_counter() - t0:.1f} s")
    fractions_true = fit_fractions(model["sum"], model["mc"])

    losses = {
        "no caches": UnbinnedNLL(model["pdf_uncached"], data),
        "caches, no precompute": UnbinnedNLL(model["pdf"], data),
    }
    losses["caches + precompute"] = losses["caches, no precompute"]
    params = losses["no caches"].params
    truth_values = np.array([float(p) for p in params])
    rng = np.random.default_rng(7)
    start = truth_values + np.where([p.name.endswith("_mag") for p in params], 0.15 * truth_values, 0.3) \
        * rng.uniform(-1, 1, len(params))

    _say("[3/6] fitting the couplings (8 parameters) three ways:")
    results, timings = {}, {}
    for label, loss in losses.items():
        precompute = label == "caches + precompute"
        _say(f"      {label:<24} ", end="")
        t0 = time.perf_counter()
        first = _fit(loss, start, precompute)
        t_first = time.perf_counter() - t0
        second = _fit(loss, start, precompute)  # warm: no tracing
        x = np.array([second.values[p.name] for p in params])
        t_eval = median_ms(lambda loss=loss, x=x: loss.value_gradient_at(x), repeats=20)
        results[label], timings[label] = second, (t_first, second.time, t_eval)
        _say(f"first fit {t_first:6.2f} s (with tracing), warm fit {second.time:6.2f} s, "
             f"loss+gradient {t_eval:7.2f} ms, nfcn {second.nfcn}, valid {second.valid}")
        del first
    ref = results["no caches"]
    for label, res in results.items():
        assert abs(res.fmin - ref.fmin) < 1e-6 * max(1.0, abs(ref.fmin)), (label, res.fmin, ref.fmin)

    fit = results["caches + precompute"]
    values, errors = fit.values, fit.errors
    _say("\n[4/6] fit result (caches + precompute):")
    _say(f"    valid={fit.valid}  fmin={fit.fmin:.4f}  edm={fit.edm:.2e}  (all three fits agree on fmin to 1e-6)")
    _say(f"    {'parameter':<22}{'truth':>10}{'fit':>12}{'error':>10}{'pull':>8}")
    for p, t in zip(params, truth_values, strict=True):
        v, e = values[p.name], errors[p.name]
        _say(f"    {p.name:<22}{t:>10.4f}{v:>12.4f}{e:>10.4f}{(v - t) / e:>8.2f}")
    fractions_fit = fit_fractions(model["sum"], model["mc"])
    _say(f"\n    {'component':<14}{'fit fraction (truth)':>22}")
    for a, f_fit, f_true in zip(model["sum"].amplitudes, fractions_fit, fractions_true, strict=True):
        _say(f"    {a.name:<14}{f_fit:>12.3f} ({f_true:.3f})")

    t_un = timings["no caches"][2]
    _say("\n    timings                    first fit   warm fit   loss+gradient   speed-up per evaluation")
    for label, (t_first, t_warm, t_eval) in timings.items():
        _say(f"    {label:<26}{t_first:>8.2f} s{t_warm:>9.2f} s{t_eval:>12.2f} ms{t_un / t_eval:>14.1f}x")
    report = fit.precompute
    _say("\n    per-cache statistics over both cached fits (status from zcache.precompute):")
    _say(_cache_table(report))
    _say(f"    cached bytes: {report.total_bytes / 1e6:.1f} MB")

    # Floating a line shape: precompute makes exactly that resonance's columns and its K integral
    # entries always dirty; the other columns and entries stay cached.
    kstar = next(a for a in model["sum"].amplitudes if a.name == "K*(892)")
    kstar.mass.floating = kstar.width.floating = True
    loss = losses["caches + precompute"]
    try:
        floating = loss.params  # follows the flags: the couplings, the K*(892) mass and width
        mass_fit = Minuit().minimize(loss, floating)
        statuses = [n.status for n in mass_fit.precompute.nodes]
        dirty = sorted(n.name for n in mass_fit.precompute.nodes if n.status == "always dirty")
        x = np.array([mass_fit.values[p.name] for p in floating])
        t_mass = median_ms(lambda: loss.value_gradient_at(x, floating), repeats=10)
        _say(f"\n    floating the K*(892) mass and width too ({len(floating)} parameters): "
             f"m = {mass_fit.values[kstar.mass.name]:.5f} +- {mass_fit.errors[kstar.mass.name]:.5f} (truth "
             f"{RESONANCES[0][1]}), width = {mass_fit.values[kstar.width.name]:.5f} +- "
             f"{mass_fit.errors[kstar.width.name]:.5f} (truth {RESONANCES[0][2]}); valid {mass_fit.valid}")
        _say(f"    precompute: {statuses.count('always dirty')} always dirty ({', '.join(dirty)}), "
             f"{len(statuses) - statuses.count('always dirty')} cached; loss+gradient {t_mass:.2f} ms "
             f"(couplings only {timings['caches + precompute'][2]:.2f} ms, no caches {t_un:.2f} ms)")
    finally:
        kstar.mass.floating = kstar.width.floating = False
        zcache.set_values([kstar.mass, kstar.width], list(RESONANCES[0][1:3]))
        zcache.set_values(loss.params, [values[p.name] for p in loss.params])

    fitted_events = data.value().numpy()  # for the plots: step 5 refills `data` in place
    _say(f"\n[5/6] simulation pipeline: {n_simulation} new datasets at fixed parameters (set_data, no retrace)")
    integrals = [c for c in report.caches if c.name.startswith("I[")]
    misses_before = sum(c.stats["misses"] for c in integrals)
    sim_loss = losses["caches + precompute"]
    # value() runs its first two calls eagerly and traces at the third; that graph then serves every dataset.
    for _ in range(3):
        sim_loss.value()
    traces_before = [f.trace_count for f in sim_loss.functions()]
    for i in range(n_simulation):
        t0 = time.perf_counter()
        model["pdf"].sample(n_events, data=data)
        value = float(sim_loss.value())
        _say(f"    dataset {i + 1}: generated and evaluated in {time.perf_counter() - t0:.2f} s, NLL {value:.2f}")
    misses_after = sum(c.stats["misses"] for c in integrals)
    _say(f"    integral-matrix caches recomputed: {misses_after - misses_before} "
         f"(parameter-only caches survive new data); retraces: "
         f"{sum(f.trace_count for f in sim_loss.functions()) - sum(traces_before)}")

    _say("\n[6/6] writing plots and the dependency graph ... ", end="")
    dot_path = out / "dependency_graph.dot"
    dot_path.write_text(zcache.to_dot())
    written = [str(dot_path)]
    if plots:
        try:
            mc_events, intensity = _plot_sample(model, len(fitted_events))
            _plot_dalitz(out / "dalitz.png", fitted_events, mc_events, intensity)
            _plot_fit(out / "fit_projections.png", model, fitted_events, mc_events)
            _plot_graph(out / "dependency_graph.png", report)
            written += [str(out / name) for name in ("dalitz.png", "fit_projections.png", "dependency_graph.png")]
        except ImportError:
            _say("(matplotlib is not installed: pip install zcache[plot]; PNGs skipped) ", end="")
    _say("done")
    for path in written:
        _say(f"    {path}")
    _say(f"\ntotal time {time.perf_counter() - t_start:.0f} s")
    return {"results": results, "timings": timings, "report": report, "fractions": fractions_fit,
            "truth": truth, "written": written, "integral_misses": misses_after - misses_before}


def _cli(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="data events (default 100000)")
    parser.add_argument("--mc", type=int, default=None, help="phase-space events (default 2 x events)")
    parser.add_argument("--out", default="demo_output", help="folder for the PNG and DOT files")
    args = parser.parse_args(argv)
    main(args.events, args.mc or 2 * args.events, args.out)


if __name__ == "__main__":
    _cli(sys.argv[1:])
