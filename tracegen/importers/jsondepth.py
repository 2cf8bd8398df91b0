"""Limits of a JSON document, checked on its raw bytes before a parser sees them.

Both JSON parsers of the Kineto importer need a guard. The streaming one (ijson's yajl2_c
backend) builds each event with memory that grows with the square of its nesting depth (a 219 KB
file nested 100,000 deep took 15.7 GB), and it crashes the process (segmentation fault) on a
number of some 10,000 digits; the whole-file one (``json.loads``) recurses once per level. So the
bytes are scanned first: :class:`DepthGuard` keeps the scanner's state (depth, inside a string,
after a backslash, length of the current number, ...) from one chunk to the next and reports the
first byte where the nesting depth or a number's length passes its limit.

The scan also notes *wide* numbers: integers of 20 digits or more (or 19 starting with 9) and
exponents of 3 digits or more, the only numbers the two parsers may read differently (yajl refuses an integer beyond
int64 and a float that overflows to infinity; ``json`` accepts both), and surrogate escapes
(``\\uD800``-``\\uDFFF`` in a string: yajl turns a lone one into ``?``, ``json`` keeps it). The
whole-file reader leaves such a document to the streaming one (``tracegen.importers.kineto``).

Two implementations of one scan, byte for byte the same (tests/test_jsonscan.py): the C++
extension ``tracegen.importers._jsonscan`` (setup.py; about 1.6 ns per byte, no numba import,
which alone costs some 0.4 s CPU per process) and, when it is not built, :func:`_scan` below,
compiled with numba (fastrack_core.jit) on first use.
"""

from __future__ import annotations

MAX_NUMBER_CHARS = 64  # digits, sign, point and exponent of one number (a float64 needs at most 24)

# flags of the scanner state (src/jsonscan.cpp states the same)
IN_STR, ESCAPED, IS_FLOAT, IN_EXP, WIDE, NEG, FIRST9, U1, U2, SURROGATE = 1, 2, 4, 8, 16, 32, 64, 128, 256, 512
WIDE_INT_DIGITS = 19  # int64 max 9223372036854775807: more digits, or 19 starting with 9, may not fit
WIDE_EXP_DIGITS = 3  # an exponent this long may overflow a float64

try:
    from tracegen.importers import _jsonscan as _compiled
except ImportError:  # pragma: no cover - depends on the build (the test covers both)
    _compiled = None


def _scan_py(buf, depth, flags, num_len, exp_digits, tokens, limit, num_limit):
    """(depth, flags, num_len, exp_digits, tokens, index of the first byte past a limit or -1,
    which: 1 depth 2 number). ``tokens`` counts ``[``, ``{`` and ``,`` outside strings."""
    for i in range(buf.shape[0]):
        c = buf[i]
        if flags & IN_STR:
            if flags & ESCAPED:
                flags &= ~ESCAPED
                if c == 117:  # u
                    flags |= U1
                continue
            if flags & U1:  # "\u" seen: a surrogate escape is \uD800-\uDFFF
                flags &= ~U1
                if c == 100 or c == 68:  # d D
                    flags |= U2
                    continue
            elif flags & U2:
                flags &= ~U2
                if (56 <= c <= 57) or (97 <= c <= 102) or (65 <= c <= 70):  # 8-9 a-f A-F
                    flags |= SURROGATE
                    continue
            if c == 92:  # backslash
                flags |= ESCAPED
            elif c == 34:  # closing quote
                flags &= ~IN_STR
            continue
        if (48 <= c <= 57) or c == 45 or c == 43 or c == 46 or c == 101 or c == 69:  # 0-9 - + . e E
            num_len += 1
            if num_len > num_limit:
                return depth, flags, num_len, exp_digits, tokens, i, 2
            if c == 46:
                flags |= IS_FLOAT
            elif c == 101 or c == 69:
                flags |= IS_FLOAT | IN_EXP
                exp_digits = 0
            elif c == 45:
                if num_len == 1:
                    flags |= NEG
            elif 48 <= c <= 57:
                if flags & IN_EXP:
                    exp_digits += 1
                    if exp_digits >= WIDE_EXP_DIGITS:
                        flags |= WIDE
                elif not (flags & IS_FLOAT):
                    digits = num_len - (1 if flags & NEG else 0)
                    if digits == 1 and c == 57:
                        flags |= FIRST9
                    if digits > WIDE_INT_DIGITS or (digits == WIDE_INT_DIGITS and flags & FIRST9):
                        flags |= WIDE
            continue
        if num_len:
            num_len = 0
            exp_digits = 0
            flags &= ~(IS_FLOAT | IN_EXP | NEG | FIRST9)
        if c == 34:
            flags |= IN_STR
        elif c == 44:  # ,
            tokens += 1
        elif c == 91 or c == 123:  # [ {
            tokens += 1
            depth += 1
            if depth > limit:
                return depth, flags, num_len, exp_digits, tokens, i, 1
        elif c == 93 or c == 125:  # ] }
            depth -= 1
    return depth, flags, num_len, exp_digits, tokens, -1, 0


_jitted = None


def _scan(data: bytes, depth: int, flags: int, num_len: int, exp_digits: int, tokens: int, limit: int,
          num_limit: int):
    """The fallback scan: :func:`_scan_py` compiled with numba (imported here, on first use only)."""
    global _jitted
    import numpy as np

    if _jitted is None:
        from fastrack_core.jit import njit

        _jitted = njit(cache=True, nogil=True)(_scan_py)
    return tuple(int(x) for x in _jitted(np.frombuffer(data, np.uint8), depth, flags, num_len, exp_digits, tokens,
                                         limit, num_limit))


def scan(data: bytes, depth: int, flags: int, num_len: int, exp_digits: int, tokens: int, limit: int,
         num_limit: int, compiled: bool | None = None) -> tuple[int, int, int, int, int, int, int]:
    """One step of the guard scan over ``data``: the compiled scan if built (``compiled=None``),
    else (or with ``compiled=False``) the numba one."""
    use = _compiled is not None if compiled is None else compiled
    if use:
        return _compiled.scan(data, depth, flags, num_len, exp_digits, tokens, limit, num_limit)
    return _scan(data, depth, flags, num_len, exp_digits, tokens, limit, num_limit)


class DepthGuard:
    """Feed it every chunk in order; :meth:`feed` returns ``(offset, what)`` of the first byte past
    a limit (``what``: "depth" or "number"), or ``(-1, "")``. :attr:`wide` tells whether a wide
    number (see the module) was seen so far, :attr:`tokens` how many ``[``, ``{`` and ``,``
    (outside strings): about one per value, a bound on what the parsed document costs."""

    __slots__ = ("limit", "depth", "flags", "num_len", "exp_digits", "tokens", "offset", "compiled")

    def __init__(self, limit: int, compiled: bool | None = None):
        self.limit = limit
        self.depth, self.flags, self.num_len, self.exp_digits, self.tokens, self.offset = 0, 0, 0, 0, 0, 0
        self.compiled = compiled

    @property
    def wide(self) -> bool:
        return bool(self.flags & WIDE)

    @property
    def surrogate(self) -> bool:
        """Whether a ``\\uD800``-``\\uDFFF`` escape was seen in a string so far."""
        return bool(self.flags & SURROGATE)

    def feed(self, data: bytes) -> tuple[int, str]:
        if not data:
            return -1, ""
        self.depth, self.flags, self.num_len, self.exp_digits, self.tokens, at, which = scan(
            data, self.depth, self.flags, self.num_len, self.exp_digits, self.tokens, self.limit, MAX_NUMBER_CHARS,
            self.compiled)
        start = self.offset
        self.offset += len(data)
        return (start + at, "depth" if which == 1 else "number") if at >= 0 else (-1, "")
