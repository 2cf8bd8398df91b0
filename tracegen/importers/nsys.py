"""Import an Nsight Systems SQLite export (``nsys export --type sqlite``) as raw ops.

:func:`read_nsys` returns a pandas frame of *raw ops* (one row per CUDA runtime/driver call and
per GPU kernel, memcpy, memset or NCCL kernel) plus whitelisted metadata; :func:`read` does so for
several files (one per rank) and, with :func:`sniff`, is behind the registered importer
:data:`tracegen.importers.NSYS`. It derives no
dependencies: :func:`tracegen.deps.derive_dependencies` turns the raw ops into the
schema-v1 table (flattening nested calls, adding CPU gap ops and all dependency edges), guided
by the hint columns filled here. ``docs/import-nsys.md`` describes the mapping.

Facts about the export this module relies on (checked against real exports, nsys 2021-2025):

* Tables are created lazily; any of them may be absent. Times are integer ns.
* Kernel names, runtime call names and registered NVTX strings live in ``StringIds``; runtime
  names carry a CUPTI version suffix (``cudaMemcpyAsync_v3020``), driver names do not.
* Enumerations (memcpy kind, memory kind, sync type) are stored as numbers whose meaning is given
  by ``ENUM_*`` tables (``id, name, label``). Nsight's memory-kind numbers are *not* CUPTI's
  (Nsight 0 = Pageable, 1 = Pinned; CUPTI 0 = Unknown, 1 = Pageable), and sync-type numbers moved
  between versions, so every enum is joined and matched by its symbolic name, never hard-coded.
* ``globalTid``/``globalPid`` are packed: pid = (g >> 24) & 0xFFFFFF, tid = g & 0xFFFFFF.
* CUPTI writes 0xFFFFFFFF for "not applicable" stream/event ids in synchronization records.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from fastrack_core.errors import TraceFormatError
from fastrack_core.schema import MAX_NAME_CHARS, MAX_NODES_PER_FILE, OpKind
from fastrack_core.sniff import NSYS_REPORT_HINT, is_nsys_report
from tracegen.importers.common import SQLITE_MAGIC, RawImport, read_head

SOURCE_FORMAT = "nsys-sqlite"
CAPTURE_TOOL = "nsys"

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC_TABLE = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
EVENT_TABLE = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
CUPTI_TABLES = (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, RUNTIME_TABLE)

#: Columns of the raw-op frame, in order (schema columns, then the hint columns).
RAW_COLUMNS = (
    "rank", "device", "thread", "stream", "kind", "name", "start_ns", "dur_ns", "bytes",
    "copy_dir", "host_mem", "coll_type", "coll_bytes", "coll_group", "coll_seq", "correlation",
    "step", "sync_stream", "sync_scope", "event_corr", "record_stream", "wait_stream", "blocking",
)

_INVALID_IDS = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF, -1)

# Host calls that block until GPU work finishes, by base name (CUPTI version suffix removed).
_SYNC_CALLS = {
    "cudaStreamSynchronize": "stream",
    "cuStreamSynchronize": "stream",
    "cudaDeviceSynchronize": "device",
    "cudaThreadSynchronize": "device",
    "cuCtxSynchronize": "device",
    "cudaEventSynchronize": "event",
    "cuEventSynchronize": "event",
}
_PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)")
_NVTX_RANK = re.compile(r"^\s*rank\s*[:=#_-]?\s*(\d+)\s*$", re.IGNORECASE)
_FILE_RANK = re.compile(r"(?:^|[^a-z0-9])(?:rank|worker)[-_]?(\d+)")
_NCCL_OP = re.compile(
    r"^nccl(?:Dev)?(?:Kernel_)?(AllReduce|AllGather|ReduceScatter|AllToAll|Broadcast|SendRecv|Send|Recv|Reduce|Generic)"
)
_DIR_ABBREV = {"H2D": "HtoD", "D2H": "DtoH", "D2D": "DtoD", "P2P": "PtoP"}


# --------------------------------------------------------------------------- public entry


def sniff(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file that starts with the SQLite header. Raises
    :class:`TraceFormatError` when it cannot be read."""
    return not os.path.isdir(path) and read_head(path).startswith(SQLITE_MAGIC)


def read(paths: Sequence[str | os.PathLike]) -> RawImport:
    """The raw ops of one or more Nsight SQLite exports (one per rank) as one frame. A rank met in
    two files is an error naming both."""
    paths = [str(p) for p in paths]
    raws, metas, seen = [], [], {}
    for p in paths:
        if os.path.isdir(p):
            raise TraceFormatError("is a directory; --format nsys takes SQLite files", path=p)
        if not os.path.exists(p):
            raise TraceFormatError("no such file", path=p)
    for p in paths:
        raw, meta = read_nsys(p)
        for r in sorted(set(raw["rank"].tolist()) if "rank" in raw and len(raw) else {0}):
            if r in seen:
                raise TraceFormatError(f"rank {r} appears twice: in {seen[r]} and in {p}", path=p)
            seen[r] = p
        raws.append(raw)
        metas.append(dict(meta or {}))
    raw = pd.concat(raws, ignore_index=True, sort=False) if len(raws) > 1 else raws[0]
    meta = metas[0]
    if len(metas) > 1:
        meta["source_files"] = [Path(p).name for p in paths]
        meta["ranks"] = sorted(seen)
    return RawImport(raw=raw, metadata=meta, num_events=len(raw), files=paths)


def read_nsys(path: str | os.PathLike) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read an Nsight Systems SQLite export. Returns ``(raw_ops, metadata)``.

    Raises :class:`TraceFormatError` (naming the file) when the file is missing, is not an
    SQLite database, is damaged, or holds no CUPTI activity tables.
    """
    path = str(path)
    _check_sqlite_file(path)
    try:
        conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
        conn.text_factory = _text  # invalid UTF-8 in a name must not stop the import
    except sqlite3.Error as exc:
        raise TraceFormatError(f"cannot open SQLite database ({exc})", path=path) from None
    try:
        return _read(conn, path)
    except sqlite3.DatabaseError as exc:
        raise TraceFormatError(f"unreadable or damaged SQLite database ({exc})", path=path) from None
    except UnicodeDecodeError:  # SQLite decodes its own schema before our text factory sees anything
        raise TraceFormatError("damaged SQLite database (its schema holds text that is not UTF-8)", path=path) from None
    except TraceFormatError as exc:  # raised by a helper that does not know the file
        if exc.path is None:
            exc.path = path
        raise
    except OverflowError:
        raise TraceFormatError("an integer column holds a value beyond 64 bits", path=path) from None
    finally:
        conn.close()


# --------------------------------------------------------------------------- file checks


def _check_sqlite_file(path: str) -> None:
    if not os.path.exists(path):
        raise TraceFormatError("no such file", path=path)
    if os.path.isdir(path):
        raise TraceFormatError("is a directory, expected an Nsight Systems SQLite export", path=path)
    head = read_head(path, 100)
    if head.startswith(SQLITE_MAGIC):
        if len(head) < 100:
            raise TraceFormatError("truncated SQLite database (header incomplete)", path=path)
        return
    if is_nsys_report(path):
        raise TraceFormatError(NSYS_REPORT_HINT, path=path)
    what = "an empty file" if not head else "no SQLite header"  # never echo the file's bytes
    raise TraceFormatError(
        f"not an SQLite database ({what}); expected an Nsight Systems export "
        "made with `nsys export --type sqlite`",
        path=path,
    )


# --------------------------------------------------------------------------- SQL helpers


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}


def _col(cols: set[str], alias: str, name: str, default: str = "NULL") -> str:
    """``alias.name`` when the column exists in this export's version, else a literal."""
    return f'{alias}."{name}"' if name in cols else default


def _enum_join(tables: set[str], conn, enum: str, alias: str, on: str) -> tuple[str, str, str]:
    """(name expr, label expr, join clause) for an ENUM_* table, or NULLs when it is absent."""
    if enum not in tables:
        return "NULL", "NULL", ""
    cols = _columns(conn, enum)
    name = _col(cols, alias, "name")
    label = _col(cols, alias, "label")
    return name, label, f' LEFT JOIN "{enum}" {alias} ON {alias}.id = {on}'


_INT_COLUMNS = frozenset({"start", "end", "device", "stream", "corr", "gpid", "gtid", "bytes", "event", "event_sync"})
_INT64 = (-(2**63), 2**63 - 1)
_TEXT_COLUMNS = frozenset({"dname", "sname", "name", "text"})  # names of ops and NVTX ranges


def _query(conn: sqlite3.Connection, sql: str, names: list[str]) -> pd.DataFrame:
    """Rows of ``sql`` as a frame. SQLite types are per value, so an integer column may hold text,
    a float or a blob: those are refused here, naming the table and the column (never the value).
    A table of more than ``MAX_NODES_PER_FILE`` rows is refused before any is fetched, a text
    longer than ``MAX_NAME_CHARS`` before the frame is built."""
    table = sql.rsplit(" FROM ", 1)[-1].split()[0]
    count = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    if count > MAX_NODES_PER_FILE:
        raise TraceFormatError(f"table {table} has {count:,} rows, more than {MAX_NODES_PER_FILE:,} "
                               "(the limit of one file: fastrack_core.schema.MAX_NODES_PER_FILE)")
    rows = conn.execute(sql).fetchall()
    for i, name in enumerate(names):
        if name in _TEXT_COLUMNS and rows and max((len(r[i]) for r in rows if isinstance(r[i], (str, bytes))),
                                                  default=0) > MAX_NAME_CHARS:
            raise TraceFormatError(f"table {table}: a text for '{name}' is longer than {MAX_NAME_CHARS:,} characters "
                                   "(fastrack_core.schema.MAX_NAME_CHARS)")
    df = pd.DataFrame.from_records(rows, columns=names)
    for name in names:
        if name not in _INT_COLUMNS and len(df) and df[name].dtype == object:  # a text column may hold a blob
            col = df[name]
            if col.map(lambda v: isinstance(v, (bytes, bytearray))).any():
                df[name] = col.map(lambda v: bytes(v).decode("utf-8", "replace") if isinstance(v, (bytes, bytearray))
                                   else v)
            continue
        if name not in _INT_COLUMNS or df[name].dtype.kind in "iu" or not len(df):
            continue
        col = df[name]
        if col.dtype.kind == "f":  # integers and NULLs read as floats: integral values only
            vals = col.to_numpy()
            bad = pd.Series(~(np.isnan(vals) | ((vals == np.floor(vals)) & (np.abs(vals) < 2.0**63))))
        else:
            bad = col.map(lambda v: not (v is None or (isinstance(v, int) and _INT64[0] <= v <= _INT64[1])
                                         or (isinstance(v, float) and (v != v or v.is_integer()))))
        if bad.any():
            v = col[bad].iloc[0]
            table = sql.rsplit(" FROM ", 1)[-1].split()[0]
            raise TraceFormatError(f"table {table}: column for '{name}' holds a {type(v).__name__} value where an "
                                   "integer belongs")
    return df


def _pid(g: pd.Series) -> np.ndarray:
    v = pd.to_numeric(g, errors="coerce").fillna(0).astype(np.int64).to_numpy()
    return (v >> 24) & 0xFFFFFF


def _tid(g: pd.Series) -> np.ndarray:
    v = pd.to_numeric(g, errors="coerce").fillna(0).astype(np.int64).to_numpy()
    return v & 0xFFFFFF


def _int(s: pd.Series, default: int = -1) -> np.ndarray:
    v = pd.to_numeric(s, errors="coerce").fillna(default).astype(np.int64).to_numpy()
    return np.where(np.isin(v, _INVALID_IDS), default, v)


def _norm(text: Any) -> str:
    return re.sub(r"[^A-Z]", "", str(text).upper()) if isinstance(text, str) else ""


# --------------------------------------------------------------------------- enum decoding


def _copy_dir(name: Any, label: Any) -> str | None:
    """Memcpy direction from an ENUM_CUDA_MEMCPY_OPER row (symbolic name, else label)."""
    rules = (
        (("PTOP", "PEERTOPEER"), "P2P"),
        (("HTOD", "HOSTTODEVICE", "HTOA", "HOSTTOARRAY"), "H2D"),
        (("DTOH", "DEVICETOHOST", "ATOH", "ARRAYTOHOST"), "D2H"),
        (("DTOD", "DEVICETODEVICE", "ATOD", "ARRAYTODEVICE", "DTOA", "DEVICETOARRAY", "ATOA", "ARRAYTOARRAY"), "D2D"),
    )
    for text in (name, label):
        t = _norm(text)
        for suffixes, d in rules:
            if t and t.endswith(suffixes):
                return d
    return None


def _mem_kind(name: Any, label: Any) -> str | None:
    """'pageable' | 'pinned' | 'device' | 'managed' | None from an ENUM_CUDA_MEM_KIND row."""
    for text in (name, label):
        t = _norm(text)
        if not t:
            continue
        if "PAGEABLE" in t:
            return "pageable"
        if "PINNED" in t:
            return "pinned"
        if "MANAGED" in t:
            return "managed"
        if "DEVICE" in t or "ARRAY" in t:
            return "device"
        if "UNKNOWN" in t:
            return None
    return None


def _sync_type(name: Any, label: Any) -> str:
    """'wait' | 'event' | 'stream' | 'device' | '' from an ENUM_CUPTI_SYNC_TYPE row."""
    for text in (name, label):
        t = _norm(text)
        if not t:
            continue
        if "STREAMWAIT" in t:
            return "wait"
        if "EVENTSYNC" in t:
            return "event"
        if "STREAMSYNC" in t:
            return "stream"
        if "CONTEXT" in t or "DEVICESYNC" in t:
            return "device"
    return ""


def _base_call_name(name: str) -> str:
    """``cudaMemcpyAsync_ptsz_v7000`` -> ``cudaMemcpyAsync``."""
    name = re.sub(r"_v\d+$", "", name)
    return re.sub(r"_(?:ptsz|ptds)$", "", name)


def nccl_coll_type(kernel_name: str) -> str | None:
    """Collective type of an NCCL kernel name, or None if it is not an NCCL kernel.

    ``ncclDevKernel_AllReduce_RING_LL`` -> ``all_reduce``; ``ncclKernel_AllGather_RING_LL_Sum_int8_t``
    -> ``all_gather``; old ``ncclAllReduceRingLLKernel_sum_f32`` -> ``all_reduce``; an NCCL kernel
    whose type cannot be read -> ``unknown``.
    """
    base = kernel_name.strip()
    if base.startswith("void "):
        base = base[5:].lstrip()
    if not base.startswith("nccl"):
        return None
    m = _NCCL_OP.match(base)
    if not m:
        return "unknown"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()


# --------------------------------------------------------------------------- readers


def _read_kernels(conn, tables) -> pd.DataFrame:
    names = ["start", "end", "device", "stream", "corr", "gpid", "dname", "sname"]
    if KERNEL_TABLE not in tables:
        return pd.DataFrame(columns=names)
    c = _columns(conn, KERNEL_TABLE)
    has_strings = "StringIds" in tables
    dn = "dn.value" if has_strings and "demangledName" in c else "NULL"
    sn = "sn.value" if has_strings and "shortName" in c else "NULL"
    joins = ""
    if dn != "NULL":
        joins += ' LEFT JOIN StringIds dn ON dn.id = k."demangledName"'
    if sn != "NULL":
        joins += ' LEFT JOIN StringIds sn ON sn.id = k."shortName"'
    sql = (
        f'SELECT k.start, k."end", {_col(c, "k", "deviceId", "0")}, {_col(c, "k", "streamId", "-1")}, '
        f'{_col(c, "k", "correlationId")}, {_col(c, "k", "globalPid")}, {dn}, {sn} '
        f"FROM {KERNEL_TABLE} k{joins}"
    )
    return _query(conn, sql, names)


# CUPTI's CUpti_ActivityMemcpyKind (docs/sources.md [S42]): the numbers of
# ``copyKind``, which Nsight copies from the CUPTI record; used only when an export has no
# ENUM_CUDA_MEMCPY_OPER table (Nsight Systems 2022.x and older). Memory kinds and sync types are
# never guessed this way (Nsight's numbers for those are not CUPTI's, or moved between versions).
CUPTI_MEMCPY_KIND = {1: "HTOD", 2: "DTOH", 3: "HTOA", 4: "ATOH", 5: "ATOA", 6: "ATOD", 7: "DTOA", 8: "DTOD",
                     9: "HTOH", 10: "PTOP"}


def _read_memcpy(conn, tables) -> pd.DataFrame:
    names = ["start", "end", "device", "stream", "corr", "gpid", "bytes",
             "ck_name", "ck_label", "sk_name", "sk_label", "dk_name", "dk_label"]
    if MEMCPY_TABLE not in tables:
        return pd.DataFrame(columns=names)
    c = _columns(conn, MEMCPY_TABLE)
    ckn, ckl, ckj = _enum_join(tables, conn, "ENUM_CUDA_MEMCPY_OPER", "ck", 'm."copyKind"')
    if "ENUM_CUDA_MEMCPY_OPER" not in tables and "copyKind" in c:  # older exports (nsys 2022.x): CUPTI's numbers
        ckn = ("CASE m.\"copyKind\" " + " ".join(f"WHEN {k} THEN '{v}'" for k, v in CUPTI_MEMCPY_KIND.items())
               + " END")
    if "srcKind" in c:
        skn, skl, skj = _enum_join(tables, conn, "ENUM_CUDA_MEM_KIND", "sk", 'm."srcKind"')
    else:
        skn, skl, skj = "NULL", "NULL", ""
    if "dstKind" in c:
        dkn, dkl, dkj = _enum_join(tables, conn, "ENUM_CUDA_MEM_KIND", "dk", 'm."dstKind"')
    else:
        dkn, dkl, dkj = "NULL", "NULL", ""
    sql = (
        f'SELECT m.start, m."end", {_col(c, "m", "deviceId", "0")}, {_col(c, "m", "streamId", "-1")}, '
        f'{_col(c, "m", "correlationId")}, {_col(c, "m", "globalPid")}, {_col(c, "m", "bytes", "0")}, '
        f"{ckn}, {ckl}, {skn}, {skl}, {dkn}, {dkl} FROM {MEMCPY_TABLE} m{ckj}{skj}{dkj}"
    )
    return _query(conn, sql, names)


def _read_memset(conn, tables) -> pd.DataFrame:
    names = ["start", "end", "device", "stream", "corr", "gpid", "bytes", "mk_name", "mk_label"]
    if MEMSET_TABLE not in tables:
        return pd.DataFrame(columns=names)
    c = _columns(conn, MEMSET_TABLE)
    if "memKind" in c:
        mkn, mkl, mkj = _enum_join(tables, conn, "ENUM_CUDA_MEM_KIND", "mk", 's."memKind"')
    else:
        mkn, mkl, mkj = "NULL", "NULL", ""
    sql = (
        f'SELECT s.start, s."end", {_col(c, "s", "deviceId", "0")}, {_col(c, "s", "streamId", "-1")}, '
        f'{_col(c, "s", "correlationId")}, {_col(c, "s", "globalPid")}, {_col(c, "s", "bytes", "0")}, '
        f"{mkn}, {mkl} FROM {MEMSET_TABLE} s{mkj}"
    )
    return _query(conn, sql, names)


def _read_runtime(conn, tables) -> pd.DataFrame:
    names = ["start", "end", "gtid", "corr", "name"]
    if RUNTIME_TABLE not in tables:
        return pd.DataFrame(columns=names)
    c = _columns(conn, RUNTIME_TABLE)
    if "StringIds" in tables and "nameId" in c:
        name, join = "s.value", ' LEFT JOIN StringIds s ON s.id = r."nameId"'
    else:
        name, join = "NULL", ""
    sql = (
        f'SELECT r.start, r."end", {_col(c, "r", "globalTid")}, {_col(c, "r", "correlationId")}, {name} '
        f"FROM {RUNTIME_TABLE} r{join}"
    )
    return _query(conn, sql, names)


def _read_sync(conn, tables) -> pd.DataFrame:
    names = ["start", "end", "device", "stream", "corr", "gpid", "event", "event_sync", "st_name", "st_label"]
    if SYNC_TABLE not in tables:
        return pd.DataFrame(columns=names)
    c = _columns(conn, SYNC_TABLE)
    stn, stl, stj = _enum_join(tables, conn, "ENUM_CUPTI_SYNC_TYPE", "st", 'y."syncType"')
    sql = (
        f'SELECT y.start, y."end", {_col(c, "y", "deviceId", "0")}, {_col(c, "y", "streamId", "-1")}, '
        f'{_col(c, "y", "correlationId")}, {_col(c, "y", "globalPid")}, {_col(c, "y", "eventId", "-1")}, '
        f'{_col(c, "y", "eventSyncId")}, {stn}, {stl} FROM {SYNC_TABLE} y{stj}'
    )
    return _query(conn, sql, names)


def _read_events(conn, tables) -> pd.DataFrame:
    names = ["device", "stream", "corr", "gpid", "event", "event_sync"]
    if EVENT_TABLE not in tables:
        return pd.DataFrame(columns=names)
    c = _columns(conn, EVENT_TABLE)
    sql = (
        f'SELECT {_col(c, "e", "deviceId", "0")}, {_col(c, "e", "streamId", "-1")}, '
        f'{_col(c, "e", "correlationId")}, {_col(c, "e", "globalPid")}, {_col(c, "e", "eventId", "-1")}, '
        f'{_col(c, "e", "eventSyncId")} FROM {EVENT_TABLE} e'
    )
    return _query(conn, sql, names)


def _read_nvtx(conn, tables) -> pd.DataFrame:
    """Only the NVTX rows this importer uses: ProfilerStep#N ranges and 'rank N' labels."""
    names = ["start", "end", "gtid", "text"]
    if "NVTX_EVENTS" not in tables:
        return pd.DataFrame(columns=names)
    c = _columns(conn, "NVTX_EVENTS")
    parts = []
    if "text" in c:
        parts.append('n."text"')
    if "textId" in c and "StringIds" in tables:
        parts.append("s.value")
    if not parts:
        return pd.DataFrame(columns=names)
    text = parts[0] if len(parts) == 1 else f"COALESCE({', '.join(parts)})"
    join = ' LEFT JOIN StringIds s ON s.id = n."textId"' if "s.value" in parts else ""
    sql = (
        f'SELECT n.start, {_col(c, "n", "end")}, {_col(c, "n", "globalTid")}, {text} AS t '
        f"FROM NVTX_EVENTS n{join} WHERE t LIKE '%ProfilerStep#%' OR t LIKE '%rank%'"
    )
    return _query(conn, sql, names)


def _read_metadata(conn, tables, path: str, devices_used: list[int]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "source_format": SOURCE_FORMAT,
        "capture_tool": CAPTURE_TOOL,
        "source_files": [os.path.basename(path)],
    }
    if "TARGET_INFO_GPU" in tables:
        c = _columns(conn, "TARGET_INFO_GPU")
        if "name" in c:
            dev_col = "cuDevice" if "cuDevice" in c else ("id" if "id" in c else None)
            rows = conn.execute(
                f'SELECT {dev_col if dev_col else "NULL"}, name FROM TARGET_INFO_GPU WHERE name IS NOT NULL'
            ).fetchall()
            by_dev = {r[0]: r[1] for r in rows}
            model = next((by_dev[d] for d in sorted(devices_used) if d in by_dev), None)
            if model is None and rows:
                model = rows[0][1]
            if isinstance(model, str) and model.strip():
                meta["gpu_model"] = model.strip()
    if "META_DATA_EXPORT" in tables:
        rows = dict(conn.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall())
        versions = {}
        # Whitelisted names only: META_DATA_EXPORT is small, but never copy unknown keys.
        if rows.get("EXPORT_PRODUCT_VERSION"):
            versions["nsys"] = str(rows["EXPORT_PRODUCT_VERSION"])
        if rows.get("EXPORT_SCHEMA_VERSION"):
            versions["nsys_export_schema"] = str(rows["EXPORT_SCHEMA_VERSION"])
        if versions:
            meta["tool_versions"] = versions
    return meta


# --------------------------------------------------------------------------- assembly


def _empty_hints(n: int) -> dict[str, np.ndarray]:
    return {
        "sync_stream": np.full(n, -1, np.int64),
        "sync_scope": np.full(n, "", object),
        "event_corr": np.full(n, -1, np.int64),
        "record_stream": np.full(n, -1, np.int64),
        "wait_stream": np.full(n, -1, np.int64),
        "blocking": np.zeros(n, bool),
    }


def _gpu_frame(df: pd.DataFrame, kind: np.ndarray, name: np.ndarray, nbytes: np.ndarray,
               copy_dir=None, host_mem=None, coll_type=None) -> pd.DataFrame:
    n = len(df)
    none = np.full(n, None, object)
    out = pd.DataFrame({
        "pid": _pid(df["gpid"]),
        "device": _int(df["device"], 0),
        "thread": np.full(n, -1, np.int64),
        "stream": _int(df["stream"], -1),
        "kind": kind.astype(np.int64),
        "name": name,
        "start": pd.to_numeric(df["start"]).astype(np.int64).to_numpy(),
        "end": pd.to_numeric(df["end"]).astype(np.int64).to_numpy(),
        "bytes": nbytes.astype(np.int64),
        "copy_dir": none if copy_dir is None else copy_dir,
        "host_mem": none.copy() if host_mem is None else host_mem,
        "coll_type": none.copy() if coll_type is None else coll_type,
        "correlation": _int(df["corr"], -1),
    })
    for k, v in _empty_hints(n).items():
        out[k] = v
    return out


def _kernels_to_ops(k: pd.DataFrame) -> pd.DataFrame:
    dname = k["dname"].where(k["dname"].notna(), k["sname"])
    name = dname.fillna("<unknown kernel>").astype(str).to_numpy(object)
    base = k["sname"].where(k["sname"].notna(), k["dname"]).fillna("").astype(str).to_numpy(object)
    pairs = pd.DataFrame({"b": base, "n": name})
    uniq = pairs.drop_duplicates()
    types = {(b, n): nccl_coll_type(b) or nccl_coll_type(n) for b, n in zip(uniq["b"], uniq["n"])}
    coll = np.array([types[p] for p in zip(base, name)], object)
    is_coll = np.array([c is not None for c in coll], bool)
    kind = np.where(is_coll, int(OpKind.COLLECTIVE), int(OpKind.KERNEL))
    return _gpu_frame(k, kind, name, np.zeros(len(k), np.int64), coll_type=coll)


def _memcpy_to_ops(m: pd.DataFrame) -> pd.DataFrame:
    n = len(m)
    combos = m[["ck_name", "ck_label", "sk_name", "sk_label", "dk_name", "dk_label"]].astype(object)
    combos = combos.where(combos.notna(), None)
    cache: dict[tuple, tuple] = {}
    copy_dir = np.empty(n, object)
    host_mem = np.empty(n, object)
    names = np.empty(n, object)
    for i, key in enumerate(map(tuple, combos.to_numpy())):
        if key not in cache:
            ckn, ckl, skn, skl, dkn, dkl = key
            d = _copy_dir(ckn, ckl)
            src, dst = _mem_kind(skn, skl), _mem_kind(dkn, dkl)
            if d is None:  # unknown/host-to-host copy kinds: decide from the memory kinds
                host = ("pageable", "pinned")
                if src in host and dst in ("device",):
                    d = "H2D"
                elif src == "device" and dst in host:
                    d = "D2H"
                elif src == "device" and dst == "device":
                    d = "D2D"
            hm = src if d == "H2D" else dst if d == "D2H" else None
            hm = hm if hm in ("pageable", "pinned") else None
            label = f"Memcpy {_DIR_ABBREV.get(d, 'HtoH' if _norm(ckn).endswith('HTOH') else 'Unknown')}"
            if isinstance(skl, str) and isinstance(dkl, str):
                label += f" ({skl} -> {dkl})"
            cache[key] = (d, hm, label)
        copy_dir[i], host_mem[i], names[i] = cache[key]
    kind = np.full(n, int(OpKind.MEMCPY))
    return _gpu_frame(m, kind, names, _int(m["bytes"], 0), copy_dir=copy_dir, host_mem=host_mem)


def _memset_to_ops(s: pd.DataFrame) -> pd.DataFrame:
    labels = s["mk_label"].astype(object).where(s["mk_label"].notna(), None)
    names = labels.map(lambda lab: f"Memset ({lab})" if isinstance(lab, str) else "Memset").to_numpy(object)
    kind = np.full(len(s), int(OpKind.MEMSET))
    return _gpu_frame(s, kind, names, _int(s["bytes"], 0))


def _runtime_to_ops(r: pd.DataFrame, gpu: pd.DataFrame, sync: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    n = len(r)
    raw_names = r["name"].fillna("<unknown call>").astype(str)
    base = raw_names.map({u: _base_call_name(u) for u in pd.unique(raw_names)}).to_numpy(object)
    out = pd.DataFrame({
        "pid": _pid(r["gtid"]),
        "device": np.full(n, -1, np.int64),
        "thread": _tid(r["gtid"]),
        "stream": np.full(n, -1, np.int64),
        "kind": np.full(n, int(OpKind.RUNTIME), np.int64),
        "name": base,
        "start": pd.to_numeric(r["start"]).astype(np.int64).to_numpy(),
        "end": pd.to_numeric(r["end"]).astype(np.int64).to_numpy(),
        "bytes": np.zeros(n, np.int64),
        "copy_dir": np.full(n, None, object),
        "host_mem": np.full(n, None, object),
        "coll_type": np.full(n, None, object),
        "correlation": _int(r["corr"], -1),
    })
    for k, v in _empty_hints(n).items():
        out[k] = v
    key = pd.MultiIndex.from_arrays([out["pid"], out["correlation"]])

    # Device and launched copy of each call, from the first GPU op with its correlation id.
    launched = gpu[gpu["correlation"] >= 0].sort_values("start").drop_duplicates(["pid", "correlation"])
    gl = launched.set_index(["pid", "correlation"])
    idx = gl.index.get_indexer(key) if len(gl) else np.full(n, -1)
    hit = (idx >= 0) & (out["correlation"].to_numpy() >= 0)
    has_gpu = hit
    copy_dir = np.full(n, None, object)
    host_mem = np.full(n, None, object)
    is_copy = np.zeros(n, bool)
    if hit.any():
        out.loc[hit, "device"] = gl["device"].to_numpy()[idx[hit]]
        copy_dir[hit] = gl["copy_dir"].to_numpy(object)[idx[hit]]
        host_mem[hit] = gl["host_mem"].to_numpy(object)[idx[hit]]
        is_copy[hit] = gl["kind"].to_numpy()[idx[hit]] == int(OpKind.MEMCPY)

    # Synchronous copy API (no "Async" in the name) to or from the host blocks the calling
    # thread; so does an async D2H copy into pageable memory.
    sync_names = {u: "Async" not in u and "Memcpy" in u for u in pd.unique(base)}
    sync_api = pd.Series(base).map(sync_names).to_numpy(bool)
    host_copy = np.array([d in ("H2D", "D2H") for d in copy_dir], bool)
    pageable_d2h = (copy_dir == "D2H") & (host_mem == "pageable")
    out["blocking"] = is_copy & ((sync_api & host_copy) | pageable_d2h)

    # Synchronization records (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION), matched by correlation id.
    scope = pd.Series(base).map(_SYNC_CALLS).fillna("").to_numpy(object)
    if len(sync):
        sy = sync.copy()
        sy["pid"] = _pid(sy["gpid"])
        sy["corr"] = _int(sy["corr"], -1)
        st = sy[["st_name", "st_label"]].astype(object).where(sy[["st_name", "st_label"]].notna(), None)
        st_types = {kv: _sync_type(*kv) for kv in set(map(tuple, st.to_numpy()))}
        sy["type"] = [st_types[kv] for kv in map(tuple, st.to_numpy())]
        sy["stream"] = _int(sy["stream"], -1)
        sy["event"] = _int(sy["event"], -1)
        sy["event_sync"] = _int(sy["event_sync"], -1)
        sy["device"] = _int(sy["device"], -1)
        sy = sy[sy["corr"] >= 0].drop_duplicates(["pid", "corr"]).set_index(["pid", "corr"])
        sidx = sy.index.get_indexer(key)
        shit = sidx >= 0
        stype = np.full(n, "", object)
        stype[shit] = sy["type"].to_numpy(object)[sidx[shit]]
        sstream = np.full(n, -1, np.int64)
        sstream[shit] = sy["stream"].to_numpy()[sidx[shit]]
        sdevice = np.full(n, -1, np.int64)
        sdevice[shit] = sy["device"].to_numpy()[sidx[shit]]
        # A call CUPTI reports as a blocking sync is a sync even under a name we do not know,
        # unless it also launched GPU work (then it is a blocking launch, handled above).
        blocking_sync = np.isin(stype, ["stream", "event", "device"]) & ~has_gpu
        scope = np.where((scope == "") & blocking_sync, stype, scope)
        is_stream = scope == "stream"
        out.loc[is_stream, "sync_stream"] = sstream[is_stream]
        is_wait = stype == "wait"
        out.loc[is_wait, "wait_stream"] = sstream[is_wait]
        fill_dev = (out["device"].to_numpy() < 0) & (sdevice >= 0)
        out.loc[fill_dev, "device"] = sdevice[fill_dev]

        # Event matching: which cudaEventRecord does each wait / event sync refer to?
        needs = (stype == "wait") | (scope == "event")
        if needs.any() and len(events):
            rec_corr, rec_stream = _match_event_records(
                out, sy, sidx, needs, events
            )
            out.loc[needs, "event_corr"] = rec_corr
            out.loc[needs, "record_stream"] = rec_stream
            is_event = scope == "event"
            out.loc[is_event, "sync_stream"] = out.loc[is_event, "record_stream"]

    out["sync_scope"] = scope
    out.loc[scope != "", "kind"] = int(OpKind.SYNC)

    # Event records: the stream each cudaEventRecord recorded on.
    if len(events):
        ev = events.copy()
        ev["pid"] = _pid(ev["gpid"])
        ev["corr"] = _int(ev["corr"], -1)
        ev = ev[ev["corr"] >= 0].drop_duplicates(["pid", "corr"]).set_index(["pid", "corr"])
        eidx = ev.index.get_indexer(key)
        ehit = eidx >= 0
        out.loc[ehit, "record_stream"] = _int(ev["stream"], -1)[eidx[ehit]]
        edev = _int(ev["device"], -1)[eidx[ehit]]
        cur = out.loc[ehit, "device"].to_numpy()
        out.loc[ehit, "device"] = np.where(cur < 0, edev, cur)
    return out


def _match_event_records(out, sy, sidx, needs, events):
    """For each wait/event-sync call (rows ``needs`` of ``out``), the correlation id and stream of
    the cudaEventRecord it refers to: exact by ``eventSyncId`` when the export has it, else the
    latest record of the same event id (same process) whose call started before the waiting call.
    """
    ev = events.copy()
    ev["pid"] = _pid(ev["gpid"])
    ev["corr"] = _int(ev["corr"], -1)
    ev["event"] = _int(ev["event"], -1)
    ev["event_sync"] = _int(ev["event_sync"], -1)
    ev["stream"] = _int(ev["stream"], -1)
    # Time of each record call (its runtime call start); records without a call are unusable.
    calls = out[["pid", "correlation", "start"]].rename(columns={"correlation": "corr", "start": "t"})
    ev = ev.merge(calls.drop_duplicates(["pid", "corr"]), on=["pid", "corr"], how="left")

    rows = np.flatnonzero(needs)
    sub = sidx[rows]
    w = pd.DataFrame({
        "row": rows,
        "pid": out["pid"].to_numpy()[rows],
        "t": out["start"].to_numpy()[rows],
        "event": np.where(sub >= 0, sy["event"].to_numpy()[np.maximum(sub, 0)], -1),
        "event_sync": np.where(sub >= 0, sy["event_sync"].to_numpy()[np.maximum(sub, 0)], -1),
    })
    rec_corr = np.full(len(w), -1, np.int64)
    rec_stream = np.full(len(w), -1, np.int64)

    exact = ev[ev["event_sync"] >= 0].drop_duplicates(["pid", "event_sync"]).set_index(["pid", "event_sync"])
    k = pd.MultiIndex.from_arrays([w["pid"], w["event_sync"]])
    xi = exact.index.get_indexer(k) if len(exact) else np.full(len(w), -1)
    xh = (xi >= 0) & (w["event_sync"].to_numpy() >= 0)
    rec_corr[xh] = exact["corr"].to_numpy()[xi[xh]]
    rec_stream[xh] = exact["stream"].to_numpy()[xi[xh]]

    rest = w[~xh & (w["event"].to_numpy() >= 0)]
    cand = ev[ev["t"].notna() & (ev["event"] >= 0)].copy()
    if len(rest) and len(cand):
        cand["t"] = cand["t"].astype(np.int64)
        left = rest.reset_index().sort_values("t")
        right = cand[["pid", "event", "t", "corr", "stream"]].sort_values("t")
        m = pd.merge_asof(left, right, on="t", by=["pid", "event"], direction="backward",
                          allow_exact_matches=True)
        ok = m["corr"].notna().to_numpy()
        pos = m["index"].to_numpy()[ok]
        rec_corr[pos] = m["corr"].to_numpy()[ok].astype(np.int64)
        rec_stream[pos] = m["stream"].to_numpy()[ok].astype(np.int64)
    return rec_corr, rec_stream


def _assign_ranks(ops: pd.DataFrame, nvtx: pd.DataFrame, path: str) -> dict[int, int]:
    """Rank of each process (pid) in the file; see docs/import-nsys.md."""
    pids = sorted(int(p) for p in pd.unique(ops["pid"]))
    labeled: dict[int, int] = {}
    if len(nvtx):
        for g, text in zip(nvtx["gtid"], nvtx["text"]):
            m = _NVTX_RANK.match(text) if isinstance(text, str) else None
            if m:
                pid = int(_pid(pd.Series([g]))[0])
                if pid in pids:
                    labeled.setdefault(pid, int(m.group(1)))
    unlabeled = [p for p in pids if p not in labeled]
    gpu = ops[ops["stream"] >= 0]
    min_dev = gpu.groupby("pid")["device"].min().to_dict() if len(gpu) else {}
    unlabeled.sort(key=lambda p: (min_dev.get(p, 1 << 30), p))
    ranks = dict(labeled)
    if len(unlabeled) == 1 and not labeled:
        m = _FILE_RANK.search(os.path.basename(path).lower())
        ranks[unlabeled[0]] = int(m.group(1)) if m else 0
    else:
        used = set(labeled.values())
        free = (r for r in range(len(pids) + len(used) + 1) if r not in used)
        for p in unlabeled:
            ranks[p] = next(free)
    return ranks


def _assign_steps(ops: pd.DataFrame, nvtx: pd.DataFrame) -> np.ndarray:
    step = np.full(len(ops), -1, np.int32)
    if not len(nvtx):
        return step
    rng = []
    for s, e, g, text in zip(nvtx["start"], nvtx["end"], nvtx["gtid"], nvtx["text"]):
        m = _PROFILER_STEP.search(text) if isinstance(text, str) else None
        if m and e is not None and not pd.isna(e) and int(e) >= int(s):
            rng.append((int(_pid(pd.Series([g]))[0]), int(s), int(e), int(m.group(1))))
    if not rng:
        return step
    r = pd.DataFrame(rng, columns=["pid", "s", "e", "n"]).sort_values(["pid", "s"])
    host = (ops["stream"].to_numpy() < 0)
    for pid, grp in r.groupby("pid"):
        sel = np.flatnonzero(host & (ops["pid"].to_numpy() == pid))
        if not sel.size:
            continue
        t = ops["start"].to_numpy()[sel]
        i = np.searchsorted(grp["s"].to_numpy(), t, side="right") - 1
        ok = i >= 0
        inside = np.zeros(sel.size, bool)
        inside[ok] = t[ok] < grp["e"].to_numpy()[i[ok]]
        step[sel[inside]] = grp["n"].to_numpy()[i[inside]]
    # GPU ops take the step of their launching call.
    hosts = ops[host & (ops["correlation"].to_numpy() >= 0)]
    hkey = pd.MultiIndex.from_arrays([hosts["pid"], hosts["correlation"]])
    hstep = pd.Series(step[host & (ops["correlation"].to_numpy() >= 0)], index=hkey)
    hstep = hstep[~hstep.index.duplicated()]
    gsel = np.flatnonzero(~host & (ops["correlation"].to_numpy() >= 0))
    gkey = pd.MultiIndex.from_arrays([ops["pid"].to_numpy()[gsel], ops["correlation"].to_numpy()[gsel]])
    gi = hstep.index.get_indexer(gkey)
    hit = gi >= 0
    step[gsel[hit]] = hstep.to_numpy()[gi[hit]]
    return step


def _read(conn: sqlite3.Connection, path: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    tables = _tables(conn)
    if not any(t in tables for t in CUPTI_TABLES):
        raise TraceFormatError(
            "no CUPTI activity tables (kernel/memcpy/runtime); "
            "was the trace exported with nsys export --type sqlite?",
            path=path,
        )
    try:
        kernels = _read_kernels(conn, tables)
        memcpy = _read_memcpy(conn, tables)
    except TraceFormatError as exc:
        raise TraceFormatError(str(exc), path=path) from None
    memset = _read_memset(conn, tables)
    runtime = _read_runtime(conn, tables)
    sync = _read_sync(conn, tables)
    events = _read_events(conn, tables)
    nvtx = _read_nvtx(conn, tables)

    gpu_parts = []
    if len(kernels):
        gpu_parts.append(_kernels_to_ops(kernels))
    if len(memcpy):
        gpu_parts.append(_memcpy_to_ops(memcpy))
    if len(memset):
        gpu_parts.append(_memset_to_ops(memset))
    gpu = pd.concat(gpu_parts, ignore_index=True) if gpu_parts else None
    if gpu is None and not len(runtime):
        raise TraceFormatError(
            "the CUPTI activity tables are empty: the capture recorded no CUDA work "
            "(was CUDA tracing enabled, e.g. nsys profile --trace=cuda?)",
            path=path,
        )
    if gpu is None:
        gpu = _gpu_frame(pd.DataFrame(columns=["gpid", "device", "stream", "start", "end", "corr"]),
                         np.zeros(0, np.int64), np.zeros(0, object), np.zeros(0, np.int64))
    host = _runtime_to_ops(runtime, gpu, sync, events) if len(runtime) else gpu.iloc[:0].copy()
    ops = pd.concat([host, gpu], ignore_index=True)

    # CUPTI writes start = end = 0 when it could not time an activity: drop those.
    ops = ops[~((ops["start"] == 0) & (ops["end"] == 0))].reset_index(drop=True)
    if not len(ops):
        raise TraceFormatError("no timed CUDA activity in the CUPTI tables", path=path)

    ranks = _assign_ranks(ops, nvtx, path)
    ops["rank"] = ops["pid"].map(ranks).astype(np.int32)
    ops["step"] = _assign_steps(ops, nvtx)

    # Collectives: no communicator in the export, so each NCCL stream stands for one group.
    is_coll = ops["kind"].to_numpy() == int(OpKind.COLLECTIVE)
    ops["coll_group"] = np.where(is_coll, "nccl-stream-" + ops["stream"].astype(str), None)
    ops["coll_bytes"] = np.zeros(len(ops), np.int64)
    ops["coll_seq"] = np.full(len(ops), -1, np.int64)
    if is_coll.any():
        c = ops[is_coll].sort_values(["start", "correlation"])
        ops.loc[c.index, "coll_seq"] = c.groupby(["rank", "stream"]).cumcount().astype(np.int64)

    origin = ops.groupby("rank")["start"].transform("min")
    ops["start_ns"] = (ops["start"] - origin).astype(np.int64)
    ops["dur_ns"] = np.maximum(ops["end"] - ops["start"], 0).astype(np.int64)
    ops["is_gpu"] = ops["stream"] >= 0
    ops = ops.sort_values(["rank", "start_ns", "is_gpu", "thread", "stream", "correlation"], kind="stable")
    raw = ops.loc[:, list(RAW_COLUMNS)].reset_index(drop=True)
    raw = raw.astype({
        "rank": np.int32, "device": np.int32, "thread": np.int64, "stream": np.int64, "kind": np.int64,
        "start_ns": np.int64, "dur_ns": np.int64, "bytes": np.int64, "coll_bytes": np.int64,
        "coll_seq": np.int64, "correlation": np.int64, "step": np.int32, "sync_stream": np.int64,
        "event_corr": np.int64, "record_stream": np.int64, "wait_stream": np.int64, "blocking": bool,
    })
    for col in ("copy_dir", "host_mem", "coll_type", "coll_group"):
        raw[col] = raw[col].astype(object).where(raw[col].notna(), None)

    devices = sorted(int(d) for d in pd.unique(raw.loc[raw["stream"] >= 0, "device"]))
    meta = _read_metadata(conn, tables, path, devices)
    meta["ranks"] = sorted(int(r) for r in pd.unique(raw["rank"]))
    return raw, meta
