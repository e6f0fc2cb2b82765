"""Loaded before any test or doctest imports zcache: the test session's compile cache is a temporary folder.

zcache keeps compiled XLA programs in ``$ZCACHE_CACHE_DIR`` (default ``~/.cache/zcache``); a test run
must not write there. This file is at the root so that it also applies to ``pytest zcache`` (the
doctests alone), which does not load ``tests/conftest.py``. Subprocesses and xdist workers inherit
the variable; the process that made the folder removes it at exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if os.environ.get("ZCACHE_TEST_SESSION_CACHE") != os.environ.get("ZCACHE_CACHE_DIR") or \
        "ZCACHE_TEST_SESSION_CACHE" not in os.environ:
    _folder = tempfile.mkdtemp(prefix="zcache-test-cache-")
    os.environ["ZCACHE_CACHE_DIR"] = os.environ["ZCACHE_TEST_SESSION_CACHE"] = _folder
    atexit.register(shutil.rmtree, _folder, True)
