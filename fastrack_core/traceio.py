"""Reading and writing Parquet traces of the Fastrack schema.

Writers go through :func:`write_trace`, which validates the table against the contract and
writes atomically (temporary file in the same folder, then rename), so a failed run never
leaves a half-written trace behind.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fastrack_core.version import __version__
from fastrack_core.atomic import atomic_path
from fastrack_core.errors import SchemaError, TraceFormatError
from fastrack_core.sniff import not_a_parquet_trace_hint
from fastrack_core.schema import (
    ARROW_SCHEMA,
    COLUMNS,
    METADATA_KEY,
    MAX_SPAN_NS,
    OP_KIND_BY_LABEL,
    SCHEMA_VERSION,
    VALUE_RANGES,
    DepKind,
    clean_metadata,
    encode_metadata,
)

# Defaults used by make_table for columns a writer does not provide.
COLUMN_DEFAULTS: dict[str, Any] = {
    "rank": 0,
    "device": -1,
    "thread": -1,
    "stream": -1,
    "bytes": 0,
    "copy_dir": None,
    "host_mem": None,
    "coll_type": None,
    "coll_bytes": 0,
    "coll_group": None,
    "coll_seq": -1,
    "correlation": -1,
    "step": -1,
}
_REQUIRED = ("op_id", "kind", "name", "start_ns", "dur_ns")


@dataclass
class Trace:
    """A trace in memory: the Arrow table (schema v1) and its whitelisted metadata."""

    table: pa.Table
    metadata: dict[str, Any] = field(default_factory=dict)
    path: str | None = None

    @property
    def num_ops(self) -> int:
        return self.table.num_rows

    def drop_columns(self) -> "Trace":
        """Drop the table's columns in place (``num_ops``, metadata and path stay) and hand their
        memory back to the system; returns this trace. For a reader that has taken what it needs
        from a trace it read itself (replay.pipeline.run.load_graph)."""
        self.table = self.table.select([])
        pa.default_memory_pool().release_unused()
        return self

    def column(self, name: str) -> np.ndarray:
        """A column as numpy (dictionary columns decoded to an object array of str/None; a
        fixed-width numeric column without nulls as a read-only view, :func:`as_numpy`)."""
        col = self.table.column(name)
        if col.type in _NUMPY_OF:
            return as_numpy(col)  # (no pandas import: pyarrow's converter would cost ~0.3 s of a replay)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        return col.to_numpy(zero_copy_only=False)


def as_numpy(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A fixed-width numeric Arrow column as numpy, without pyarrow's pandas-backed converter
    (``to_numpy`` imports pandas, ~0.5 s of a replay's start-up). Zero-copy (read-only) for one
    chunk without nulls; anything else (nulls, non-numeric types) falls back to ``to_numpy``."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    dtype = _NUMPY_OF.get(col.type)
    if dtype is None or any(c.null_count for c in chunks):
        return col.to_numpy(zero_copy_only=False) if isinstance(col, pa.ChunkedArray) else col.to_numpy(
            zero_copy_only=False)
    parts = [buffer_values(c, dtype) for c in chunks if len(c)]
    if not parts:
        return np.zeros(0, dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def buffer_values(arr: pa.Array, dtype: np.dtype) -> np.ndarray:
    """The values buffer of a fixed-width Arrow array as a read-only numpy view (slots of nulls
    included, with whatever they hold: see :func:`validity`)."""
    dtype = np.dtype(dtype)
    return np.frombuffer(arr.buffers()[1], dtype, count=len(arr), offset=arr.offset * dtype.itemsize)


def validity(arr: pa.Array) -> np.ndarray | None:
    """Which slots of an Arrow array hold a value (bool), from its validity bitmap; None when
    it has no nulls."""
    if not arr.null_count:
        return None
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], np.uint8), bitorder="little")
    return bits[arr.offset:arr.offset + len(arr)].astype(bool)


def one_chunk(col: pa.ChunkedArray) -> pa.Array:
    """A column as one Arrow array: its only chunk as it is (``combine_chunks`` copies even a single
    chunk), else the chunks concatenated."""
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


_NUMPY_OF = {pa.int8(): np.dtype(np.int8), pa.int16(): np.dtype(np.int16), pa.int32(): np.dtype(np.int32),
             pa.int64(): np.dtype(np.int64), pa.uint8(): np.dtype(np.uint8), pa.uint16(): np.dtype(np.uint16),
             pa.uint32(): np.dtype(np.uint32), pa.uint64(): np.dtype(np.uint64),
             pa.float32(): np.dtype(np.float32), pa.float64(): np.dtype(np.float64)}


def make_table(columns: Mapping[str, Any]) -> pa.Table:
    """Build a schema-v1 table from column arrays (lists or numpy), filling defaults.

    ``deps`` and ``dep_kinds`` may be given as lists of lists, or both omitted (no deps).
    """
    missing = [c for c in _REQUIRED if c not in columns]
    if missing:
        raise SchemaError(f"cannot build a trace without column(s) {', '.join(missing)}")
    unknown = sorted(set(columns) - set(COLUMNS))
    if unknown:
        raise SchemaError(f"unknown column(s) {', '.join(unknown)}")
    n = len(columns["op_id"])
    arrays = []
    for name, (typ, _nullable, _doc) in COLUMNS.items():
        if name in columns:
            values = columns[name]
        elif name in ("deps", "dep_kinds"):
            values = [[] for _ in range(n)]
        else:
            values = [COLUMN_DEFAULTS[name]] * n
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            arr = values.cast(typ) if values.type != typ else values
        elif pa.types.is_dictionary(typ):
            arr = pa.array(list(values) if isinstance(values, np.ndarray) else values, pa.string())
            arr = arr.dictionary_encode()
            if arr.type != typ:
                arr = arr.cast(typ)
        else:
            arr = pa.array(values, typ)
        if len(arr) != n:
            raise SchemaError(f"column '{name}' has {len(arr)} values, expected {n}")
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)


def validate_table(table: pa.Table, path: str | None = None, partial: bool = False) -> None:
    """Check a table against the contract: columns, types, values. Raises SchemaError.
    ``partial``: the table holds only some columns (a reader asked for them); check those."""
    names = table.schema.names
    for name, (_typ, nullable, _doc) in COLUMNS.items():
        if name not in names:
            continue
        _check_columns(table.schema, path, partial, only=name)
        if not nullable and table.column(name).null_count:
            raise SchemaError(f"column '{name}' has {table.column(name).null_count} null value(s)", path=path)
    _check_columns(table.schema, path, partial)
    if table.num_rows == 0:
        raise SchemaError("empty trace: no operations", path=path)
    _check_ranges(table, path)
    if "op_id" in names and not _increasing(table.column("op_id")):
        ids = as_numpy(table.column("op_id"))
        if np.unique(ids).size != ids.size:
            u, c = np.unique(ids, return_counts=True)
            raise SchemaError(f"field 'op_id' is not unique: op {int(u[c > 1][0])} appears {int(c[c > 1][0])} times",
                              path=path)
    if "kind" in names:
        unknown = sorted(str(k) for k in set(distinct_values(table.column("kind"))) - set(OP_KIND_BY_LABEL))
        if unknown:
            raise SchemaError(f"field 'kind' has {len(unknown)} unknown value(s); expected one of "
                              f"{', '.join(OP_KIND_BY_LABEL)}", path=path)
    if "deps" not in names or "dep_kinds" not in names:
        return
    d_col, dk_col = table.column("deps"), table.column("dep_kinds")
    if [len(c) for c in d_col.chunks] == [len(c) for c in dk_col.chunks]:  # chunk by chunk, no copy
        pairs = list(zip(d_col.chunks, dk_col.chunks))
    else:
        pairs = [(one_chunk(d_col), one_chunk(dk_col))]
    top = max((int(v.max()) for v in (_list_values(dk) for _, dk in pairs) if v.size), default=0)
    if top > max(DepKind):
        raise SchemaError(f"field 'dep_kinds' has unknown code {top}", path=path)
    for d, dk in pairs:
        if len(d):
            d_off, dk_off = as_numpy(d.offsets), as_numpy(dk.offsets)  # (of a slice: not from 0)
            if not np.array_equal(d_off - d_off[0], dk_off - dk_off[0]):
                raise SchemaError("fields 'deps' and 'dep_kinds' differ in length on some op", path=path)


def _list_values(lists: pa.ListArray) -> np.ndarray:
    """The items of a list array, as ``flatten`` gives them, from its offsets and values (``flatten``
    imports pyarrow.compute, ~0.13 s of a replay); null lists go through ``flatten``."""
    if lists.null_count:
        return as_numpy(lists.flatten())
    off = as_numpy(lists.offsets)
    return as_numpy(lists.values.slice(int(off[0]), int(off[-1] - off[0]))) if len(lists) else np.zeros(0, np.int8)


def _increasing(col: pa.ChunkedArray) -> bool:
    """Whether a (non-null integer) column strictly increases, chunk by chunk (no copy)."""
    last = None
    for c in col.chunks:
        if not len(c):
            continue
        v = as_numpy(c)
        if not np.all(v[1:] > v[:-1]) or (last is not None and v[0] <= last):
            return False
        last = v[-1]
    return True


def _check_columns(schema: pa.Schema, path: str | None, partial: bool = False, only: str | None = None) -> None:
    """Every column of the contract present (unless ``partial``) and of its type (``only``: check
    that one column's type)."""
    names = schema.names
    if only is None:
        missing = [c for c in COLUMNS if c not in names]
        if missing and not partial:
            raise SchemaError(
                f"not a Fastrack trace (schema v{SCHEMA_VERSION}): missing column(s) {', '.join(missing)}",
                path=path,
            )
    for name, (typ, _nullable, _doc) in COLUMNS.items():
        if name not in names or (only is not None and name != only):
            continue
        got = schema.field(name).type
        if got != typ and not (pa.types.is_dictionary(typ) and got in (pa.string(), pa.large_string())):
            raise SchemaError(f"column '{name}' has type {got}, expected {typ}", path=path)


def _check_unread(pf: pq.ParquetFile, schema: pa.Schema, read: list[str], path: str) -> None:
    """The contract on the columns a partial read skipped, as a full read would check it: every
    column present and of its type (the footer's schema), and no nulls where none are allowed and
    values inside their ranges (the row groups' statistics). A column whose statistics are missing
    or show a violation is read (with op_id, to name the op) and checked as in a full read."""
    _check_columns(schema, path)
    meta = pf.metadata
    leaf = {pf.schema.column(j).path: j for j in range(meta.num_columns)}
    suspect = []
    for name, (_typ, nullable, _doc) in COLUMNS.items():
        limits = VALUE_RANGES.get(name)
        if name in read or (nullable and limits is None):
            continue
        for i in range(meta.num_row_groups):
            st = meta.row_group(i).column(leaf[name]).statistics if name in leaf else None
            if (st is None or not st.has_null_count or (not nullable and st.null_count)
                    or (limits is not None and st.null_count < meta.row_group(i).num_rows
                        and not (st.has_min_max and limits[0] <= st.min and st.max <= limits[1]))):
                suspect.append(name)
                break
    if suspect:
        validate_table(pf.read(columns=["op_id", *suspect]), path, partial=True)


def _valid_values(col: pa.ChunkedArray) -> list[np.ndarray] | None:
    """The non-null values of a fixed-width column, chunk by chunk, read from the Arrow buffers (no
    pyarrow.compute, whose import costs ~0.13 s of a replay); None for any other type."""
    dtype = _NUMPY_OF.get(col.type)
    if dtype is None:
        return None
    out = []
    for c in col.chunks:
        if not len(c):
            continue
        values, valid = buffer_values(c, dtype), validity(c)
        out.append(values if valid is None else values[valid])
    return out


def _min_max(col: pa.ChunkedArray) -> tuple[int | None, int | None]:
    parts = _valid_values(col)
    if parts is None:
        import pyarrow.compute as pc

        mm = pc.min_max(col).as_py()
        return mm["min"], mm["max"]
    parts = [v for v in parts if v.size]
    if not parts:
        return None, None
    return min(int(v.min()) for v in parts), max(int(v.max()) for v in parts)


def _check_ranges(table: pa.Table, path: str | None) -> None:
    """Every integer column inside its documented range (fastrack_core.schema.VALUE_RANGES), and every
    op ending inside the span a trace may cover."""
    names = table.schema.names
    for name, (lo, hi, why) in VALUE_RANGES.items():
        if name not in names:
            continue
        col = table.column(name)
        mn, mx = _min_max(col)
        if mn is None or (lo <= mn and mx <= hi):
            continue
        values = col.to_numpy()
        bad = np.flatnonzero((values < lo) | (values > hi))
        _range_error(table, name, int(bad[0]), int(values[bad[0]]), bad.size, f"outside [{lo}, {hi}]: {why}", path)
    if "start_ns" not in names or "dur_ns" not in names:
        return
    start, dur = table.column("start_ns"), table.column("dur_ns")
    if start.null_count or dur.null_count or start.type != pa.int64() or dur.type != pa.int64():
        import pyarrow.compute as pc

        end = pc.add_checked(start, dur).to_numpy()
    else:  # both inside [0, 2^50] (checked above): the sum cannot overflow
        end = as_numpy(start) + as_numpy(dur)
    if end.size and int(end.max()) > MAX_SPAN_NS:
        bad = np.flatnonzero(end > MAX_SPAN_NS)
        _range_error(table, "dur_ns", int(bad[0]), int(end[bad[0]]), bad.size,
                     f"ends at {int(end[bad[0]])} ns, beyond the 2^50 ns a trace may span", path, show=False)


def _range_error(table, name, row, value, count, what, path, show=True):
    op = int(table.column("op_id")[row].as_py()) if name != "op_id" and "op_id" in table.schema.names else None
    where = f"field '{name}' of op {op}" if op is not None else f"field '{name}' of row {row}"
    got = f" is {value}," if show else ""
    raise SchemaError(f"{where}{got} {what}; {count} op(s) affected", path=path)


def distinct_values(col: pa.ChunkedArray) -> list:
    """The distinct values of a column, None included when it has nulls, in no particular order.
    Dictionary and fixed-width columns are read from their Arrow buffers (no pyarrow.compute, whose
    import costs ~0.13 s of a replay); anything else goes through ``pyarrow.compute.unique``."""
    found: set = set()
    if pa.types.is_dictionary(col.type) and col.type.index_type in _NUMPY_OF:
        idx_dtype = _NUMPY_OF[col.type.index_type]
        for c in col.chunks:
            if not len(c):
                continue
            idx, valid = buffer_values(c.indices, idx_dtype), validity(c)
            if valid is not None:
                found.add(None)
                idx = idx[valid]
            used = np.flatnonzero(np.bincount(idx.astype(np.int64), minlength=len(c.dictionary)))
            words = c.dictionary.to_pylist()
            found.update(words[int(i)] for i in used)
        return list(found)
    parts = _valid_values(col)
    if parts is None:
        import pyarrow.compute as pc

        u = pc.unique(col)
        if pa.types.is_dictionary(u.type):
            u = u.cast(u.type.value_type)
        return u.to_pylist()
    for v in parts:
        found.update(np.unique(v).tolist())
    if col.null_count:
        found.add(None)
    return list(found)


def write_trace(path: str | os.PathLike, table: pa.Table, metadata: Mapping[str, Any]) -> Path:
    """Validate and write a trace atomically. Returns the final path."""
    path = Path(path)
    validate_table(table, str(path))
    meta = dict(metadata)
    meta.setdefault("created_by", f"fastrack {__version__}")
    if "ranks" not in meta:
        meta["ranks"] = sorted(int(r) for r in distinct_values(table.column("rank")))
    table = table.replace_schema_metadata(encode_metadata(meta))
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=1 << 20)
    return path


def trace_in_memory(table: pa.Table, metadata: Mapping[str, Any], path: str | None = None) -> Trace:
    """The :class:`Trace` that :func:`write_trace` then :func:`read_trace` would give, without the
    file: the same validation, and the metadata through the same encoding and cleaning."""
    validate_table(table, path)
    meta = dict(metadata)
    meta.setdefault("created_by", f"fastrack {__version__}")
    if "ranks" not in meta:
        meta["ranks"] = sorted(int(r) for r in distinct_values(table.column("rank")))
    schema = table.replace_schema_metadata(encode_metadata(meta)).schema
    return Trace(table=table.replace_schema_metadata(None), metadata=_decode_metadata(schema, path), path=path)


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """Only the file-level metadata of a trace (cheap: reads the footer)."""
    path = str(path)
    schema = _read_schema(path)
    return _decode_metadata(schema, path)


def _read_schema(path: str) -> pa.Schema:
    if not os.path.exists(path):
        raise TraceFormatError("no such file", path=path)
    try:
        return pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        hint = not_a_parquet_trace_hint(path)  # a profiler trace given where a Parquet trace is read
        raise TraceFormatError(hint or f"not a Parquet file ({str(exc).splitlines()[0]})", path=path) from None
    except (UnicodeDecodeError, pa.ArrowException):  # a damaged footer (e.g. metadata keys that are not text)
        raise TraceFormatError("not a Parquet file (damaged footer)", path=path) from None


def _decode_metadata(schema: pa.Schema, path: str) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise SchemaError("not a Fastrack trace: Parquet metadata key 'fastrack' is missing", path=path)
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError):
        raise SchemaError("metadata key 'fastrack' is not valid JSON", path=path) from None
    if not isinstance(meta, dict):
        raise SchemaError(f"metadata key 'fastrack' is a JSON {type(meta).__name__}, expected an object", path=path)
    version = meta.get("schema_version")
    if not isinstance(version, int):
        raise SchemaError(f"metadata field 'schema_version' is {version!r}, expected an integer", path=path)
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"trace schema version {version} is newer than this tool supports ({SCHEMA_VERSION}); upgrade fastrack",
            path=path,
        )
    if version < 1:
        raise SchemaError(f"metadata field 'schema_version' is {version}, expected 1", path=path)
    return clean_metadata(meta)


def read_trace(path: str | os.PathLike, columns: list[str] | None = None) -> Trace:
    """Read and validate a trace. ``columns`` restricts the columns read; the file is still held
    to the whole contract: the columns read are checked as in a full read, the others from the
    footer (schema, row-group statistics), read only where their statistics cannot vouch for them."""
    path = str(path)
    schema = _read_schema(path)
    meta = _decode_metadata(schema, path)
    try:
        # ParquetFile.read, not pq.read_table: read_table goes through pyarrow.dataset, which
        # imports pandas (~0.5 s of a replay's start-up); the table read is the same
        with pq.ParquetFile(path) as pf:
            table = pf.read(columns=columns)
            if columns is not None:  # the rest of the contract, from the footer (no column read)
                validate_table(table, path, partial=True)
                _check_unread(pf, schema, list(columns), path)
    except (pa.ArrowException, OSError, UnicodeDecodeError, ValueError) as exc:
        raise TraceFormatError(f"unreadable Parquet data ({str(exc).splitlines()[0]})", path=path) from None
    if columns is None:
        validate_table(table, path)
    return Trace(table=table.replace_schema_metadata(None), metadata=meta, path=path)
