"""The types zcache's functions return, for annotations and ``isinstance`` checks.

Examples
--------
>>> import zcache
>>> from zcache.types import Function, Restorer
>>> mu = zcache.Parameter("mu_types", 1.0)
>>> isinstance(mu.set_value(2.0), Restorer)
True
>>> isinstance(zcache.function(lambda: mu.value()), Function)
True
"""

from __future__ import annotations

from ._engine.budget import CacheBudgetInfo
from ._engine.compile_cache import CompileCacheInfo
from ._engine.function import Function
from ._engine.mode import IDENTIFIERS
from ._engine.precompute import NodeReport, Precomputable, PrecomputeReport
from ._engine.restorer import Restorer

__all__ = [
    "IDENTIFIERS",
    "CacheBudgetInfo",
    "CompileCacheInfo",
    "Function",
    "NodeReport",
    "PrecomputeReport",
    "Precomputable",
    "Restorer",
]
