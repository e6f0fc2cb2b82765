"""
The dependency graph of a model
===============================

zcache records which cache was computed from which input. This example builds a Gaussian peak on an
exponential background, draws the graph of its loss, moves one parameter, and shows that exactly the caches
downstream of it were invalidated. Then it asks :func:`zcache.precompute` which caches a fit should keep.
"""

# %%
# A model and its loss
# --------------------
# The background slope ``lam`` is fixed; the peak's ``mu`` and ``sigma`` and the two yields float. The graph
# fills as the caches are read, so we evaluate the loss once before looking at it.
import matplotlib.pyplot as plt
import networkx as nx
import numpy as np

import zcache
from zcache.loss import ExtendedUnbinnedNLL
from zcache.models import Exponential, Gaussian, Space, SumPdf

rng = np.random.default_rng(3)
x = np.r_[rng.normal(5.0, 0.5, 1000), rng.exponential(1 / 0.3, 4000)]
space = Space("x", 0.0, 10.0)
data = zcache.Data(x[(x > 0.0) & (x < 10.0)], name="data", obs="x")

mu = zcache.Parameter("mu", 5.0, lower=3.0, upper=7.0)
sigma = zcache.Parameter("sigma", 0.5, lower=0.05, upper=2.0)
lam = zcache.Parameter("lam", -0.3, lower=-2.0, upper=-0.01, floating=False)
nsig = zcache.Parameter("nsig", 1000.0, lower=0.0, upper=1e5)
nbkg = zcache.Parameter("nbkg", 3000.0, lower=0.0, upper=1e5)
model = SumPdf([Gaussian(space, mu, sigma, name="signal"), Exponential(space, lam, name="background")],
               yields=[nsig, nbkg])
loss = ExtendedUnbinnedNLL(model, data)
loss.value()

# %%
# The graph
# ---------
# :func:`zcache.dependency_graph` is the live ``networkx.DiGraph``: nodes are parameters, datasets and
# caches (attribute ``kind``), an edge ``a -> b`` means that ``b`` was computed from ``a``.
# :func:`zcache.to_dot` writes it in Graphviz DOT, with each cache's hits and misses, for ``dot -Tpng``.
# The graph holds every model alive in the process; this loss's part is the component its parameters are in.
everything = zcache.dependency_graph()
graph = everything.subgraph(nx.node_connected_component(everything.to_undirected(as_view=True), mu.node_id))
print(zcache.to_dot())
caches = {n: graph.nodes[n]["ref"]() for n, kind in graph.nodes(data="kind") if kind == "cache"}

# %%
# To draw it with matplotlib, we put each node in a column by its depth (inputs on the left, the total
# density on the right) and colour it by kind; a cache is labelled with its hits and misses.
COLOURS = {"parameter": "#4c72b0", "data": "#8172b2", "cache": "#55a868", "invalid": "#c44e52"}


def draw(ax, title, invalid=()):
    """Draw the graph on ``ax``, each node a coloured box; caches in ``invalid`` in red."""
    for depth, layer in enumerate(nx.topological_generations(graph)):
        for n in layer:
            graph.nodes[n]["depth"] = depth
    pos = nx.multipartite_layout(graph, subset_key="depth")
    nx.draw_networkx_edges(graph, pos, ax=ax, edge_color="#999999", arrowsize=12, min_source_margin=18,
                           min_target_margin=30)
    for n, (px, py) in pos.items():
        label = graph.nodes[n]["name"].replace("._", "\n_").replace(".", "\n")
        if n in caches:
            label += "\nhits {hits}, misses {misses}".format(**caches[n].stats)
        colour = COLOURS["invalid" if n in invalid else graph.nodes[n]["kind"]]
        ax.text(px, py, label, ha="center", va="center", fontsize=8, color="white",
                bbox={"boxstyle": "round", "facecolor": colour, "edgecolor": "none"})
    handles = [plt.Line2D([], [], marker="s", ls="", color=c, label=k) for k, c in COLOURS.items()
               if k != "invalid" or invalid]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(handles), frameon=False)
    ax.set_title(title)
    ax.margins(0.12, 0.08)
    ax.axis("off")


fig, ax = plt.subplots(figsize=(10, 6))
draw(ax, "The loss's dependency graph after one evaluation")

# %%
# Moving one parameter
# --------------------
# ``mu.set_value`` invalidates the caches that depend on ``mu``, the descendants of its node, and nothing
# else: the background's density and normalization stay valid. Invalidation only lowers a flag; nothing is
# recomputed until a cache is read again.
mu.set_value(5.1)
invalid = {n for n, cache in caches.items() if not cache.is_valid}
print("invalidated:", sorted(caches[n].name for n in invalid))
assert invalid == {n for n in nx.descendants(graph, mu.node_id) if n in caches}

fig, ax = plt.subplots(figsize=(10, 6))
draw(ax, "After mu.set_value(5.1): the invalidated caches in red", invalid)

# %%
# The next evaluation recomputes the red caches (one more miss each) and reads the valid ones back: one more
# hit for the data's range check and the background density. The background's normalization is not even
# read, because the density computed from it is still valid. ``cache.stats`` counts hits and misses.
loss.value()
for n, cache in caches.items():
    print(f"{cache.name:<28} {'recomputed' if n in invalid else 'kept':<10}  {cache.stats}")
    assert cache.is_valid

# %%
# What a fit keeps
# -----------------
# In a fit every call moves the floating parameters, so a cache that depends on one would miss on every call
# and only cost a copy. :func:`zcache.precompute` (which :class:`zcache.minimize.Minuit` runs first) keeps
# the caches no floating parameter reaches and bypasses the others ("always dirty"). Its report says which
# and why; here only the background's density and normalization and the range check stay cached.
report = zcache.precompute(loss)
print(report)
kept = {cache.name for cache in report.cached}
assert kept == {"Exponential._cached_pdf", "Exponential.normalization", "data in range"}
report.undo()  # back to every cache active, as before

plt.show()
