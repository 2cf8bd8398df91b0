"""What a replay keeps from a measured trace: the causal lags of launches and streams.

A replay is a what-if; what it keeps from the measurement must be what the machine would do
again, never *when* things happened to happen. Two quantities come from the trace, per rank:

* **launch latency** ``L`` (ns): from the start of a launching call to the start of its GPU op
  when nothing else held the op back. Estimated from the ops that really were launch-bound: the
  GPU op's stream and every other prerequisite were idle when the call started. The estimate is
  the ``LAUNCH_LATENCY_PERCENTILE`` of their launch-to-start times. An op's own queueing delay
  (launch to start while its stream was busy) is never kept.
* **After the call** (how ``L`` is applied): a GPU op starts a short, steady time after the
  call that launched it *returns*, whatever its kind (on the real H100 traces of tests/data,
  launch-bound kernels, memsets and copies all start 1.7-2.1 us after their call ends), while
  calls last differently (a ``cudaMemcpyAsync`` several us longer than a ``cudaLaunchKernel``).
  So each LAUNCH edge's lag is its own call's measured duration plus the rank's **after-call
  gap** (the ``LAUNCH_LATENCY_PERCENTILE`` of start minus call end over the launch-bound ops;
  the smallest where none was launch-bound; a lag is never below 0). ``L`` itself (from the
  call's start) is still reported, and caps the first half of a split blocking call, whose
  measured duration is mostly waiting: its LAUNCH edge keeps its own launch-to-start when it was
  launch-bound, else the median of the rank's launch-bound blocking calls, else ``L``. One
  latency from the call's start for every launch started each launch-bound copy early by the
  difference of the call lengths (up to 3.7% of the span on emulated captures with many copies).
* **back-to-back gap** (ns): a GPU op queued behind its stream predecessor starts when that
  predecessor ends plus the GPU front end's dispatch gap. A measured gap is that gap, and is kept
  on the STREAM edge, when the op really was queued (its launch, call start plus ``L``, had
  arrived by the time its predecessor ended) and the gap is at most ``BACK_TO_BACK_MAX_NS``. A
  larger gap, or any gap of an op whose launch arrived later, means the op was not waiting for
  its predecessor (it waited for its launch or something else), so the edge gets the rank's
  typical gap (median of the kept gaps), never more than the measured one. Measured overlap
  (negative gap) is kept, as before.

Rationale and the measured distributions behind both constants: docs/fidelity.md.

Ops that the trace cannot explain (a GPU op that started well after every prerequisite the
trace records, plus these lags) are not pinned to their measured time: they start when their
recorded prerequisites allow, and :class:`Calibration` reports how many there are and how much
time they waited for something the trace does not show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Percentile (0-100) of launch-to-start times of launch-bound ops taken as the launch latency.
# The median: the launch path (call, driver, doorbell, GPU front end) has a right-skewed spread
# of a few microseconds on every trace we have (docs/fidelity.md); a lower percentile would
# replay every launch-bound op early, the median keeps the error symmetric. Unit: percent.
LAUNCH_LATENCY_PERCENTILE = 50.0
# Largest measured gap (ns) between a GPU op and its stream predecessor that is taken as the GPU's
# own back-to-back dispatch gap. Queued ops on the real traces show gaps of 1-8 us (H100, V100)
# and up to 15 us (A100, integer-microsecond timestamps); idle gaps are tens of us and more.
BACK_TO_BACK_MAX_NS = 10_000
# A GPU op that starts more than this (ns) after every prerequisite the trace records (with the
# lags above) waited for something the trace does not show: counted as unexplained.
UNEXPLAINED_MIN_NS = BACK_TO_BACK_MAX_NS
# A blocking call (sync op) that returns more than this (ns) after the GPU work it waits for
# finished: its wait is not explained by the trace's dependencies; reported.
SYNC_RETURN_MAX_NS = 50_000
# Ranks without any launch-bound op fall back to their smallest launch-to-start time (an upper
# bound of the latency), or to 0 when the rank launches nothing.

_NONE = np.iinfo(np.int64).min // 4


@dataclass
class Calibration:
    """Per-rank lags the builder derived, and what the trace could not explain."""

    launch_latency_ns: dict[int, int] = field(default_factory=dict)
    launch_samples: dict[int, int] = field(default_factory=dict)  # launch-bound ops behind each estimate
    # the after-call gap a LAUNCH edge's lag is made of (module docstring, "After the call")
    launch_after_call_ns: dict[int, int] = field(default_factory=dict)
    back_to_back_ns: dict[int, int] = field(default_factory=dict)
    unexplained_ops: int = 0  # GPU ops held by something the trace does not record
    unexplained_ns: int = 0  # their total hold beyond every recorded prerequisite
    unexplained_first: list[int] = field(default_factory=list)  # op ids of the largest holds
    sync_unexplained_ops: int = 0  # blocking calls returning long after their awaited work
    sync_unexplained_ns: int = 0
    sync_unexplained_first: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "launch_latency_ns": {str(r): v for r, v in sorted(self.launch_latency_ns.items())},
            "launch_latency_samples": {str(r): v for r, v in sorted(self.launch_samples.items())},
            "launch_after_call_ns": {str(r): v for r, v in sorted(self.launch_after_call_ns.items())},
            "back_to_back_gap_ns": {str(r): v for r, v in sorted(self.back_to_back_ns.items())},
            "unexplained_gpu_ops": self.unexplained_ops,
            "unexplained_gpu_hold_ns": self.unexplained_ns,
            "unexplained_gpu_op_ids": self.unexplained_first,
            "unexplained_sync_ops": self.sync_unexplained_ops,
            "unexplained_sync_wait_ns": self.sync_unexplained_ns,
            "unexplained_sync_op_ids": self.sync_unexplained_first,
            "constants": {"launch_latency_percentile": LAUNCH_LATENCY_PERCENTILE,
                          "back_to_back_max_ns": BACK_TO_BACK_MAX_NS,
                          "unexplained_min_ns": UNEXPLAINED_MIN_NS,
                          "sync_return_max_ns": SYNC_RETURN_MAX_NS},
        }

    def notes(self) -> list[str]:
        lat = ", ".join(f"rank {r}: {v / 1e3:.1f} us" + (f", {self.launch_after_call_ns[r] / 1e3:.1f} us after the call"
                                                        if r in self.launch_after_call_ns else "")
                        for r, v in sorted(self.launch_latency_ns.items()))
        out = [f"launch latency (from launch-bound ops, p{LAUNCH_LATENCY_PERCENTILE:g}): {lat or 'no launches'}"]
        if self.unexplained_ops:
            out.append(f"{self.unexplained_ops} GPU op(s) started {self.unexplained_ns / 1e3:,.1f} us in total after "
                       "every prerequisite the trace records (waits it does not record, e.g. cross-stream events "
                       f"without their record call); they are not pinned. Largest: op(s) "
                       f"{', '.join(map(str, self.unexplained_first))}")
        if self.sync_unexplained_ops:
            out.append(f"{self.sync_unexplained_ops} blocking call(s) returned {self.sync_unexplained_ns / 1e3:,.1f} us "
                       "in total after the GPU work they wait for (what they waited for is not in the trace); "
                       f"kept as host time. Largest: op(s) {', '.join(map(str, self.sync_unexplained_first))}")
        return out


def per_rank_percentile(sample_rank: np.ndarray, values: np.ndarray, q: float) -> dict[int, int]:
    """{rank: q-th percentile of its values} (nearest-rank, integer ns), one sort for all ranks
    (ranks are non-negative; a trace's ranks are dense ids)."""
    if values.size == 0:
        return {}
    lo, hi = int(sample_rank.min()), int(sample_rank.max())
    if lo == hi:  # one rank (the usual case): a plain sort
        r, v = np.full(1, lo), np.sort(values)
        first, counts = np.zeros(1, np.int64), np.array([values.size])
    else:
        order = np.lexsort((values, sample_rank))
        r, v = sample_rank[order], values[order]
        first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
        counts = np.diff(np.r_[first, r.size])
    pick = first + np.minimum(counts - 1, np.floor(q / 100.0 * (counts - 1) + 0.5).astype(np.int64))
    return dict(zip(r[first].tolist(), v[pick].astype(np.int64).tolist()))


def per_rank_count(sample_rank: np.ndarray) -> dict[int, int]:
    """{rank: number of samples}, ranks ascending (non-negative ranks)."""
    if sample_rank.size == 0:
        return {}
    counts = np.bincount(sample_rank)
    present = np.flatnonzero(counts)
    return dict(zip(present.tolist(), counts[present].tolist()))


def lookup(per_rank: dict[int, int], rank: np.ndarray, default: np.ndarray | int = 0) -> np.ndarray:
    """Per element of ``rank``, its rank's value (``default`` where the rank has none)."""
    top = max(int(rank.max()), max(per_rank)) if per_rank and rank.size else -1
    if top < 0 or int(rank.min()) < 0 or min(per_rank) < 0 or top > 4 * rank.size + 1024:  # no dense table
        out = np.broadcast_to(np.asarray(default, np.int64), rank.shape).copy()
        for r, v in per_rank.items():
            out[rank == r] = v
        return out
    has = np.zeros(top + 1, bool)
    table = np.zeros(top + 1, np.int64)
    keys = np.fromiter(per_rank.keys(), np.int64, len(per_rank))
    has[keys] = True
    table[keys] = np.fromiter(per_rank.values(), np.int64, len(per_rank))
    if np.all(has[rank]) and np.ndim(default) == 0:
        return table[rank]
    return np.where(has[rank], table[rank], np.asarray(default, np.int64)).astype(np.int64)


def largest(values: np.ndarray, ids: np.ndarray, k: int = 5) -> list[int]:
    """Ids of the ``k`` largest values, largest first."""
    if values.size == 0:
        return []
    top = np.argsort(-values, kind="stable")[:k]
    return [int(i) for i in ids[top]]
