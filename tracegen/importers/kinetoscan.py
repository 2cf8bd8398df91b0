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

The scanner is used when the extension is built and the environment variable
:data:`ENV_SWITCH` (``FASTRACK_NO_NATIVE_JSON``) is unset, empty or ``0``; set to anything else it
forces the Python path (tests and comparisons). ``tests/test_kineto_scan.py`` proves both paths
give the same result: the real traces of ``tests/data``, generated documents (hypothesis) and
damaged ones, and the Parquet written by ``tracegen convert``.
"""

from __future__ import annotations

import os

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


__all__ = ["ENV_SWITCH", "enabled", "scan"]
