"""One-time setup in a trace: the rule that `tracegen info` (on the recorded times) and `replay`
(on the replayed times) both apply, so the two say the same thing (docs/capture.md, "Setup out of
the window").

Setup is a prefix of the span, ``[origin, boundary)``, with the boundary chosen by the first rule
that applies:

1. ``window``: the trace was captured with ``--window-from``/``--window-to`` (metadata
   ``window``): the setup was left out at capture; nothing in the trace is setup (boundary = origin).
2. ``before-first-step``: the trace marks steps and the first op of a step starts after the
   origin: everything before it (model construction, weight uploads, warm-up outside any step).
3. ``upload-prefix``: otherwise, everything before the first GPU op that is neither a
   host-to-device copy nor a memset (weight and input uploads, allocation: the time before the GPU
   computes anything). A GPU op waits for the uploads before it on its stream, so under CC the
   encrypted uploads lengthen this prefix.
4. ``none``: no op qualifies (no GPU work beyond uploads): no setup.

Works on plain arrays, the trace's or the replay graph's (only the ops recorded in the trace,
never nodes a protocol added).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastrack_core.schema import CopyDir, OpKind

RULES = ("window", "before-first-step", "upload-prefix", "none")


def setup_split(start: np.ndarray, end: np.ndarray, step: np.ndarray, computes: np.ndarray, *,
                windowed: bool = False, origin: int | None = None, last: int | None = None) -> dict[str, Any]:
    """``{"rule", "setup_ns", "span_ns", "share"}`` of ops with these ``start``/``end`` times (ns),
    ``step`` numbers (-1: none) and ``computes`` (bool: a GPU op other than an H2D copy or a
    memset). ``origin``/``last``: the span's ends when the caller knows them (else the ops')."""
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    step = np.asarray(step)
    computes = np.asarray(computes, bool)
    if origin is None:
        origin = int(start.min()) if start.size else 0
    if last is None:
        last = int(end.max()) if end.size else origin
    boundary, rule = origin, "none"
    in_step = step >= 0
    if windowed:
        rule = "window"
    elif in_step.any() and int(start[in_step].min()) > origin:
        boundary, rule = int(start[in_step].min()), "before-first-step"
    elif computes.any():
        boundary, rule = int(start[computes].min()), "upload-prefix"
    span = max(0, int(last) - int(origin))
    setup = max(0, min(int(boundary) - int(origin), span))
    return {"rule": rule, "setup_ns": setup, "span_ns": span, "share": round(setup / span, 6) if span else 0.0}


def computes(kind: np.ndarray, copy_dir: np.ndarray) -> np.ndarray:
    """The ops that end an upload prefix (rule 3): kernels, collectives, copies other than
    host-to-device; from :class:`~fastrack_core.schema.OpKind` and ``CopyDir`` codes."""
    kind, copy_dir = np.asarray(kind), np.asarray(copy_dir)
    return (np.isin(kind, (int(OpKind.KERNEL), int(OpKind.COLLECTIVE)))
            | ((kind == int(OpKind.MEMCPY)) & (copy_dir != int(CopyDir.H2D))))


def format_setup(split: dict[str, Any]) -> str:
    """``setup: X ms of Y ms span (Z%), rule R``."""
    return (f"setup: {split['setup_ns'] / 1e6:.3f} ms of {split['span_ns'] / 1e6:.3f} ms span "
            f"({100 * split['share']:.1f}%), rule {split['rule']}")


__all__ = ["RULES", "setup_split", "computes", "format_setup"]
