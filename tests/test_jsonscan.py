"""The JSON guard scan (tracegen.importers.jsondepth): the compiled extension and its numba twin
give the same state, error offset and kind on every byte string, fed whole or in chunks (both
through tests/twins.py, pair ``jsonscan``; the reference is ``_scan_py``, here also run as plain
Python)."""

from __future__ import annotations

import numpy as np
import pytest
import twins
from hypothesis import given, settings
from hypothesis import strategies as st

from tracegen.importers import jsondepth
from tracegen.importers.jsondepth import MAX_NUMBER_CHARS, WIDE, DepthGuard, scan

LIMIT = 64

# bytes that matter to the scanner, and some that do not
ALPHABET = b'[]{}"\\0123456789-+.eE ,:tfnuldD8aF\n\xff\xc3\xa9x'
json_like = st.lists(st.sampled_from(list(ALPHABET)), max_size=300).map(bytes)
any_bytes = st.binary(max_size=300)


def _reference(data: bytes, state=(0, 0, 0, 0, 0), limit=LIMIT, num_limit=MAX_NUMBER_CHARS):
    """The plain-Python scan (the numba function before compilation)."""
    return jsondepth._scan_py(np.frombuffer(data, np.uint8), *state, limit, num_limit)


def _fed(data: bytes, cuts: list[int]) -> tuple:
    g = DepthGuard(LIMIT)
    first = (-1, "")
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in zip(points, points[1:]):
        r = g.feed(data[a:b])
        if r[0] >= 0:
            first = r
            break
    return first, (g.depth, g.flags, g.num_len, g.exp_digits, g.tokens) if first[0] < 0 else None, g.wide


def _feed(doc: bytes, limit: int = LIMIT) -> tuple:
    """(what feeding ``doc`` whole returns, the guard's whole state after it) under the twin in use."""
    g = DepthGuard(limit)
    got = g.feed(doc)
    return got, {"depth": g.depth, "flags": g.flags, "num_len": g.num_len, "exp_digits": g.exp_digits,
                 "tokens": g.tokens, "offset": g.offset, "wide": g.wide, "surrogate": g.surrogate}


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_like, any_bytes))
def test_the_compiled_and_the_numba_scan_agree_on_every_byte_string(data):
    twins.agree("jsonscan", lambda: scan(data, 0, 0, 0, 0, 0, LIMIT, MAX_NUMBER_CHARS), expect=_reference(data))


@settings(max_examples=200, deadline=None)
@given(st.one_of(json_like, any_bytes), st.lists(st.integers(0, 400), max_size=6))
def test_chunks_give_what_the_whole_buffer_gives(data, cuts):
    (at, what), state, wide = twins.agree("jsonscan", lambda: _fed(data, cuts))
    whole = _reference(data)
    assert at == whole[5] and what == {0: "", 1: "depth", 2: "number"}[whole[6]]
    if at < 0:
        assert state == whole[:5]
        assert wide == bool(whole[1] & WIDE)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40))
def test_small_limits_agree(limit, num_limit):
    data = b'{"a": [[[1234567890123, "[[[\\"]]]"], -1.5e+300], {"b": [[[[[[0]]]]]]}]}'
    twins.agree("jsonscan", lambda: scan(data, 0, 0, 0, 0, 0, limit, num_limit),
                expect=_reference(data, limit=limit, num_limit=num_limit))


def test_depth_limit_is_exact_and_strings_do_not_count():
    ok = b"[" * LIMIT + b"]" * LIMIT
    assert twins.agree("jsonscan", lambda: _feed(ok))[0] == (-1, "")
    deep = b'{"x": "[[[[", "y": ' + b"[" * LIMIT + b"]" * LIMIT + b"}"
    at, what = twins.agree("jsonscan", lambda: _feed(deep))[0]
    assert what == "depth" and at == deep.index(b'"y": ') + 5 + LIMIT - 1  # the 65th open bracket
    escaped = b'["\\"[[[[[[[[", 1]'
    got, state = twins.agree("jsonscan", lambda: _feed(escaped, 2))
    assert got == (-1, "") and state["depth"] == 0


def test_number_limit_is_exact_and_strings_do_not_count():
    n64 = b"[" + b"1" * MAX_NUMBER_CHARS + b"]"
    assert twins.agree("jsonscan", lambda: _feed(n64))[0] == (-1, "")
    n65 = b'["' + b"9" * 500 + b'", ' + b"1" * (MAX_NUMBER_CHARS + 1) + b"]"
    at, what = twins.agree("jsonscan", lambda: _feed(n65))[0]
    assert what == "number" and at == 500 + 5 + MAX_NUMBER_CHARS


@pytest.mark.parametrize("doc,wide", [
    (b"[999999999999999999]", False),  # 18 digits: fits int64 whatever they are
    (b"[1751410836000000000, -8999999999999999999]", False),  # 19 starting below 9 (baseTimeNanoseconds)
    (b"[9000000000000000000]", True),  # 19 starting with 9: may not fit
    (b"[-9223372036854775808]", True),
    (b"[12345678901234567890]", True),  # 20: never fits
    (b"[1694128201545123.456]", False),  # a Kineto timestamp with a fraction
    (b"[1.5e99, 2E-99]", False),
    (b"[1.5e308]", True),  # a 3-digit exponent may overflow
    (b'["12345678901234567890", true, false, null]', False),  # in a string: not a number
])
def test_wide_numbers_are_noted(doc, wide):
    got, state = twins.agree("jsonscan", lambda: _feed(doc))
    assert got == (-1, "") and state["wide"] == wide


@pytest.mark.parametrize("doc,surrogate", [
    (rb'["\ud800", 1]', True), (rb'["a\uDFFF"]', True), (rb'["\ud83d\ude00"]', True),
    (rb'["\u00e9 \ud7ff \ue000"]', False), (rb'["\\ud800"]', False),  # an escaped backslash, then text
    (rb'[1, "x"] \ud800', False),  # outside a string: not an escape
])
def test_surrogate_escapes_are_noted(doc, surrogate):
    assert twins.agree("jsonscan", lambda: _feed(doc))[1]["surrogate"] == surrogate


def test_invalid_utf8_does_not_confuse_the_scan():
    """Bytes that are not UTF-8 are refused by the readers (by position); the scan itself only
    has to stay in step: a stray byte inside or outside a string is not a bracket or a quote."""
    doc = b'[{"a": "\xff\xed\xa0\x80["}, \xc0\x80]'
    got, state = twins.agree("jsonscan", lambda: _feed(doc))
    assert got == (-1, "") and state["depth"] == 0


def test_tokens_count_containers_and_commas_outside_strings():
    assert twins.agree("jsonscan", lambda: _feed(b'{"a": [1, 2, {}], "b,[{": "x"}'))[1]["tokens"] == 6  # { [ , , { ,
