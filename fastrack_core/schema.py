"""The Fastrack trace contract: Parquet, schema version 1.

This module is the single definition of what a trace file holds. ``tracegen`` writes it,
``replay`` reads it; neither defines columns of its own. ``docs/trace-schema.md`` documents
every field in prose.

One row per operation. A multi-rank trace is one file with a ``rank`` column. Times are
integer nanoseconds relative to the rank's own origin (each rank has its own clock; ranks are
aligned by their collectives, never by raw timestamps).

Dependencies are stored on the dependent op as two parallel lists: ``deps`` (op ids) and
``dep_kinds`` (codes from :class:`DepKind`).
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any

import pyarrow as pa

SCHEMA_VERSION = 1
METADATA_KEY = b"fastrack"


class OpKind(enum.IntEnum):
    """What an operation is. Stored in Parquet as its lower-case name (dictionary encoded)."""

    CPU = 0  # host CPU work not inside a CUDA call (framework, Python, data loading)
    RUNTIME = 1  # CUDA runtime/driver call on a host thread (launches, async copies, event ops)
    SYNC = 2  # host call that blocks until GPU work finishes (stream/event/device sync)
    KERNEL = 3  # GPU compute kernel on a stream
    MEMCPY = 4  # GPU copy on a stream (H2D, D2H, D2D, P2P)
    MEMSET = 5  # GPU memset on a stream
    COLLECTIVE = 6  # communication kernel (NCCL) on a stream, with coll_* attributes

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def on_gpu(self) -> bool:
        return self in GPU_KINDS


GPU_KINDS = frozenset({OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET, OpKind.COLLECTIVE})
HOST_KINDS = frozenset({OpKind.CPU, OpKind.RUNTIME, OpKind.SYNC})
OP_KIND_BY_LABEL = {k.label: k for k in OpKind}


class DepKind(enum.IntEnum):
    """Why an op waits for another. Stored as these integer codes (uint8)."""

    PROGRAM = 0  # previous op on the same host thread (CPU program order)
    LAUNCH = 1  # CUDA call -> the GPU op it launched (matched by correlation id)
    STREAM = 2  # previous op on the same GPU stream (FIFO)
    EVENT = 3  # cross-stream event: op recorded on one stream -> op after a wait on another
    SYNC = 4  # GPU op -> host call that blocked until it finished
    COLLECTIVE = 5  # member of the same collective on another rank (group barrier)
    DATA = 6  # derived by a protocol transform: one stage of a transfer -> the next
    RESOURCE = 7  # derived by a protocol transform: a finite resource handed over (bounce slot)

    @property
    def label(self) -> str:
        return self.name.lower()


class CopyDir(enum.IntEnum):
    NONE = 0
    H2D = 1
    D2H = 2
    D2D = 3
    P2P = 4

    @property
    def label(self) -> str | None:
        return None if self is CopyDir.NONE else self.name


class HostMem(enum.IntEnum):
    NONE = 0
    PINNED = 1
    PAGEABLE = 2

    @property
    def label(self) -> str | None:
        return None if self is HostMem.NONE else self.name.lower()


COPY_DIR_BY_LABEL = {d.label: d for d in CopyDir if d.label}
HOST_MEM_BY_LABEL = {m.label: m for m in HostMem if m.label}

_DICT_STR = pa.dictionary(pa.int32(), pa.string())

# Column name -> (arrow type, nullable, one-line meaning). Order is the on-disk order.
COLUMNS: dict[str, tuple[pa.DataType, bool, str]] = {
    "op_id": (pa.int64(), False, "stable id of the op, unique in the file"),
    "rank": (pa.int32(), False, "rank (process) the op belongs to, 0-based"),
    "device": (pa.int32(), False, "GPU ordinal the op ran on or targets; -1 if none"),
    "thread": (pa.int64(), False, "host thread id for host ops; -1 for GPU ops"),
    "stream": (pa.int64(), False, "GPU stream id for GPU ops; -1 for host ops"),
    "kind": (_DICT_STR, False, "op kind: " + "|".join(k.label for k in OpKind)),
    "name": (_DICT_STR, False, "kernel, call or operator name"),
    "start_ns": (pa.int64(), False, "measured start, ns since the rank's origin"),
    "dur_ns": (pa.int64(), False, "measured duration, ns (>= 0)"),
    "bytes": (pa.int64(), False, "bytes moved or set (memcpy/memset/collective); 0 otherwise"),
    "copy_dir": (_DICT_STR, True, "memcpy direction: H2D|D2H|D2D|P2P; null otherwise"),
    "host_mem": (_DICT_STR, True, "host memory of a H2D/D2H copy: pinned|pageable; null if unknown"),
    "coll_type": (_DICT_STR, True, "collective type (all_reduce, all_gather, ...); null otherwise"),
    "coll_bytes": (pa.int64(), False, "message size of the collective per rank, bytes; 0 otherwise"),
    "coll_group": (_DICT_STR, True, "process group of the collective (name or rank list)"),
    "coll_seq": (pa.int64(), False, "sequence number of the collective within its group; -1 otherwise"),
    "correlation": (pa.int64(), False, "CUDA correlation id linking a call and its GPU op; -1 if none"),
    "step": (pa.int32(), False, "profiler step (ProfilerStep#N) the op belongs to; -1 if none"),
    "deps": (pa.list_(pa.int64()), False, "op ids this op waits for"),
    "dep_kinds": (pa.list_(pa.uint8()), False, "DepKind code of each entry of deps"),
}

# The valid range of every integer column, checked in one place (fastrack_core.traceio.validate_table)
# by every reader and writer. The bounds keep all arithmetic downstream inside int64 (a span of
# 2^50 ns plus any sum of per-op costs the model can add) and keep arrays indexed by rank small.
MAX_SPAN_NS = 2**50  # about 13 days: longer than any profiled window
MAX_BYTES = 2**44  # 16 TiB: more than any one transfer or collective message can move
MAX_RANK = 2**20 - 1  # ranks are dense 0-based ids; arrays indexed by rank stay below 8 MiB
MAX_OP_ID = 2**48 - 1
VALUE_RANGES: dict[str, tuple[int, int, str]] = {  # column -> (min, max, why)
    "op_id": (0, MAX_OP_ID, "op ids are non-negative"),
    "rank": (0, MAX_RANK, "ranks are dense 0-based ids"),
    "device": (-1, 2**16 - 1, "a GPU ordinal, or -1"),
    "start_ns": (0, MAX_SPAN_NS, "times are relative to the rank's origin, at most 2^50 ns (13 days)"),
    "dur_ns": (0, MAX_SPAN_NS, "durations are non-negative, at most 2^50 ns (13 days)"),
    "bytes": (0, MAX_BYTES, "byte counts are non-negative, at most 2^44 (16 TiB)"),
    "coll_bytes": (0, MAX_BYTES, "byte counts are non-negative, at most 2^44 (16 TiB)"),
    "coll_seq": (-1, MAX_OP_ID, "a sequence number, or -1"),
    "correlation": (-1, 2**62, "a correlation id, or -1"),
    "step": (-1, 2**31 - 1, "a step number, or -1"),
}

# Reader limits (docs/robustness.md "Reader limits"): what any importer reads of one input before it
# refuses it with one line naming the limit. Each bounds memory or work a small hostile file could
# otherwise multiply (a gzip bomb, one huge string, a dependency blow-up); each is far above what a
# real profiler writes (assumption: ranges in the docs).
MAX_DECOMPRESSED_BYTES = 512 << 20  # one input file read whole (Chakra ET protobuf), decompressed
MAX_EVENT_BYTES = 16 << 20  # one Kineto event (with the whitespace before it) on the streaming path
MAX_NAME_CHARS = 1 << 16  # one op name (kernel names demangle to a few KiB)
MAX_NODES_PER_FILE = 1 << 24  # nodes of one Chakra ET / PyTorch ET file, kernel rows of one Nsight export
MAX_DEPS_PER_NODE = 1 << 16  # dependencies of one op (fan-in), after bridging no-work nodes
MAX_EDGES = 1 << 27  # dependency edges of one import, and steps spent bridging them (fan-out is bounded by it)

ARROW_SCHEMA = pa.schema([pa.field(n, t, nullable=nul) for n, (t, nul, _) in COLUMNS.items()])

# File-level metadata: only these keys are ever written (whitelist). Values are JSON types.
METADATA_FIELDS: dict[str, str] = {
    "schema_version": "int: this schema's version (1)",
    "source_format": "str: kineto-json | nsys-sqlite | pytorch-et | chakra-et | capture-profiler | capture-emulated | synthetic",
    "source_files": "list[str]: base names of the input files (no directories)",
    "capture_tool": "str: program that recorded the trace (e.g. 'PyTorch Profiler', 'nsys')",
    "tool_versions": "dict[str,str]: versions of the capture stack (pytorch, cuda_runtime, cupti, ...)",
    "gpu_model": "str: GPU name as reported by the capture (e.g. 'NVIDIA H100 80GB HBM3')",
    "world_size": "int: number of ranks in the job (may exceed the ranks present)",
    "ranks": "list[int]: ranks present in this file",
    "emulated": "bool: true when GPU timings come from a cost model, not hardware",
    "device_model": "str: cost model used for emulated timings (e.g. 'h100-sxm'); null if real",
    "trace_name": "str: a human label",
    "created_by": "str: 'fastrack <version>' that wrote the file",
    "capture_notes": "list[str]: what the capture could not reproduce as the hardware would (one line each)",
    "host_time": "dict[str,scalar]: emulated capture, how host time was made (mode; script mode: calibration, totals)",
    "window": "dict[str,scalar]: capture --window-from/--window-to: the names that opened and closed the recorded window, what was left out",
}

_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "schema_version": int,
    "source_format": str,
    "source_files": list,
    "capture_tool": str,
    "tool_versions": dict,
    "gpu_model": str,
    "world_size": int,
    "ranks": list,
    "emulated": bool,
    "device_model": (str, type(None)),
    "trace_name": str,
    "created_by": str,
    "capture_notes": list,
    "host_time": dict,
    "window": dict,
}


_VERSION_RE = re.compile(r"^v?[0-9]+(\.[0-9]+)*([.+_-][0-9A-Za-z]{1,16}){0,3}$")


def clean_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """Keep only whitelisted metadata keys with values of the right JSON type.

    Unknown keys are dropped silently: real traces embed environments and access tokens, and
    nothing that is not in :data:`METADATA_FIELDS` may reach an output file.
    """
    out: dict[str, Any] = {}
    for key, expected in _META_TYPES.items():
        if key not in meta or meta[key] is None and expected is not type(None):
            continue
        value = meta[key]
        if not isinstance(value, expected):
            continue
        if key == "tool_versions":  # only values shaped like versions: a field of the source may hold anything
            value = {str(k)[:40]: str(v) for k, v in value.items()
                     if isinstance(v, (str, int, float)) and not isinstance(v, bool) and _VERSION_RE.match(str(v))}
        if key == "source_files":
            value = [str(v).replace("\\", "/").rsplit("/", 1)[-1] for v in value]
        if key == "ranks":
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                continue  # a damaged list is dropped (like any other wrong type), never half-read
            value = [int(v) for v in value]
        if key == "capture_notes":
            value = [str(v) for v in value]
        if key == "host_time":  # flat: short names, scalar values (docs/capture.md names them)
            value = {str(k)[:40]: v for k, v in value.items()
                     if isinstance(v, (str, int, float, bool)) and not (isinstance(v, str) and len(v) > 80)}
        if key == "window":  # flat: short names, scalar values or null (docs/capture.md, "Setup out of the window")
            value = {str(k)[:40]: v for k, v in value.items()
                     if v is None or isinstance(v, (str, int, float, bool)) and not (isinstance(v, str) and len(v) > 200)}
        out[key] = value
    out["schema_version"] = SCHEMA_VERSION
    return out


def encode_metadata(meta: dict[str, Any]) -> dict[bytes, bytes]:
    return {METADATA_KEY: json.dumps(clean_metadata(meta), sort_keys=True).encode()}
