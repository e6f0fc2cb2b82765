"""The shape of the package: imports point one way, and no module uses another's private names.

The folders show the layers: ``zcache/_engine/`` is the caching engine, the public modules at
the top level are the fitting layer and its facades (``zcache/_fitting/`` holds the fitting
layer's private parts; a public package such as ``zcache/amplitude/``, ``zcache/models/`` or ``zcache/scale/``
holds its own private modules behind one re-export list). The same rules run as
import-linter contracts in ``make lint`` (``lint-imports``, contracts in setup.cfg); this test
needs nothing beyond the standard library and networkx, and also sees imports inside functions.
The top level shows the layers at a glance (at most 15 entries), and modules, classes and functions stay
short enough to read (issue 53: the limits and how lines are counted are at ``_too_long``).
"""

from __future__ import annotations

import ast
import pathlib

import networkx as nx
import pytest

import zcache

PACKAGE = pathlib.Path(zcache.__file__).parent

#: What engine modules may import outside the engine: the errors.
ENGINE_MAY_IMPORT = {"exceptions"}


def _name(path: pathlib.Path) -> str:
    """``_engine.function`` for zcache/_engine/function.py, ``_engine`` for its __init__."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__init__"


def _modules() -> dict[str, ast.Module]:
    return {_name(path): ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return name == "__init__" or (PACKAGE / name.replace(".", "/")).is_dir()


def _resolve(name: str, level: int, module: str | None) -> list[str]:
    """The dotted base a relative import of ``module`` at ``level`` in module ``name`` refers to."""
    here = [] if name == "__init__" else name.split(".")
    base = here if _is_package(name) else here[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return [*base, *(module.split(".") if module else [])]


def _imports(name: str, tree: ast.Module, known: set[str] | None = None) -> list[tuple[str, list[str], int]]:
    """(imported zcache module, imported names, line) for every import in ``tree``, also inside functions."""
    known = set(_modules()) if known is None else known
    out = []

    def add(parts: list[str], names: list[str], line: int) -> None:
        target = ".".join(parts)
        # from a package import a module of it: the module is what is imported
        modules = [".".join([*parts, n]) for n in names if ".".join([*parts, n]) in known]
        if modules:
            out.extend((m, [], line) for m in modules)
            rest = [n for n in names if ".".join([*parts, n]) not in known]
            if rest:
                out.append((target or "__init__", rest, line))
        else:
            out.append((target or "__init__", names, line))

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level >= 1:
                add(_resolve(name, node.level, node.module), names, node.lineno)
            elif (node.module or "").split(".")[0] == "zcache":
                add(node.module.split(".")[1:], names, node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "zcache" and len(parts) > 1:
                    out.append((".".join(parts[1:]), [], node.lineno))
    return out


def import_graph() -> nx.DiGraph:
    """Module -> the zcache modules it imports (package ``__init__`` files left out: they re-export)."""
    modules = _modules()
    known = set(modules)
    g = nx.DiGraph()
    for name, tree in modules.items():
        if _is_package(name):
            continue
        g.add_node(name)
        for target, _, _ in _imports(name, tree, known):
            if target in modules and target != name and not _is_package(target):
                g.add_edge(name, target)
    return g


def _engine(name: str) -> bool:
    return name.startswith("_engine.")


@pytest.mark.slow  # about 4 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times"); static; `make lint` runs it
def test_no_import_cycles():
    """Command: ``python -m pytest tests/test_imports.py`` (and ``lint-imports`` in ``make lint``)."""
    g = import_graph()
    assert len(g) > 20
    assert sum(map(_engine, g)) > 15
    cycles = list(nx.simple_cycles(g))
    assert cycles == [], f"import cycles among zcache modules: {cycles}"


def test_the_cycle_check_sees_a_cycle_and_lazy_imports():
    """Positive control: a lazy import inside a function counts, relative levels resolve, and a cycle is found."""
    tree = ast.parse("def f():\n    from .mode import x\n    from ..exceptions import E\n    from .. import loss\n")
    assert _imports("_engine.function", tree, {"_engine.mode", "exceptions", "loss"}) == [
        ("_engine.mode", ["x"], 2), ("exceptions", ["E"], 3), ("loss", [], 4)]
    assert _imports("minimize", ast.parse("from ._engine import parameter\n"), {"_engine.parameter"}) == [
        ("_engine.parameter", [], 1)]
    g = nx.DiGraph([("a", "b"), ("b", "a")])
    assert list(nx.simple_cycles(g))


@pytest.mark.slow  # about 3 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times"); static; `make lint` runs it
def test_the_engine_never_imports_the_fitting_layer():
    g = import_graph()
    bad = [(m, t) for m in g if _engine(m) for t in g.successors(m) if not _engine(t) and t not in ENGINE_MAY_IMPORT]
    assert bad == []


def test_the_layers_are_folders():
    """Every private module lives in a layer's folder; the top level holds public modules only."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem.startswith("_") and p.stem != "__init__")
    assert top == []
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == {
        "_engine", "_fitting", "amplitude", "inference", "models", "plot", "scale", "shapes"}


#: Issue 53: the top level of zcache/ shows the layers at a glance (modules and packages, ``__init__.py`` included).
MAX_TOP_LEVEL_ENTRIES = 15


def test_the_top_level_shows_the_layers_at_a_glance():
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists())
    assert "__init__.py" in entries and "_engine" in entries  # the listing sees files and packages
    assert len(entries) <= MAX_TOP_LEVEL_ENTRIES, entries


@pytest.mark.slow  # about 3 CPU s, over the fast loop's ~1.5 (CONTRIBUTING.md, "Test times"); static; `make lint` runs it
def test_no_private_names_across_modules():
    """No ``from .x import _name`` and no ``module._name`` of another zcache module."""
    modules = _modules()
    known = set(modules)
    bad = []
    for name, tree in modules.items():
        for target, names, line in _imports(name, tree, known):
            bad += [f"{name}:{line} imports {target}.{n}" for n in names
                    if n.startswith("_") and not n.startswith("__") and target in modules]
        aliases = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level
                   and not node.module for a in node.names}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{name}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert bad == []


# Issue 53: no module over ~1,000 lines (all lines), no class over ~400 and no function over ~100 lines of code.
# Lines of code: a line that holds a token other than a comment, not in a docstring (module, class or function)
# and not blank; decorators count with what they decorate.
MAX_MODULE_LINES, MAX_CLASS_CODE_LINES, MAX_FUNCTION_CODE_LINES = 1000, 400, 100
# Every private TensorFlow API zcache uses is in tf_internals, numbered, each with a loud test: one place by rule
# (design/invariants.md), so it is not split by size; it still may not grow without bound.
ONE_PLACE_BY_RULE = {"_engine/tf_internals.py": 1200}


def _too_long(source: str, where: str) -> list[str]:
    """What in ``source`` (a module's text) is over the limits, each as ``where:line name (n code lines)``."""
    import io
    import tokenize

    tree = ast.parse(source)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    code = {line for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type not in skip
            for line in range(tok.start[0], tok.end[0] + 1)} - docstrings
    out = []
    if len(source.splitlines()) > MAX_MODULE_LINES:
        out.append(f"{where} ({len(source.splitlines())} lines)")
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            n = sum(1 for line in code if start <= line <= node.end_lineno)
            if n > (MAX_CLASS_CODE_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_CODE_LINES):
                out.append(f"{where}:{node.lineno} {node.name} ({n} code lines)")
    return out


def test_modules_classes_and_functions_stay_short():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where, source = str(path.relative_to(PACKAGE)), path.read_text()
        found = _too_long(source, where)
        if len(source.splitlines()) <= ONE_PLACE_BY_RULE.get(where, 0):  # its functions and classes still count
            found = [line for line in found if not line.startswith(f"{where} (")]
        bad += found
    assert bad == [], "split these into named steps (issue 53):\n" + "\n".join(bad)


def test_the_length_check_counts_code_not_docstrings_or_comments():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_CODE_LINES - 1))
    doc = '    """A docstring.\n\n' + "    More.\n" * 200 + '    """\n'
    comments = "    # a comment\n\n" * 100
    short = f"def f():\n{doc}{comments}{body}"  # the def line and the body: at the limit
    assert _too_long(short, "m.py") == []
    long = f"@decorator\ndef f():\n{doc}{body}"  # the decorator is one line more
    assert _too_long(long, "m.py") == [f"m.py:2 f ({MAX_FUNCTION_CODE_LINES + 1} code lines)"]
    methods = "".join(f"    def m{i}(self):\n        return {i}\n" for i in range(MAX_CLASS_CODE_LINES // 2))
    assert _too_long(f"class C:\n{methods}", "m.py") == [f"m.py:1 C ({MAX_CLASS_CODE_LINES + 1} code lines)"]
    assert _too_long("x = 1\n" * (MAX_MODULE_LINES + 1), "m.py") == [f"m.py ({MAX_MODULE_LINES + 1} lines)"]
