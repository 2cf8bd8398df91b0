"""Annotations the script writes that become markers in the emulated trace (docs/conventions.md
rule 8, names from :mod:`fastrack_core.markers`).

``torch.profiler.record_function(name)`` with a request-marker name (``request:<event>:<id>``)
writes that marker when the range is entered: a zero-duration ``cpu`` op on the host thread at the
current virtual time, in program order with the host ops around it. A serving loop annotates
``with record_function(request_marker("first_token", rid)): pass`` right after the host has the
token; the same line in a real run gives the Kineto trace a ``user_annotation`` range of that name,
which ``tracegen convert`` turns into the same marker (:mod:`tracegen.importers.kineto`).
Other names are left to the rest of the emulation (``ProfilerStep#N`` steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastrack_core.markers import REQUEST_PREFIX, parse_request_marker
from fastrack_core.schema import OpKind

if TYPE_CHECKING:
    from tracegen.emulation.timeline import Recorder


def record_annotation(rec: "Recorder", name: str) -> bool:
    """Write the marker of a ``record_function`` range being entered, when its name is one;
    returns whether it was. A name that starts like a request marker but is not one is left
    alone (it stays an ordinary range)."""
    if not name.startswith(REQUEST_PREFIX) or parse_request_marker(name) is None:
        return False
    rec.host(OpKind.CPU, name, 0)
    return True
