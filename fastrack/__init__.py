"""Fastrack: what GPU confidential computing costs, and what a better secure-IO protocol saves.

Shared core of the ``tracegen`` and ``replay`` tools: the trace contract (:mod:`fastrack.schema`),
trace I/O (:mod:`fastrack.traceio`) and the error hierarchy (:mod:`fastrack.errors`).

The Python API (docs/api.md) is :mod:`fastrack.api`, loaded on first use so that ``import
fastrack`` stays light and the core imports nothing of ours::

    import fastrack
    res = fastrack.replay("traces/llama.parquet", "fastrack")
    res.slowdown, res.breakdown()
"""

__version__ = "0.1.0"

_API = ("Comparison", "Result", "Sweep", "capture", "compare", "convert", "load", "params", "presets", "protocols",
        "replay", "sensitivity", "sweep")


def __getattr__(name):
    if name in _API:
        import importlib

        return getattr(importlib.import_module("fastrack.api"), name)
    raise AttributeError(f"module 'fastrack' has no attribute '{name}'")


def __dir__():
    return sorted([*globals(), *_API])
