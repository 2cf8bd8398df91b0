"""What-if data parallelism: one GPU's training step becomes N ranks that all-reduce gradients.

``replay --data-parallel N [--bucket-mb MB] --protocol P TRACE`` replays a single-GPU training
trace as PyTorch DistributedDataParallel would run it on N GPUs:

* every rank runs a copy of the trace's ops (same durations, same host threads and streams);
* **gradient readiness** comes from the trace: a ``cpu`` op named ``AccumulateGrad`` whose
  ``bytes`` is the gradient's size, on the thread that runs backward, at the moment the autograd
  engine produced that gradient (docs/conventions.md). Names ending in ``::AccumulateGrad`` (the
  autograd node as Kineto names it) count too when they carry bytes;
* gradients are put into **buckets in the order they became ready**, as DDP does once it has
  rebuilt its buckets after the first iteration: a bucket closes when it holds at least its cap
  (``--bucket-mb``, default 25 MB, where 1 MB = 2^20 bytes as DDP's ``bucket_cap_mb``; the first
  bucket of a step is capped at 1 MiB, ``dist._DEFAULT_FIRST_BUCKET_BYTES``). Buckets are formed
  per profiler step;
* when a bucket is full, the autograd hook of its last gradient **launches an all-reduce** of the
  bucket on the rank's NCCL stream (a ``collective`` op named ``nccl:all_reduce`` with the bucket's
  bytes, LAUNCH edge from that gradient's marker), after the GPU work queued so far on the
  current stream (EVENT edge from the latest GPU op launched before the marker): gradient
  exchange **overlaps the rest of backward**. The all-reduces of a rank run in order (one NCCL
  stream) and the members on all ranks form one barrier group;
* after backward, DDP makes the current stream wait for the all-reduces: the first GPU op
  launched after the step's last gradient marker on that stream waits for the step's last
  bucket (EVENT edge). The host does not block.

Not modelled (docs/multi-gpu.md): the per-bucket gradient division and copies into and out of
the flat bucket (a few small kernels per bucket), unused-parameter detection, buckets of mixed
dtypes, gradient accumulation without sync (``no_sync``), ranks that differ (stragglers).

The all-reduces have no measured duration: the protocol prices them (``none``: plaintext on the
model's topology; ``baseline``, ``fastrack``...: encrypted messages), so ``captured`` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastrack_core.errors import ConfigError, GraphError
from fastrack_core.schema import DepKind, OpKind
from replay.graph import NO_LANE, NODE_FIELDS, Category, Lanes, LaneType, OpGraph, edges_by_dependent
from replay.names import CAPTURED

GRAD_MARKER = "AccumulateGrad"
DEFAULT_BUCKET_MB = 25.0
MB = 1 << 20  # DDP's bucket_cap_mb counts MiB
FIRST_BUCKET_BYTES = 1 << 20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
COLLECTIVE_NAME = "nccl:all_reduce"
NCCL_STREAM_NAME = "nccl"
_GPU_KINDS = [int(OpKind.KERNEL), int(OpKind.MEMCPY), int(OpKind.MEMSET)]


def gradient_markers(graph: OpGraph) -> np.ndarray:
    """Node indices of the gradient-ready markers, in the order gradients became ready."""
    names = np.array([nm == GRAD_MARKER or nm.endswith("::" + GRAD_MARKER) for nm in graph.names] or [False])
    m = np.flatnonzero((graph.kind == OpKind.CPU) & names[graph.name] & (graph.bytes > 0))
    return m[np.lexsort((m, graph.order[m]))].astype(np.int64)


def assign_buckets(nbytes: np.ndarray, step: np.ndarray, cap_bytes: int,
                   first_cap_bytes: int = FIRST_BUCKET_BYTES) -> np.ndarray:
    """Bucket id (0, 1, ...) of each gradient, in readiness order: a bucket closes once it holds at
    least its cap (the first bucket of each step: ``min(first_cap_bytes, cap_bytes)``)."""
    out = np.zeros(nbytes.shape[0], np.int64)
    b, filled, limit, cur_step = -1, 0, 0, None
    for i, (size, s) in enumerate(zip(nbytes.tolist(), step.tolist())):
        if b < 0 or s != cur_step:  # a step's first bucket
            b, filled, limit, cur_step = b + 1, 0, min(first_cap_bytes, cap_bytes), s
        elif filled >= limit:
            b, filled, limit = b + 1, 0, cap_bytes
        out[i] = b
        filled += size
    return out


# ------------------------------------------------------------------------------ the transform


def data_parallel(graph: OpGraph, world: int, bucket_mb: float = DEFAULT_BUCKET_MB) -> OpGraph:
    """``graph`` (one rank) as ``world`` data-parallel ranks with bucketed gradient all-reduces."""
    marks = _checked_markers(graph, world, bucket_mb)
    if world == 1:
        return graph
    buckets = _Buckets.of(graph, marks, bucket_mb)
    gpu = _GpuIssue.of(graph)
    hook_waits_for = gpu.latest_before(graph.order[buckets.last_mark])
    step_waiter = _backward_end_waiters(graph, gpu, buckets, hook_waits_for)

    lanes, lane, nccl_lane = _replicated_lanes(graph, world)
    names = graph.names + ((COLLECTIVE_NAME,) if COLLECTIVE_NAME not in graph.names else ())
    members = _Members(graph.n, world, len(buckets))
    columns = _node_columns(graph, world, lane, buckets, members, nccl_lane, names.index(COLLECTIVE_NAME))

    edges = _Edges()
    edges.add(_per_rank(graph.dep_src, graph.n, world), _per_rank(_edge_dependents(graph), graph.n, world),
              np.tile(graph.dep_kind, world), np.tile(graph.dep_lag, world))
    _add_ddp_edges(edges, graph, members, buckets, hook_waits_for, step_waiter)

    src, dst, kind, lag = edges.concatenated()
    order, ptr = edges_by_dependent(dst, world * graph.n + members.count)
    out = OpGraph(**columns, dep_ptr=ptr, dep_src=src[order], dep_kind=kind[order], dep_lag=lag[order], lanes=lanes,
                  names=names, kind_names=dict(graph.kind_names), rank_shift=np.zeros(world, np.int64))
    out.validate()
    return out


def data_parallel_graph(graph: OpGraph, world: int, bucket_mb: float, protocols) -> OpGraph:
    """:func:`data_parallel` for the command line: refuses ``captured`` among ``protocols``."""
    if CAPTURED in [p.strip() for p in protocols]:
        raise ConfigError("--data-parallel adds all-reduces that were never measured: choose a protocol that prices "
                          "them (none, ppcie, baseline, fastrack, ...), not 'captured'")
    return data_parallel(graph, world, bucket_mb)


def _checked_markers(graph: OpGraph, world: int, bucket_mb: float) -> np.ndarray:
    """The gradient markers of a single-GPU trace without collectives (raises on anything else)."""
    if world < 1:
        raise ConfigError(f"--data-parallel must be at least 1, got {world}")
    if not bucket_mb > 0:
        raise ConfigError(f"--bucket-mb must be positive, got {bucket_mb}")
    ranks = np.unique(graph.rank)
    if ranks.size != 1:
        raise ConfigError(f"--data-parallel turns a single-GPU trace into N ranks; this trace has ranks "
                          f"{', '.join(map(str, ranks.tolist()))}")
    if np.any(graph.kind == OpKind.COLLECTIVE):
        raise ConfigError("--data-parallel needs a single-GPU trace without collectives; this one has "
                          f"{int(np.sum(graph.kind == OpKind.COLLECTIVE))}")
    marks = gradient_markers(graph)
    if marks.size == 0:
        raise GraphError(f"--data-parallel needs gradient-ready markers (cpu ops named '{GRAD_MARKER}' whose bytes "
                         "is the gradient's size, docs/conventions.md); this trace has none")
    return marks


@dataclass(frozen=True)
class _Buckets:
    """The DDP buckets of the trace: per bucket, the marker of its last gradient and its bytes."""

    last_mark: np.ndarray  # int64 node index: the hook of this gradient launches the all-reduce
    nbytes: np.ndarray  # int64

    def __len__(self) -> int:
        return int(self.last_mark.shape[0])

    @staticmethod
    def of(graph: OpGraph, marks: np.ndarray, bucket_mb: float) -> "_Buckets":
        bucket = assign_buckets(graph.bytes[marks], graph.step[marks], int(round(bucket_mb * MB)))
        count = int(bucket[-1]) + 1
        last_mark = np.zeros(count, np.int64)
        last_mark[bucket] = marks  # marks are in readiness order: the last write per bucket wins
        nbytes = np.bincount(bucket, weights=graph.bytes[marks], minlength=count).astype(np.int64)
        return _Buckets(last_mark=last_mark, nbytes=nbytes)


def _edge_dependents(graph: OpGraph) -> np.ndarray:
    """Dependent node of every edge (the CSR expanded)."""
    return np.repeat(np.arange(graph.n, dtype=np.int64), np.diff(graph.dep_ptr))


@dataclass(frozen=True)
class _GpuIssue:
    """The GPU ops of the trace in the order the host issued them (their launching call's start,
    or their own start when no call launched them; ties by node index)."""

    node: np.ndarray  # int64 node indices, in issue order
    issue: np.ndarray  # int64 ns, non-decreasing

    @staticmethod
    def of(graph: OpGraph) -> "_GpuIssue":
        dst = _edge_dependents(graph)
        launch = np.flatnonzero(graph.dep_kind == DepKind.LAUNCH)
        launcher = np.full(graph.n, -1, np.int64)
        launcher[dst[launch][::-1]] = graph.dep_src[launch][::-1]  # the first LAUNCH edge of a node wins
        gpu = np.flatnonzero(np.isin(graph.kind, _GPU_KINDS))
        issue = np.where(launcher[gpu] >= 0, graph.order[np.maximum(launcher[gpu], 0)], graph.order[gpu])
        o = np.lexsort((gpu, issue))
        return _GpuIssue(node=gpu[o], issue=issue[o])

    def latest_before(self, t: np.ndarray) -> np.ndarray:
        """Per time: the last GPU op issued at or before it, or -1."""
        at = np.searchsorted(self.issue, t, side="right") - 1
        return np.where(at >= 0, self.node[np.maximum(at, 0)], -1)


def _backward_end_waiters(graph: OpGraph, gpu: _GpuIssue, buckets: _Buckets, hook_waits_for: np.ndarray) -> np.ndarray:
    """Per bucket: the GPU op that waits for it (the first one issued after a step's last bucket
    on the stream of the work that bucket's hook waited for), or -1."""
    step_of = graph.step[buckets.last_mark]
    last_of_step = np.r_[step_of[1:] != step_of[:-1], True]
    waiter = np.full(len(buckets), -1, np.int64)
    for b in np.flatnonzero(last_of_step & (hook_waits_for >= 0)).tolist():
        stream = graph.lane[hook_waits_for[b]]
        later = np.flatnonzero((gpu.issue > graph.order[buckets.last_mark[b]]) & (graph.lane[gpu.node] == stream))
        if later.size:
            waiter[b] = gpu.node[later[0]]
    return waiter


def _typical_launch_lag(graph: OpGraph) -> int:
    """Median lag of the trace's LAUNCH edges (0 without any): the hook's launch of an all-reduce."""
    lags = graph.dep_lag[graph.dep_kind == DepKind.LAUNCH]
    return int(np.median(lags)) if lags.size else 0


# ------------------------------------------------------------------------------ replication


def _per_rank(index: np.ndarray, n: int, world: int) -> np.ndarray:
    """Node indices ``index`` of rank 0's copy, repeated for every rank (rank-major)."""
    offset = (np.arange(world, dtype=np.int64) * n)[:, None]
    return (np.asarray(index, np.int64)[None, :] + offset).ravel()


def _replicated_lanes(graph: OpGraph, world: int) -> tuple[Lanes, np.ndarray, np.ndarray]:
    """Every rank's copy of the trace's lanes plus its NCCL stream: (lanes, lane of every
    replicated node, NCCL stream lane per rank)."""
    n_lanes = len(graph.lanes)
    prefix = f"rank{int(graph.rank[0])}/"
    names = tuple(f"rank{r}/" + (nm[len(prefix):] if nm.startswith(prefix) else nm)
                  for r in range(world) for nm in graph.lanes.names)
    lanes = Lanes(rank=np.repeat(np.arange(world, dtype=np.int32), n_lanes), type=np.tile(graph.lanes.type, world),
                  key=np.tile(graph.lanes.key, world), servers=np.tile(graph.lanes.servers, world), names=names)
    nccl_key = int(graph.lanes.key[graph.lanes.type == LaneType.STREAM].max(initial=0)) + 1
    nccl_lane = np.zeros(world, np.int32)
    for r in range(world):
        lanes, nccl_lane[r] = lanes.add(r, LaneType.STREAM, nccl_key, f"rank{r}/{NCCL_STREAM_NAME} stream")
    lane = np.where(graph.lane >= 0, graph.lane, NO_LANE)
    shifted = np.where(lane[None, :] >= 0, lane[None, :] + (np.arange(world) * n_lanes)[:, None], NO_LANE)
    return lanes, shifted.ravel(), nccl_lane


class _Members:
    """The all-reduce nodes, appended after the replicated ranks: bucket-major, rank-minor."""

    def __init__(self, n: int, world: int, buckets: int):
        self.n, self.world, self.count = n, world, buckets * world
        self.bucket = np.repeat(np.arange(buckets, dtype=np.int64), world)  # per member
        self.rank = np.tile(np.arange(world, dtype=np.int64), buckets)  # per member
        self.node = world * n + np.arange(self.count, dtype=np.int64)  # per member: its index in the output

    def on_rank(self, trace_node: np.ndarray) -> np.ndarray:
        """Per member: its rank's copy of ``trace_node`` (one entry per member; -1 stays -1)."""
        return np.where(trace_node >= 0, self.rank * self.n + trace_node, -1)


def _node_columns(graph: OpGraph, world: int, lane: np.ndarray, buckets: _Buckets, members: _Members,
                  nccl_lane: np.ndarray, collective_name: int) -> dict[str, np.ndarray]:
    """Every per-node column of the output: the ranks' copies of the trace, then the members."""
    n, count = graph.n, members.count
    anchor = buckets.last_mark[members.bucket]  # provenance of a member: its bucket's last gradient
    id_stride = int(graph.op_id.max()) + 1 if n else 1
    replicas = {f: np.tile(getattr(graph, f), world) for f in NODE_FIELDS}
    replicas["op_id"] = np.repeat(np.arange(world, dtype=np.int64), n) * id_stride + replicas["op_id"]
    replicas["rank"] = np.repeat(np.arange(world, dtype=np.int32), n)
    replicas["lane"] = lane
    added = dict(
        op_id=world * id_stride + np.arange(count, dtype=np.int64),
        origin=graph.origin[anchor],
        rank=members.rank.astype(np.int32),
        kind=np.full(count, int(OpKind.COLLECTIVE), np.int8),
        category=np.full(count, int(Category.COMM), np.int8),
        lane=nccl_lane[members.rank],
        dur=np.zeros(count, np.int64),
        bytes=buckets.nbytes[members.bucket],
        copy_dir=np.zeros(count, np.int8),
        host_mem=np.zeros(count, np.int8),
        name=np.full(count, collective_name, np.int32),
        order=graph.order[anchor] + graph.dur[anchor],
        release=np.zeros(count, np.int64),
        group=members.bucket,
        captured_start=np.full(count, -1, np.int64),
        captured_dur=np.full(count, -1, np.int64),
        step=graph.step[anchor],
    )
    return {f: np.concatenate([replicas[f], added[f]]).astype(getattr(graph, f).dtype, copy=False)
            for f in NODE_FIELDS}


class _Edges:
    """Edge batches (src, dst, kind, lag) collected in order; entries with src or dst < 0 are skipped."""

    def __init__(self):
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, src, dst, kind, lag) -> None:
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        keep = (src >= 0) & (dst >= 0)
        kinds = np.broadcast_to(np.asarray(kind, np.uint8), src.shape)
        lags = np.broadcast_to(np.asarray(lag, np.int64), src.shape)
        self._parts.append((src[keep], dst[keep], kinds[keep], lags[keep]))

    def concatenated(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All edges so far: (src, dst, kind, lag)."""
        src, dst, kind, lag = zip(*self._parts)
        return np.concatenate(src), np.concatenate(dst), np.concatenate(kind), np.concatenate(lag)


def _add_ddp_edges(edges: _Edges, graph: OpGraph, members: _Members, buckets: _Buckets, hook_waits_for: np.ndarray,
                   step_waiter: np.ndarray) -> None:
    """The all-reduce of a bucket: launched by its last gradient's hook (after the GPU work
    queued before it), in bucket order on the NCCL stream, waited for by the end of backward."""
    anchor = buckets.last_mark[members.bucket]
    edges.add(members.on_rank(anchor), members.node, DepKind.LAUNCH, graph.dur[anchor] + _typical_launch_lag(graph))
    edges.add(members.on_rank(hook_waits_for[members.bucket]), members.node, DepKind.EVENT, 0)
    later = np.flatnonzero(members.bucket >= 1)
    edges.add(members.node[later] - members.world, members.node[later], DepKind.STREAM, 0)
    waiter = step_waiter[members.bucket]
    edges.add(np.where(waiter >= 0, members.node, -1), members.on_rank(waiter), DepKind.EVENT, 0)


__all__ = ["data_parallel", "data_parallel_graph", "gradient_markers", "assign_buckets", "GRAD_MARKER",
           "DEFAULT_BUCKET_MB", "COLLECTIVE_NAME"]
