"""Reading the raw ops of an importer: defaults, typed columns, validation, annotations.

The contract is in :mod:`tracegen.deps`: a pandas DataFrame or a :class:`RawColumns` (plain numpy
columns; the Kineto importer's, so that a Kineto convert never imports pandas). :func:`read_raw_ops`
turns either into :class:`RawOps`, one numpy array per column, or raises :class:`TraceFormatError`.
Only a DataFrame input, or an object column that must be read as numbers, imports pandas.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from fastrack_core.errors import TraceFormatError
from fastrack_core.markers import REQUEST_PREFIX, parse_request_marker
from fastrack_core.schema import OpKind
from fastrack_core.traceio import COLUMN_DEFAULTS
from tracegen.deps.search import EMPTY, factorize

if TYPE_CHECKING:
    import pandas as pd

HINT_COLUMNS: dict[str, Any] = {
    "sync_stream": -1,
    "sync_scope": "",
    "event_corr": -1,
    "record_stream": -1,
    "wait_stream": -1,
    "blocking": False,
}
RAW_DEFAULTS: dict[str, Any] = {**COLUMN_DEFAULTS, **HINT_COLUMNS}
SCOPE_CODES = {"": 0, "stream": 1, "event": 2, "device": 3}
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


class RawColumns:
    """Raw ops as plain columns: name -> numpy array (all of one length), in column order. Object
    columns hold Python values, None or NaN where missing; numeric columns follow pandas' concat
    dtypes (an int column some rows lack is float64 with NaN). ``frame()`` is the same as a
    pandas DataFrame (imports pandas)."""

    def __init__(self, columns: dict[str, np.ndarray], length: int):
        self.columns = columns
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        cols = [pd.Series(a, dtype=object, copy=False) if a.dtype == object else a for a in self.columns.values()]
        # (column labels as plain objects: a pandas string index is Arrow-backed, and the first Arrow
        # string array of a process costs ~15-30 ms)
        frame = pd.DataFrame(dict(enumerate(cols)))
        frame.columns = pd.Index(list(self.columns), dtype=object)
        return frame


RawInput = Union["pd.DataFrame", RawColumns]


def as_frame(raw: RawInput) -> pd.DataFrame:
    """``raw`` as a pandas DataFrame (imports pandas for a :class:`RawColumns`)."""
    return raw.frame() if isinstance(raw, RawColumns) else raw


def _isna(v: np.ndarray) -> np.ndarray:
    """pandas' ``isna`` of a numpy column of :class:`RawColumns` (object: None or a float NaN)."""
    if v.dtype == object:
        return np.equal(v, None) | np.not_equal(v, v) if len(v) else np.zeros(0, bool)
    if v.dtype.kind in "fc":
        return np.isnan(v)
    return np.zeros(len(v), bool)


def _series(v: np.ndarray):
    """An object column of :class:`RawColumns` as the pandas Series a DataFrame would hold."""
    import pandas as pd

    return pd.Series(v, dtype=object, copy=False)


_INT64_EDGE = 2.0**63  # the first double past int64: a column read as doubles must stay below it


def int_col(raw: RawInput, name: str, path: str | None) -> np.ndarray:
    if name not in raw:
        return np.full(len(raw), RAW_DEFAULTS[name], np.int64)
    s = raw[name]
    if isinstance(s, np.ndarray):
        if s.dtype.kind in "iu":
            return s.astype(np.int64, copy=False)
        if s.dtype.kind not in "fb":
            s = _series(s)
    if s.dtype.kind in "iu":
        return s.to_numpy(np.int64)
    try:
        if isinstance(s, np.ndarray):
            v = s.astype(np.float64)
        else:
            import pandas as pd

            v = s.to_numpy(np.float64) if isinstance(s.dtype, np.dtype) and s.dtype.kind == "f" else (
                pd.to_numeric(s, errors="raise").to_numpy(np.float64, na_value=np.nan))
    except (ValueError, TypeError):
        raise TraceFormatError(f"raw column '{name}' is not numeric", path=path) from None
    if np.isnan(v).any():
        v = np.where(np.isnan(v), RAW_DEFAULTS.get(name, -1), v)
    v = np.rint(v)
    if v.size and not (np.abs(v) < _INT64_EDGE).all():  # (inf, or past int64 once rounded to a double)
        raise TraceFormatError(f"raw column '{name}': a value is outside the 64-bit integer range", path=path)
    return v.astype(np.int64)


def obj_col(raw: RawInput, name: str, rows: np.ndarray | None = None) -> np.ndarray:
    """Column ``name`` (of the ``rows`` given, else all) as an object array, missing values None."""
    n = len(raw) if rows is None else len(rows)
    if name not in raw:
        return np.full(n, RAW_DEFAULTS.get(name), dtype=object)
    s = raw[name]
    if isinstance(s, np.ndarray):
        v = s.astype(object) if rows is None else s[rows].astype(object)
        v[_isna(v)] = None
        return v
    if rows is None:
        return s.to_numpy(dtype=object, na_value=None)
    import pandas as pd

    v = s.to_numpy(dtype=object)[rows]
    v[pd.isna(v)] = None
    return v


def map_unique(values: np.ndarray, func) -> np.ndarray:
    """``func`` applied to each distinct value of an object array (hash-factorized, so cheap on
    repeated strings)."""
    codes, uniq = factorize(values)
    mapped = np.empty(len(uniq) + 1, dtype=object)
    mapped[:-1] = [func(u) for u in uniq]
    mapped[-1] = func(None)
    return mapped[codes]


def label_col(raw: RawInput, name: str, enum_cls, rows: np.ndarray | None = None) -> np.ndarray:
    """copy_dir / host_mem given as labels or enum ints -> object array of label or None (of the
    ``rows`` given, else all)."""
    v = obj_col(raw, name, rows)

    def label(x):
        if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
            try:
                return enum_cls(int(x)).label
            except ValueError:
                return None
        return x if isinstance(x, str) and x else None

    return map_unique(v, label) if len(v) else v


@dataclasses.dataclass
class RawOps:
    """The raw-op frame as typed arrays, one entry per raw row."""

    frame: RawInput
    path: str | None
    kind: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    end: np.ndarray
    rank: np.ndarray
    device: np.ndarray
    thread: np.ndarray
    stream: np.ndarray
    corr: np.ndarray
    step_in: np.ndarray
    name_code: np.ndarray  # per row: index into name_values, -1 for a missing name
    name_values: np.ndarray  # the distinct names (object array), in order of first appearance
    sync_stream: np.ndarray
    event_corr: np.ndarray
    record_stream: np.ndarray
    wait_stream: np.ndarray
    scope: np.ndarray  # SCOPE_CODES value
    blocking: np.ndarray
    marker: np.ndarray  # a request marker (fastrack_core.markers): a zero-duration CPU row written out as a host op

    @functools.cached_property
    def names(self) -> np.ndarray:
        """Name of every row (object array; None where missing)."""
        return np.append(self.name_values, None)[self.name_code]

    def map_names(self, func, rows: np.ndarray) -> np.ndarray:
        """``func`` of the name of each of ``rows`` (object array), computed once per distinct
        name (``func(None)`` for a missing one)."""
        mapped = np.empty(len(self.name_values) + 1, dtype=object)
        mapped[:-1] = [func(u) for u in self.name_values]
        mapped[-1] = func(None)
        return mapped[self.name_code[rows]]

    @property
    def is_host(self) -> np.ndarray:
        """CUDA runtime/driver calls, and request markers."""
        return (self.kind == OpKind.RUNTIME) | (self.kind == OpKind.SYNC) | self.marker

    @property
    def is_gpu(self) -> np.ndarray:
        """Kernels, copies, sets, collectives."""
        return self.kind >= OpKind.KERNEL


def _check_times(raw: RawInput, path: str | None) -> None:
    for c in ("start_ns", "dur_ns"):
        s = raw[c]
        if s.dtype.kind in "iu":
            continue
        if isinstance(s, np.ndarray) and s.dtype.kind in "fb":
            f = s.astype(np.float64)
        else:
            import pandas as pd

            s = _series(s) if isinstance(s, np.ndarray) else s
            f = pd.to_numeric(s, errors="coerce").to_numpy(np.float64, na_value=np.nan)
        bad = np.flatnonzero(~np.isfinite(f))
        if bad.size:
            i = int(bad[0])
            raise TraceFormatError(
                f"field '{c}' of raw op {i} is not a finite number; "
                f"{bad.size} op(s) affected",
                path=path,
            )


def _scope_codes(raw: RawInput, path: str | None) -> np.ndarray:
    if "sync_scope" not in raw:
        return np.zeros(len(raw), np.int64)
    s = raw["sync_scope"]
    values = s.astype(object) if isinstance(s, np.ndarray) else s.to_numpy(dtype=object, na_value=None)
    sc = map_unique(  # (missing values are factorized as missing: no need to make them None first)
        values, lambda x: SCOPE_CODES.get("" if x is None else str(x).strip().lower(), -1),
    ).astype(np.int64)
    if (sc < 0).any():
        i = int(np.flatnonzero(sc < 0)[0])
        bad = s[i] if isinstance(s, np.ndarray) else s.iloc[i]
        raise TraceFormatError(f"unknown sync_scope {bad!r} in raw ops", path=path)
    return sc


def _names(raw: RawInput) -> np.ndarray:
    """The name column as an object array (missing: None or NaN) for :func:`factorize`."""
    s = raw["name"]
    return s.astype(object, copy=False) if isinstance(s, np.ndarray) else s.to_numpy(dtype=object, na_value=None)


def _blocking(raw: RawInput) -> np.ndarray:
    if "blocking" not in raw:
        return np.zeros(len(raw), bool)
    s = raw["blocking"]
    if not isinstance(s, np.ndarray):
        return s.fillna(False).to_numpy(bool)
    if s.dtype == bool:
        return s.copy()
    v = s.astype(object)
    v[_isna(v)] = False
    return v.astype(bool)


def read_raw_ops(raw: RawInput, path: str | None) -> RawOps:
    """Typed, validated arrays of ``raw`` (errors name ``path``)."""
    if len(raw) == 0:
        raise TraceFormatError("empty trace: no operations", path=path)
    for c in ("kind", "name", "start_ns", "dur_ns"):
        if c not in raw:
            raise TraceFormatError(f"raw ops lack column '{c}'", path=path)
    _check_times(raw, path)
    kind = int_col(raw, "kind", path)
    start = int_col(raw, "start_ns", path)
    dur = int_col(raw, "dur_ns", path)
    badk = (kind < 0) | (kind > max(OpKind))
    if badk.any():
        raise TraceFormatError(f"unknown op kind {int(kind[badk][0])} in raw ops", path=path)
    neg = np.flatnonzero(dur < 0)
    if neg.size:
        i = int(neg[0])
        raise TraceFormatError(
            f"raw op {i} has a negative duration ({int(dur[i])} ns); {neg.size} op(s) affected",
            path=path,
        )
    # names are factorized once, in row order (their objects lie in memory in that order; a pass
    # in any other order is bound by cache misses); later steps work on the codes
    name_code, name_values = factorize(_names(raw))
    ops = RawOps(
        frame=raw, path=path, kind=kind, start=start, dur=dur, end=start + dur,
        rank=int_col(raw, "rank", path),
        device=int_col(raw, "device", path),
        thread=int_col(raw, "thread", path),
        stream=int_col(raw, "stream", path),
        corr=int_col(raw, "correlation", path),
        step_in=int_col(raw, "step", path),
        name_code=name_code, name_values=name_values,
        sync_stream=int_col(raw, "sync_stream", path),
        event_corr=int_col(raw, "event_corr", path),
        record_stream=int_col(raw, "record_stream", path),
        wait_stream=int_col(raw, "wait_stream", path),
        scope=_scope_codes(raw, path),
        blocking=_blocking(raw),
        marker=np.zeros(len(raw), bool),
    )
    cpu0 = np.flatnonzero((kind == OpKind.CPU) & (dur == 0))
    if cpu0.size:
        ops.marker[cpu0] = ops.map_names(_is_request_marker, cpu0).astype(bool)
    if not (ops.is_host.any() or ops.is_gpu.any()):
        raise TraceFormatError("empty trace: no CUDA calls and no GPU operations", path=path)
    return ops


@dataclasses.dataclass
class Annotations:
    """CPU rows: ``ProfilerStep#N`` intervals (steps) and operator annotations (gap names)."""

    step_rows: np.ndarray  # raw row of each step interval
    step_numbers: np.ndarray  # its N
    operator_rows: np.ndarray  # raw rows of the other annotations


def _is_request_marker(name) -> bool:
    return isinstance(name, str) and name.startswith(REQUEST_PREFIX) and parse_request_marker(name) is not None


def annotations(ops: RawOps) -> Annotations:
    a_idx = np.flatnonzero((ops.kind == OpKind.CPU) & ~ops.marker)

    def step_no(x):
        m = _STEP_RE.match(x) if isinstance(x, str) else None
        return int(m.group(1)) if m else -1

    a_step = ops.map_names(step_no, a_idx).astype(np.int64) if len(a_idx) else EMPTY
    a_is_step = a_step >= 0
    return Annotations(step_rows=a_idx[a_is_step], step_numbers=a_step[a_is_step], operator_rows=a_idx[~a_is_step])
