"""The one place that decides how hot loops are compiled.

``njit`` is numba's, with results cached on disk. ``FASTRACK_NO_JIT=1`` makes it a no-op, so the
same functions run as plain Python (same results, slower): useful for debugging and coverage.
"""

from __future__ import annotations

import os

if os.environ.get("FASTRACK_NO_JIT"):

    def njit(*args, **kwargs):
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

else:
    from numba import njit

__all__ = ["njit"]
