"""The whole-file Kineto reader in one compiled pass: parse and event loop together.

``tracegen.importers._kineto`` (C++, ``src/kinetoscan.cpp``, built by ``setup.py``) reads the
decompressed bytes of a Kineto document once, checks the whole document as strict JSON, and
builds Python objects only for what :func:`tracegen.importers.kineto._collect` keeps: the five
row lists, the event count, the members before ``traceEvents``, whether the top level is a bare
array, and the byte offset where the last event ends. It is the twin of
:func:`tracegen.importers.jsonwhole.parse_whole` (``json`` building every event as a dict)
followed by ``_collect``, and gives exactly their result: the same rows, value by value and type
by type (an int stays an int, ``true`` stays ``True``, a list or object in a field is built as
``json`` builds it, an ``args`` dict kept in a row is the whole dict), or ``None``.

``None`` means "not handled here": the Python path then runs unchanged and gives the result or
the error. It is returned for anything outside what the scanner handles with certainty:

* anything ``json`` (strict) or :func:`~tracegen.importers.jsonwhole.parse_whole` refuses:
  invalid UTF-8 (encoded surrogates and overlong forms included), a control character in a
  string, a bad escape, a number outside the JSON grammar, ``NaN``/``Infinity``, bytes after the
  document, a top level that is not an array or an object with a ``traceEvents`` array, a
  top-level key twice;
* what the two parsers could read apart: a ``\\uD800``-``\\uDFFF`` escape, an integer beyond
  int64 (the guard scan in front declines both already);
* any event on which ``_collect`` raises: an event that is not an object, a ``cat`` that is an
  array or object, a ``name`` that is not a string where ``_collect`` checks it, an ``args`` that
  is neither an object nor false-like (null, false, 0, "", [], {}) where ``_collect`` calls
  ``.get`` on it.

A key named twice in one object keeps its last value, as ``json`` does (in an event, in its
``args``, in any value built). The guard scan and the size and object-budget checks of
``parse_whole`` run first, unchanged, so the same documents are read at once as before.

:func:`stream` does the same for the streaming reader (documents over the whole-file limit):
the events array is read chunk by chunk, the complete events of each chunk scanned, the rest
carried into the next; it declines to ijson on anything :func:`scan` declines and on what yajl
reads differently from ``json`` (see :func:`stream`).

The scanner is used when the extension is built and the environment variable
:data:`ENV_SWITCH` (``FASTRACK_NO_NATIVE_JSON``) is unset, empty or ``0``; set to anything else it
forces the Python path (tests and comparisons). ``tests/test_kineto_scan.py`` proves both paths
give the same result: the real traces of ``tests/data``, generated documents (hypothesis) and
damaged ones, and the Parquet written by ``tracegen convert``.
"""

from __future__ import annotations

import json
import os
import zlib

from json.decoder import WHITESPACE

from fastrack_core.schema import MAX_EVENT_BYTES
from tracegen.importers.jsondepth import DepthGuard

ENV_SWITCH = "FASTRACK_NO_NATIVE_JSON"

try:
    from tracegen.importers import _kineto as _compiled
except ImportError:  # pragma: no cover - depends on the build (the tests cover both paths)
    _compiled = None


def enabled() -> bool:
    """Whether :func:`scan` uses the compiled scanner (built, and not switched off)."""
    return _compiled is not None and os.environ.get(ENV_SWITCH, "") in ("", "0")


def scan(data: bytes, cats: dict[str, int]) -> tuple | None:
    """``(before, bare, last_event_end, num_events, gpu, rt, sync, ann, rpc)`` of the document
    ``data`` (``cats``: ``kineto._CATS``, category -> code 0..6), or None (see the module)."""
    if not enabled():
        return None
    return _compiled.scan(data, cats)


class _Decline(Exception):
    """The streaming scan hands the file back to ijson."""


class EventTooLong(Exception):
    """No event ended within :data:`~fastrack_core.schema.MAX_EVENT_BYTES` bytes: ``at`` is the
    file offset of the chunk holding the end of the last complete event (0: none yet). Raised by
    both streaming readers at the same chunk (:func:`event_too_long`), refused by the caller."""

    def __init__(self, at: int):
        self.at = at
        super().__init__(at)


def event_too_long(read: int, last_end: int, chunk: int) -> None:
    """Raise :class:`EventTooLong` when more than ``MAX_EVENT_BYTES`` plus one chunk were read
    (``read`` bytes so far) since the start of the chunk holding ``last_end``, the end of the last
    complete event (-1: none yet), without another event ending: a single event, or the space
    between two, that long is refused, so no reader holds more of it (the compiled one would keep
    joining it, ijson would build it)."""
    at = (last_end // chunk) * chunk if last_end >= 0 else 0
    if read - at > MAX_EVENT_BYTES + chunk:
        raise EventTooLong(at)


def stream(f, bare: bool, cats: dict[str, int], chunk: int, depth_limit: int,
           tail_limit: int = 16 << 20) -> tuple | None:
    """The streaming reader's events read by the compiled scanner: ``(num_events, gpu, rt, sync,
    ann, rpc, window)``, or None (read it with ijson). ``f`` is the decompressed file, read in
    chunks of ``chunk`` bytes, each passing the guard scan (``depth_limit``) first; ``bare``: the
    top level is an array of events (else an object with ``traceEvents``). ``window`` holds the
    bytes from the start of the chunk holding the end of the last event to the end of the file,
    the window the ijson reader keeps for the keys after the events. Memory: the chunk, the
    part of an event it cuts, the rows, the window.

    Declined, besides everything :func:`scan` declines: a wide number or a surrogate escape
    anywhere (yajl refuses or rewrites those), a document without events, more than
    ``tail_limit`` bytes after the last event, any read error."""
    if not enabled():
        return None
    try:
        return _Stream(f, cats, chunk, depth_limit, tail_limit).run(bare)
    except (_Decline, OSError, EOFError, ValueError, zlib.error):
        return None


class _Stream:
    __slots__ = ("f", "cats", "chunk", "guard", "tail_limit", "buf", "parts", "held", "offset", "window", "read",
                 "eof")

    def __init__(self, f, cats, chunk: int, depth_limit: int, tail_limit: int):
        self.f, self.cats, self.chunk, self.tail_limit = f, cats, chunk, tail_limit
        self.guard = DepthGuard(depth_limit)
        self.buf = b""  # the unread bytes, from file offset ``offset``, then the chunks of ``parts``
        self.parts: list[bytes] = []  # (joined to ``buf`` only when walked: a long event costs no copies per chunk)
        self.held = 0  # len(buf) + the bytes of parts
        self.offset = 0
        self.window: list[tuple[int, bytes]] = []  # (file offset, chunk) since the one holding the latest event end
        self.read = 0  # bytes read so far
        self.eof = False

    def more(self) -> bool:
        """Appends the next chunk to ``parts``; False at the end of the file."""
        data = self.f.read(self.chunk)
        if not data:
            self.eof = True
            return False
        at, _ = self.guard.feed(data)
        if at >= 0 or self.guard.wide or self.guard.surrogate:
            raise _Decline
        self.parts.append(data)
        self.held += len(data)
        self.window.append((self.read, data))
        self.read += len(data)
        return True

    def joined(self) -> bytes:
        if self.parts:
            self.buf = b"".join([self.buf, *self.parts])
            self.parts = []
        return self.buf

    def drop(self, n: int) -> None:
        self.buf = self.joined()[n:]
        self.held -= n
        self.offset += n

    def run(self, bare: bool) -> tuple:
        keys = self.array_start(bare)
        n, rows, last = self.events()
        if last < 0:
            raise _Decline  # no event: ijson's window would be the whole file
        while self.more():
            if self.held > self.tail_limit:
                raise _Decline
        rest = self.joined()
        if bare:
            if rest.strip(_WS) != b"":
                raise _Decline
        else:  # the members after the events, checked with the names before them (a key twice)
            names = b"".join(json.dumps(k).encode() + b":0," for k in keys)
            if _compiled.scan(b"{" + names + b'"traceEvents":[]' + rest, {}) is None:
                raise _Decline
        return (n, *rows, b"".join(d for _, d in self.window))

    def array_start(self, bare: bool) -> list[str]:
        """Moves ``buf`` past the ``[`` of the events; the top-level keys before it."""
        while True:
            if not self.more() or self.held > self.tail_limit:
                raise _Decline  # (a head that large: ijson reads it)
            if bare:
                body = self.joined().lstrip(_WS)
                if not body:
                    continue
                if body[:1] != b"[":
                    raise _Decline
                self.drop(len(self.buf) - len(body) + 1)
                return []
            got = _head(self.joined())
            if got is not None:
                keys, at = got
                self.drop(at)
                return keys

    def events(self) -> tuple[int, list, int]:
        """The rows of the events array (``buf`` starts past its ``[``), ``buf`` then starting past
        its ``]``; the number of events and the file offset of the last byte of the last one."""
        rows: list[list] = [[], [], [], [], []]
        n, last, after_comma = 0, -1, False
        while True:
            status, cut, end = _compiled.split(self.joined(), 0, after_comma)
            if status < 0:
                raise _Decline
            if end >= 0:  # complete events before ``cut``
                got = _compiled.scan(b"[" + self.buf[:cut] + b"]", self.cats)
                if got is None:
                    raise _Decline
                n += got[3]
                for acc, part in zip(rows, got[4:]):
                    acc.extend(part)
                last = self.offset + end
                while len(self.window) > 1 and self.window[1][0] <= last:  # keep the chunk holding it on
                    del self.window[0]
            if status == 1:
                self.drop(cut + 1)
                return n, rows, last
            if end >= 0:
                self.drop(cut + 1)
                after_comma = True
                want = self.held + 1
            else:  # an event longer than what is held: read as much again before the next walk
                want = 2 * self.held + 1
            grew = False
            while self.held < want and self.more():
                grew = True
                event_too_long(self.read, last, self.chunk)
            if not grew:
                raise _Decline  # the file ends inside the array


def _head(data: bytes) -> tuple[list[str], int] | None:
    """(keys before ``traceEvents``, byte offset just past the ``[`` of its array) of the document
    starting in ``data``, or None when ``data`` ends first. Raises _Decline on anything else."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data":  # (a character cut by the chunk's end)
            raise _Decline from None
        text = data[:exc.start].decode("utf-8")
    ws = WHITESPACE
    i = ws.match(text, 0).end()
    if text[i:i + 1] != "{":
        if i < len(text):
            raise _Decline
        return None
    keys: list[str] = []
    i += 1
    try:
        while True:
            i = ws.match(text, i).end()
            if text[i:i + 1] != '"':
                raise _Decline if i < len(text) else _More
            key, i = _DECODER.raw_decode(text, i)
            i = ws.match(text, i).end()
            if text[i:i + 1] != ":":
                raise _Decline if i < len(text) else _More
            i = ws.match(text, i + 1).end()
            if key in keys:
                raise _Decline
            if key == "traceEvents":
                if text[i:i + 1] != "[":
                    raise _Decline if i < len(text) else _More
                return keys, len(text[:i + 1].encode("utf-8"))
            keys.append(key)
            _, i = _DECODER.raw_decode(text, i)
            i = ws.match(text, i).end()
            c = text[i:i + 1]
            if c == ",":
                i += 1
            elif c:
                raise _Decline  # '}' (no traceEvents) or a stray character
            else:
                raise _More
    except _More:
        return None
    except ValueError:  # cut in the middle of a value, or not JSON: more data decides
        return None


class _More(Exception):
    """The head continues past the bytes read so far."""


def _refuse_constant(name: str):
    raise ValueError(name)  # NaN, Infinity: not JSON


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


_WS = b" \t\n\r"

__all__ = ["ENV_SWITCH", "EventTooLong", "enabled", "event_too_long", "scan", "stream"]
