"""Two limits of a JSON document, checked on its raw bytes as they are read.

The C parser behind the Kineto importer (ijson's yajl2_c backend) builds each event with memory
that grows with the square of its nesting depth (a 219 KB file nested 100,000 deep took 15.7
GB), and it crashes the process (segmentation fault) on a number of some 10,000 digits. So the
bytes are scanned before the parser sees them: :class:`DepthGuard` keeps the scanner's state
(depth, inside a string, after a backslash, length of the current number) from one chunk to the
next and reports the first byte where the nesting depth or a number's length passes its limit.
Compiled with numba (fastrack.jit): about 1 ns per byte, a tenth of the parse itself.
"""

from __future__ import annotations

import numpy as np

from fastrack.jit import njit


MAX_NUMBER_CHARS = 64  # digits, sign, point and exponent of one number (a float64 needs at most 24)


@njit(cache=True, nogil=True)
def _scan(buf, depth, in_str, escaped, num_len, limit, num_limit):
    """(depth, in_str, escaped, num_len, index of the first byte past a limit or -1, which: 1 depth 2 number)."""
    for i in range(buf.shape[0]):
        c = buf[i]
        if in_str:
            if escaped:
                escaped = False
            elif c == 92:  # backslash
                escaped = True
            elif c == 34:  # closing quote
                in_str = False
            continue
        if (48 <= c <= 57) or c == 45 or c == 43 or c == 46 or c == 101 or c == 69:  # 0-9 - + . e E
            num_len += 1
            if num_len > num_limit:
                return depth, in_str, escaped, num_len, i, 2
            continue
        num_len = 0
        if c == 34:
            in_str = True
        elif c == 91 or c == 123:  # [ {
            depth += 1
            if depth > limit:
                return depth, in_str, escaped, num_len, i, 1
        elif c == 93 or c == 125:  # ] }
            depth -= 1
    return depth, in_str, escaped, num_len, -1, 0


class DepthGuard:
    """Feed it every chunk in order; :meth:`feed` returns ``(offset, what)`` of the first byte past
    a limit (``what``: "depth" or "number"), or ``(-1, "")``."""

    __slots__ = ("limit", "depth", "in_str", "escaped", "num_len", "offset")

    def __init__(self, limit: int):
        self.limit = limit
        self.depth, self.in_str, self.escaped, self.num_len, self.offset = 0, False, False, 0, 0

    def feed(self, data: bytes) -> tuple[int, str]:
        if not data:
            return -1, ""
        self.depth, self.in_str, self.escaped, self.num_len, at, which = _scan(
            np.frombuffer(data, np.uint8), self.depth, self.in_str, self.escaped, self.num_len, self.limit,
            MAX_NUMBER_CHARS)
        start = self.offset
        self.offset += len(data)
        return (start + at, "depth" if which == 1 else "number") if at >= 0 else (-1, "")
