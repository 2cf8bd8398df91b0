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
model's topology; ``cc-multi``...: encrypted messages), so ``captured`` is refused.
"""

from __future__ import annotations

import numpy as np

from fastrack.errors import ConfigError, GraphError
from fastrack.schema import DepKind, OpKind
from replay.graph import NO_LANE, Category, Lanes, LaneType, OpGraph, edges_by_dependent

GRAD_MARKER = "AccumulateGrad"
DEFAULT_BUCKET_MB = 25.0
MB = 1 << 20  # DDP's bucket_cap_mb counts MiB
FIRST_BUCKET_BYTES = 1 << 20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
COLLECTIVE_NAME = "nccl:all_reduce"
NCCL_STREAM_NAME = "nccl"


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


def data_parallel(graph: OpGraph, world: int, bucket_mb: float = DEFAULT_BUCKET_MB) -> OpGraph:
    """``graph`` (one rank) as ``world`` data-parallel ranks with bucketed gradient all-reduces."""
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
    if world == 1:
        return graph
    n = graph.n
    L = len(graph.lanes)
    r0 = int(ranks[0])
    cap = int(round(bucket_mb * MB))
    bucket = assign_buckets(graph.bytes[marks], graph.step[marks], cap)
    B = int(bucket[-1]) + 1
    last_mark = np.zeros(B, np.int64)
    last_mark[bucket] = marks  # marks are in readiness order: the last write per bucket wins
    bbytes = np.bincount(bucket, weights=graph.bytes[marks], minlength=B).astype(np.int64)

    # GPU work the hook waits for: the latest GPU op launched before the bucket's last marker
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.dep_ptr))
    launch = np.flatnonzero(graph.dep_kind == DepKind.LAUNCH)
    launcher = np.full(n, -1, np.int64)
    launcher[dst[launch][::-1]] = graph.dep_src[launch][::-1]
    gpu = np.flatnonzero(np.isin(graph.kind, [int(OpKind.KERNEL), int(OpKind.MEMCPY), int(OpKind.MEMSET)]))
    issue = np.where(launcher[gpu] >= 0, graph.order[np.maximum(launcher[gpu], 0)], graph.order[gpu])
    o = np.lexsort((gpu, issue))
    gpu, issue = gpu[o], issue[o]
    at = np.searchsorted(issue, graph.order[last_mark], side="right") - 1
    produced = np.where(at >= 0, gpu[np.maximum(at, 0)], -1)
    # after the step's last bucket: first GPU op launched after its marker on the same stream
    step_of = graph.step[last_mark]
    last_of_step = np.r_[step_of[1:] != step_of[:-1], True]
    waiter = np.full(B, -1, np.int64)
    for b in np.flatnonzero(last_of_step & (produced >= 0)).tolist():
        lane = graph.lane[produced[b]]
        later = np.flatnonzero((issue > graph.order[last_mark[b]]) & (graph.lane[gpu] == lane))
        if later.size:
            waiter[b] = gpu[later[0]]
    lags = graph.dep_lag[launch]
    launch_lag = int(np.median(lags)) if lags.size else 0

    # ---- replicate the rank
    R = world
    off = (np.arange(R, dtype=np.int64) * n)[:, None]
    idx = lambda a: (np.asarray(a, np.int64)[None, :] + off).ravel()  # noqa: E731
    tile = lambda a: np.tile(a, R)  # noqa: E731
    id_stride = int(graph.op_id.max()) + 1 if n else 1
    lane_rank = np.repeat(np.arange(R, dtype=np.int32), L)
    prefix = f"rank{r0}/"
    lane_names = tuple(f"rank{r}/" + (nm[len(prefix):] if nm.startswith(prefix) else nm)
                       for r in range(R) for nm in graph.lanes.names)
    lanes = Lanes(rank=lane_rank, type=tile(graph.lanes.type), key=tile(graph.lanes.key),
                  servers=tile(graph.lanes.servers), names=lane_names)
    nccl_key = int(graph.lanes.key[graph.lanes.type == LaneType.STREAM].max(initial=0)) + 1
    nccl_lane = np.zeros(R, np.int32)
    for r in range(R):
        lanes, nccl_lane[r] = lanes.add(r, LaneType.STREAM, nccl_key, f"rank{r}/{NCCL_STREAM_NAME} stream")
    lane = np.where(graph.lane >= 0, graph.lane, NO_LANE)
    lane_all = (np.where(lane[None, :] >= 0, lane[None, :] + (np.arange(R) * L)[:, None], NO_LANE)).ravel()

    # collective members: bucket-major, rank-minor
    mb = np.repeat(np.arange(B, dtype=np.int64), R)
    mr = np.tile(np.arange(R, dtype=np.int64), B)
    m_idx = R * n + np.arange(B * R, dtype=np.int64)
    names = graph.names + ((COLLECTIVE_NAME,) if COLLECTIVE_NAME not in graph.names else ())
    cname = names.index(COLLECTIVE_NAME)
    anchor = last_mark[mb]
    cat = lambda base, extra: np.concatenate([tile(base), extra]).astype(base.dtype)  # noqa: E731
    g_op = np.concatenate([np.repeat(np.arange(R, dtype=np.int64), n) * id_stride + tile(graph.op_id),
                           R * id_stride + np.arange(B * R, dtype=np.int64)])
    new = dict(
        op_id=g_op,
        origin=cat(graph.origin, graph.origin[anchor]),
        rank=np.concatenate([np.repeat(np.arange(R, dtype=np.int32), n), mr.astype(np.int32)]),
        kind=cat(graph.kind, np.full(B * R, int(OpKind.COLLECTIVE), np.int8)),
        category=cat(graph.category, np.full(B * R, int(Category.COMM), np.int8)),
        lane=np.concatenate([lane_all, nccl_lane[mr]]).astype(np.int32),
        dur=cat(graph.dur, np.zeros(B * R, np.int64)),
        bytes=cat(graph.bytes, bbytes[mb]),
        copy_dir=cat(graph.copy_dir, np.zeros(B * R, np.int8)),
        host_mem=cat(graph.host_mem, np.zeros(B * R, np.int8)),
        name=cat(graph.name, np.full(B * R, cname, np.int32)),
        order=cat(graph.order, graph.order[anchor] + graph.dur[anchor]),
        release=cat(graph.release, np.zeros(B * R, np.int64)),
        group=cat(graph.group, mb.astype(np.int64)),
        captured_start=cat(graph.captured_start, np.full(B * R, -1, np.int64)),
        captured_dur=cat(graph.captured_dur, np.full(B * R, -1, np.int64)),
        step=cat(graph.step, graph.step[anchor]),
    )
    # ---- edges: the trace's, per rank, then the DDP ones
    e_src = [idx(graph.dep_src)]
    e_dst = [idx(dst)]
    e_kind = [tile(graph.dep_kind)]
    e_lag = [tile(graph.dep_lag)]

    def add(src, dst_, kind, lag):
        src, dst_ = np.asarray(src, np.int64), np.asarray(dst_, np.int64)
        keep = (src >= 0) & (dst_ >= 0)
        e_src.append(src[keep])
        e_dst.append(dst_[keep])
        e_kind.append(np.full(int(keep.sum()), int(kind), np.uint8))
        e_lag.append(np.broadcast_to(np.asarray(lag, np.int64), src.shape)[keep])

    add(mr * n + anchor, m_idx, DepKind.LAUNCH, graph.dur[anchor] + launch_lag)
    pb = produced[mb]
    add(np.where(pb >= 0, mr * n + pb, -1), m_idx, DepKind.EVENT, 0)
    nxt = np.flatnonzero(mb >= 1)
    add(m_idx[nxt] - R, m_idx[nxt], DepKind.STREAM, 0)
    wb = waiter[mb]
    add(np.where(wb >= 0, m_idx, -1), np.where(wb >= 0, mr * n + wb, -1), DepKind.EVENT, 0)

    src_all = np.concatenate(e_src)
    dst_all = np.concatenate(e_dst)
    N = R * n + B * R
    order, ptr = edges_by_dependent(dst_all, N)
    out = OpGraph(**new, dep_ptr=ptr, dep_src=src_all[order], dep_kind=np.concatenate(e_kind)[order],
                  dep_lag=np.concatenate(e_lag)[order], lanes=lanes, names=names, kind_names=dict(graph.kind_names),
                  rank_shift=np.zeros(R, np.int64))
    out.validate()
    return out


def data_parallel_graph(graph: OpGraph, world: int, bucket_mb: float, protocols) -> OpGraph:
    """:func:`data_parallel` for the command line: refuses ``captured`` among ``protocols``."""
    from replay.run import CAPTURED

    if CAPTURED in [p.strip() for p in protocols]:
        raise ConfigError("--data-parallel adds all-reduces that were never measured: choose a protocol that prices "
                          "them (none, ppcie, cc-multi, ...), not 'captured'")
    return data_parallel(graph, world, bucket_mb)


def replay_data_parallel(trace, world: int, bucket_mb: float = DEFAULT_BUCKET_MB, protocol: str = "none",
                         model: str = "h100", preset: str | None = None, overrides=()):
    """``replay_trace`` of ``trace`` turned into ``world`` data-parallel ranks (see the module doc)."""
    from replay.run import load_graph, replay_graph

    graph, tr = load_graph(trace)
    rep = replay_graph(data_parallel_graph(graph, world, bucket_mb, [protocol]), protocol, model, preset, overrides,
                       trace_ops=tr.num_ops)
    rep.result.notes.append(f"data-parallel what-if: {world} rank(s), DDP buckets of {bucket_mb:g} MB")
    return rep


__all__ = ["data_parallel", "data_parallel_graph", "replay_data_parallel", "gradient_markers", "assign_buckets", "GRAD_MARKER",
           "DEFAULT_BUCKET_MB", "COLLECTIVE_NAME"]
