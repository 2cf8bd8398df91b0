"""Fastrack: what GPU confidential computing costs, and what a better secure-IO protocol saves.

Shared core of the ``tracegen`` and ``replay`` tools: the trace contract (:mod:`fastrack.schema`),
trace I/O (:mod:`fastrack.traceio`) and the error hierarchy (:mod:`fastrack.errors`).
"""

__version__ = "0.1.0"
