"""Small hand-made traces for tests: build a schema-v1 trace from a compact op list."""

from __future__ import annotations

from fastrack_core.schema import DepKind
from fastrack_core.traceio import make_table, write_trace

DK = {k.label: int(k) for k in DepKind}


def op(kind, name, start, dur, *, thread=-1, stream=-1, device=-1, rank=0, deps=(), **extra):
    """deps: sequence of (op_id, 'program'|'launch'|...)."""
    d = dict(kind=kind, name=name, start_ns=start, dur_ns=dur, thread=thread, stream=stream, device=device, rank=rank,
             deps=[int(i) for i, _ in deps], dep_kinds=[DK[k] for _, k in deps])
    d.update(extra)
    return d


def table(ops):
    cols: dict[str, list] = {}
    keys = sorted({k for o in ops for k in o})
    for k in keys:
        cols[k] = [o.get(k, _default(k)) for o in ops]
    cols["op_id"] = list(range(len(ops)))
    return make_table(cols)


def _default(k):
    from fastrack_core.traceio import COLUMN_DEFAULTS

    return COLUMN_DEFAULTS.get(k)


def write(path, ops, **meta):
    meta.setdefault("source_format", "synthetic")
    write_trace(path, table(ops), meta)
    return path
