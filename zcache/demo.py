"""Deprecated alias of :mod:`zcache.demos.amplitude` (the demos moved into one subpackage).

``python -m zcache.demo`` still runs it; use ``python -m zcache.demos.amplitude``.
"""

import warnings

from .demos.amplitude import *  # noqa: F403
from .demos.amplitude import main

warnings.warn("zcache.demo moved to zcache.demos.amplitude; the old path will be removed.", DeprecationWarning,
              stacklevel=2)

if __name__ == "__main__":
    main()
