"""The virtual timeline of one emulated capture: host ops on the script's host threads (the main
thread and those it starts, each with its own :class:`HostState`; :mod:`.threads`), GPU ops on
in-order streams, and the composite actions (kernel launch, memcpy, memset, synchronisation,
events) the emulator's layers emit. Durations come from :mod:`tracegen.emulation.costmodel`; how
host time advances between the emulator's handlers is :mod:`tracegen.emulation.hosttime`. The
recorder the patched ``torch.cuda`` surface talks to is the innermost :func:`activated` one
(:func:`active_recorder`)."""

from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from fastrack_core.schema import CopyDir, DepKind, HostMem, OpKind
from tracegen.emulation import costmodel
from tracegen.emulation.costmodel import GpuSpec
from tracegen.emulation.hosttime import HostClock, host_scaled_spec
from tracegen.emulation.scripttime import SCRIPT_OP_MIN_NS
from tracegen.emulation.speed import speed_factors

if TYPE_CHECKING:
    from tracegen.emulation.streams import EmuEvent

DEFAULT_STREAM = 7  # the id CUPTI gives the default stream in Kineto traces
HOST_THREAD = 1  # thread id of the script's main thread in the trace (fixed: captures are deterministic)
SCRIPT_OP_NAME = "cpu"  # the script's own time between operators (docs/conventions.md rule 1: no enclosing operator)


@dataclass
class _Op:
    kind: OpKind
    name: str
    start: int
    dur: int
    thread: int = -1
    stream: int = -1
    bytes: int = 0
    copy_dir: CopyDir = CopyDir.NONE
    host_mem: HostMem = HostMem.NONE
    correlation: int = -1
    opt_step: int = 0
    explicit_step: int = -1
    deps: list = field(default_factory=list)  # [(index, DepKind)]

    @property
    def end(self) -> int:
        return self.start + self.dur



@dataclass(frozen=True)
class GraphNode:
    """A GPU op recorded into a CUDA graph during stream capture (its duration before the
    what-if speed factors, applied when the graph is launched). A collective node (``kind``
    ``COLLECTIVE``, from :mod:`tracegen.emulation.distributed`) also keeps its type and process
    group: each launch of the graph gives it the group's next sequence number."""

    kind: OpKind
    name: str
    dur: int
    bytes: int = 0
    copy_dir: CopyDir = CopyDir.NONE
    host_mem: HostMem = HostMem.NONE
    coll_type: str | None = None
    coll_group: str | None = None


CAPTURE_SYNC_ERROR = ("CUDA error: operation not permitted when stream is capturing "
                      "(a synchronising call inside CUDA graph capture)")


_ACTIVE: list["Recorder"] = []


class HostState:
    """One host thread of the capture: its trace thread id, virtual clock (``now``), the end and
    index of its last host op, the script time not yet written, its :class:`HostClock` and its
    current stream (PyTorch's current stream is per thread too), and for a started thread the
    ``ProfilerStep`` its ops belong to (``step``: the one its last handoff came from; None: the
    recorder's current step, as for the main thread)."""

    __slots__ = ("thread", "now", "host_end", "last_host", "script_pending", "clock", "current_stream",
                 "first_deps", "step")

    def __init__(self, thread: int, now: int = 0):
        self.thread = thread
        self.now = now  # virtual host time, ns
        self.host_end = now  # end of the last host op written
        self.last_host: int | None = None  # index of the last host op
        self.script_pending = 0  # script host time (ns) on the timeline since the last host op written
        self.clock: HostClock | None = None
        self.current_stream = None
        self.first_deps: list = []  # [(index, DepKind)] the thread's first host op gets (its spawn)
        self.step: int | None = None  # a started thread's step (tracegen.emulation.threads); None: explicit_step


def _state_attr(name: str) -> property:
    """A recorder attribute held per host thread (:meth:`Recorder.state`)."""

    def get(rec):
        return getattr(rec._local.__dict__.get("state") or rec.main, name)

    def put(rec, value):
        setattr(rec._local.__dict__.get("state") or rec.main, name, value)

    return property(get, put, doc=f"the calling thread's ``{name}`` (HostState)")


def active_recorder() -> "Recorder":
    """The recorder of the innermost active emulated GPU."""
    if not _ACTIVE:
        raise RuntimeError("no emulated GPU is active")
    return _ACTIVE[-1]


@contextlib.contextmanager
def activated(rec: "Recorder") -> Iterator["Recorder"]:
    """Make ``rec`` the :func:`active_recorder` inside the block."""
    _ACTIVE.append(rec)
    try:
        yield rec
    finally:
        _ACTIVE.remove(rec)


class Recorder:
    """The virtual timeline of one emulated capture."""

    def __init__(self, spec: GpuSpec, host_time: str = "modelled", *, gpu_speed: float = 1.0,
                 copy_speed: float = 1.0, host_speed: float = 1.0):
        """``gpu_speed``/``copy_speed``/``host_speed``: what-if speed factors
        (:mod:`tracegen.emulation.speed`): kernel and memset durations, copy durations and every
        modelled host duration are divided by them."""
        self.speed = speed_factors(gpu_speed, copy_speed, host_speed)
        self.spec = host_scaled_spec(spec, self.speed.host)
        # the per-thread host state (HostState; tracegen.emulation.threads): the main thread's is
        # ``self.main``; a thread the capture started has its own, found through ``self._local``;
        # ``now``, ``host_end``, ``last_host``, ``thread``, ``script_pending``, ``clock`` and
        # ``current_stream`` below are the calling thread's
        self._local = threading.local()
        self.main_ident = threading.get_ident()
        self.main = HostState(HOST_THREAD)
        self.threads = None  # tracegen.emulation.threads.Threads of the session, once installed
        self.threaded = False  # a thread has been started under the capture (the handlers take self.lock)
        self.lock = threading.RLock()  # held by a thread inside the emulator's handlers (threaded scripts)
        self.main.clock = HostClock(self, host_time)
        self.ops: list[_Op] = []
        self.stream_free: dict[int, int] = {}
        self.stream_last: dict[int, int] = {}
        self.stream_pending_events: dict[int, list[int]] = {}
        self.stream_ready: dict[int, int] = {}
        self._next_stream = DEFAULT_STREAM + 6
        self.default_stream = None  # created lazily (needs an activated recorder)
        self.correlation = 0
        self.opt_steps = 0
        self.explicit_step = -1
        self.saw_explicit_step = False
        self.step_stack: list[tuple[Any, int]] = []
        self.gpu_ops = 0
        self.cpu_op_name = "cpu"
        self.graph_nodes: list[GraphNode] | None = None  # the CUDA graph being captured, if any
        self.notes: list[str] = []  # capture notes (stderr + trace metadata `capture_notes`)
        self.nvtx_stack: list[str] = []  # open torch.cuda.nvtx ranges (tracegen.emulation.nvtx)
        self.nvtx_range_ids = 0
        self.graph_capture_stream = None  # torch.cuda.graph's side stream (tracegen.emulation.graphs)
        # called as (node, correlation, op) for each collective node a graph launch runs (set by
        # tracegen.emulation.distributed for a --nproc rank)
        self.graph_collective = None

    # -- the calling thread's host state (tracegen.emulation.threads) -----------------------
    def state(self) -> HostState:
        """The host state of the calling thread: its own if the capture started it, else the
        main thread's (a thread the emulator does not know writes on the main thread, as before)."""
        return getattr(self._local, "state", None) or self.main

    def current_step(self) -> int:
        """The ``ProfilerStep`` of the calling thread's ops: a started thread's own (the step its
        last handoff came from), else the one the script is in now."""
        if not self.threaded:  # no thread started: every op is the main thread's
            return self.explicit_step
        step = self.state().step
        return self.explicit_step if step is None else step

    def known_thread(self) -> bool:
        """The calling thread is the main thread or one the capture started (and set up)."""
        return threading.get_ident() == self.main_ident or getattr(self._local, "state", None) is not None

    now = _state_attr("now")
    host_end = _state_attr("host_end")
    last_host = _state_attr("last_host")
    thread = _state_attr("thread")
    script_pending = _state_attr("script_pending")
    clock = _state_attr("clock")
    current_stream = _state_attr("current_stream")

    # -- notes and markers ----------------------------------------------------------------
    def note(self, text: str) -> None:
        """A capture note: printed once on stderr and kept for the trace metadata."""
        if text not in self.notes:
            self.notes.append(text)
            sys.stderr.write(f"tracegen capture: note: {text}\n")
            sys.stderr.flush()

    def marker(self, name: str) -> int:
        """A named instant (docs/conventions.md rule 8): a zero-duration ``cpu`` op now."""
        self.enter()
        try:
            return self.host(OpKind.CPU, name, 0)
        finally:
            self.leave()

    # -- host time (tracegen.emulation.hosttime) -------------------------------------------
    def enter(self):
        self.clock.enter()

    def leave(self):
        self.clock.leave()

    def counted(self, fn: Callable, *a, **kw):
        """Run ``fn`` (the script's or PyTorch's own host work) as host time."""
        return self.clock.counted(fn, *a, **kw)

    def modeled(self, host_ns: int, fn: Callable, *a, **kw):
        """Run ``fn`` (an operator on meta tensors) outside the host time and charge ``host_ns``,
        the modeled host cost of that operator on a real GPU server, instead."""
        out = fn(*a, **kw)
        self.now += host_ns
        return out

    # -- op emission ----------------------------------------------------------------------
    def _add(self, op: _Op) -> int:
        op.opt_step = self.opt_steps
        op.explicit_step = self.current_step()
        self.ops.append(op)
        return len(self.ops) - 1

    def host(self, kind: OpKind, name: str, dur: int, gap_name: str | None = None) -> int:
        """A host op at the current virtual time (after an explicit cpu op for any gap). In
        ``--host-time script`` the gap holds the script's own measured time first (written as
        its own ``cpu`` op when at least ``SCRIPT_OP_MIN_NS``), then the framework part named
        after the operator being launched."""
        st = self.state()
        if st.now > st.host_end:
            gap = st.now - st.host_end
            own = min(st.script_pending, gap)
            if own >= SCRIPT_OP_MIN_NS:
                self._host_raw(OpKind.CPU, SCRIPT_OP_NAME, st.host_end, own)
                gap -= own
            if gap > 0:
                self._host_raw(OpKind.CPU, gap_name or self.cpu_op_name, st.host_end, gap)
        st.script_pending = 0
        idx = self._host_raw(kind, name, st.now, dur)
        st.now = st.host_end = st.now + dur
        return idx

    def handoff_wait(self, name: str, src: int | None, src_time: int) -> int | None:
        """The receiving side of a handoff between host threads (:mod:`tracegen.emulation.threads`):
        a ``sync`` host op ``name`` that waited until ``src_time``, the sender's virtual time when
        it handed over at its host op ``src`` (a SYNC dependency; Lamport: the receiver's time
        becomes the later of both)."""
        if src is None:
            return None
        idx = self.host(OpKind.SYNC, name, max(0, src_time - self.state().now))
        self.ops[idx].deps.append((src, DepKind.SYNC))
        return idx

    def _host_raw(self, kind, name, start, dur) -> int:
        st = self.state()
        op = _Op(kind, name, start, max(0, int(dur)), thread=st.thread)
        if st.last_host is not None:
            op.deps.append((st.last_host, DepKind.PROGRAM))
        elif st.first_deps:
            op.deps.extend(st.first_deps)
        idx = self._add(op)
        st.last_host = idx
        st.host_end = start + op.dur
        return idx

    def stream_id(self, stream=None) -> int:
        if stream is None:
            stream = self.current_stream
        if stream is None:
            return DEFAULT_STREAM
        return getattr(stream, "stream_id", DEFAULT_STREAM)

    def new_stream_id(self) -> int:
        self._next_stream += 1
        return self._next_stream

    def gpu(self, kind: OpKind, name: str, dur: int, launch: int, *, stream: int | None = None,
            nbytes: int = 0, copy_dir: CopyDir = CopyDir.NONE, host_mem: HostMem = HostMem.NONE,
            coll: tuple[str, str] | None = None) -> int:
        """A GPU op launched by runtime op ``launch``; during stream capture a node of the graph
        instead (``coll``: a collective's type and group, kept on its node)."""
        if self.graph_nodes is not None:  # stream capture: into the graph, nothing runs
            ctype, group = coll if coll is not None else (None, None)
            self.graph_nodes.append(GraphNode(kind, name, int(dur), int(nbytes), copy_dir, host_mem, ctype, group))
            return -1
        s = self.stream_id() if stream is None else stream
        lop = self.ops[launch]
        start = max(lop.end + self.spec.launch_latency_ns, self.stream_free.get(s, 0), self.stream_ready.pop(s, 0))
        op = _Op(kind, name, start, self.speed.gpu_dur(kind, dur), stream=s, bytes=int(nbytes), copy_dir=copy_dir,
                 host_mem=host_mem, correlation=lop.correlation)
        op.deps.append((launch, DepKind.LAUNCH))
        if s in self.stream_last:
            op.deps.append((self.stream_last[s], DepKind.STREAM))
        for ev_op in self.stream_pending_events.pop(s, []):
            op.deps.append((ev_op, DepKind.EVENT))
        idx = self._add(op)
        self.stream_free[s] = op.end
        self.stream_last[s] = idx
        self.gpu_ops += 1
        return idx

    def runtime(self, name: str, dur: int, gap_name: str | None = None) -> int:
        idx = self.host(OpKind.RUNTIME, name, dur, gap_name)
        self.correlation += 1
        self.ops[idx].correlation = self.correlation
        return idx

    def sync(self, name: str, waits: list[int]) -> int:
        """A host op that blocks until the GPU ops ``waits`` have finished, and returns
        ``sync_return_ns`` after that (or after its start, when nothing is pending)."""
        if self.graph_nodes is not None:
            raise RuntimeError(CAPTURE_SYNC_ERROR)
        waits = [w for w in waits if w is not None and w >= 0]
        end = max([self.ops[w].end for w in waits], default=0)
        dur = max(end, self.now) + self.spec.sync_return_ns - self.now
        idx = self.host(OpKind.SYNC, name, dur)
        self.ops[idx].deps.extend((w, DepKind.SYNC) for w in waits)
        return idx

    # -- composite actions ----------------------------------------------------------------
    def launch_kernels(self, op_name: str, kernels: list[costmodel.KernelCost], label: str) -> None:
        for kc in kernels:
            rt = self.runtime("cudaLaunchKernel", self.spec.launch_kernel_ns, gap_name=op_name)
            self.gpu(OpKind.KERNEL, label, kc.dur_ns, rt)

    def memcpy(self, direction: CopyDir, nbytes: int, pinned: bool, non_blocking: bool, op_name: str) -> int:
        """cudaMemcpyAsync (+ the synchronisation PyTorch adds when it is blocking)."""
        spec = self.spec
        if direction == CopyDir.D2D:
            dur = costmodel.d2d_ns(nbytes, spec)
            mem = HostMem.NONE
            label = "Memcpy DtoD (Device -> Device)"
        else:
            dur = costmodel.h2d_d2h_ns(nbytes, pinned, spec, d2h=direction == CopyDir.D2H)
            mem = HostMem.PINNED if pinned else HostMem.PAGEABLE
            kind = "Pinned" if pinned else "Pageable"
            label = ("Memcpy HtoD (%s -> Device)" if direction == CopyDir.H2D else "Memcpy DtoH (Device -> %s)") % kind
        rt = self.runtime("cudaMemcpyAsync", spec.memcpy_call_ns, gap_name=op_name)
        g = self.gpu(OpKind.MEMCPY, label, dur, rt, nbytes=nbytes, copy_dir=direction, host_mem=mem)
        if direction == CopyDir.D2D:
            return g
        if not pinned and (direction == CopyDir.D2H or non_blocking):
            # the driver stages pageable memory: the call itself returns only when the copy is done
            self.sync("cudaMemcpyAsync", [g])
        elif not non_blocking:
            self.sync("cudaStreamSynchronize", [g])
        return g

    def memset(self, nbytes: int, op_name: str) -> int:
        rt = self.runtime("cudaMemsetAsync", self.spec.memset_call_ns, gap_name=op_name)
        return self.gpu(OpKind.MEMSET, "Memset (Device)", costmodel.memset_ns(nbytes, self.spec), rt, nbytes=nbytes)

    def stream_sync(self, stream_id: int | None = None):
        self.enter()
        try:
            s = self.stream_id() if stream_id is None else stream_id
            self.sync("cudaStreamSynchronize", [self.stream_last.get(s)])
        finally:
            self.leave()

    def device_sync(self):
        self.enter()
        try:
            self.sync("cudaDeviceSynchronize", list(self.stream_last.values()))
        finally:
            self.leave()

    def event_record(self, ev: EmuEvent, stream=None):
        self.enter()
        try:
            s = self.stream_id(stream)
            self.runtime("cudaEventRecord", self.spec.event_call_ns)
            if self.graph_nodes is not None:  # a node of the graph (fork/join): no timeline effect
                return
            ev.op = self.stream_last.get(s)
            ev.time = max(self.stream_free.get(s, 0), self.now)
        finally:
            self.leave()

    def stream_wait_event(self, stream, ev: EmuEvent):
        self.enter()
        try:
            s = self.stream_id(stream)
            self.runtime("cudaStreamWaitEvent", self.spec.event_call_ns)
            if self.graph_nodes is not None:
                return
            if ev.op is not None:
                self.stream_pending_events.setdefault(s, []).append(ev.op)
            if ev.time is not None:
                self.stream_ready[s] = max(self.stream_ready.get(s, 0), ev.time)
        finally:
            self.leave()

    def event_sync(self, ev: EmuEvent):
        self.enter()
        try:
            self.sync("cudaEventSynchronize", [ev.op])
        finally:
            self.leave()

    # -- CUDA graphs (tracegen.emulation.graphs) -----------------------------------------
    def graph_capture_begin(self, call_ns: int) -> None:
        """``cudaStreamBeginCapture``: from now on GPU ops are recorded into a graph."""
        if self.graph_nodes is not None:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing "
                               "(a CUDA graph capture is already in progress)")
        self.enter()
        try:
            self.runtime("cudaStreamBeginCapture", call_ns)
        finally:
            self.leave()
        self.graph_nodes = []

    def graph_capture_end(self, end_call_ns: int, instantiate_ns: int, per_node_ns: int) -> list[GraphNode]:
        """``cudaStreamEndCapture`` + ``cudaGraphInstantiate``; returns the captured nodes."""
        nodes, self.graph_nodes = self.graph_nodes or [], None
        self.enter()
        try:
            self.runtime("cudaStreamEndCapture", end_call_ns)
            self.runtime("cudaGraphInstantiate", instantiate_ns + per_node_ns * len(nodes))
        finally:
            self.leave()
        return nodes

    def graph_launch(self, nodes: list[GraphNode], call_ns: int) -> int:
        """``cudaGraphLaunch``: one runtime call on the host launching every node, in capture
        order, on the current stream (each with a ``launch`` dependency on that one call). Each
        collective node is handed to :attr:`graph_collective`, which numbers it."""
        if self.graph_nodes is not None:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing "
                               "(a graph launch inside a capture)")
        self.enter()
        try:
            rt = self.runtime("cudaGraphLaunch", call_ns)
            s = self.stream_id()
            for n in nodes:
                op = self.gpu(n.kind, n.name, n.dur, rt, stream=s, nbytes=n.bytes, copy_dir=n.copy_dir,
                              host_mem=n.host_mem)
                if n.coll_type is not None:
                    if self.graph_collective is None:
                        raise RuntimeError("a CUDA graph with a collective was launched outside the rank "
                                           "that captured it")
                    self.graph_collective(n, self.ops[rt].correlation, op)
            return rt
        finally:
            self.leave()

    def optimizer_step_done(self, *_a, **_kw):
        self.opt_steps += 1

    def explicit_step_boundary(self):
        """``torch.profiler.profile.step()`` in the script: a new ProfilerStep begins."""
        self.saw_explicit_step = True
        self.explicit_step = self.explicit_step + 1 if self.explicit_step >= 0 else 0

