""":func:`derive_dependencies`: the raw ops of an importer -> a schema-v1 trace table.

The steps, in data order: read the raw frame (:mod:`~tracegen.deps.raw`), flatten the host calls
(:mod:`~tracegen.deps.hosts`), match GPU ops to their calls (:mod:`~tracegen.deps.launches`), split
blocking calls and launches blocked on a full queue (:mod:`~tracegen.deps.queue`) and add gap ops
(hosts), derive the edges (program, launch, stream
(:mod:`~tracegen.deps.streams`), sync and event (:mod:`~tracegen.deps.syncs`), inferred waits
(:mod:`~tracegen.deps.held`), collective
(:mod:`~tracegen.deps.collectives`)), then assemble the table (:mod:`~tracegen.deps.assemble`).
The contract and the rules are in :mod:`tracegen.deps` and ``docs/conventions.md``.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

import pyarrow as pa

from tracegen.deps.assemble import assemble_table
from tracegen.deps.collectives import collective_edges
from tracegen.deps.edges import Edges
from tracegen.deps.held import held_edges
from tracegen.deps.hosts import flatten_host_calls, gap_ops, program_edges, split_blocking_calls
from tracegen.deps.launches import gpu_ops, launch_edges
from tracegen.deps.queue import blocked_launches
from tracegen.deps.raw import RawInput, annotations, read_raw_ops
from tracegen.deps.streams import GpuLookup, stream_edges
from tracegen.deps.syncs import event_edges, sync_edges, sync_half_edges


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: importers allocate millions of small containers that
    all live to the end, and generation scans would cost about a third of the import time."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def derive_dependencies(raw: RawInput, *, path: str | None = None) -> pa.Table:
    """Build a schema-v1 table from a raw-op frame (see :mod:`tracegen.deps` for the contract).

    ``path`` only labels error messages. Raises :class:`TraceFormatError` on bad input
    (negative or NaN durations, unknown kinds, no host or GPU op at all).
    """
    with no_gc():
        return _derive(raw, path)


def _derive(raw: RawInput, path: str | None) -> pa.Table:
    ops = read_raw_ops(raw, path)
    ann = annotations(ops)
    calls = flatten_host_calls(ops)
    gpu = gpu_ops(ops, calls.corr_map)
    host = split_blocking_calls(calls, gpu.launch, gpu.start, blocked_launches(calls, gpu, ops))
    gaps = gap_ops(host, ops, ann)
    gpu_base = host.n + gaps.n  # op index: host calls and halves, gaps, GPU ops
    edges = Edges()
    program_edges(host, gaps, edges)
    gpu = launch_edges(gpu, host, gpu_base, edges)
    stream_edges(gpu, gpu_base, edges)
    sync_half_edges(host, gpu, gpu_base, edges)
    if gpu.n:
        find = GpuLookup(gpu)
        sync_edges(host, gpu, calls.corr_map, find, gpu_base, edges)
        event_edges(host, calls.corr_map, find, gpu_base, edges)
        held_edges(gpu, gpu_base, edges)
    coll = collective_edges(ops, gpu, gpu_base, edges)
    return assemble_table(ops, ann, host, gaps, gpu, coll, edges)
