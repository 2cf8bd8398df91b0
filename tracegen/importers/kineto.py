"""Import PyTorch profiler (Kineto) Chrome-trace JSON files.

``read(paths)`` returns a :class:`~tracegen.importers.common.RawImport`: raw ops following the
contract of :mod:`tracegen.deps` (a :class:`~tracegen.deps.raw.RawColumns` of numpy columns: a
Kineto convert never imports pandas) and whitelisted metadata; ``sniff(path)`` tells a Kineto input
(both behind the registered importer :data:`tracegen.importers.KINETO`). ``read_kineto(paths)`` returns
``(raw as a pandas DataFrame, metadata)``; ``import_kineto(paths)`` also runs :func:`tracegen.deps.derive_dependencies`
and returns ``(table, metadata)``.

Reading: plain or gzip JSON (gzip detected by its magic bytes, not by the file name). A document
of at most ``WHOLE_FILE_MAX_BYTES`` (64 MiB decompressed) is read at once with one ``json`` parse
(:mod:`tracegen.importers.jsonwhole`; when built, the compiled scanner of
:mod:`tracegen.importers.kinetoscan` does that parse and the event loop in one pass), which hands
anything unusual or wrong back to the streaming reader; larger ones are streamed: the top level
before ``traceEvents`` is parsed token by token and only whitelisted keys are built, the events
are stream-parsed in chunks (by the same compiled scanner when it can, else with ijson, C backend
when available), so a large file is never held in memory as a whole. Both readers share the
event loop (:func:`_collect`, or its compiled twin) and give the same result. The keys after
``traceEvents`` (TraceLens-style files put ``deviceProperties`` there) are read from the bytes
that follow the last event. Every byte passes the guard scan (:mod:`tracegen.importers.jsondepth`:
nesting depth, number length) before a parser sees it.

What is kept (``docs/conventions.md``, ``docs/trace-formats.md`` of the shared notes):

* ``kernel``/``Kernel``, ``gpu_memcpy``/``Memcpy``, ``gpu_memset``/``Memset``: GPU ops; NCCL kernels
  (``nccl*`` names) become ``collective`` ops. Collective type/size/group come from the kernel
  args, else the ``record_param_comms`` CPU op with the same External id, else the
  ``record_param_comms`` / ``nccl:<type>`` annotation enclosing the launching call, else the
  kernel name. Bytes = nelems (``In msg nelems``, else ``Out msg nelems``) x sizeof(dtype).
* ``cuda_runtime``/``Runtime``/``cuda_driver``: host calls (``sync`` for the synchronize calls).
* ``cuda_sync``: hints for the call with the same correlation (stream of a stream sync; record
  correlation and streams of event syncs and stream waits). Not ops themselves.
* ``cpu_op``/``Operator``: names of the CPU gap ops (threads with CUDA calls only).
* ``ProfilerStep#N`` (``user_annotation`` or ``cpu_op``): steps.
* ``request:<event>:<id>`` (``user_annotation`` or ``cpu_op``, e.g. ``record_function`` ranges of a
  serving loop, any thread of the process): request markers (:mod:`fastrack_core.markers`), one
  zero-duration ``cpu`` op at the range's start (docs/serving.md).
* Everything else (python_function, flows, instants, counters, overhead rows with pid -1, GPU
  user annotations, metadata rows) is skipped.

Multi-rank: several files, or a directory of them, make one table with a ``rank`` column; the
rank comes from ``distributedInfo.rank``, else the file name (``rank-3``, ``rank_3``,
``worker3``), else 0.
"""

from __future__ import annotations

import codecs
import contextlib
import sys
import gzip
import json
import os
import re
import zlib
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import ijson
import numpy as np

from fastrack_core.errors import TraceFormatError
from fastrack_core.markers import REQUEST_PREFIX, parse_request_marker
from fastrack_core.schema import MAX_EVENT_BYTES, MAX_NAME_CHARS, MAX_RANK, MAX_SPAN_NS, CopyDir, HostMem, OpKind
from tracegen.deps import derive_dependencies, no_gc
from tracegen.deps.raw import RawColumns, as_frame
from tracegen.importers import kinetoscan
from tracegen.importers.jsondepth import MAX_NUMBER_CHARS, DepthGuard
from tracegen.importers.jsonwhole import WHOLE_FILE_MAX_BYTES, WholeDoc, read_whole
from tracegen.importers.common import GZIP_MAGIC, SQLITE_MAGIC, RawImport, read_head

if TYPE_CHECKING:
    import pandas as pd

try:  # the C backend is ~10x faster than the pure-Python one; ijson picks it by default
    _backend = ijson.get_backend("yajl2_c")
except ImportError:  # pragma: no cover - depends on the installation
    _backend = ijson
_PY_BACKEND = ijson.get_backend("python")  # integers of any width (yajl's stop at 64 bits)

CHUNK = 1 << 18
MAX_JSON_DEPTH = 64  # nesting of one value (Kineto writes at most 4); deeper values are refused
_TAIL_LIMIT = 64 << 20

# category -> code (src/kinetoscan.cpp branches on the same codes)
_K, _MC, _MS, _RT, _SY, _OP, _UA = range(7)
_CATS = {
    "kernel": _K, "Kernel": _K,
    "gpu_memcpy": _MC, "Memcpy": _MC,
    "gpu_memset": _MS, "Memset": _MS,
    "cuda_runtime": _RT, "Runtime": _RT, "cuda_driver": _RT,
    "cuda_sync": _SY,
    "cpu_op": _OP, "Operator": _OP,
    "user_annotation": _UA,
}  # fmt: skip
_GPU_KIND = {_K: int(OpKind.KERNEL), _MC: int(OpKind.MEMCPY), _MS: int(OpKind.MEMSET)}

_SYNC_SCOPE = {
    "cudaStreamSynchronize": "stream", "cuStreamSynchronize": "stream",
    "cudaEventSynchronize": "event", "cuEventSynchronize": "event",
    "cudaDeviceSynchronize": "device", "cuCtxSynchronize": "device", "cudaThreadSynchronize": "device",
}  # fmt: skip
_SYNC_MEMCPY = re.compile(r"^(cudaMemcpy(2D|3D|Peer|ToSymbol|FromSymbol|ToArray|FromArray)?|cuMemcpy\w*?)(_v\d+)?$")
_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
_MEMCPY_DIR = {"htod": CopyDir.H2D, "dtoh": CopyDir.D2H, "dtod": CopyDir.D2D, "ptop": CopyDir.P2P}
_MEMCPY_RE = re.compile(r"memcpy\s+(\w+)\s*(?:\(\s*([^)]*?)\s*->\s*([^)]*?)\s*\))?", re.I)
_RANK_RE = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)|worker[-_]?(\d+)", re.I)
_INT_RE = re.compile(r"-?\d+")

_DTYPE_SIZE = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "long": 8, "int64": 8, "int64_t": 8, "int": 4, "int32": 4, "short": 2, "int16": 2,
    "char": 1, "int8": 1, "byte": 1, "uint8": 1, "bool": 1, "complexfloat": 8, "complexdouble": 16,
    "complexhalf": 4, "uint16": 2, "uint32": 4, "uint64": 8,
}  # fmt: skip
_COLL_ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "alltoallv": "all_to_all", "sendrecv": "send_recv",
    "broadcast": "broadcast", "reduce": "reduce", "send": "send", "recv": "recv", "barrier": "barrier",
    "gather": "gather", "scatter": "scatter",
}  # fmt: skip
_VERSION_KEYS = {
    "schemaVersion": "kineto_schema",
    "cuda_runtime_version": "cuda_runtime",
    "cuda_driver_version": "cuda_driver",
    "cupti_version": "cupti",
    "pytorch_version": "pytorch",
    "torch_version": "pytorch",
}
_HEAD_KEYS = {"deviceProperties", "distributedInfo", *_VERSION_KEYS}


# --------------------------------------------------------------------------- file access


def sniff(path: str | os.PathLike) -> bool:
    """Whether ``path`` looks like Kineto input: a directory (of rank files), or a file that starts
    like gzip or like a JSON object/array. Raises :class:`TraceFormatError` when it cannot be read."""
    if os.path.isdir(path):
        return True
    head = read_head(path)
    return head.startswith(GZIP_MAGIC) or head.lstrip()[:1] in (b"{", b"[")


def _open(path: str):
    head = read_head(path)
    if not head:
        raise TraceFormatError("empty file", path=path)
    if head.startswith(SQLITE_MAGIC):
        raise TraceFormatError("is an SQLite database (Nsight export?), not Kineto JSON", path=path)
    if head.startswith(GZIP_MAGIC):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _io_error(exc: BaseException, path: str) -> TraceFormatError:
    if isinstance(exc, EOFError):
        return TraceFormatError("truncated gzip stream (file ends before the end of the compressed data)", path=path)
    if isinstance(exc, (gzip.BadGzipFile, zlib.error)):
        return TraceFormatError(f"corrupt gzip data ({exc})", path=path)
    return TraceFormatError(f"cannot read file ({exc})", path=path)


class _Counted:
    """File wrapper that knows where the parser is: bytes and lines before the chunk read last,
    and the last two chunks, so a JSON error can be reported by position (never by content)."""

    __slots__ = ("f", "path", "before", "lines", "prev", "last", "nonfinite", "guard", "utf8")

    def __init__(self, f, path: str):
        self.f, self.path, self.before, self.lines, self.prev, self.last = f, path, 0, 0, b"", b""
        self.nonfinite = False
        self.guard = DepthGuard(MAX_JSON_DEPTH)
        self.utf8 = codecs.getincrementaldecoder("utf-8")()

    def _utf8_error(self, data: bytes) -> int:
        """Offset of the first byte that is not UTF-8 in ``data`` (the chunk just fed to the
        guard; b"" at the end of the file), or -1. JSON text is UTF-8, and yajl lets some bad
        bytes through (e.g. encoded surrogates) that then fail deep inside the parser."""
        pending = len(self.utf8.getstate()[0])
        try:
            self.utf8.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            return self.guard.offset - len(data) - pending + exc.start
        return -1

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        if not data:
            bad = self._utf8_error(b"") if n != 0 else -1
            if bad >= 0:
                raise TraceFormatError(f"invalid UTF-8 at byte {bad:,}: JSON text must be UTF-8", path=self.path)
            return data
        at, what = self.guard.feed(data)
        bad = self._utf8_error(data)
        if bad >= 0 and (at < 0 or bad < at):
            raise TraceFormatError(f"invalid UTF-8 at byte {bad:,}: JSON text must be UTF-8", path=self.path)
        if at >= 0 and what == "depth":
            raise TraceFormatError(f"a JSON value at byte {at:,} is nested deeper than {MAX_JSON_DEPTH} levels",
                                   path=self.path)
        if at >= 0:
            raise TraceFormatError(f"a JSON number at byte {at:,} is longer than {MAX_NUMBER_CHARS} characters",
                                   path=self.path)
        self.before += len(self.prev)
        self.lines += self.prev.count(b"\n")
        self.prev, self.last = self.last, data
        return data

    def position(self, context: str, at: int) -> tuple[int, int, int] | None:
        """(byte offset, line, column), 1-based line and column, of the character ``at`` of
        ``context`` (the parser's rendering of the bytes around an error), or None if not found."""
        window = self.prev + self.last
        flat = window.replace(b"\n", b" ").replace(b"\r", b" ").replace(b"\t", b" ")
        try:
            needle = context.encode()
        except UnicodeEncodeError:
            return None
        i = flat.rfind(needle) if needle else -1
        if i < 0:
            return None
        local = i + at
        offset = self.before + local
        line = self.lines + window[:local].count(b"\n") + 1
        col = local - (window.rfind(b"\n", 0, local) + 1) + 1 if b"\n" in window[:local] else None
        if col is None:  # the line started before the window: count back through it is not possible
            col = local + 1 if self.before == 0 else 0
        self.nonfinite = window[max(local - 1, 0):local + 9].lstrip(b"-:, ").startswith((b"NaN", b"Infinity", b"nan", b"inf"))
        return offset, line, col


_YAJL_CONTEXT = re.compile(r"^(?P<what>[^\n]*?)\.?\n(?P<ctx>[^\n]*)\n(?P<caret>[^\n]*\^)", re.S)


def _json_error(exc: BaseException, path: str, where: _Counted | None = None) -> TraceFormatError:
    """One line for a JSON syntax error: what the parser found and where, never the input's bytes
    (real traces embed secrets; the parser's own message quotes the text around the error)."""
    text = str(exc)
    if isinstance(exc, ijson.IncompleteJSONError) and ("premature EOF" in text or "incomplete" in text.lower()):
        return TraceFormatError("truncated JSON (the file ends in the middle of the document)", path=path)
    m = _YAJL_CONTEXT.match(text)
    what = m.group("what").strip() if m else "syntax error"
    what = what if re.fullmatch(r"[a-z ]+ error: [A-Za-z0-9 ,.()'{}\[\]:-]{0,80}", what) else "syntax error"
    pos = None
    if m and where is not None:
        ctx = m.group("ctx")
        body = ctx.lstrip(" ")
        at = max(0, m.group("caret").index("^") - (len(ctx) - len(body)) - 1)
        pos = where.position(body.rstrip(" "), min(at, max(len(body.rstrip(" ")) - 1, 0)))
    if pos is not None:
        loc = f" at byte {pos[0]:,} (line {pos[1]}" + (f", column {pos[2]})" if pos[2] else ")")
    elif where is not None:
        loc = f" between bytes {where.before:,} and {where.before + len(where.prev) + len(where.last):,}"
    else:
        loc = ""
    hint = " (NaN/Infinity are not valid JSON)" if pos is not None and where.nonfinite else ""
    return TraceFormatError(f"invalid JSON{loc}: {what}{hint}", path=path)


def _read_head(path: str) -> tuple[dict[str, Any], str | None]:
    """Whitelisted top-level keys before ``traceEvents`` and the events prefix (None: no events)."""
    try:
        return _read_head_with(path, _backend)
    except _WideInteger as wide:
        try:
            with _quiet_python_backend():
                return _read_head_with(path, _PY_BACKEND)
        except (ijson.JSONError, ValueError):
            raise wide.error from None


def _read_head_with(path: str, backend) -> tuple[dict[str, Any], str | None]:
    head: dict[str, Any] = {}
    with _open(path) as raw:
        f = _Counted(raw, path)
        events = backend.parse(f, use_float=True)  # numbers as the events and the tail read them
        try:
            first = next(events, None)
            if first is None:
                raise TraceFormatError("empty JSON document", path=path)
            _, ev, _ = first
            if ev == "start_array":
                return head, "item"  # bare Chrome-trace array of events
            if ev != "start_map":
                raise TraceFormatError("not a Kineto/Chrome trace: the JSON top level is not an object", path=path)
            builder = None
            key = None
            depth = 0
            for prefix, ev, value in events:
                if builder is not None:
                    builder.event(ev, value)
                    if ev in ("start_map", "start_array"):
                        depth += 1
                        if depth > MAX_JSON_DEPTH:
                            raise TraceFormatError(f"field '{key}' is nested deeper than {MAX_JSON_DEPTH} levels",
                                                   path=path)
                    elif ev in ("end_map", "end_array"):
                        depth -= 1
                    if depth == 0:
                        head[key] = builder.value
                        builder = None
                    continue
                if prefix == "" and ev == "map_key":
                    if value == "traceEvents":
                        nxt = next(events, None)
                        if nxt is None or nxt[1] != "start_array":
                            raise TraceFormatError("not a Kineto trace: 'traceEvents' is not an array", path=path)
                        return head, "traceEvents.item"
                    key = value
                    if value in _HEAD_KEYS:
                        builder = ijson.ObjectBuilder()
                        depth = 0
            return head, None
        except TraceFormatError:
            raise
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise _io_error(exc, path) from None
        except ijson.JSONError as exc:
            if backend is not _PY_BACKEND and "integer overflow" in str(exc):
                raise _WideInteger(_json_error(exc, path, f)) from None
            raise _json_error(exc, path, f) from None
        finally:
            _close_quietly(events)  # (left half-way: the head is all it reads)
            del events  # (so that a caller's gc frees the parser: _quiet_python_backend)


@contextlib.contextmanager
def _quiet_python_backend():
    """ijson's pure-Python backend is a chain of coroutines; left half-way (a document refused or
    cut short), its inner ones raise when they are freed, and Python prints each as an
    "Exception ignored" traceback after our one-line message. Inside this block those are
    dropped (they are ijson's, about a document already refused): the chain is freed before the
    block ends, with the hook in place."""
    import gc

    previous = sys.unraisablehook

    def hook(unraisable):
        if not isinstance(unraisable.exc_value, ijson.JSONError):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        gc.collect()
        sys.unraisablehook = previous


def _close_quietly(gen) -> None:
    """Close a parser generator left half-way, now. The pure-Python backend's generators raise on
    close when the document is cut short or was refused, which at garbage collection would print
    an "Exception ignored" traceback after the one-line message."""
    try:
        gen.close()
    except Exception:  # noqa: BLE001 - what it would say, the caller has said or does not need
        pass


def _tail_keys(window: bytes) -> dict[str, Any]:
    """Top-level keys after the events array, from the bytes that follow the last event."""
    pos = window.find(b"]")
    while pos >= 0:
        rest = window[pos + 1 :].lstrip()
        if rest.startswith(b"}") and not rest[1:].strip():
            return {}
        if rest.startswith(b","):
            try:
                tail = json.loads(b"{" + rest[1:])
            except (ValueError, RecursionError):
                pass
            else:
                if isinstance(tail, dict):
                    return tail
        pos = window.find(b"]", pos + 1)
    return {}


# --------------------------------------------------------------------------- one file


@dataclass
class _FileData:
    path: str
    rank: int
    world_size: int | None
    head: dict[str, Any]
    num_events: int
    gpu: list = field(default_factory=list)
    rt: list = field(default_factory=list)
    sync: list = field(default_factory=list)
    ann: list = field(default_factory=list)
    rpc: list = field(default_factory=list)


class _TailReader:
    """File wrapper for ijson: counts chunks and keeps the ones read since the chunk that
    completed the latest event (``mark``), i.e. the bytes holding the end of ``traceEvents`` and
    the top-level keys after it."""

    __slots__ = ("f", "count", "mark", "keep", "kept")

    def __init__(self, f):
        self.f = f
        self.count = 0
        self.mark = -1
        self.keep: list[tuple[int, bytes]] = []
        self.kept = 0

    def read(self, n: int = -1) -> bytes:
        if n == 0:  # ijson probes with read(0) for bytes vs str
            return self.f.read(0)
        data = self.f.read(CHUNK if n is None or n < 0 else max(n, CHUNK))
        # the bound of the compiled reader too (kinetoscan.event_too_long): no event ends in 16 MiB
        kinetoscan.event_too_long(self.count * CHUNK + len(data), self.mark * CHUNK if self.mark >= 0 else -1, CHUNK)
        keep = self.keep
        while keep and (keep[0][0] < self.mark or self.kept > _TAIL_LIMIT and len(keep) > 1):
            self.kept -= len(keep.pop(0)[1])
        if data:
            keep.append((self.count, data))
            self.kept += len(data)
            self.count += 1
        return data

    def tail(self) -> bytes:
        return b"".join(d for i, d in self.keep if i >= self.mark)


def _collect(path: str, events: Iterable, fd: _FileData) -> int:
    """Sort the events of one file into ``fd``'s row lists; the number of events. The one event
    loop of both readers (streaming and whole-file), so they keep exactly the same rows."""
    gpu_a, rt_a, sync_a, ann_a, rpc_a = fd.gpu.append, fd.rt.append, fd.sync.append, fd.ann.append, fd.rpc.append
    cats = _CATS
    n = 0
    try:
        for ev in events:
            n += 1
            code = cats.get(ev.get("cat"))
            if code is None:
                continue
            try:  # fast path: the keys Kineto always writes
                if code == _RT:
                    rt_a((ev["name"], ev["pid"], ev["tid"], ev["ts"], ev["dur"], ev["args"]["correlation"], ev["ph"]))
                    continue
                if code == _OP:
                    ann_a((code, ev["name"], ev["pid"], ev["tid"], ev["ts"], ev["dur"], ev["ph"]))
                    if ev["name"] == "record_param_comms":
                        a = ev.get("args") or {}
                        rpc_a((ev["name"], ev["pid"], ev["tid"], ev["ts"], ev["dur"],
                               a.get("External id", a.get("external id", -1)), a))  # fmt: skip
                    continue
            except (KeyError, TypeError):
                pass
            if ev.get("ph") != "X":
                continue
            if code <= _MS:  # GPU op
                a = ev.get("args") or {}
                name = ev.get("name", "")
                if type(name) is not str:
                    raise TraceFormatError(f"an event's 'name' is a JSON {_json_type(name)}, expected a string",
                                           path=path)
                coll = None
                if code == _K and ("Collective name" in a or name[:4].lower() == "nccl"):
                    coll = a
                gpu_a((code, name, ev.get("pid"), ev.get("tid"), ev.get("ts"), ev.get("dur", 0),
                       a.get("correlation", -1), a.get("stream"), a.get("device"), a.get("bytes", 0),
                       a.get("External id", a.get("external id", -1)), coll))  # fmt: skip
            elif code == _RT:
                a = ev.get("args")
                rt_a((ev.get("name", ""), ev.get("pid"), ev.get("tid"), ev.get("ts"), ev.get("dur", 0),
                      a.get("correlation", -1) if isinstance(a, dict) else -1, "X"))  # fmt: skip
            elif code == _SY:
                a = ev.get("args") or {}
                sync_a((a.get("correlation", -1), a.get("cuda_sync_kind", ev.get("name", "")), a.get("stream", -1),
                        a.get("wait_on_stream", -1), a.get("wait_on_cuda_event_record_corr_id", -1),
                        a.get("device", -1)))  # fmt: skip
            else:  # cpu_op / user_annotation
                name = ev.get("name", "")
                if type(name) is not str:
                    raise TraceFormatError(f"an event's 'name' is a JSON {_json_type(name)}, expected a string",
                                           path=path)
                ann_a((code, name, ev.get("pid"), ev.get("tid"), ev.get("ts"), ev.get("dur", 0), "X"))
                if name == "record_param_comms" or (code == _UA and name[:5] == "nccl:"):
                    a = ev.get("args") or {}
                    rpc_a((name, ev.get("pid"), ev.get("tid"), ev.get("ts"), ev.get("dur", 0),
                           a.get("External id", a.get("external id", -1)), a))  # fmt: skip
    except TraceFormatError:
        raise
    except (AttributeError, TypeError):
        raise TraceFormatError("not a Kineto trace: an entry of 'traceEvents' is not an object, or one of its fields "
                               "has the wrong JSON type", path=path) from None
    return n


def _marked(items, reader: _TailReader):
    """ijson's items, noting in ``reader`` the chunk each one was completed in."""
    for ev in items:
        reader.mark = reader.count - 1
        yield ev


def _parse_events(path: str, prefix: str) -> tuple[_FileData, dict[str, Any]]:
    """The streaming reader: events parsed chunk by chunk (bounded memory, any size)."""
    fd = _FileData(path=path, rank=0, world_size=None, head={}, num_events=0)
    try:
        return _stream_events(path, prefix, fd)
    except kinetoscan.EventTooLong as exc:
        raise TraceFormatError(f"a JSON event (or the space before it) after byte {exc.at:,} is longer than "
                               f"{MAX_EVENT_BYTES:,} bytes (fastrack_core.schema.MAX_EVENT_BYTES)", path=path) from None


def _stream_events(path: str, prefix: str, fd: _FileData) -> tuple[_FileData, dict[str, Any]]:
    if kinetoscan.enabled():  # the compiled scanner, when it can (kinetoscan.py), else ijson
        with _open(path) as raw:
            got = kinetoscan.stream(raw, prefix == "item", _CATS, CHUNK, MAX_JSON_DEPTH)
        if got is not None:
            fd.num_events, fd.gpu, fd.rt, fd.sync, fd.ann, fd.rpc, window = got
            return fd, _tail_keys(window) if prefix != "item" else {}
    try:
        return _ijson_events(path, prefix, fd, _backend)
    except _WideInteger as wide:  # yajl stops at an integer beyond 64 bits (rocprof's hive_id): Python's parser reads it
        fd = _FileData(path=path, rank=0, world_size=None, head={}, num_events=0)
        try:
            with _quiet_python_backend():
                return _ijson_events(path, prefix, fd, _PY_BACKEND)
        except (ijson.JSONError, ValueError):  # not JSON after all: yajl's error, as before
            raise wide.error from None


class _WideInteger(Exception):
    """yajl refused an integer beyond 64 bits, which is valid JSON; ``error``: its refusal, kept
    for a document the Python parser refuses too."""

    def __init__(self, error: TraceFormatError):
        self.error = error
        super().__init__()


def _ijson_events(path: str, prefix: str, fd: _FileData, backend) -> tuple[_FileData, dict[str, Any]]:
    with _open(path) as raw:
        counted = _Counted(raw, path)
        reader = _TailReader(counted)
        items = backend.items(reader, prefix, use_float=True)
        marked = _marked(items, reader)
        failure: Exception | None = None
        try:
            n = _collect(path, marked, fd)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            failure = _io_error(exc, path)
        except ijson.JSONError as exc:
            if backend is not _PY_BACKEND and "integer overflow" in str(exc):
                failure = _WideInteger(_json_error(exc, path, counted))
            else:
                failure = _json_error(exc, path, counted)
        except TraceFormatError as exc:  # raised again below, without the frames that hold the parser
            failure = exc.with_traceback(None)
        finally:
            _close_quietly(marked)
            _close_quietly(items)
            del marked, items  # (so that a caller's gc frees the parser: _quiet_python_backend)
    if failure is not None:
        raise failure from None
    fd.num_events = n
    tail = _tail_keys(reader.tail()) if prefix != "item" else {}
    return fd, tail


def _whole_events(path: str, doc: WholeDoc) -> tuple[_FileData, dict[str, Any]]:
    """The whole-file reader's events and tail keys, exactly as :func:`_parse_events` finds them:
    the tail is looked for in the bytes from the start of the chunk of ``CHUNK`` bytes that holds
    the end of the last event, the window the streaming reader keeps."""
    fd = _FileData(path=path, rank=0, world_size=None, head={}, num_events=0)
    if doc.rows is not None:  # the compiled scanner sorted the events already (kinetoscan.py)
        fd.num_events, fd.gpu, fd.rt, fd.sync, fd.ann, fd.rpc = doc.rows
    else:
        fd.num_events = _collect(path, doc.events, fd)
    if doc.bare:
        return fd, {}
    start = (doc.last_event_end // CHUNK) * CHUNK if doc.last_event_end >= 0 else 0
    return fd, _tail_keys(doc.data[start:])


def _rank_from_name(path: str) -> int | None:
    m = _RANK_RE.search(Path(path).name)
    if not m:
        return None
    return int(m.group(1) or m.group(2))


def _read_file(path: str) -> _FileData:
    """One file: read at once when :func:`~tracegen.importers.jsonwhole.read_whole` can (at most
    :data:`WHOLE_FILE_MAX_BYTES` decompressed, nothing the two parsers read differently), else
    streamed; the same result either way (0 as the limit: always streamed)."""
    doc = read_whole(path, MAX_JSON_DEPTH, WHOLE_FILE_MAX_BYTES, _CATS) if WHOLE_FILE_MAX_BYTES > 0 else None
    if doc is not None:
        head = {k: v for k, v in doc.before.items() if k in _HEAD_KEYS}
        fd, tail = _whole_events(path, doc)
        del doc
    else:
        head, prefix = _read_head(path)
        if prefix is None:
            raise TraceFormatError("not a Kineto/Chrome trace: no 'traceEvents' array", path=path)
        fd, tail = _parse_events(path, prefix)
    for k, v in tail.items():
        if k in _HEAD_KEYS and k not in head:
            head[k] = v
    fd.head = head
    dist = head.get("distributedInfo") if isinstance(head.get("distributedInfo"), dict) else {}
    r = dist.get("rank")
    if isinstance(r, (int, float)) and not isinstance(r, bool) and r >= 0:
        if not r <= MAX_RANK:  # (a rank beyond any trace's, infinity too: refused before it is stored)
            raise TraceFormatError(f"'distributedInfo.rank' is beyond the largest rank MAX_RANK ({MAX_RANK:,})",
                                   path=path)
        fd.rank = int(r)
    else:
        named = _rank_from_name(path)
        if named is not None and named > MAX_RANK:
            raise TraceFormatError(f"the rank in the file name is beyond the largest rank MAX_RANK ({MAX_RANK:,})",
                                   path=path)
        fd.rank = named or 0
    ws = dist.get("world_size")
    fd.world_size = int(ws) if isinstance(ws, (int, float)) and not isinstance(ws, bool) and ws > 0 else None
    return fd


# --------------------------------------------------------------------------- column helpers


def _nth(i: int) -> str:
    """'the 3rd' (events are named by position, never by their name: names are data)."""
    n = i + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"the {n:,}{suffix}"


def _num(values: Iterable, what: str, names, path: str, *, nonneg: bool = False) -> np.ndarray:
    """Microsecond values -> float64 array, with errors naming the event."""
    vals = list(values)
    try:
        arr = np.array(vals, dtype=np.float64)
    except (TypeError, ValueError):
        for i, v in enumerate(vals):
            try:
                float(v)
            except (TypeError, ValueError):
                raise TraceFormatError(f"{_nth(i)} event of its kind has a non-numeric '{what}' (a {type(v).__name__})",
                                       path=path) from None
        raise
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceFormatError(f"{_nth(i)} event of its kind has a missing or NaN '{what}'; {int(bad.sum())} event(s) affected", path=path)
    if nonneg and (arr * 1000.0 > MAX_SPAN_NS).any():  # a duration no trace can hold (and no int64 either)
        i = int(np.flatnonzero(arr * 1000.0 > MAX_SPAN_NS)[0])
        raise TraceFormatError(f"{_nth(i)} event of its kind has a '{what}' longer than the {MAX_SPAN_NS / 86400e9:.0f} days a "
                               "trace may span", path=path)
    if nonneg and (arr < 0).any():
        i = int(np.flatnonzero(arr < 0)[0])
        raise TraceFormatError(
            f"{_nth(i)} event of its kind has a negative duration ({arr[i]:g} us); {int((arr < 0).sum())} event(s) affected",
            path=path,
        )
    return arr


def _ns(us: np.ndarray, base: float) -> np.ndarray:
    """round(us * 1000) relative to ``base`` us (exact for integer us; float error < 1 ns)."""
    ns = np.rint((us - base) * 1000.0)
    ns[~(np.abs(ns) < 2.0**62)] = -1  # out of any trace's range (the contract refuses it, naming the field)
    return ns.astype(np.int64)


def _ints(values: Iterable, default: int = -1) -> np.ndarray:
    """Integers from ints / floats / numeric strings / labels ('stream 7 ', 'GPU 0')."""
    vals = list(values)
    try:
        return np.array(vals, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.empty(len(vals), np.int64)
    cache: dict[Any, int] = {}
    for i, v in enumerate(vals):
        if isinstance(v, bool) or v is None:
            out[i] = default
        elif isinstance(v, int):
            out[i] = v if -(2**63) <= v < 2**63 else default
        elif isinstance(v, float):
            out[i] = int(v) if np.isfinite(v) and abs(v) < 2.0**63 else default
        elif not isinstance(v, str):
            raise TraceFormatError(f"an event has a JSON {_json_type(v)} where a number or a label belongs")
        else:
            r = cache.get(v)
            if r is None:
                m = _INT_RE.findall(str(v))
                r = int(m[-1]) if m else (zlib.crc32(str(v).encode()) & 0x7FFFFFFF)
                cache[v] = r
            out[i] = r
    return out


def _json_type(v: Any) -> str:
    return {dict: "object", list: "array", str: "string"}.get(type(v), type(v).__name__)


def _coll_type(name: str | None) -> str | None:
    if not name:
        return None
    s = str(name).strip().lower()
    if s.startswith("nccl:"):
        s = s[5:]
    s = s.lstrip("_")
    for suffix in ("_coalesced", "_base", "_into_tensor", "_tensor"):
        if s.endswith(suffix):
            s = s[: -len(suffix)]
    key = s.replace("_", "")
    return _COLL_ALIASES.get(key, s or None)


def _coll_from_kernel_name(name: str) -> str | None:
    m = re.match(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", name)
    return _coll_type(m.group(1)) if m else None


def _coll_bytes(args: dict) -> int:
    size = _DTYPE_SIZE.get(str(args.get("dtype", "")).lower().replace("c10::", "").replace("torch.", ""), 0)
    nel = args.get("In msg nelems") or args.get("Out msg nelems") or 0
    try:
        return int(nel) * size
    except (TypeError, ValueError):
        return 0


def _coll_group(args: dict) -> str | None:
    g = args.get("Process Group Name")
    if g not in (None, ""):
        return str(g)
    g = args.get("Process Group Ranks")
    return str(g) if g not in (None, "") else None


def _memcpy_kind(name: str) -> tuple[str | None, str | None]:
    m = _MEMCPY_RE.search(name)
    if not m:
        return None, None
    d = _MEMCPY_DIR.get(m.group(1).lower())
    if d is None:
        return None, None
    mem = None
    host_side = m.group(2) if d == CopyDir.H2D else m.group(3) if d == CopyDir.D2H else None
    if host_side:
        hs = host_side.strip().lower()
        if hs == "pinned":
            mem = HostMem.PINNED.label
        elif hs == "pageable":
            mem = HostMem.PAGEABLE.label
    return d.label, mem


# --------------------------------------------------------------------------- rows of one file


def _check_name_col(names: tuple, path: str, distinct: dict | None = None) -> None:
    """Every event's ``name`` is a string (a list or an object would reach every later step);
    ``distinct``: the distinct names when known (only those are looked at, unless one is wrong)."""
    if set(map(type, names if distinct is None else distinct)) != {str}:
        bad = next(v for v in names if type(v) is not str)
        raise TraceFormatError(f"an event's 'name' is a JSON {_json_type(bad)}, expected a string", path=path)
    if max(map(len, names if distinct is None else distinct), default=0) > MAX_NAME_CHARS:
        raise TraceFormatError(f"an event's 'name' is longer than {MAX_NAME_CHARS:,} characters "
                               "(fastrack_core.schema.MAX_NAME_CHARS)", path=path)


def _distinct(names: tuple) -> dict | None:
    """The distinct names in order of first appearance (dict keys), None if one is unhashable."""
    try:
        return dict.fromkeys(names)
    except TypeError:
        return None


def _codes(values: tuple, distinct: dict) -> tuple[np.ndarray, list]:
    """Dense codes of ``values`` (first appearance order) and the ``distinct`` values: the names
    repeat, so per-name work is done once per distinct name."""
    index = {v: i for i, v in enumerate(distinct)}
    return np.fromiter(map(index.__getitem__, values), np.int64, len(values)), list(index)


def _only_x(ph: tuple) -> np.ndarray | None:
    """Mask of the complete ('X') events, or None when all are."""
    return None if ph.count("X") == len(ph) else np.array([p == "X" for p in ph], bool)


def _concat_columns(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The parts (column arrays of equal length each) as one set of columns, exactly as
    ``pd.concat`` of their frames would make it (``ignore_index``, ``sort=False``): columns in order
    of first appearance; a column some part lacks is filled with NaN (int64 -> float64, bool -> object)."""
    lens = [len(next(iter(p.values()))) for p in parts]
    n = sum(lens)
    names: list[str] = []
    for p in parts:
        names += [c for c in p if c not in names]
    cols: dict[str, np.ndarray] = {}
    for c in names:
        have = [p.get(c) for p in parts]
        if all(a is not None for a in have):
            out = np.concatenate(have) if len(have) > 1 else have[0]
        else:
            kind = next(a for a in have if a is not None).dtype.kind
            out = np.full(n, np.nan, np.float64 if kind in "iuf" else object)
            at = 0
            for a, k in zip(have, lens):
                if a is not None:
                    out[at:at + k] = a.tolist() if kind == "b" else a
                at += k
        cols[c] = out
    return cols


def _frame_of(parts: list[dict[str, np.ndarray]], rank: int) -> RawColumns:
    """The raw ops of one file: the parts' columns (:func:`_concat_columns`) and the rank."""
    cols = _concat_columns(parts)
    n = sum(len(next(iter(p.values()))) for p in parts)
    cols["rank"] = np.full(n, rank, np.int64)
    return RawColumns(cols, n)


def _frame(fd: _FileData) -> RawColumns:
    """The raw-op frame of one file (:mod:`tracegen.deps` contract): columns built with numpy
    from the row lists, per-name work once per distinct name, one frame at the end."""
    path = fd.path
    rtc = tuple(zip(*fd.rt)) if fd.rt else None  # name, pid, tid, ts, dur, corr, ph
    gc_ = tuple(zip(*fd.gpu)) if fd.gpu else None  # code, name, pid, tid, ts, dur, corr, stream, device, bytes, ext, coll
    anc = tuple(zip(*fd.ann)) if fd.ann else None  # code, name, pid, tid, ts, dur, ph
    if not fd.gpu and not fd.rt:
        raise TraceFormatError(
            f"empty trace: no CUDA runtime calls and no GPU operations among {fd.num_events} events", path=path
        )
    rt_names = _distinct(rtc[0]) if rtc else None
    ann_names = _distinct(anc[1]) if anc else None
    for cols, index, distinct in ((rtc, 0, rt_names), (gc_, 1, None), (anc, 1, ann_names)):
        if cols is not None:
            _check_name_col(cols[index], path, distinct)
    ng, nr = len(fd.gpu), len(fd.rt)
    all_ts = (gc_[4] if gc_ else ()) + (rtc[3] if rtc else ()) + (anc[4] if anc else ())
    ts_all = _num(all_ts, "ts", None, path) if all_ts else np.zeros(1)
    base = float(np.floor(np.min(ts_all)))
    span_us = float(np.max(ts_all)) - base
    if span_us * 1000.0 > MAX_SPAN_NS:  # one wrong 'ts' would stretch the trace over years
        raise TraceFormatError(f"events' 'ts' span {span_us / 86400e6:,.1f} days; a trace may span at most "
                               f"{MAX_SPAN_NS / 86400e9:.0f} days: some 'ts' is wrong", path=path)
    parts: list[dict[str, np.ndarray]] = []

    # ---- host calls
    rt: dict[str, np.ndarray] = {}
    if rtc:
        name, pid, tid, _ts, dur, corr, ph = rtc
        keep = _ints(pid) != -1
        xs = _only_x(ph)
        if xs is not None:
            keep &= xs
        names = np.array(name, dtype=object)
        dur_a = _num(dur, "dur", None, path, nonneg=True)
        codes, uniq = _codes(name, rt_names)
        scope = np.array([_SYNC_SCOPE.get(n, "") for n in uniq], dtype=object)[codes]
        blocking = np.array([_SYNC_MEMCPY.match(n) is not None for n in uniq], bool)[codes]
        rt = {
            "kind": np.where(scope != "", int(OpKind.SYNC), int(OpKind.RUNTIME)), "name": names, "thread": _ints(tid),
            "start_ns": _ns(ts_all[ng:ng + nr], base), "dur_ns": np.rint(dur_a * 1000.0).astype(np.int64),
            "correlation": _ints(corr), "sync_scope": scope, "blocking": blocking,
        }  # fmt: skip
        if not keep.all():
            rt = {k: v[keep] for k, v in rt.items()}
        parts.append(rt)

    # ---- GPU ops
    if gc_:
        code, name, pid, tid, _ts, dur, corr, stream, device, nbytes, ext, coll = gc_
        names = np.array(name, dtype=object)
        code_a = np.array(code, np.int64)
        kind = np.array([_GPU_KIND[c] for c in range(_MS + 1)], np.int64)[code_a]
        dev = _ints(device)
        dev = np.where(dev < 0, _ints(pid), dev) if (dev < 0).any() else dev
        st = _ints(stream)
        st = np.where(st < 0, _ints(tid), st) if (st < 0).any() else st
        dur_a = _num(dur, "dur", None, path, nonneg=True)
        g = {
            "kind": kind, "name": names, "device": dev, "stream": st, "start_ns": _ns(ts_all[:ng], base),
            "dur_ns": np.rint(dur_a * 1000.0).astype(np.int64), "correlation": _ints(corr),
            "bytes": np.maximum(_ints(nbytes, 0), 0),
        }  # fmt: skip
        mc = np.flatnonzero(code_a == _MC)
        if len(mc):
            cache = {n: _memcpy_kind(n) for n in set(names[mc].tolist())}
            cd = np.full(ng, None, dtype=object)
            hm = np.full(ng, None, dtype=object)
            cd[mc] = [cache[n][0] for n in names[mc]]
            hm[mc] = [cache[n][1] for n in names[mc]]
            g["copy_dir"], g["host_mem"] = cd, hm
        ci = [i for i, c in enumerate(coll) if c is not None]
        if ci:
            _collectives(fd, g, ci, names, ext, coll, rtc)
        parts.append(g)
        # blocking D2H pageable async copies
        if rt and len(mc):
            pg = mc[(g["copy_dir"][mc] == CopyDir.D2H.label) & (g["host_mem"][mc] == HostMem.PAGEABLE.label)]
            if len(pg):
                rc = rt["correlation"]
                rt["blocking"][np.isin(rc, g["correlation"][pg]) & (rc >= 0)] = True

    # ---- cuda_sync hints onto host calls by correlation (the first hint of each correlation)
    if fd.sync and rt:
        sc, skind, sstream, wstream, wcorr, sdev = zip(*fd.sync)
        s_corr = _ints(sc)
        s_kind = np.array([str(k).strip() for k in skind], dtype=object)
        s_stream, w_stream, w_corr, s_dev = (_ints(c) for c in (sstream, wstream, wcorr, sdev))
        uc, first = np.unique(s_corr, return_index=True)
        rc = rt["correlation"]
        pos = np.minimum(np.searchsorted(uc, rc), len(uc) - 1)
        idx = np.flatnonzero(uc[pos] == rc)
        if len(idx):
            j = first[pos[idx]]
            sk, scope = s_kind[j], rt["sync_scope"][idx]
            s_stream, w_stream, w_corr, s_dev = s_stream[j], w_stream[j], w_corr[j], s_dev[j]
            for col in ("sync_stream", "event_corr", "record_stream", "wait_stream", "device"):
                rt[col] = np.full(len(rc), -1, np.int64)
            is_ss = (sk == "Stream Sync") & (scope == "stream")
            rt["sync_stream"][idx[is_ss]] = s_stream[is_ss]
            is_ev = ((sk == "Event Sync") & (scope == "event")) | (sk == "Stream Wait Event")
            rt["event_corr"][idx[is_ev]] = w_corr[is_ev]
            rt["record_stream"][idx[is_ev]] = w_stream[is_ev]
            is_wait = sk == "Stream Wait Event"
            rt["wait_stream"][idx[is_wait]] = s_stream[is_wait]
            is_dev = (scope == "device") & (s_dev >= 0)
            rt["device"][idx[is_dev]] = s_dev[is_dev]

    # ---- annotations: operators on CUDA-calling threads, profiler steps anywhere
    if anc:
        code, name, pid, tid, _ts, dur, ph = anc
        tid_a = _ints(tid)
        pid_a = _ints(pid)
        # names are strings (_check_name_col) and repeat: classify each distinct one once
        codes, uniq = _codes(name, ann_names)
        is_step = np.array([n[:1] == "P" and _STEP_RE.match(n) is not None for n in uniq], bool)[codes]
        is_marker = np.array([n[:8] == REQUEST_PREFIX and parse_request_marker(n) is not None for n in uniq],
                             bool)[codes]
        code_a = np.array(code, np.int64)
        cuda_threads = np.unique(rt["thread"]) if rt else EMPTY_I64
        keep = is_step | ((code_a == _OP) & np.isin(tid_a, cuda_threads) & (pid_a != -1))
        keep |= is_marker & (pid_a != -1)
        xs = _only_x(ph)
        if xs is not None:
            keep &= xs
        if keep.any():
            sel = np.flatnonzero(keep)
            dur_a = _num([dur[i] for i in sel.tolist()], "dur", None, path, nonneg=True)
            dur_a = np.where(is_marker[sel], 0.0, dur_a)  # a marker is the instant its range began
            parts.append(
                {"kind": np.full(len(sel), int(OpKind.CPU), np.int64), "name": np.array(name, dtype=object)[sel],
                 "thread": tid_a[sel], "start_ns": _ns(ts_all[ng + nr + sel], base),
                 "dur_ns": np.rint(dur_a * 1000.0).astype(np.int64)}
            )  # fmt: skip
    return _frame_of(parts, fd.rank)


EMPTY_I64 = np.zeros(0, np.int64)


def _collectives(fd: _FileData, g: dict[str, np.ndarray], ci: list[int], names, ext, coll, rtc) -> None:
    """Fill kind/coll_* of NCCL kernels (rows ``ci`` of the GPU columns ``g``; ``rtc``: the host
    call columns, or None)."""
    rpc_by_ext: dict[int, dict] = {}
    encl: dict[int, list] = {}  # thread -> sorted [(start_us, end_us, type, args)]
    for name, _pid, tid, ts, dur, x, a in fd.rpc:
        has = isinstance(a, dict) and "Collective name" in a
        if name == "record_param_comms" and has and isinstance(x, int) and x >= 0:
            rpc_by_ext.setdefault(x, a)
        try:
            t0, t1 = float(ts), float(ts) + float(dur or 0)
        except (TypeError, ValueError):
            continue
        typ = _coll_type(a.get("Collective name")) if has else (_coll_type(name) if name.startswith("nccl:") else None)
        encl.setdefault(_ints([tid])[0], []).append((t0, t1, typ, a if has else None))
    for lst in encl.values():
        lst.sort(key=lambda r: r[0])
    starts = {t: [r[0] for r in lst] for t, lst in encl.items()}
    corr = g["correlation"]
    # launching call of each collective kernel, by correlation: the first host call whose
    # correlation value is one of theirs (rows whose value reads as that integer, or as none)
    launch: dict[int, tuple[int, float]] = {}
    if rtc and encl:
        want_a = np.unique(corr[ci])
        want_a = want_a[want_a >= 0]
        want = set(want_a.tolist())
        rcorr = rtc[5]
        ra = _ints(rcorr)
        tids, tss = rtc[2], rtc[3]
        for i in np.flatnonzero(np.isin(ra, want_a) | (ra == -1)).tolist():
            c = rcorr[i]
            if c in want:
                try:
                    launch.setdefault(c, (_ints([tids[i]])[0], float(tss[i])))
                except (TypeError, ValueError):
                    pass
    kind = g["kind"].copy()
    ng = len(kind)
    ctype = np.full(ng, None, dtype=object)
    cgroup = np.full(ng, None, dtype=object)
    cbytes = np.zeros(ng, np.int64)
    for i in ci:
        a = coll[i]
        info = a if "Collective name" in a else None
        if info is None and isinstance(ext[i], int) and ext[i] >= 0:
            info = rpc_by_ext.get(ext[i])
        typ = None
        if info is None and int(corr[i]) in launch:
            tid, t = launch[int(corr[i])]
            lst = encl.get(tid, [])
            j = bisect_right(starts.get(tid, []), t) - 1
            while j >= 0:
                r = lst[j]
                if r[0] <= t <= r[1]:
                    if r[3] is not None:
                        info = r[3]
                        break
                    if typ is None and r[2]:
                        typ = r[2]
                elif r[1] < t and r[0] < t - 1e6:  # far before: stop scanning
                    break
                j -= 1
        if info is not None:
            typ = _coll_type(info.get("Collective name")) or typ
            cgroup[i] = _coll_group(info)
            cbytes[i] = _coll_bytes(info)
        ctype[i] = typ or _coll_from_kernel_name(names[i]) or "unknown"
        kind[i] = int(OpKind.COLLECTIVE)
    g["kind"] = kind
    g["coll_type"], g["coll_group"], g["coll_bytes"] = ctype, cgroup, cbytes
    is_coll = kind == int(OpKind.COLLECTIVE)
    g["bytes"] = np.where(is_coll, cbytes, g["bytes"])


# --------------------------------------------------------------------------- public API


def expand_inputs(paths: Iterable[str | os.PathLike]) -> list[str]:
    """Files named, with each directory replaced by its ``*.json`` / ``*.json.gz`` / ``*.gz``
    files (sorted; not recursive)."""
    out: list[str] = []
    for p in paths:
        p = str(p)
        if os.path.isdir(p):
            files = sorted(
                os.path.join(p, f)
                for f in os.listdir(p)
                if os.path.isfile(os.path.join(p, f)) and re.search(r"\.(json|gz)$", f, re.I)
            )
            if not files:
                raise TraceFormatError("directory holds no trace files (*.json, *.json.gz)", path=p)
            out.extend(files)
        else:
            if not os.path.exists(p):
                raise TraceFormatError("no such file", path=p)
            out.append(p)
    if not out:
        raise TraceFormatError("no input files")
    return out


def read(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> RawImport:
    """Parse Kineto files (or directories of them) into a raw-op frame and whitelisted metadata."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = expand_inputs(paths)
    datas: list[_FileData] = []
    frames: list[RawColumns] = []
    by_rank: dict[int, str] = {}
    for p in files:
        with no_gc():
            fd = _read_file(p)
        if fd.rank in by_rank:
            raise TraceFormatError(f"rank {fd.rank} appears twice: in {by_rank[fd.rank]} and in {p}", path=p)
        by_rank[fd.rank] = p
        with no_gc():
            try:
                frames.append(_frame(fd))
            except TraceFormatError as exc:  # a helper that does not know the file: name it here
                if exc.path is None:
                    exc.path = p
                raise
        fd.gpu = fd.rt = fd.sync = fd.ann = fd.rpc = []  # free memory early
        datas.append(fd)
    sizes = {fd.world_size for fd in datas if fd.world_size is not None}
    if len(sizes) > 1:
        desc = ", ".join(f"{Path(fd.path).name} (world size {fd.world_size})" for fd in datas if fd.world_size is not None)
        raise TraceFormatError(f"files come from jobs of different world sizes: {desc}")
    raw = frames[0] if len(frames) == 1 else RawColumns(_concat_columns([f.columns for f in frames]),
                                                        sum(len(f) for f in frames))
    meta = _metadata(datas, raw, sizes)
    return RawImport(raw=raw, metadata=meta, num_events=sum(fd.num_events for fd in datas), files=files)


def _metadata(datas: list[_FileData], raw: RawColumns, sizes: set[int]) -> dict[str, Any]:
    models: list[str] = []
    versions: dict[str, str] = {}
    rank, gpu = raw["rank"], raw["kind"] >= int(OpKind.KERNEL)
    device = raw["device"] if "device" in raw else None
    for fd in datas:
        head = fd.head
        props = head.get("deviceProperties")
        mine = gpu & (rank == fd.rank)  # the file's GPU ops: the device most of them ran on
        used = Counter(device[mine].tolist()).most_common(1) if device is not None and mine.any() else []
        if isinstance(props, list) and props:
            match = [d for d in props if isinstance(d, dict) and used and d.get("id") == used[0][0]]
            d = match[0] if match else props[0] if isinstance(props[0], dict) else {}
            if isinstance(d.get("name"), str) and d["name"] not in models:
                models.append(d["name"])
        for key, label in _VERSION_KEYS.items():
            v = head.get(key)
            if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                versions.setdefault(label, str(v))
        dist = head.get("distributedInfo")
        if isinstance(dist, dict) and isinstance(dist.get("nccl_version"), (str, int)):
            versions.setdefault("nccl", str(dist["nccl_version"]))
        if isinstance(dist, dict) and isinstance(dist.get("backend"), str):
            versions.setdefault("distributed_backend", dist["backend"])
    meta: dict[str, Any] = {
        "source_format": "kineto-json",
        "source_files": [Path(fd.path).name for fd in datas],
        "capture_tool": "PyTorch Profiler",
        "tool_versions": versions,
        "ranks": sorted(fd.rank for fd in datas),
        "emulated": False,
        "device_model": None,
        "trace_name": Path(datas[0].path).name if len(datas) == 1 else Path(datas[0].path).parent.name,
    }
    if models:
        meta["gpu_model"] = " / ".join(models)
    if sizes:
        meta["world_size"] = sizes.pop()
    return meta


def read_kineto(paths) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``(raw ops as a pandas DataFrame, metadata)`` of Kineto trace file(s); see :mod:`tracegen.deps`."""
    imp = read(paths)
    return as_frame(imp.raw), imp.metadata


def import_kineto(paths) -> tuple[Any, dict[str, Any]]:
    """``(pyarrow table of schema v1, metadata)`` of Kineto trace file(s)."""
    imp = read(paths)
    label = imp.files[0] if len(imp.files) == 1 else None
    return derive_dependencies(imp.raw, path=label), imp.metadata


__all__ = ["sniff", "read", "read_kineto", "import_kineto", "expand_inputs"]
