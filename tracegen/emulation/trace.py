"""Trace assembly: the schema-v1 table of a finished emulated recording (rows sorted by start,
host before GPU at equal start; steps from ``ProfilerStep#N`` annotations if any, else from
``optimizer.step()`` calls; origin at the earliest op)."""

from __future__ import annotations

import pyarrow as pa

from fastrack_core.schema import OpKind
from fastrack_core.traceio import make_table


def recorder_table(rec) -> pa.Table:
    """The schema-v1 table of an emulated capture (rows sorted by start, host before GPU)."""
    ops = rec.ops
    use_explicit = rec.saw_explicit_step
    # ties: host before GPU, then by host thread (threads reach the emulator in an order that varies
    # from run to run; within a thread, and for GPU ops, the order of recording)
    order = sorted(range(len(ops)), key=lambda i: (ops[i].start, ops[i].kind.on_gpu,
                                                   0 if ops[i].kind.on_gpu else ops[i].thread, i))
    new = {old: new for new, old in enumerate(order)}
    cols: dict[str, list] = {k: [] for k in ("op_id", "device", "thread", "stream", "kind", "name", "start_ns",
                                              "dur_ns", "bytes", "copy_dir", "host_mem", "correlation", "step",
                                              "deps", "dep_kinds")}
    last_step = rec.opt_steps
    for i in order:
        op = ops[i]
        if use_explicit:
            step = op.explicit_step
        else:
            step = op.opt_step if op.opt_step < last_step else -1
        cols["op_id"].append(new[i])
        cols["device"].append(-1 if op.kind == OpKind.CPU else 0)
        cols["thread"].append(op.thread if not op.kind.on_gpu else -1)
        cols["stream"].append(op.stream if op.kind.on_gpu else -1)
        cols["kind"].append(op.kind.label)
        cols["name"].append(op.name)
        cols["start_ns"].append(op.start)
        cols["dur_ns"].append(op.dur)
        cols["bytes"].append(op.bytes)
        cols["copy_dir"].append(op.copy_dir.label)
        cols["host_mem"].append(op.host_mem.label)
        cols["correlation"].append(op.correlation)
        cols["step"].append(step)
        cols["deps"].append([new[d] for d, _ in op.deps])
        cols["dep_kinds"].append([int(k) for _, k in op.deps])
    if len({t for t in cols["thread"] if t >= 0}) > 1:
        # several host threads: correlation ids were handed out in the order the threads reached
        # the emulator, which varies from run to run; number them by first appearance in row order
        # (pairs stay pairs). A one-thread capture keeps its ids as recorded.
        renumber: dict[int, int] = {}
        cols["correlation"] = [c if c < 0 else renumber.setdefault(c, len(renumber) + 1) for c in cols["correlation"]]
    t0 = min(cols["start_ns"]) if cols["start_ns"] else 0
    cols["start_ns"] = [s - t0 for s in cols["start_ns"]]
    return make_table(cols)
