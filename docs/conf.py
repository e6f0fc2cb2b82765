"""Sphinx configuration of zcache's documentation (``make docs``: HTML in docs/_build/html, warnings are errors)."""

from __future__ import annotations

import importlib.util
import os
from importlib.metadata import version as _version
from pathlib import Path

# autodoc imports zcache as installed (``pip install -e .[docs]``): the docs show what a user imports.

project = "zcache"
author = "zcache developers"
copyright = "2026, zcache developers"
release = _version("zcache")
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "examples/README.rst", "**/GALLERY_HEADER.rst"]
templates_path = ["_templates"]
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# One page per public name, generated from each module's ``__all__`` (autosummary respects it).
autosummary_generate = True
autosummary_ignore_module_all = False
autosummary_imported_members = True
autodoc_default_options = {"members": True, "inherited-members": False, "show-inheritance": True}
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()  # tests/test_docstrings.py validates; here only rendering
numpydoc_xref_param_type = False


# A reader's order for the gallery: everyday fits first, then toys, amplitude analysis, and the engine at work.
_GALLERY = [
    "plot_mass_fit_dataframe.py",
    "plot_template_fit_barlow_beeston.py",
    "plot_sweights.py",
    "plot_simultaneous_fit.py",
    "plot_toy_study_pulls.py",
    "plot_dalitz_amplitude_fit.py",
    "plot_ampform_bridge.py",
    "plot_dependency_graph.py",
    "plot_cache_at_work.py",
]


def _gallery_order(filename: str) -> tuple[int, str]:
    """Sort key of sphinx-gallery's examples (files not listed go last, by name)."""
    name = os.path.basename(filename)
    return (_GALLERY.index(name) if name in _GALLERY else len(_GALLERY), name)


sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "abort_on_example_error": True,  # a broken example fails the build
    "only_warn_on_example_error": False,
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": _gallery_order,
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "show_memory": False,
    "min_reported_time": 1,
}

html_theme = "pydata_sphinx_theme"
html_title = f"zcache {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
}
# MathJax served from the built site, so formulas render without a network: the files of the
# sphinx-mathjax-offline package, copied as static files (its own extension is not marked parallel-safe).
_MATHJAX = Path(importlib.util.find_spec("sphinx-mathjax-offline").origin).parent / "static"
html_static_path: list[str] = [str(_MATHJAX)]
mathjax_path = "mathjax/tex-chtml.js"
html_show_sourcelink = False

# Every cross-reference must resolve (a renamed or removed name fails the build), except to private names
# (a public class's private base shown by show-inheritance) and to other libraries (the build is offline).
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"zcache(\.\w+)*\._\w+.*"),
    (r"py:.*", r"(iminuit|tensorflow|tf|numpy|np|networkx|nx|scipy|pandas|dask|distributed)(\..*)?"),
    (r"py:.*", r"(sympy|ampform|qrules|hist|uproot|matplotlib)(\..*)?"),
]
suppress_warnings = ["config.cache"]


def _skip_wrapped_iminuit(app, what, name, obj, skip, options):  # noqa: ARG001 (Sphinx's hook signature)
    """Leave out ``FitMinuit``'s wrappers of iminuit's methods.

    iminuit documents them (its docstrings use iminuit's own Sphinx setup), and ``FitMinuit``'s docstring
    lists which ones restore the fit's state.
    """
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None and getattr(wrapped, "__module__", "").startswith("iminuit"):
        return True
    return None


def setup(app):
    """Connect the hooks above."""
    app.connect("autodoc-skip-member", _skip_wrapped_iminuit)
