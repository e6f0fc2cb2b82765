"""The shape of the package: imports point one way, and no module uses another's private names.

The same rules run as import-linter contracts in ``make lint`` (``lint-imports``, contracts in
setup.cfg); this test needs nothing beyond the standard library and networkx, and also sees
imports inside functions.
"""

from __future__ import annotations

import ast
import pathlib

import networkx as nx

import zcache

PACKAGE = pathlib.Path(zcache.__file__).parent

#: The fitting layer: models, losses, minimizers and what is built on them.
FITTING = {"models", "shapes", "sampling", "phasespace", "loss", "objective", "amplitudes", "binned", "_coherent",
           "minimize", "results", "_minuit2", "_batched_bfgs", "batch", "toys",
           "plot", "symbolic", "demo", "demo_basics", "demo_toys"}


def _modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text()) for path in sorted(PACKAGE.glob("*.py"))}


def _imports(name: str, tree: ast.Module) -> list[tuple[str, list[str], int]]:
    """(imported zcache module, imported names, line) for every import in ``tree``, also inside functions."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:  # from .x import a, b
                out.append((node.module.split(".")[0], [a.name for a in node.names], node.lineno))
            elif node.level == 1:  # from . import x, y
                out.extend((a.name, [], node.lineno) for a in node.names)
            elif (node.module or "").startswith("zcache"):
                parts = node.module.split(".")
                if len(parts) > 1:
                    out.append((parts[1], [a.name for a in node.names], node.lineno))
                else:
                    out.extend((a.name, [], node.lineno) for a in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "zcache" and len(parts) > 1:
                    out.append((parts[1], [], node.lineno))
    return out


def import_graph() -> nx.DiGraph:
    """Module -> the zcache modules it imports (``__init__`` left out: it imports everything)."""
    modules = _modules()
    g = nx.DiGraph()
    for name, tree in modules.items():
        if name == "__init__":
            continue
        g.add_node(name)
        for target, _, _ in _imports(name, tree):
            if target in modules and target != name:
                g.add_edge(name, target)
    return g


def test_no_import_cycles():
    """Command: ``python -m pytest tests/test_imports.py`` (and ``lint-imports`` in ``make lint``)."""
    g = import_graph()
    assert len(g) > 20
    cycles = list(nx.simple_cycles(g))
    assert cycles == [], f"import cycles among zcache modules: {cycles}"


def test_the_cycle_check_sees_a_cycle_and_lazy_imports():
    """Positive control: a lazy import inside a function counts, and a cycle is found."""
    tree = ast.parse("def f():\n    from ._mode import x\n")
    assert _imports("a", tree) == [("_mode", ["x"], 2)]
    g = nx.DiGraph([("a", "b"), ("b", "a")])
    assert list(nx.simple_cycles(g))


def test_the_engine_never_imports_the_fitting_layer():
    g = import_graph()
    engine = [m for m in g if m not in FITTING and m not in {"types", "run"}]
    bad = [(m, t) for m in engine for t in g.successors(m) if t in FITTING]
    assert bad == []


def test_no_private_names_across_modules():
    """No ``from .x import _name`` and no ``module._name`` of another zcache module."""
    modules = _modules()
    bad = []
    for name, tree in modules.items():
        for target, names, line in _imports(name, tree):
            bad += [f"{name}:{line} imports {target}.{n}" for n in names
                    if n.startswith("_") and not n.startswith("__") and target in modules]
        aliases = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1
                   and not node.module for a in node.names}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{name}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert bad == []
