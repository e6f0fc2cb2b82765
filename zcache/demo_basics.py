"""Deprecated alias of :mod:`zcache.demos.basics` (the demos moved into one subpackage).

``python -m zcache.demo_basics`` still runs it; use ``python -m zcache.demos.basics``.
"""

import warnings

from .demos.basics import *  # noqa: F403
from .demos.basics import main

warnings.warn("zcache.demo_basics moved to zcache.demos.basics; the old path will be removed.", DeprecationWarning,
              stacklevel=2)

if __name__ == "__main__":
    main()
