"""A Chrome-trace JSON document read at once (one ``json`` parse), when that is safe and gives
exactly what the streaming reader (ijson, :mod:`tracegen.importers.kineto`) would.

:func:`read_whole` returns ``None`` (read it streaming) unless every one of these holds:

* the decompressed document has at most ``max_bytes`` bytes (:data:`WHOLE_FILE_MAX_BYTES` by
  default), and the Python objects it would become are estimated at most
  :data:`WHOLE_FILE_MAX_OBJECT_BYTES`: :data:`BYTES_PER_TOKEN` per ``[``, ``{`` or ``,`` (about
  one per value) plus one per byte (string contents), an upper bound of what ``json`` builds
  (measured: 36-87 bytes per token from empty objects to objects of distinct keys, 54 on the
  largest real trace; a real trace takes 3.4 bytes per byte of JSON, but 64 MiB of ``{},`` would
  take 1.5 GB, so such a document is streamed);
* the guard scan (:mod:`tracegen.importers.jsondepth`) finds no value nested deeper than the
  limit, no number longer than ``MAX_NUMBER_CHARS``, no *wide* number and no surrogate escape
  (``\\uD800``-``\\uDFFF``), the only values the two parsers may read differently;
* the bytes are UTF-8, the text is valid JSON without ``NaN``/``Infinity``, its top level is an
  array, or an object with no key twice and a ``traceEvents`` array.

With ``cats`` (the Kineto reader passes its categories), the compiled Kineto scanner
(:mod:`tracegen.importers.kinetoscan`) reads the document first, after the same guard scan and
budget checks: it builds only the rows the Kineto event loop keeps (``WholeDoc.rows``), and when
it declines, ``json`` reads the document as described here.

Any failure (a damaged gzip stream too) means ``None``: the streaming reader then reads the same
file and reports the error, so an error is worded and located the same way whichever path
met it (by position, never quoting input bytes), and the fast path needs no error handling of
its own. Costs when it gives up: the decompression and the scan, a fraction of the parse.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass
from json.decoder import WHITESPACE
from typing import Any

from fastrack_core.sniff import GZIP_MAGIC
from tracegen.importers import kinetoscan
from tracegen.importers.jsondepth import DepthGuard

WHOLE_FILE_MAX_BYTES = 64 << 20  # decompressed bytes read at once; larger documents are streamed
WHOLE_FILE_MAX_OBJECT_BYTES = 512 << 20  # estimated memory of the parsed document, at most
BYTES_PER_TOKEN = 96  # memory of one value as a Python object, an upper bound (see the module)
_WS = " \t\n\r"


@dataclass
class WholeDoc:
    """A document read at once."""

    data: bytes  # the decompressed bytes
    before: dict[str, Any]  # top-level members before ``traceEvents`` (empty for a bare array)
    events: list | None  # the items of ``traceEvents`` (or of the bare top-level array); None with rows
    bare: bool  # the top level is an array of events
    last_event_end: int  # byte offset of the last byte of the last event (-1: no event)
    # (num_events, gpu, rt, sync, ann, rpc): the Kineto rows, when the compiled scanner read the
    # document (kinetoscan.py; ``parse_whole(..., cats=...)``); None when ``events`` holds it
    rows: tuple | None = None


def _refuse_constant(name: str):
    raise ValueError(name)  # NaN, Infinity, -Infinity: not JSON (yajl refuses them)


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def read_bytes(path: str, max_bytes: int) -> bytes | None:
    """The decompressed bytes of ``path`` (gzip or plain), or None when there are more than
    ``max_bytes`` or the file cannot be read (the streaming reader then says why)."""
    try:
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC:
                if os.fstat(f.fileno()).st_size > max_bytes:
                    return None
                f.seek(0)
                data = f.read(max_bytes + 1)
            else:
                f.seek(-4, 2)  # ISIZE: the size mod 2**32 of the last member (a hint, not trusted)
                if int.from_bytes(f.read(4), "little") > max_bytes:
                    return None
                f.seek(0)
                with gzip.GzipFile(fileobj=f, mode="rb") as gz:
                    data = gz.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error, ValueError):
        return None
    return data if len(data) <= max_bytes else None


def _skip_ws(text: str, i: int) -> int:
    return WHITESPACE.match(text, i).end()


def _members(text: str, i: int) -> tuple[list[tuple[str, Any, int, int]], int]:
    """The members (key, value, start, end) of the object whose ``{`` is at ``i``, and the index
    past its ``}``. Raises ValueError on anything that is not a JSON object."""
    out = []
    i = _skip_ws(text, i + 1)
    if text[i:i + 1] == "}":
        return out, i + 1
    while True:
        if text[i:i + 1] != '"':
            raise ValueError("key")
        key, i = _DECODER.raw_decode(text, i)
        i = _skip_ws(text, i)
        if text[i:i + 1] != ":":
            raise ValueError(":")
        start = _skip_ws(text, i + 1)
        value, i = _DECODER.raw_decode(text, start)
        out.append((key, value, start, i))
        i = _skip_ws(text, i)
        c = text[i:i + 1]
        if c == "}":
            return out, i + 1
        if c != ",":
            raise ValueError(",")
        i = _skip_ws(text, i + 1)


def _last_event_end(text: str, close: int, data_is_ascii: bool) -> int:
    """Byte offset of the last non-whitespace character before the ``]`` at index ``close``."""
    j = close - 1
    while j >= 0 and text[j] in _WS:
        j -= 1
    return j if data_is_ascii else len(text[:j].encode("utf-8"))


def parse_whole(data: bytes, depth_limit: int, cats: dict[str, int] | None = None) -> WholeDoc | None:
    """The document of ``data`` as the streaming reader would see it, or None (see the module).
    With ``cats`` (Kineto categories, ``kineto._CATS``) the compiled Kineto scanner reads it when
    it can (:mod:`tracegen.importers.kinetoscan`): ``rows`` then holds what ``kineto._collect``
    would give, ``events`` is None; else ``json`` does, as without ``cats``."""
    guard = DepthGuard(depth_limit)
    at, _ = guard.feed(data)
    if at >= 0 or guard.wide or guard.surrogate or guard.depth != 0:
        return None
    if BYTES_PER_TOKEN * guard.tokens + len(data) > WHOLE_FILE_MAX_OBJECT_BYTES:
        return None
    if cats is not None:
        got = kinetoscan.scan(data, cats)
        if got is not None:
            before, bare, last, *rows = got
            return WholeDoc(data, before, None, bare, last, tuple(rows))
    try:
        text = data.decode("utf-8")
        i = _skip_ws(text, 0)
        c = text[i:i + 1]
        if c == "[":
            events, end = _DECODER.raw_decode(text, i)
            if _skip_ws(text, end) != len(text):
                return None
            last = _last_event_end(text, end - 1, text.isascii()) if events else -1
            return WholeDoc(data, {}, events, True, last)
        if c != "{":
            return None
        members, end = _members(text, i)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    if _skip_ws(text, end) != len(text):
        return None
    keys = [m[0] for m in members]
    if len(set(keys)) != len(keys) or "traceEvents" not in keys:
        return None
    k = keys.index("traceEvents")
    _, events, _, end = members[k]
    if not isinstance(events, list):
        return None
    last = _last_event_end(text, end - 1, text.isascii()) if events else -1
    return WholeDoc(data, {m[0]: m[1] for m in members[:k]}, events, False, last)


def read_whole(path: str, depth_limit: int, max_bytes: int = WHOLE_FILE_MAX_BYTES,
               cats: dict[str, int] | None = None) -> WholeDoc | None:
    """:func:`parse_whole` of the file ``path`` (gzip or plain), or None."""
    data = read_bytes(path, max_bytes)
    return None if data is None else parse_whole(data, depth_limit, cats)


__all__ = ["WHOLE_FILE_MAX_BYTES", "WHOLE_FILE_MAX_OBJECT_BYTES", "BYTES_PER_TOKEN", "WholeDoc", "read_bytes", "parse_whole", "read_whole"]
