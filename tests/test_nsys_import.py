"""Nsight Systems SQLite import (tracegen.importers.nsys).

No redistributable real export exists, so each test builds a small SQLite file with the real
export schema: the CREATE TABLE statements below copy the column names, types and NOT NULL
constraints of ``nsys export --type sqlite`` (export schema 3.16, nsys 2024.6; the newer
CUPTI_ACTIVITY_KIND_CUDA_EVENT table and ``eventSyncId`` columns as in nsys 2025), and the ENUM
tables carry the real (id, name, label) rows. Note the real ENUM_CUDA_MEM_KIND numbering
(0 = Pageable, 1 = Pinned), which differs from CUPTI's.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fastrack_core.errors import FastrackError, TraceFormatError
from fastrack_core.schema import OpKind
from tracegen.importers.nsys import RAW_COLUMNS, nccl_coll_type, read_nsys

SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE TARGET_INFO_GPU (
    vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER,
    l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER,
    smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER,
    ctxswDevPath TEXT, ctrlDevPath TEXT, revision INTEGER, nodeMask INTEGER, constantMemory INTEGER,
    maxIPC INTEGER, maxRegistersPerBlock INTEGER, maxShmemPerBlock INTEGER,
    maxShmemPerBlockOptin INTEGER, maxShmemPerSm INTEGER, maxRegistersPerSm INTEGER,
    threadsPerWarp INTEGER, asyncEngines INTEGER, maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER,
    maxThreadsPerBlock INTEGER, maxBlockDimX INTEGER, maxBlockDimY INTEGER, maxBlockDimZ INTEGER,
    maxGridDimX INTEGER, maxGridDimY INTEGER, maxGridDimZ INTEGER, computeMajor INTEGER,
    computeMinor INTEGER, smMajor INTEGER, smMinor INTEGER);
CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT NOT NULL, name TEXT NOT NULL,
    nameEnum INTEGER NOT NULL, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER,
    cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL,
    gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
    blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
    localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL,
    sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER,
    dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER,
    dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
    correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE NVTX_EVENTS (
    start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER,
    color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER,
    uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER,
    floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUPTI_SYNC_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
"""

# nsys 2024.6 (export schema 3.16): synchronization records without eventSyncId, no CUDA_EVENT table.
SYNC_2024 = """
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    syncType INTEGER NOT NULL, eventId INTEGER NOT NULL);
"""
# A version with the CUDA_EVENT table but no eventSyncId (matching by event id and time).
SYNC_EVENTS_NO_SYNCID = SYNC_2024 + """
CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT (
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, eventId INTEGER NOT NULL);
"""
# nsys 2025: eventSyncId links a sync record to its event record exactly.
SYNC_2025 = """
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    deprecatedSyncType INTEGER, syncType INTEGER NOT NULL, eventId INTEGER NOT NULL, eventSyncId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT (
    timestamp INTEGER, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, eventId INTEGER NOT NULL,
    eventSyncId INTEGER);
"""

ENUMS = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array"),
        (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host"), (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array"),
        (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device"), (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"), (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"),
        (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"), (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
        (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host"),
        (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"), (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
        (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
        (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
        (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
        (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ],
    "ENUM_NSYS_EVENT_TYPE": [
        (34, "NvtxMark", "NvtxMark"), (59, "NvtxPushPopRange", "NvtxPushPopRange"),
        (60, "NvtxStartEndRange", "NvtxStartEndRange"),
    ],
}

PID, TID = 4242, 4243
GPID = PID << 24
GTID = (PID << 24) | TID
T0 = 1_000_000_000  # absolute capture clock of the first kept op
INVALID = 0xFFFFFFFF
NCCL_DEMANGLED = "ncclDevKernel_AllReduce_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GPU_NAME = "NVIDIA H100 80GB HBM3"


class Db:
    """A tiny writer that fills NOT NULL columns a test does not care about with 0 / ''."""

    def __init__(self, path: Path, ddl: str):
        self.conn = sqlite3.connect(path)
        self.conn.execute("PRAGMA synchronous = OFF")
        self.conn.executescript(ddl)
        self.strings: dict[str, int] = {}
        self._notnull: dict[str, dict[str, str]] = {}

    def sid(self, text: str) -> int:
        if text not in self.strings:
            self.strings[text] = len(self.strings) + 1
            self.conn.execute("INSERT INTO StringIds VALUES (?, ?)", (self.strings[text], text))
        return self.strings[text]

    def insert(self, table: str, **vals) -> None:
        if table not in self._notnull:
            info = self.conn.execute(f"PRAGMA table_info({table})").fetchall()
            self._notnull[table] = {r[1]: r[2] for r in info if r[3]}
        for col, typ in self._notnull[table].items():
            vals.setdefault(col, "" if typ == "TEXT" else 0)
        cols = ", ".join(f'"{c}"' for c in vals)
        self.conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(vals))})", tuple(vals.values()))

    def close(self) -> None:
        self.conn.commit()
        self.conn.close()


def runtime(db, corr, name, start, end, gtid=GTID):
    db.insert("CUPTI_ACTIVITY_KIND_RUNTIME", start=T0 + start, end=T0 + end, eventClass=0, globalTid=gtid,
              correlationId=corr, nameId=db.sid(name), returnValue=0)


def kernel(db, corr, demangled, short, stream, start, end, gpid=GPID, device=0):
    db.insert("CUPTI_ACTIVITY_KIND_KERNEL", start=T0 + start, end=T0 + end, deviceId=device, contextId=1,
              streamId=stream, correlationId=corr, globalPid=gpid, demangledName=db.sid(demangled),
              shortName=db.sid(short), gridX=1, gridY=1, gridZ=1, blockX=128, blockY=1, blockZ=1)


def build_scenario(path: Path, sync_ddl: str = SYNC_2025, *, nvtx_rank: int | None = None,
                   mem_kind_enum=None, steps: bool = True) -> Path:
    """The hand-checkable scenario. Times below are relative to T0 (ns).

    host thread 4243 (process 4242)            GPU (device 0)
      0- 2000  cudaMemcpyAsync      corr 10 ->  stream 7   1500- 4500  H2D 1 MiB pinned->device
   3000- 3500  cudaLaunchKernel     corr 11 ->  stream 7   5000- 8000  gemm_kernel
   4000- 4400  cudaLaunchKernel     corr 12 ->  stream 7   8000- 9000  relu_kernel
   4600- 4800  cudaEventRecord      corr 13     (event 5 recorded on stream 7, eventSyncId 900)
   5000- 5200  cudaStreamWaitEvent  corr 14     (stream 13 waits for event 5)
   5400- 5800  cudaLaunchKernel     corr 15 ->  stream 13  9100-10100  softmax_kernel
   6000-10200  cudaStreamSynchronize corr 16    (stream 7)
  10500-13000  cudaMemcpy           corr 17 ->  stream 7  11000-12500  D2H 4096 B device->pageable
  13200-13600  cudaLaunchKernel     corr 18 ->  stream 20 14000-20000  NCCL AllReduce
  13800-20100  cudaDeviceSynchronize corr 19
  20200-20400  cudaMemsetAsync      corr 20 ->  stream 7  20500-20600  memset 256 B
    NVTX ProfilerStep#3 [-500, 10400), ProfilerStep#4 [10400, 21000)
    """
    db = Db(path, SCHEMA + sync_ddl)
    for table, rows in ENUMS.items():
        if table == "ENUM_CUDA_MEM_KIND" and mem_kind_enum is not None:
            rows = mem_kind_enum
        db.conn.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)
    has_sync_id = "eventSyncId" in sync_ddl
    has_events = "CUPTI_ACTIVITY_KIND_CUDA_EVENT" in sync_ddl
    kinds = {name.split("_")[-1]: i for i, name, _ in (mem_kind_enum or ENUMS["ENUM_CUDA_MEM_KIND"])}

    db.insert("TARGET_INFO_GPU", vmId=0, id=0, name=GPU_NAME, cuDevice=0, busLocation="0000:18:00.0")
    db.insert("TARGET_INFO_SYSTEM_ENV", devStateName="", name="Hostname", nameEnum=1, value="secret-host")
    db.conn.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
        ("EXPORT_PRODUCT_VERSION", "2024.6.2.225"), ("EXPORT_SCHEMA_VERSION", "3.16.1"),
        ("EXPORT_PRIVATE_TOKEN", "hf_do_not_copy")])
    db.conn.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (GPID, PID, "python"))

    runtime(db, 10, "cudaMemcpyAsync_v3020", 0, 2000)
    db.insert("CUPTI_ACTIVITY_KIND_MEMCPY", start=T0 + 1500, end=T0 + 4500, deviceId=0, contextId=1, streamId=7,
              correlationId=10, globalPid=GPID, bytes=1 << 20, copyKind=1, srcKind=kinds["PINNED"],
              dstKind=kinds["DEVICE"])
    runtime(db, 11, "cudaLaunchKernel_v7000", 3000, 3500)
    kernel(db, 11, "void gemm_kernel<float>(float*, int)", "gemm_kernel", 7, 5000, 8000)
    runtime(db, 12, "cudaLaunchKernel_v7000", 4000, 4400)
    kernel(db, 12, "relu_kernel(float*)", "relu_kernel", 7, 8000, 9000)
    runtime(db, 13, "cudaEventRecord_v3020", 4600, 4800)
    if has_events:
        ev = dict(deviceId=0, contextId=1, streamId=7, correlationId=13, globalPid=GPID, eventId=5)
        if has_sync_id:
            ev["eventSyncId"] = 900
        db.insert("CUPTI_ACTIVITY_KIND_CUDA_EVENT", **ev)
    runtime(db, 14, "cudaStreamWaitEvent_v3020", 5000, 5200)
    sy = dict(start=T0 + 5000, end=T0 + 5200, deviceId=0, contextId=1, streamId=13, correlationId=14,
              globalPid=GPID, syncType=2, eventId=5)
    if has_sync_id:
        sy["eventSyncId"] = 900
    db.insert("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", **sy)
    runtime(db, 15, "cudaLaunchKernel_v7000", 5400, 5800)
    kernel(db, 15, "softmax_kernel(float const*, float*)", "softmax_kernel", 13, 9100, 10100)
    runtime(db, 16, "cudaStreamSynchronize_v3020", 6000, 10200)
    db.insert("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", start=T0 + 6000, end=T0 + 10200, deviceId=0, contextId=1,
              streamId=7, correlationId=16, globalPid=GPID, syncType=3, eventId=INVALID)
    runtime(db, 17, "cudaMemcpy_v3020", 10500, 13000)
    db.insert("CUPTI_ACTIVITY_KIND_MEMCPY", start=T0 + 11000, end=T0 + 12500, deviceId=0, contextId=1,
              streamId=7, correlationId=17, globalPid=GPID, bytes=4096, copyKind=2, srcKind=kinds["DEVICE"],
              dstKind=kinds["PAGEABLE"])
    runtime(db, 18, "cudaLaunchKernel_v7000", 13200, 13600)
    kernel(db, 18, NCCL_DEMANGLED, "ncclDevKernel_AllReduce_RING_LL", 20, 14000, 20000)
    runtime(db, 19, "cudaDeviceSynchronize_v3020", 13800, 20100)
    db.insert("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", start=T0 + 13800, end=T0 + 20100, deviceId=0, contextId=1,
              streamId=INVALID, correlationId=19, globalPid=GPID, syncType=4, eventId=INVALID)
    runtime(db, 20, "cudaMemsetAsync_v3020", 20200, 20400)
    db.insert("CUPTI_ACTIVITY_KIND_MEMSET", start=T0 + 20500, end=T0 + 20600, deviceId=0, contextId=1,
              streamId=7, correlationId=20, globalPid=GPID, value=0, bytes=256, memKind=kinds["DEVICE"])
    if steps:
        db.insert("NVTX_EVENTS", start=T0 - 500, end=T0 + 10400, eventType=59, text="ProfilerStep#3", globalTid=GTID)
        db.insert("NVTX_EVENTS", start=T0 + 10400, end=T0 + 21000, eventType=59, textId=db.sid("ProfilerStep#4"),
                  globalTid=GTID)
    if nvtx_rank is not None:
        db.insert("NVTX_EVENTS", start=T0 - 900, end=None, eventType=34, text=f"rank {nvtx_rank}", globalTid=GTID)
    db.close()
    return path


# Expected raw ops of the scenario, in the order read_nsys sorts them (rank, start, host first).
R, S, K, MC, MS, C = (int(OpKind.RUNTIME), int(OpKind.SYNC), int(OpKind.KERNEL), int(OpKind.MEMCPY),
                      int(OpKind.MEMSET), int(OpKind.COLLECTIVE))
#        kind name                                       start   dur  dev thread stream bytes  copy   host        corr step
EXPECTED = [
    (R, "cudaMemcpyAsync",                                   0, 2000, 0, TID, -1,      0, None,  None,        10, 3),
    (MC, "Memcpy HtoD (Pinned -> Device)",                1500, 3000, 0, -1,  7, 1 << 20, "H2D", "pinned",     10, 3),
    (R, "cudaLaunchKernel",                               3000,  500, 0, TID, -1,      0, None,  None,        11, 3),
    (R, "cudaLaunchKernel",                               4000,  400, 0, TID, -1,      0, None,  None,        12, 3),
    (R, "cudaEventRecord",                                4600,  200, 0, TID, -1,      0, None,  None,        13, 3),
    (R, "cudaStreamWaitEvent",                            5000,  200, 0, TID, -1,      0, None,  None,        14, 3),
    (K, "void gemm_kernel<float>(float*, int)",           5000, 3000, 0, -1,  7,       0, None,  None,        11, 3),
    (R, "cudaLaunchKernel",                               5400,  400, 0, TID, -1,      0, None,  None,        15, 3),
    (S, "cudaStreamSynchronize",                          6000, 4200, 0, TID, -1,      0, None,  None,        16, 3),
    (K, "relu_kernel(float*)",                            8000, 1000, 0, -1,  7,       0, None,  None,        12, 3),
    (K, "softmax_kernel(float const*, float*)",           9100, 1000, 0, -1, 13,       0, None,  None,        15, 3),
    (R, "cudaMemcpy",                                    10500, 2500, 0, TID, -1,      0, None,  None,        17, 4),
    (MC, "Memcpy DtoH (Device -> Pageable)",             11000, 1500, 0, -1,  7,    4096, "D2H", "pageable",   17, 4),
    (R, "cudaLaunchKernel",                              13200,  400, 0, TID, -1,      0, None,  None,        18, 4),
    (S, "cudaDeviceSynchronize",                         13800, 6300, 0, TID, -1,      0, None,  None,        19, 4),
    (C, NCCL_DEMANGLED,                                  14000, 6000, 0, -1, 20,       0, None,  None,        18, 4),
    (R, "cudaMemsetAsync",                               20200,  200, 0, TID, -1,      0, None,  None,        20, 4),
    (MS, "Memset (Device)",                              20500,  100, 0, -1,  7,     256, None,  None,        20, 4),
]


@pytest.fixture
def scenario(tmp_path) -> Path:
    return build_scenario(tmp_path / "scenario.sqlite")


def by_corr(raw, corr, gpu):
    sel = raw[(raw["correlation"] == corr) & ((raw["stream"] >= 0) == gpu)]
    assert len(sel) == 1, (corr, gpu, sel)
    return sel.iloc[0]


# --------------------------------------------------------------------------- the scenario


def test_raw_ops_match_hand_computed_values(scenario):
    raw, _ = read_nsys(scenario)
    assert list(raw.columns) == list(RAW_COLUMNS)
    assert len(raw) == len(EXPECTED)
    got = [
        (int(r.kind), r.name, int(r.start_ns), int(r.dur_ns), int(r.device), int(r.thread), int(r.stream),
         int(r.bytes), r.copy_dir, r.host_mem, int(r.correlation), int(r.step))
        for r in raw.itertuples()
    ]
    assert got == EXPECTED
    assert set(raw["rank"]) == {0}


def test_collective_fields(scenario):
    raw, _ = read_nsys(scenario)
    nccl = by_corr(raw, 18, gpu=True)
    assert nccl["kind"] == C
    assert nccl["coll_type"] == "all_reduce"
    assert nccl["coll_group"] == "nccl-stream-20"
    assert nccl["coll_seq"] == 0
    assert nccl["coll_bytes"] == 0  # not recorded by nsys
    rest = raw[raw["kind"] != C]
    assert rest["coll_type"].isna().all() and rest["coll_group"].isna().all()
    assert (rest["coll_seq"] == -1).all() and (rest["coll_bytes"] == 0).all()


def test_sync_and_event_hints(scenario):
    raw, _ = read_nsys(scenario)
    hint_cols = ["sync_stream", "sync_scope", "event_corr", "record_stream", "wait_stream", "blocking"]
    hints = {int(r.correlation): tuple(getattr(r, c) for c in hint_cols)
             for r in raw[raw["stream"] < 0].itertuples()}
    assert hints == {
        10: (-1, "", -1, -1, -1, False),      # cudaMemcpyAsync H2D pinned: does not block
        11: (-1, "", -1, -1, -1, False),
        12: (-1, "", -1, -1, -1, False),
        13: (-1, "", -1, 7, -1, False),       # cudaEventRecord on stream 7
        14: (-1, "", 13, 7, 13, False),       # stream 13 waits for the record of corr 13 (stream 7)
        15: (-1, "", -1, -1, -1, False),
        16: (7, "stream", -1, -1, -1, False),  # cudaStreamSynchronize(stream 7)
        17: (-1, "", -1, -1, -1, True),       # synchronous cudaMemcpy D2H: launches and waits
        18: (-1, "", -1, -1, -1, False),
        19: (-1, "device", -1, -1, -1, False),
        20: (-1, "", -1, -1, -1, False),
    }
    gpu = raw[raw["stream"] >= 0]
    assert (gpu["sync_scope"] == "").all() and not gpu["blocking"].any()
    assert (gpu[["sync_stream", "event_corr", "record_stream", "wait_stream"]] == -1).all().all()


def test_dtypes(scenario):
    raw, _ = read_nsys(scenario)
    for col in ("thread", "stream", "kind", "start_ns", "dur_ns", "bytes", "coll_bytes", "coll_seq",
                "correlation", "sync_stream", "event_corr", "record_stream", "wait_stream"):
        assert raw[col].dtype == "int64", col
    for col in ("rank", "device", "step"):
        assert raw[col].dtype == "int32", col
    assert raw["blocking"].dtype == bool


def test_metadata_is_whitelisted(scenario):
    _, meta = read_nsys(scenario)
    assert meta == {
        "source_format": "nsys-sqlite",
        "capture_tool": "nsys",
        "source_files": ["scenario.sqlite"],
        "gpu_model": GPU_NAME,
        "tool_versions": {"nsys": "2024.6.2.225", "nsys_export_schema": "3.16.1"},
        "ranks": [0],
    }
    text = repr(meta)
    assert "hf_do_not_copy" not in text and "secret-host" not in text


def test_event_matching_without_event_sync_id(tmp_path):
    """CUDA_EVENT table without eventSyncId: latest record of the same event id before the wait."""
    raw, _ = read_nsys(build_scenario(tmp_path / "t.sqlite", SYNC_EVENTS_NO_SYNCID))
    wait = by_corr(raw, 14, gpu=False)
    assert (wait["event_corr"], wait["record_stream"], wait["wait_stream"]) == (13, 7, 13)


def test_older_export_without_cuda_event_table(tmp_path):
    """nsys 2024.6 has no CUDA_EVENT table: the wait keeps its stream, the record is unknown."""
    raw, _ = read_nsys(build_scenario(tmp_path / "t.sqlite", SYNC_2024))
    wait = by_corr(raw, 14, gpu=False)
    assert (wait["event_corr"], wait["record_stream"], wait["wait_stream"]) == (-1, -1, 13)
    assert by_corr(raw, 16, gpu=False)["sync_stream"] == 7
    assert len(raw) == len(EXPECTED)


def test_event_synchronize_and_reused_event(tmp_path):
    """cudaEventSynchronize on an event recorded twice refers to the latest record before it."""
    path = tmp_path / "ev.sqlite"
    db = Db(path, SCHEMA + SYNC_EVENTS_NO_SYNCID)
    for table, rows in ENUMS.items():
        db.conn.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)
    for corr, stream, t in ((1, 7, 0), (3, 9, 2000)):
        runtime(db, corr, "cudaEventRecord_v3020", t, t + 100)
        db.insert("CUPTI_ACTIVITY_KIND_CUDA_EVENT", deviceId=0, contextId=1, streamId=stream, correlationId=corr,
                  globalPid=GPID, eventId=42)
    runtime(db, 2, "cudaLaunchKernel_v7000", 500, 600)
    kernel(db, 2, "k(int)", "k", 9, 700, 900)
    runtime(db, 4, "cudaEventSynchronize_v3020", 2500, 3000)
    db.insert("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", start=T0 + 2500, end=T0 + 3000, deviceId=0, contextId=1,
              streamId=INVALID, correlationId=4, globalPid=GPID, syncType=1, eventId=42)
    db.close()
    raw, _ = read_nsys(path)
    es = by_corr(raw, 4, gpu=False)
    assert es["kind"] == S and es["sync_scope"] == "event"
    assert (es["event_corr"], es["record_stream"], es["sync_stream"]) == (3, 9, 9)


def test_mem_kind_enum_is_joined_not_hard_coded(tmp_path):
    """Renumber ENUM_CUDA_MEM_KIND (as CUPTI numbers it): directions and host memory must follow."""
    cupti_numbering = [
        (0, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"), (3, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
    ]
    raw, _ = read_nsys(build_scenario(tmp_path / "t.sqlite", mem_kind_enum=cupti_numbering))
    h2d, d2h = by_corr(raw, 10, gpu=True), by_corr(raw, 17, gpu=True)
    assert (h2d["copy_dir"], h2d["host_mem"]) == ("H2D", "pinned")
    assert (d2h["copy_dir"], d2h["host_mem"]) == ("D2H", "pageable")
    assert by_corr(raw, 17, gpu=False)["blocking"]


# --------------------------------------------------------------------------- ranks and steps


def test_rank_from_file_name(tmp_path):
    raw, meta = read_nsys(build_scenario(tmp_path / "job_rank3.sqlite"))
    assert set(raw["rank"]) == {3} and meta["ranks"] == [3]


def test_rank_from_nvtx_beats_file_name(tmp_path):
    raw, meta = read_nsys(build_scenario(tmp_path / "job_rank3.sqlite", nvtx_rank=5))
    assert set(raw["rank"]) == {5} and meta["ranks"] == [5]


def test_no_steps_without_profiler_step_ranges(tmp_path):
    raw, _ = read_nsys(build_scenario(tmp_path / "t.sqlite", steps=False))
    assert (raw["step"] == -1).all()


def test_two_processes_in_one_report(tmp_path):
    """globalTid/globalPid unpacking; one rank per process, ordered by GPU, own time origin each."""
    path = tmp_path / "both.sqlite"
    db = Db(path, SCHEMA + SYNC_2025)
    for table, rows in ENUMS.items():
        db.conn.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)
    # High bits above the pid must be ignored.
    procs = [(700, 701, 1, 50_000), (900, 901, 0, 0)]  # (pid, tid, device, time offset)
    for pid, tid, dev, off in procs:
        gtid, gpid = (3 << 48) | (pid << 24) | tid, (3 << 48) | (pid << 24)
        runtime(db, 1, "cudaLaunchKernel_v7000", off, off + 100, gtid=gtid)
        kernel(db, 1, NCCL_DEMANGLED, "ncclDevKernel_AllReduce_RING_LL", 30, off + 200, off + 900,
               gpid=gpid, device=dev)
        runtime(db, 2, "cudaLaunchKernel_v7000", off + 1000, off + 1100, gtid=gtid)
        kernel(db, 2, "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "ncclKernel_AllGather_RING_LL_Sum_int8_t",
               30, off + 1200, off + 1500, gpid=gpid, device=dev)
    db.close()
    raw, meta = read_nsys(path)
    assert meta["ranks"] == [0, 1]
    r0, r1 = raw[raw["rank"] == 0], raw[raw["rank"] == 1]
    assert set(r0["device"]) == {0} and set(r1["device"]) == {1}   # rank order follows the GPU
    assert set(r0.loc[r0["stream"] < 0, "thread"]) == {901} and set(r1.loc[r1["stream"] < 0, "thread"]) == {701}
    for part in (r0, r1):
        assert part["start_ns"].min() == 0
        coll = part[part["kind"] == C]
        assert list(coll["coll_type"]) == ["all_reduce", "all_gather"]
        assert list(coll["coll_seq"]) == [0, 1]
        assert list(coll["start_ns"]) == [200, 1200]


def test_nccl_names():
    assert nccl_coll_type("ncclDevKernel_AllReduce_RING_LL") == "all_reduce"
    assert nccl_coll_type("ncclDevKernel_ReduceScatter_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "reduce_scatter"
    assert nccl_coll_type("ncclKernel_Broadcast_RING_LL_Sum_int8_t") == "broadcast"
    assert nccl_coll_type("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "send_recv"
    assert nccl_coll_type("void ncclDevKernel_Reduce_RING_LL<0>(int)") == "reduce"
    assert nccl_coll_type("ncclAllReduceRingLLKernel_sum_f32(ncclColl)") == "all_reduce"
    assert nccl_coll_type("ncclDevKernel_Generic") == "generic"
    assert nccl_coll_type("ncclSomethingNew") == "unknown"
    assert nccl_coll_type("gemm_kernel") is None


# --------------------------------------------------------------------------- bad input


def test_sqlite_without_cupti_tables(tmp_path):
    path = tmp_path / "nocuda.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA.split("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL")[0])
    conn.execute("INSERT INTO StringIds VALUES (1, 'x')")
    conn.commit()
    conn.close()
    with pytest.raises(TraceFormatError) as info:
        read_nsys(path)
    msg = str(info.value)
    assert str(path) in msg
    assert "no CUPTI activity tables (kernel/memcpy/runtime)" in msg
    assert "nsys export --type sqlite" in msg


def test_truncated_sqlite(tmp_path, scenario):
    data = scenario.read_bytes()
    for i, cut in enumerate((len(data) // 3, 1024 + 50, 60)):
        bad = tmp_path / f"truncated{i}.sqlite"
        bad.write_bytes(data[:cut])
        with pytest.raises(FastrackError) as info:
            read_nsys(bad)
        assert str(bad) in str(info.value), cut


def test_text_file_with_sqlite_extension(tmp_path):
    bad = tmp_path / "notes.sqlite"
    bad.write_text("this is not a database\n")
    with pytest.raises(TraceFormatError) as info:
        read_nsys(bad)
    assert str(bad) in str(info.value) and "not an SQLite database" in str(info.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        read_nsys(tmp_path / "absent.sqlite")
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty file"):
        read_nsys(empty)


def test_nsys_report_instead_of_export(tmp_path):
    rep = tmp_path / "profile.nsys-rep"
    rep.write_bytes(b"\x00\x01QDSTRM-ish binary")
    with pytest.raises(TraceFormatError, match="nsys export --type sqlite"):
        read_nsys(rep)


def test_empty_cupti_tables(tmp_path):
    path = tmp_path / "idle.sqlite"
    Db(path, SCHEMA + SYNC_2025).close()
    with pytest.raises(TraceFormatError, match="no CUDA work") as info:
        read_nsys(path)
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------- end to end



def _as_table(result):
    """derive_dependencies' result as a pyarrow table (accepts a Table or a DataFrame)."""
    import pyarrow as pa

    from fastrack_core.traceio import make_table

    if isinstance(result, tuple):
        result = result[0]
    if isinstance(result, pa.Table):
        return result
    cols = {c: result[c].tolist() for c in result.columns}
    return make_table(cols)


def test_end_to_end_through_derive_dependencies(scenario, tmp_path):
    from fastrack_core.schema import DepKind
    from fastrack_core.traceio import read_trace, write_trace
    from tracegen.deps import derive_dependencies

    raw, meta = read_nsys(scenario)
    out = write_trace(tmp_path / "scenario.parquet", _as_table(derive_dependencies(raw)), meta)
    trace = read_trace(out)
    assert trace.metadata["source_format"] == "nsys-sqlite"
    assert trace.metadata["gpu_model"] == GPU_NAME
    t = trace.table.to_pandas()
    for col in ("kind", "name", "copy_dir", "host_mem", "coll_type", "coll_group"):
        t[col] = t[col].astype(object).where(t[col].notna(), None)

    # Every GPU op survives unchanged, and each one depends on its launching call.
    gpu = t[t["stream"] >= 0].sort_values("start_ns")
    exp_gpu = [e for e in EXPECTED if e[6] >= 0]
    assert [(OpKind[k.upper()].value, n, s, d, st, b, cd, hm) for k, n, s, d, st, b, cd, hm in
            gpu[["kind", "name", "start_ns", "dur_ns", "stream", "bytes", "copy_dir", "host_mem"]].itertuples(index=False)
            ] == [(e[0], e[1], e[2], e[3], e[6], e[7], e[8], e[9]) for e in exp_gpu]
    ids = dict(zip(t["op_id"], t.index))

    def deps_of(row, kind):
        return {int(d) for d, k in zip(row["deps"], row["dep_kinds"]) if k == int(kind)}

    def one(name, kind):
        sel = t[(t["name"] == name) & (t["kind"] == kind)]
        assert len(sel) == 1, (name, kind, sel)
        return sel.iloc[0]

    for _, g in gpu.iterrows():
        assert deps_of(g, DepKind.LAUNCH), g["name"]
    relu = one("relu_kernel(float*)", "kernel")
    softmax = one("softmax_kernel(float const*, float*)", "kernel")
    d2h = one("Memcpy DtoH (Device -> Pageable)", "memcpy")
    nccl = one(NCCL_DEMANGLED, "collective")
    # Cross-stream event: last op on stream 7 before the record -> first op on 13 after the wait.
    assert int(relu["op_id"]) in deps_of(softmax, DepKind.EVENT)
    # cudaStreamSynchronize(7) waits for relu (the last op launched on stream 7 before it).
    assert int(relu["op_id"]) in deps_of(one("cudaStreamSynchronize", "sync"), DepKind.SYNC)
    # cudaDeviceSynchronize waits for the NCCL kernel.
    assert int(nccl["op_id"]) in deps_of(one("cudaDeviceSynchronize", "sync"), DepKind.SYNC)
    # The blocking cudaMemcpy is split: some host sync op waits for the D2H copy.
    waiters = [r for _, r in t[t["kind"] == "sync"].iterrows() if int(d2h["op_id"]) in deps_of(r, DepKind.SYNC)]
    assert waiters, "no sync op waits for the blocking D2H copy"
    assert {int(d) for ds in t["deps"] for d in ds} <= set(ids), "dangling dependency"


def test_tracegen_convert_cli(scenario, tmp_path):
    from click.testing import CliRunner

    from fastrack_core.traceio import read_trace
    from tracegen.cli import main

    out = tmp_path / "y.parquet"
    result = CliRunner().invoke(main, ["convert", str(scenario), "-o", str(out)])
    assert result.exit_code == 0, result.output
    trace = read_trace(out)
    assert trace.metadata["source_format"] == "nsys-sqlite"
    assert trace.metadata["capture_tool"] == "nsys"
    assert trace.num_ops >= len(EXPECTED)

    bad = tmp_path / "x.sqlite"
    bad.write_text("not sqlite")
    result = CliRunner().invoke(main, ["convert", str(bad), "-o", str(tmp_path / "z.parquet")])
    assert result.exit_code == 2
    assert str(bad) in result.output
    assert not (tmp_path / "z.parquet").exists()
