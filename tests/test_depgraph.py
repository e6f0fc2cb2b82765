"""The dependency graph: structure, cycles, DOT export, weak nodes."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import tensorflow as tf

import zcache
from zcache._engine.dependencies import DependencyGraph
from zcache.exceptions import DependencyCycleError


def test_edges_point_from_dependency_to_dependent():
    p = zcache.Parameter("p", 1.0)
    x = zcache.Data(np.ones(3))
    c1 = zcache.CachedTensor(lambda: x.value() * p.value(), name="c1")
    c2 = zcache.CachedTensor(lambda: c1.value() + 1.0, name="c2")
    c2.value()
    g = zcache.dependency_graph()
    assert set(g.predecessors(c1.node_id)) == {p.node_id, x.node_id}
    assert set(g.predecessors(c2.node_id)) == {c1.node_id}
    assert g.nodes[c2.node_id]["kind"] == "cache" and g.nodes[p.node_id]["kind"] == "parameter"
    assert g.nodes[x.node_id]["kind"] == "data" and g.nodes[c1.node_id]["ref"]() is c1
    assert nx.is_directed_acyclic_graph(g)


def test_discovery_inside_a_trace():
    p = zcache.Parameter("p", 1.0)
    c = zcache.CachedTensor(lambda: p.value() * 2.0)
    zcache.function(lambda: c.value())()
    assert zcache.dependency_graph().has_edge(p.node_id, c.node_id)


def test_graph_level_cycle_refused_atomically():
    class Obj:
        pass

    graph = DependencyGraph()
    a, b, c, d = Obj(), Obj(), Obj(), Obj()
    ua, ub, uc, ud = (graph.add_node(o, "cache", n) for o, n in ((a, "a"), (b, "b"), (c, "c"), (d, "d")))
    graph.add_edges([ua], ub)
    graph.add_edges([ub], uc)
    with pytest.raises(DependencyCycleError, match="'c' cannot be a dependency of 'a'"):
        graph.add_edges([ud, uc], ua)  # ud -> ua is fine alone, uc -> ua closes a cycle
    assert not graph.nx.has_edge(ud, ua)
    with pytest.raises(DependencyCycleError):
        graph.add_edges([ua], ua)


def test_dependent_caches_memo_follows_changes():
    p = zcache.Parameter("p", 1.0)
    c1 = zcache.CachedTensor(lambda: p.value(), deps=[p])
    from zcache._engine.dependencies import GRAPH

    assert GRAPH.dependent_caches(p.node_id) == (c1.node_id,)
    c2 = zcache.CachedTensor(lambda: c1.value(), deps=[c1])
    assert set(GRAPH.dependent_caches(p.node_id)) == {c1.node_id, c2.node_id}
    assert GRAPH.ancestor_parameters(c2.node_id) == (p.node_id,)


def test_to_dot():
    p = zcache.Parameter("mass", 1.0)
    x = zcache.Data(np.ones(2), name="events")
    c = zcache.CachedTensor(lambda: x.value() * p.value(), name='bw"1"')
    c.value()
    dot = zcache.to_dot()
    assert dot.startswith("digraph zcache {") and dot.rstrip().endswith("}")
    assert f"n{p.node_id} -> n{c.node_id};" in dot
    assert f"n{x.node_id} -> n{c.node_id};" in dot
    assert 'bw\\"1\\"\\nhits 0, misses 1' in dot
    assert "shape=cylinder" in dot and "shape=ellipse" in dot
    sub = zcache.dependency_graph().subgraph([p.node_id])
    assert "->" not in zcache.to_dot(sub)


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_nodes_are_weak(collect):
    g = zcache.dependency_graph()
    p = zcache.Parameter("tmp", 1.0)
    uid = p.node_id
    assert uid in g
    del p
    collect()
    assert uid not in g


@pytest.mark.slow  # fast loop: a costlier case of a behaviour the fast tests keep
def test_cache_keeps_its_dependencies_alive(collect):
    def make():
        p = zcache.Parameter("inner", 2.0)
        return zcache.CachedTensor(lambda: p.value() * tf.constant(3.0, tf.float64))

    c = make()
    collect()
    assert float(c.value()) == 6.0
