"""Fastrack: what GPU confidential computing costs, and what a better secure-IO protocol saves.

The Python API (docs/api.md), the roof of the project: it stands on ``replay`` and ``tracegen``
(which stand on the shared floor ``fastrack_core``), and nothing of ours imports it. The
functions live in :mod:`fastrack.api` and are loaded on first use, so that ``import fastrack``
stays light::

    import fastrack
    res = fastrack.replay("traces/llama.parquet", "fastrack")
    res.slowdown, res.breakdown()

Errors are those of :mod:`fastrack.errors` (the floor's hierarchy, re-exported).
"""

from fastrack_core.version import __version__

_API = ("Comparison", "Result", "Sweep", "capture", "compare", "convert", "load", "params", "presets", "protocols",
        "replay", "sensitivity", "sweep")

__all__ = ["__version__", *_API]


def __getattr__(name):
    if name in _API:
        from fastrack import api

        return getattr(api, name)
    raise AttributeError(f"module 'fastrack' has no attribute '{name}'")


def __dir__():
    return sorted([*globals(), *_API])
