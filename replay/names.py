"""Protocol names the replay tool itself gives a meaning to (every other name is a plug-in's).

* :data:`CAPTURED` is not a protocol plug-in: it replays the trace with its measured durations
  and no hardware model (the fidelity check).
* :data:`NONE` is the protocol plug-in without a TEE; the reference every slowdown is relative to.
"""

from __future__ import annotations

CAPTURED = "captured"
NONE = "none"
