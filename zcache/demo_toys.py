"""Deprecated alias of :mod:`zcache.demos.toys` (the demos moved into one subpackage).

``python -m zcache.demo_toys`` still runs it; use ``python -m zcache.demos.toys``.
"""

import warnings

from .demos.toys import *  # noqa: F403
from .demos.toys import main

warnings.warn("zcache.demo_toys moved to zcache.demos.toys; the old path will be removed.", DeprecationWarning,
              stacklevel=2)

if __name__ == "__main__":
    main()
