"""The documentation site's sources: every public name has an API page, and the code on the prose pages runs.

``make docs`` builds the site (warnings are errors, the gallery's examples run); these tests keep the sources
honest without Sphinx: the API index lists every public module and top-level name, and each ```` ```python ````
block of the user guide and the migration pages runs, in order, in one namespace per page (blocks of other
libraries' code are fenced ```` ```{code-block} python ```` and are not run).
"""

from __future__ import annotations

import pathlib
import re
import types

import pytest

import zcache

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
PACKAGE = pathlib.Path(zcache.__file__).resolve().parent
PAGES = sorted(p for p in DOCS.glob("**/*.md") if "_build" not in p.parts and p.name != "changelog.md")
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def _api_entries() -> set[str]:
    """The names listed in the API index's autosummary tables (relative to ``zcache``, its current module)."""
    text = (DOCS / "api" / "index.rst").read_text()
    assert ".. automodule:: zcache\n" in text
    return {f"zcache.{name}" for name in re.findall(r"^   (\w+)\s*$", text, re.M)}


def test_every_public_module_has_an_api_page():
    public = {f"zcache.{p.stem}" for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}
    public |= {f"zcache.{p.name}" for p in PACKAGE.iterdir()  # the public packages (zcache.amplitude, ...)
               if p.is_dir() and (p / "__init__.py").exists() and not p.name.startswith("_")}
    assert public - _api_entries() == set()


def test_every_top_level_name_has_an_api_page():
    names = {n for n in zcache.__all__ if not isinstance(getattr(zcache, n), types.ModuleType)}
    assert {f"zcache.{n}" for n in names} - _api_entries() == set()


def test_the_api_index_names_only_what_exists():
    for entry in _api_entries():
        module, _, name = entry.rpartition(".")
        try:
            __import__(entry)
        except ImportError:
            assert hasattr(__import__(module, fromlist=[name]), name), entry


def _public_modules() -> list[str]:
    """The public modules and packages under zcache/ (their names without a leading underscore)."""
    found = [p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")]
    found += [p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists() and not p.name.startswith("_")]
    return ["zcache", *sorted(f"zcache.{name}" for name in found)]


#: Names deliberately in two public modules: the base error, at the top level and among the errors.
TWO_HOMES = {frozenset({"zcache.ZCacheError", "zcache.exceptions.ZCacheError"})}


def test_each_public_name_has_one_home():
    """A class or function is in the ``__all__`` of one public module: a private module is a file, not a home."""
    import importlib

    homes: dict[int, list[str]] = {}
    keep = []  # the objects themselves, so that no id is reused while the check runs
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not isinstance(obj, types.ModuleType):
                keep.append(obj)
                homes.setdefault(id(obj), []).append(f"{module_name}.{name}")
    assert sum(len(h) for h in homes.values()) > 150  # the check saw the public API
    shared = [sorted(h) for h in homes.values() if len(h) > 1 and frozenset(h) not in TWO_HOMES]
    assert shared == []


def test_pages_exist():
    assert PAGES, f"no .md pages under {DOCS}"
    assert any("migration" in p.parts for p in PAGES)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_code_on_the_page_runs(page, tmp_path, monkeypatch):
    """Each page's ```python blocks run in order in one namespace (as a reader pastes them), in an empty folder."""
    import matplotlib

    matplotlib.use("Agg")
    blocks = FENCE.findall(page.read_text())
    if not blocks:
        pytest.skip(f"{page.name} has no python blocks")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_page_{page.stem}"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"{page.relative_to(DOCS)}[block {i + 1}]", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"{page.relative_to(DOCS)}, python block {i + 1} failed:\n{block}") from error


def test_formulas_render_without_a_network():
    """MathJax comes with the built site (sphinx-mathjax-offline's files as static files), not from a CDN."""
    namespace: dict = {"__file__": str(DOCS / "conf.py")}
    exec(compile((DOCS / "conf.py").read_text(), str(DOCS / "conf.py"), "exec"), namespace)  # noqa: S102 - our conf
    path = namespace["mathjax_path"]
    assert not path.startswith(("http:", "https:", "//"))
    assert any((pathlib.Path(static) / path).is_file() for static in namespace["html_static_path"])
