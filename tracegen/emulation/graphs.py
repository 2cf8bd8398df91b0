"""CUDA graphs on the emulated GPU, as the hardware runs them (``docs/emulation.md``, CUDA graphs).

* **Capture** (``CUDAGraph.capture_begin``/``capture_end``, ``torch.cuda.graph``): the host runs
  the script's PyTorch code as usual and pays for it (framework time, one ``cudaLaunchKernel`` /
  ``cudaMemcpyAsync`` / ``cudaMemsetAsync`` call per op), plus ``cudaStreamBeginCapture``,
  ``cudaStreamEndCapture`` and ``cudaGraphInstantiate``; nothing runs on the GPU timeline: each GPU
  op is recorded into the graph instead. A synchronising call during capture fails as CUDA fails it.
* **Replay** (``CUDAGraph.replay()``): one ``cudaGraphLaunch`` runtime call on the host, and the
  graph's kernels, copies and memsets on the current stream, in capture order, each with a
  ``launch`` dependency on that one call (the replay's CC model charges one encrypted submission
  per launching call: ``replay/protocols/submit.py``).
* A collective captured on a ``--nproc`` rank is a node too: each replay records it again, with
  its process group's next sequence number (:mod:`tracegen.emulation.distributed`).
* ``torch.cuda.make_graphed_callables`` is PyTorch's own, running on these.

Approximation: a graph whose capture forked work onto other streams replays on one stream, in
capture order (a real graph may run independent branches concurrently).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from tracegen.emulation.timeline import DEFAULT_STREAM, GraphNode, active_recorder
from tracegen.emulation.unsupported import EmulationUnsupported


@dataclass(frozen=True)
class GraphCosts:
    """Host costs of the CUDA graph API (ns; divided by ``--host-speed`` like every host cost)."""

    launch_ns: int = 27_500
    """``cudaGraphLaunch``: median of the 70 calls in the A100 trace ``a100_80gb_rank0_ws16``
    (``/work/shared/traces/real``; min 13 us, max 569 us, integer-us timestamps; the graphs' sizes
    are not in the trace). No H100 measurement; no per-node term (none measurable there)."""
    capture_call_ns: int = 2_000
    """``cudaStreamBeginCapture`` / ``cudaStreamEndCapture``: **assumption** (a stream call, like
    ``cudaEventRecord``'s 1.4-2.4 us in the A100 traces)."""
    instantiate_ns: int = 20_000
    """``cudaGraphInstantiate`` fixed part: **assumption**, not measured (once per graph, outside
    a replay loop)."""
    instantiate_node_ns: int = 1_000
    """``cudaGraphInstantiate`` per captured node: **assumption**, not measured."""


COSTS = GraphCosts()
_POOL_IDS = itertools.count(1)


def _host_ns(ns: int) -> int:
    return int(round(ns / active_recorder().speed.host))


class EmuGraph:
    """Stand-in for ``torch.cuda.CUDAGraph``."""

    def __init__(self, keep_graph: bool = False):
        self.keep_graph = bool(keep_graph)
        self.nodes: list[GraphNode] | None = None
        self._instantiated = False
        self._capturing = False
        self._pool: tuple[int, int] | None = None

    def capture_begin(self, pool=None, capture_error_mode: str = "global", check_input_liveness: bool = False):
        rec = active_recorder()
        if self.nodes is not None or self._capturing:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph; create a new instance "
                               "to capture a new graph")
        if rec.stream_id() == DEFAULT_STREAM:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. (However, after capture, "
                               "it's ok to replay them on the default stream.)")
        self._pool = pool if pool is not None else (0, next(_POOL_IDS))
        rec.graph_capture_begin(_host_ns(COSTS.capture_call_ns))
        self._capturing = True

    def capture_end(self):
        rec = active_recorder()
        if not self._capturing:
            raise RuntimeError("capture_end without a capture_begin")
        self._capturing = False
        instantiate = not self.keep_graph
        self.nodes = rec.graph_capture_end(_host_ns(COSTS.capture_call_ns),
                                           _host_ns(COSTS.instantiate_ns) if instantiate else 0,
                                           _host_ns(COSTS.instantiate_node_ns) if instantiate else 0)
        self._instantiated = instantiate

    def instantiate(self):
        if self.nodes is None:
            raise RuntimeError("instantiate() needs a captured graph")
        if not self._instantiated:
            rec = active_recorder()
            rec.enter()
            try:
                rec.runtime("cudaGraphInstantiate", _host_ns(COSTS.instantiate_ns)
                            + _host_ns(COSTS.instantiate_node_ns) * len(self.nodes))
            finally:
                rec.leave()
            self._instantiated = True

    def replay(self):
        if self.nodes is None:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        self.instantiate()
        active_recorder().graph_launch(self.nodes, _host_ns(COSTS.launch_ns))

    def reset(self):
        self.nodes = None
        self._instantiated = False

    def pool(self):
        if self._pool is None:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._pool

    def enable_debug_mode(self):
        return None

    def debug_dump(self, debug_path):
        raise EmulationUnsupported("torch.cuda.CUDAGraph.debug_dump", "the emulated graph has no CUDA graph to dump")

    def raw_cuda_graph(self):
        raise EmulationUnsupported("torch.cuda.CUDAGraph.raw_cuda_graph")

    def raw_cuda_graph_exec(self):
        raise EmulationUnsupported("torch.cuda.CUDAGraph.raw_cuda_graph_exec")

    def get_graph_data(self, *a, **k):
        raise EmulationUnsupported("torch.cuda.CUDAGraph.get_graph_data")


class EmuGraphContext:
    """Stand-in for the ``torch.cuda.graph`` context manager: synchronise, make the capture
    stream current (a side stream unless ``stream`` is given), capture, end the capture."""

    def __init__(self, cuda_graph: EmuGraph, pool=None, stream=None, capture_error_mode: str = "global",
                 enable_annotations: bool = False, check_input_liveness: bool = False):
        rec = active_recorder()
        if stream is None:
            if rec.graph_capture_stream is None:
                from tracegen.emulation.streams import EmuStream

                rec.graph_capture_stream = EmuStream()
            stream = rec.graph_capture_stream
        self.capture_stream = stream
        self.cuda_graph = cuda_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        rec = active_recorder()
        rec.device_sync()
        self._prev = rec.current_stream
        rec.current_stream = self.capture_stream
        try:
            self.cuda_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            rec.current_stream = self._prev
            raise
        return self

    def __exit__(self, *exc):
        rec = active_recorder()
        try:
            self.cuda_graph.capture_end()
        finally:
            rec.current_stream = self._prev
        return False


def graph_pool_handle():
    return (0, next(_POOL_IDS))


def is_current_stream_capturing() -> bool:
    return active_recorder().graph_nodes is not None


def graph_patches() -> list[tuple[Any, str, Any]]:
    import torch
    import torch.cuda.graphs as tg

    out: list[tuple[Any, str, Any]] = []
    for mod in (torch.cuda, tg):  # make_graphed_callables reads some through its module's globals
        out += [(mod, "CUDAGraph", EmuGraph), (mod, "graph", EmuGraphContext),
                (mod, "graph_pool_handle", graph_pool_handle),
                (mod, "is_current_stream_capturing", is_current_stream_capturing)]
    return out
