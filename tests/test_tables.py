"""zcache._engine.tables: tables as plain numpy selections, below Data and free of TensorFlow.

The constructors on top (``Data.from_pandas`` / ``from_numpy`` / ``from_root``) are tested in
test_data_io.py; these tests pin what the module itself promises.
"""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pandas as pd

import zcache
from zcache._engine.tables import Selection, select_numpy, select_pandas


def test_a_selection_is_plain_numpy():
    table = np.array([(0.5, 1.0, 2.0), (1.5, -1.0, 3.0), (9.0, 2.0, 4.0)], dtype=[("x", "f8"), ("y", "f8"), ("w", "f8")])
    sel = select_numpy(table, ["y", "x"], None, table["y"] > 0, None, "w")
    assert isinstance(sel, Selection) and isinstance(sel.events, np.ndarray)
    assert sel.events.tolist() == [[1.0, 0.5], [2.0, 9.0]]
    assert sel.obs == ("y", "x") and sel.weights.tolist() == [2.0, 4.0] and sel.name == "data"
    same = select_pandas(pd.DataFrame(table), ["y", "x"], None, "y > 0", "t", "w")
    assert same.events.tolist() == sel.events.tolist() and same.name == "t"


def test_tables_import_no_tensorflow_and_no_other_zcache_module():
    """The module sits below Data: numpy and the exceptions only (pandas and uproot lazily)."""
    tree = ast.parse((pathlib.Path(zcache.__file__).parent / "_engine" / "tables.py").read_text())
    top = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            top.add("." * node.level + (node.module or ""))
    assert top <= {"__future__", "re", "collections.abc", "typing", "numpy", "..exceptions", "pandas", "uproot"}, top
