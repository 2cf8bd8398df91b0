"""Trace assembly: the schema-v1 table of a finished emulated recording (rows sorted by start,
host before GPU at equal start; steps from ``ProfilerStep#N`` annotations if any, else from
``optimizer.step()`` calls; origin at the earliest op)."""

from __future__ import annotations

import pyarrow as pa

from fastrack_core.schema import CopyDir, HostMem, OpKind
from fastrack_core.traceio import make_table


_ON_GPU = {k: k.on_gpu for k in OpKind}
_KIND_LABEL = {k: k.label for k in OpKind}
_COPY_LABEL = {d: d.label for d in CopyDir}
_MEM_LABEL = {m: m.label for m in HostMem}


def recorder_table(rec) -> pa.Table:
    """The schema-v1 table of an emulated capture (rows sorted by start, host before GPU)."""
    ops = rec.ops
    use_explicit = rec.saw_explicit_step
    gpu = [_ON_GPU[op.kind] for op in ops]
    # ties: host before GPU, then by host thread (threads reach the emulator in an order that varies
    # from run to run; within a thread, and for GPU ops, the order of recording)
    keys = [(op.start, g, 0 if g else op.thread, i) for i, (op, g) in enumerate(zip(ops, gpu))]
    keys.sort()
    order = [k[3] for k in keys]
    new = [0] * len(ops)
    for j, i in enumerate(order):
        new[i] = j
    rows = [ops[i] for i in order]
    on_gpu = [gpu[i] for i in order]
    last_step = rec.opt_steps
    if use_explicit:
        steps = [op.explicit_step for op in rows]
    else:
        steps = [op.opt_step if op.opt_step < last_step else -1 for op in rows]
    cols: dict[str, list] = {
        "op_id": list(range(len(rows))),
        "device": [-1 if op.kind == OpKind.CPU else 0 for op in rows],
        "thread": [-1 if g else op.thread for op, g in zip(rows, on_gpu)],
        "stream": [op.stream if g else -1 for op, g in zip(rows, on_gpu)],
        "kind": [_KIND_LABEL[op.kind] for op in rows],
        "name": [op.name for op in rows],
        "start_ns": [op.start for op in rows],
        "dur_ns": [op.dur for op in rows],
        "bytes": [op.bytes for op in rows],
        "copy_dir": [_COPY_LABEL[op.copy_dir] for op in rows],
        "host_mem": [_MEM_LABEL[op.host_mem] for op in rows],
        "correlation": [op.correlation for op in rows],
        "step": steps,
        "deps": [[new[d] for d, _ in op.deps] for op in rows],
        "dep_kinds": [[int(k) for _, k in op.deps] for op in rows],
    }
    if len({t for t in cols["thread"] if t >= 0}) > 1:
        # several host threads: correlation ids were handed out in the order the threads reached
        # the emulator, which varies from run to run; number them by first appearance in row order
        # (pairs stay pairs). A one-thread capture keeps its ids as recorded.
        renumber: dict[int, int] = {}
        cols["correlation"] = [c if c < 0 else renumber.setdefault(c, len(renumber) + 1) for c in cols["correlation"]]
    t0 = min(cols["start_ns"]) if cols["start_ns"] else 0
    cols["start_ns"] = [s - t0 for s in cols["start_ns"]]
    return make_table(cols)
