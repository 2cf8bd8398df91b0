"""Turn the "raw ops" of an importer into a schema-v1 trace: flattening, gaps, dependencies.

Every importer (Kineto JSON, Nsight SQLite, ...) reduces its input to one table of *raw ops*
and calls :func:`derive_dependencies`, which applies ``docs/conventions.md`` and returns the
Arrow table (built with :func:`fastrack_core.traceio.make_table`). Importers never compute
dependencies themselves. The table is either a pandas DataFrame (Nsight, PyTorch ET, capture)
or a :class:`tracegen.deps.raw.RawColumns` (the Kineto importer's: a dict of equal-length numpy
columns, with the dtypes the DataFrame would have, ``.frame()`` gives it); both are read alike.
The derivation itself uses numpy only, and builds its Arrow arrays from numpy buffers
(:mod:`~tracegen.deps.arrow`), so that a Kineto ``convert`` never imports pandas (~0.25 s).

Raw-op frame contract
=====================

One row per measured record. Columns (all optional except ``kind``, ``name``, ``start_ns``,
``dur_ns``; missing columns take the default shown):

=============== ======== ====== ==============================================================
column          dtype    default meaning
=============== ======== ====== ==============================================================
rank            int      0      rank (process) of the record
device          int      -1     GPU ordinal (GPU ops; host calls when known, e.g. a device sync)
thread          int      -1     host thread id (host rows)
stream          int      -1     GPU stream id (GPU rows)
kind            int      --     :class:`fastrack_core.schema.OpKind` value (see below)
name            str      --     kernel / call / operator name
start_ns        int      --     start, integer ns on the rank's clock (any origin: absolute is
                                fine, each rank is re-based to its earliest kept op)
dur_ns          int      --     duration, ns, >= 0
bytes           int      0      bytes moved / set
copy_dir        str|int  None   memcpy direction: label (H2D, D2H, D2D, P2P) or CopyDir value
host_mem        str|int  None   pinned|pageable, or HostMem value
coll_type       str      None   collective type (all_reduce, ...) of a COLLECTIVE op
coll_bytes      int      0      collective message size per rank, bytes
coll_group      str      None   process group (None: one unnamed group)
coll_seq        int      -1     sequence number in the group; -1: computed here
correlation     int      -1     CUDA correlation id linking a call and its GPU op(s)
step            int      -1     profiler step; -1: derived here (see below)
--------------- -------- ------ --------------------------------------------------------------
sync_stream     int      -1     cudaStreamSynchronize: the stream it waits on (-1 unknown)
sync_scope      str      ''     what a blocking SYNC call waits on: 'stream' | 'event' |
                                'device' | '' (unknown: no sync dependency)
event_corr      int      -1     cudaStreamWaitEvent / cudaEventSynchronize: correlation id of the
                                matching cudaEventRecord call (-1 unknown)
record_stream   int      -1     stream an event was recorded on (on the record row, or on the
                                wait / event-sync row; -1 unknown)
wait_stream     int      -1     cudaStreamWaitEvent: the stream that waits (-1 unknown)
blocking        bool     False  a call that both launches GPU work and waits for it
                                (synchronous cudaMemcpy, D2H cudaMemcpyAsync into pageable
                                memory): split into a runtime op and a sync op
=============== ======== ====== ==============================================================

Meaning of ``kind`` on input:

* ``RUNTIME`` / ``SYNC``: CUDA runtime/driver calls. These (plus the CPU gap ops derived here)
  are the host ops written out. ``SYNC`` means the call blocks the host (stream/event/device
  synchronize).
* ``KERNEL`` / ``MEMCPY`` / ``MEMSET`` / ``COLLECTIVE``: GPU ops, written out.
* ``CPU``: **annotations**, never written out. Framework operators (Kineto ``cpu_op``, NVTX
  ranges) name the CPU gap ops; a CPU row named ``ProfilerStep#N`` defines step ``N`` over its
  interval for every host op of its rank. Exception: a zero-duration CPU row named like a
  request marker (``request:<event>:<id>``, :mod:`fastrack_core.markers`) is a **marker**, written out
  as a host op of its thread at its start (docs/conventions.md rule 8); a marker that falls
  inside a host call is absorbed by that call, like a nested call.

A row is a *stream wait* (cudaStreamWaitEvent) when ``wait_stream >= 0``, or when
``event_corr >= 0`` and it is not a ``SYNC`` row. ``record_stream`` alone marks nothing (it is
also set on cudaEventRecord rows).

What is derived (``docs/conventions.md``)
=========================================

* Flattening per (rank, thread): host calls sorted by start; a call contained in an earlier one
  is absorbed by the outermost call (its correlation, blocking flag and sync hints move to the
  outer call, so its GPU ops are launched by the outer call); a call that only partly overlaps
  the previous one is clipped to start where the previous ends.
* Blocking calls with a GPU op: split into a ``runtime`` op ``[start, s)`` and a ``sync`` op
  ``[s, end]`` where ``s`` = first GPU op start clamped to ``[start + 1, end]`` (calls shorter
  than 1 ns are not split). The sync half has the same name, correlation -1 and ``sync`` deps on
  the GPU ops of the call.
* CPU gap ops fill every positive gap between consecutive host ops of a thread, named after the
  innermost non-step annotation of that thread enclosing the whole gap (else ``cpu``). Threads
  without CUDA calls are dropped.
* ``program``: previous host op of the thread.
* ``launch``: call -> GPU op(s) with its correlation (CUDA graphs: many). A GPU op whose
  correlation id is below that of every call of its rank was launched before the profiler
  started: no launch. Other GPU ops without a call get an inferred launch from the latest
  ``runtime`` op started at or before the GPU op on the rank's main launching thread (most
  launches; ties: lowest thread id).
* Issue order: a GPU op is *issued* at the start of its (real or inferred) launching call; GPU
  ops with no call at all at the earlier of their own start and 1 ns before the rank's first
  host call. Stream order and "launched before" use issue order (ties: GPU start), which keeps
  the graph acyclic.
* ``stream``: previous op of the same (rank, device, stream) in issue order.
* ``sync``: stream scope: last op issued on that stream before the call (stream unknown: the
  stream of the last GPU op the same thread launched before the call); device scope: last op
  issued before the call on every stream of the rank (of the call's device when known); event
  scope: last op issued on the record stream before the matching cudaEventRecord (record call
  found by ``event_corr``; record stream from the hints, else the stream of the last GPU op the
  recording thread launched before the record, as HTA does; without a record call the sync call's
  start bounds the record).
* ``event``: stream waits: the op the event captured (as for event syncs) -> the first op issued
  on the waiting stream after the wait call (waiting stream unknown: the stream of the first GPU op
  the same thread launches after the wait). No edge when both streams are the same.
* Launches blocked on a full queue (:mod:`tracegen.deps.queue`): a launching call longer than
  100 us that returned at most 10 us after a GPU op issued before it ended is split after its
  typical duration; the ``sync`` half depends on that GPU op.
* ``event`` (inferred, :mod:`tracegen.deps.held`): a GPU op that started more than 20 us after
  it was ready depends on the op of another stream of its (rank, device), issued before it, that
  ended at most 10 us before it started (2 us after, for coarse timestamps).
* ``collective``: COLLECTIVE ops matched across ranks by (coll_group, coll_type, coll_seq); each
  member depends on the members of every other rank. Missing ``coll_seq`` values are numbered per
  (rank, coll_group) in issue order.
* Steps: host ops take the ``ProfilerStep#N`` interval of their rank containing their start;
  GPU ops the step of their launching call; a given ``step >= 0`` is kept.
* Times are re-based per rank to the earliest kept op; rows sorted by (rank, start_ns, host before
  GPU, thread/stream); op ids 0..n-1 in that order.

Everything is vectorized with numpy (about 1M raw ops in a few seconds). The rules live in
this package, one concept per module: :mod:`~tracegen.deps.raw` (reading the frame),
:mod:`~tracegen.deps.hosts`, :mod:`~tracegen.deps.launches`, :mod:`~tracegen.deps.streams`,
:mod:`~tracegen.deps.syncs`, :mod:`~tracegen.deps.queue`, :mod:`~tracegen.deps.held`, :mod:`~tracegen.deps.collectives` and :mod:`~tracegen.deps.assemble`,
chained by :mod:`~tracegen.deps.derive` over the vectorized lookups of :mod:`~tracegen.deps.search`
and the edge list of :mod:`~tracegen.deps.edges`. Import from this package
(``from tracegen.deps import derive_dependencies``), not from its modules.
"""

from __future__ import annotations

from tracegen.deps.derive import derive_dependencies, no_gc
from tracegen.deps.raw import HINT_COLUMNS, RAW_DEFAULTS

__all__ = ["derive_dependencies", "no_gc", "HINT_COLUMNS", "RAW_DEFAULTS"]
