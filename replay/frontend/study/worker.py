"""Worker side of a study: replay a batch of points, with each trace's graph built once.

Each worker process keeps the graphs of the last few traces it replayed in a small LRU cache
(:data:`GRAPH_CACHE_SIZE`). Runs in local pool processes, Dask workers or this process.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Sequence

from fastrack_core.version import __version__
from fastrack_core.errors import ConfigError
from replay.frontend.study.points import file_sha256

GRAPH_CACHE_SIZE = 2  # graphs kept per worker process

_GRAPHS: "OrderedDict[tuple[str, str], tuple[Any, int]]" = OrderedDict()
_GRAPHS_LOCK = threading.Lock()


def _graph(path: str, sha: str):
    """The graph of a trace, built once per worker process (small LRU cache)."""
    with _GRAPHS_LOCK:
        hit = _GRAPHS.get((path, sha))
        if hit is not None:
            _GRAPHS.move_to_end((path, sha))
            return hit
        from replay.pipeline.run import load_graph

        got = file_sha256(path)
        if got != sha:
            raise ConfigError(f"trace changed since the study was planned (sha256 {got[:12]}, expected {sha[:12]}); "
                              "on a cluster, every worker must see the same file at this path", path=path)
        graph, tr = load_graph(path)
        _GRAPHS[(path, sha)] = (graph, tr.num_ops)
        while len(_GRAPHS) > GRAPH_CACHE_SIZE:
            _GRAPHS.popitem(last=False)
        return graph, tr.num_ops


def run_batch(batch: Sequence[tuple]) -> list[dict[str, Any]]:
    """Replay each point of ``batch`` (tuples from :meth:`Point.task`); runs in a worker."""
    from replay.pipeline.run import replay_graph
    from replay.pipeline.serving import has_request_markers, serving_metrics, summary_row

    out = []
    for key, path, sha, protocol, model, preset, overrides, digest, scales in batch:
        t0 = time.perf_counter()
        graph, ops = _graph(path, sha)
        rep = replay_graph(graph, protocol, model, preset, overrides, trace_ops=ops, scales=dict(scales))
        res = rep.result
        got_digest = (res.model or {}).get("digest")
        if got_digest is not None and str(got_digest) != digest:
            raise ConfigError(f"worker resolved parameters to digest {str(got_digest)[:12]}, the planner to "
                              f"{digest[:12]}: the worker runs a different model or preset files "
                              f"(fastrack {__version__} there)")
        out.append({"key": key, "makespan_ns": int(res.makespan_ns), "captured_span_ns": int(res.captured_span_ns),
                    "ops": int(res.ops), "nodes": int(res.nodes),
                    "cp": {k: int(v) for k, v in res.critical_path_ns.items()}, "version": __version__,
                    "wall_s": time.perf_counter() - t0})  # for occupancy figures only; not in the table
        if has_request_markers(graph):  # a serving trace: its mean TTFT, TPOT and tokens/s (docs/serving.md)
            out[-1]["serving"] = summary_row(serving_metrics(rep.graph, rep.schedule))
    return out
