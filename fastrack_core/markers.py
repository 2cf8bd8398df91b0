"""Named instants in a trace: the one definition of marker names (docs/conventions.md rule 8).

A marker is a ``cpu`` op of zero duration on a host thread, at the moment something happened,
sitting in the thread's sequence like any host op (rule 1). Because it is scheduled like the
host ops around it, its *replayed* time says when that moment happens under a protocol: a
request's first token is the marker written right after the host has the token in hand.

Names (the only formats writers use and readers accept):

* ``request:<event>:<id>``: a serving request event; ``<event>`` is one of
  :data:`REQUEST_EVENTS`, ``<id>`` a non-negative integer request id. ``token`` is written once
  per output token after the first (``first_token`` counts as the first).
* ``range_push:<label>`` / ``range_pop:<label>``: the edges of an annotated range (NVTX
  ``range_push``/``range_pop``, ``torch.profiler.record_function``), nesting per thread.

Gradient-ready markers (rule 7) keep their historical name, ``AccumulateGrad``.
"""

from __future__ import annotations

import re

REQUEST_EVENTS = ("arrive", "first_token", "token", "finish")
REQUEST_PREFIX = "request:"
RANGE_PUSH = "range_push:"
RANGE_POP = "range_pop:"
MAX_REQUEST_ID = 2**31 - 1  # request ids are dense per trace; larger ones are refused

_REQUEST_RE = re.compile(r"^request:(arrive|first_token|token|finish):(\d{1,10})$")


def request_marker(event: str, request_id: int) -> str:
    """The marker name of a request event."""
    if event not in REQUEST_EVENTS:
        raise ValueError(f"unknown request event {event!r}; one of {', '.join(REQUEST_EVENTS)}")
    if not 0 <= int(request_id) <= MAX_REQUEST_ID:
        raise ValueError(f"request id {request_id} outside [0, {MAX_REQUEST_ID}]")
    return f"{REQUEST_PREFIX}{event}:{int(request_id)}"


def parse_request_marker(name: str) -> tuple[str, int] | None:
    """``(event, request_id)`` of a request marker name, or None for any other name."""
    m = _REQUEST_RE.match(name)
    if m is None:
        return None
    rid = int(m.group(2))
    return (m.group(1), rid) if rid <= MAX_REQUEST_ID else None


def range_push(label: str) -> str:
    return RANGE_PUSH + label


def range_pop(label: str) -> str:
    return RANGE_POP + label
