"""``torch.cuda.nvtx`` on the emulated GPU: annotated ranges become markers in the trace
(``docs/conventions.md`` rule 8, names from :mod:`fastrack_core.markers`): ``range_push(msg)`` writes a
zero-duration ``cpu`` op ``range_push:<msg>`` on the host thread, ``range_pop()`` one named
``range_pop:<msg>`` of the range it closes; ``nvtx.range`` (built on the two) nests the same way;
``mark(msg)`` (an instant) is a push and a pop of ``msg`` at the same moment. ``range_start`` /
``range_end`` ranges need not nest, which markers cannot express: they are not recorded, and the
capture says so (a capture note)."""

from __future__ import annotations

from typing import Any

from fastrack_core.markers import range_pop as pop_name
from fastrack_core.markers import range_push as push_name
from tracegen.emulation.timeline import active_recorder


def range_push(msg) -> int:
    """Open a range; returns its zero-based nesting depth (as NVTX does)."""
    rec = active_recorder()
    label = str(msg)
    rec.marker(push_name(label))
    rec.nvtx_stack.append(label)
    return len(rec.nvtx_stack) - 1


def range_pop() -> int:
    """Close the innermost range; returns its depth, or -1 when none is open (as NVTX does)."""
    rec = active_recorder()
    if not rec.nvtx_stack:
        return -1
    label = rec.nvtx_stack.pop()
    rec.marker(pop_name(label))
    return len(rec.nvtx_stack)


def mark(msg) -> None:
    rec = active_recorder()
    rec.marker(push_name(str(msg)))
    rec.marker(pop_name(str(msg)))


def range_start(msg) -> int:
    rec = active_recorder()
    rec.note("torch.cuda.nvtx.range_start/range_end: not recorded (ranges that need not nest have no marker form)")
    rec.nvtx_range_ids += 1
    return rec.nvtx_range_ids


def range_end(range_id) -> None:
    return None


def nvtx_patches() -> list[tuple[Any, str, Any]]:
    import torch.cuda.nvtx as nv

    return [(nv, "range_push", range_push), (nv, "range_pop", range_pop), (nv, "mark", mark),
            (nv, "range_start", range_start), (nv, "range_end", range_end)]
