"""One emulated rank of a ``torch.distributed`` script (``tracegen capture --nproc N``).

The script's own ``init_process_group`` (``"nccl"``, ``"gloo"``, ``"cpu:gloo,cuda:nccl"``, none,
``env://``, ``tcp://`` or a ``store=``) is redirected to an **in-process backend**
(:class:`EmulatedGroup`, registered with the public ``torch.distributed.Backend.register_backend``
as ``fastrack_emulated``) on a local ``HashStore``: nothing leaves the process, and no rank waits
for another. Every collective the script or PyTorch (DDP's reducer, FSDP) issues reaches the
backend through c10d's dispatcher ops; the backend records it on the rank's emulated timeline as

* a ``cpu`` op ``nccl:<type>`` (the record-function PyTorch's NCCL group writes; host cost
  ``aten_op_host_ns``), then a ``cudaLaunchKernel`` runtime op, then
* a ``collective`` GPU op (``ncclDevKernel_<Type>_..._RING_LL``) on the group's own NCCL stream
  (one per process group, as ProcessGroupNCCL keeps one stream per communicator), which first
  waits for the work queued on the current stream (EVENT dependency, ProcessGroupNCCL's
  ``syncStream``), with ``coll_type``/``coll_bytes``/``coll_group``/``coll_seq``
  (:data:`COLLECTIVE_FIELDS`, keyed by the launch's correlation id: a list, in launch order, as one
  graph launch may run several);
* ``Work.wait()`` (what ``async_op=False`` calls) makes the current stream wait for it (EVENT, the
  host does not block); ``barrier()`` is a one-element all-reduce whose wait blocks the host
  (``cudaStreamSynchronize``), as ProcessGroupNCCL's barrier. DDP waits for its buckets through
  futures inside the autograd engine: when ``backward()`` returns, the current stream waits for
  every collective still unwaited (DDP's ``finalize_backward``).

Inside a CUDA-graph capture (:mod:`tracegen.emulation.graphs`) a collective runs nothing: the host
ops are recorded as above and the collective becomes a node of the graph (its type, bytes and
group kept, no sequence number taken, no stream joined). Each replay of the graph runs the node
on the replaying stream, with the launch's correlation id, and takes the group's next sequence
number then (:meth:`RankState.graph_replayed`), as the ranks of a real job each replay their own
graph of the same collectives in the same order, so the ranks' replays match one to one.

Data never moves: tensors are meta, so a collective's result is its input (a broadcast from rank 0
is not rank 0's value). Collectives on CPU tensors (a gloo group) are host work only.
Object collectives (``broadcast_object_list``, ``all_gather_object``...) read values of GPU memory
and are refused as unsupported (their values would be stand-ins).

The duration of a collective is a ring on NVLink with the named parameters below; the replay
re-prices collectives under every protocol (docs/multi-gpu.md), so this only matters for the
``captured`` protocol.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Work
from torch.utils._python_dispatch import TorchDispatchMode

from fastrack_core.errors import CaptureError
from fastrack_core.schema import OpKind
from tracegen.emulation.timeline import CAPTURE_SYNC_ERROR, Recorder

BACKEND = "fastrack_emulated"
aten = torch.ops.aten

# ----------------------------------------------------------------------------- named parameters
NVLINK_GB_S = 380.0  # GB/s per direction between two H100 SXM GPUs: measured P2P bandwidth (NVIDIA/nccl
#                      issue #1264), the figure docs/model.md uses for the replay's topology (assumption:
#                      every rank on one NVSwitch node)
NCCL_STEP_LATENCY_NS = 3400  # ns per ring step: NCCL's own tuning model for the SIMPLE protocol over NVLink
#                              (docs/model.md); a floor for small messages

_KERNEL = {  # coll_type -> NCCL kernel name stem (the replay reads the type from the name)
    "all_reduce": "AllReduce_Sum", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter_Sum",
    "broadcast": "Broadcast", "reduce": "Reduce_Sum", "all_to_all": "SendRecv", "send_recv": "SendRecv",
}
_DTYPE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
          torch.int64: "i64", torch.int32: "i32", torch.uint8: "u8", torch.int8: "i8"}


def collective_ns(ctype: str, nbytes: int, world: int) -> int:
    """Ring time of one collective of ``nbytes`` per rank on ``world`` GPUs (docs/multi-gpu.md table)."""
    n = max(1, world)
    if n == 1:
        return NCCL_STEP_LATENCY_NS
    sends = {"all_reduce": 2 * (n - 1) / n * nbytes, "all_gather": (n - 1) * nbytes,
             "reduce_scatter": (n - 1) / n * nbytes, "all_to_all": (n - 1) / n * nbytes}.get(ctype, nbytes)
    steps = {"all_reduce": 2 * (n - 1), "send_recv": 1, "all_to_all": 1}.get(ctype, n - 1)
    return math.ceil(sends / NVLINK_GB_S) + steps * NCCL_STEP_LATENCY_NS  # bytes / (GB/s) = ns


@dataclass
class RankState:
    """What one rank's capture learned about torch.distributed."""

    rank: int
    world: int
    initialized: bool = False
    # correlation -> [(type, bytes, group, seq)], in launch order (a graph launch may run several)
    coll: dict[int, list[tuple[str, int, str, int]]] = field(default_factory=dict)
    seq: dict[str, int] = field(default_factory=dict)  # group -> next sequence number
    streams: dict[str, int] = field(default_factory=dict)  # group -> NCCL stream id
    unwaited: dict[int, int] = field(default_factory=dict)  # consumer stream -> last collective op not yet waited
    rec: Recorder | None = None
    works: list = field(default_factory=list)  # every Work handed to C++ (DDP's reducer keeps them past Python)
    graph_collectives: int = 0  # collectives run by CUDA-graph replays

    def next_seq(self, group: str) -> int:
        """The group's next collective sequence number (taken)."""
        seq = self.seq.get(group, 0)
        self.seq[group] = seq + 1
        return seq

    def graph_replayed(self, node, correlation: int, op: int) -> None:
        """A collective node of a CUDA graph ran as op ``op`` of the graph launch ``correlation``
        (the recorder's ``graph_collective`` hook): it takes its group's next sequence number."""
        self.coll.setdefault(correlation, []).append(
            (node.coll_type, int(node.bytes), node.coll_group, self.next_seq(node.coll_group)))
        self.graph_collectives += 1

    def keep(self, work: "_DoneWork") -> "_DoneWork":
        """Keep ``work`` alive for the whole capture: C++ callers (DDP's reducer) hold it without a
        Python reference, and a collected Python subclass would crash them."""
        self.works.append(work)
        return work


_STATE: list[RankState] = []


def _state() -> RankState:
    if not _STATE:
        raise CaptureError("a process group of the emulated backend was used outside a --nproc capture")
    return _STATE[-1]


class _DoneWork(Work):
    """A collective that is complete on the host; ``wait()`` joins the current stream to it."""

    def __init__(self, result: Any, op: int | None, block: bool = False):
        super().__init__()
        self._fut = torch.futures.Future()
        self._fut.set_result(result)
        self._op, self._block = op, block

    def wait(self, timeout=None) -> bool:
        if self._op is not None:
            _join(_state(), self._op, block=self._block)
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self):
        return self._fut


def _join(st: RankState, op: int, *, block: bool = False) -> None:
    """The current stream (or, with ``block``, the host) waits for collective op ``op``."""
    rec = st.rec
    rec.enter()
    try:
        if block:
            rec.sync("cudaStreamSynchronize", [op])
        else:
            s = rec.stream_id()
            rec.stream_pending_events.setdefault(s, []).append(op)
            rec.stream_ready[s] = max(rec.stream_ready.get(s, 0), rec.ops[op].end)
        for s, last in list(st.unwaited.items()):
            if last <= op:
                del st.unwaited[s]
    finally:
        rec.leave()


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _on_gpu(tensors) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_meta for t in tensors)


class EmulatedGroup(dist.ProcessGroup):
    """The in-process backend: records each collective on the rank's timeline, moves no data."""

    def __init__(self, rank: int, world: int, name: str, torch_name: str):
        super().__init__(rank, world)
        self._rank_, self._world_, self._name, self._torch_name = rank, world, name, torch_name

    def size(self) -> int:
        return self._world_

    @property
    def group_name(self) -> str:  # torch uses this object as the group itself; C++ looks the name up in
        return self._torch_name   # its backends, which a Python group has none of (DeviceMesh reads it)

    def getBackendName(self) -> str:
        return BACKEND

    # -- recording ---------------------------------------------------------------------------
    def _record(self, ctype: str, tensors, nbytes: int, result, *, block: bool = False) -> _DoneWork:
        st = _state()
        rec = st.rec
        if not _on_gpu(tensors):  # a gloo-style collective on CPU tensors: host work only
            rec.enter()
            try:
                rec.host(OpKind.CPU, f"gloo:{ctype}", rec.spec.aten_op_host_ns)
            finally:
                rec.leave()
            return st.keep(_DoneWork(result, None))
        dtype = next((t.dtype for t in tensors if isinstance(t, torch.Tensor)), torch.float32)
        name = f"ncclDevKernel_{_KERNEL[ctype]}_{_DTYPE.get(dtype, 'u8')}_RING_LL"
        if rec.graph_nodes is not None:  # CUDA-graph capture: a node of the graph, numbered at each replay
            if block:  # barrier(): its host wait is a synchronising call, which CUDA refuses while capturing
                raise RuntimeError(CAPTURE_SYNC_ERROR)
            rec.enter()
            try:
                rec.host(OpKind.CPU, f"nccl:{ctype}", rec.spec.aten_op_host_ns)
                rt = rec.runtime("cudaLaunchKernel", rec.spec.launch_kernel_ns)
                rec.gpu(OpKind.COLLECTIVE, name, collective_ns(ctype, nbytes, self._world_), rt, nbytes=nbytes,
                        coll=(ctype, self._name))
            finally:
                rec.leave()
            return st.keep(_DoneWork(result, None))
        rec.enter()
        try:
            seq = st.next_seq(self._name)
            stream = st.streams.get(self._name)
            if stream is None:
                stream = st.streams[self._name] = rec.new_stream_id()
            current = rec.stream_id()
            if current in rec.stream_last:  # syncStream: the NCCL stream waits for the current one
                rec.stream_pending_events.setdefault(stream, []).append(rec.stream_last[current])
                rec.stream_ready[stream] = max(rec.stream_ready.get(stream, 0), rec.stream_free.get(current, 0))
            rec.host(OpKind.CPU, f"nccl:{ctype}", rec.spec.aten_op_host_ns)
            rt = rec.runtime("cudaLaunchKernel", rec.spec.launch_kernel_ns)
            op = rec.gpu(OpKind.COLLECTIVE, name, collective_ns(ctype, nbytes, self._world_), rt, stream=stream,
                         nbytes=nbytes)
            st.coll.setdefault(rec.ops[rt].correlation, []).append((ctype, int(nbytes), self._name, seq))
            st.unwaited[current] = op
        finally:
            rec.leave()
        return st.keep(_DoneWork(result, op, block))

    # -- the ProcessGroup interface ----------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        return self._record("all_reduce", tensors, _nbytes(tensors), tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self._record("all_reduce", tensors, _nbytes(tensors), tensors)

    def broadcast(self, tensors, opts=None):
        return self._record("broadcast", tensors, _nbytes(tensors), tensors)

    def reduce(self, tensors, opts=None):
        return self._record("reduce", tensors, _nbytes(tensors), tensors)

    def allgather(self, output_lists, inputs, opts=None):
        return self._record("all_gather", inputs, _nbytes(inputs), output_lists)

    def _allgather_base(self, output, input, opts=None):
        return self._record("all_gather", [input], _nbytes([input]), output)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._record("all_gather", inputs, _nbytes(inputs), outputs)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        flat = [t for lst in input_lists for t in lst]
        return self._record("reduce_scatter", flat, _nbytes(flat), outputs)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._record("reduce_scatter", [input], _nbytes([input]), output)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._record("reduce_scatter", inputs, _nbytes(inputs), outputs)

    def all_gather_single(self, output, input, opts=None):
        return self._record("all_gather", [input], _nbytes([input]), output)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._record("all_gather", inputs, _nbytes(inputs), outputs)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        return self._record("all_gather", inputs, _nbytes(inputs), output_lists)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._record("reduce_scatter", [input], _nbytes([input]), output)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._record("reduce_scatter", inputs, _nbytes(inputs), outputs)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._record("all_to_all", [input], _nbytes([input]), output)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._record("all_to_all", [input], _nbytes([input]), output)

    def alltoall(self, outputs, inputs, opts=None):
        return self._record("all_to_all", inputs, _nbytes(inputs), outputs)

    def barrier(self, opts=None):
        one = torch.empty(1, device="meta")  # ProcessGroupNCCL: a one-element all-reduce, then a host wait
        return self._record("all_reduce", [one], one.element_size(), None, block=True)

    def _unsupported(self, what: str):
        raise CaptureError(f"emulation does not support torch.distributed {what}; no trace written")

    def send(self, *a, **k):
        self._unsupported("send")

    def recv(self, *a, **k):
        self._unsupported("recv")

    def recv_anysource(self, *a, **k):
        self._unsupported("recv")

    def gather(self, *a, **k):
        self._unsupported("gather")

    def monitored_barrier(self, *a, **k):
        self._unsupported("monitored_barrier")

    def _start_coalescing(self, *a, **k):
        self._unsupported("coalescing (_coalescing_manager)")

    def scatter(self, *a, **k):
        self._unsupported("scatter")


def _create(opts, _backend_options=None):  # register_backend(extended_api=True) factory
    ranks = sorted(int(r) for r in opts.global_ranks_in_group) or list(range(int(opts.group_size)))
    # torch's group name (the same on every rank) plus its ranks: "0:0-1", "1:0,2"
    return EmulatedGroup(int(opts.group_rank), int(opts.group_size), f"{opts.group_id}:{_ranks_label(ranks)}",
                         str(opts.group_id))


def _ranks_label(ranks: list[int]) -> str:
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 1:
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


def register_backend() -> None:
    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda", "meta"])


def _refuse_object_collective(name: str):
    def refuse(*_a, **_k):
        raise CaptureError(f"emulation does not support torch.distributed.{name} (it needs the values of "
                           "GPU memory, which the emulated GPU does not hold); no trace written")
    return refuse


_OBJECT_COLLECTIVES = ("broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
                       "send_object_list", "recv_object_list")


_SHADOW_MAX_ELEMENTS = 1 << 16  # DDP's bucket index lists: one int per parameter


class _ValueShadow(TorchDispatchMode):
    """Keeps the values of small CPU tensors copied to the emulated GPU and gives them back when
    they are copied to the CPU again (the emulated GPU holds no values). Active only while DDP's
    reducer rebuilds its buckets: it sends the bucket index lists to the GPU, broadcasts them and
    reads them back, and stand-in values there would corrupt the buckets (every rank computes
    the same lists, so keeping the local ones is what the broadcast from rank 0 gives)."""

    def __init__(self):
        super().__init__()
        self.values: dict[int, torch.Tensor] = {}

    @staticmethod
    def _key(t) -> int | None:
        if isinstance(t, torch.Tensor) and t.is_meta and t.storage_offset() == 0 and t.is_contiguous():
            return t.untyped_storage()._cdata
        return None

    def _remember(self, dst, src) -> None:
        key = self._key(dst)
        if key is not None and not src.is_meta and src.numel() <= _SHADOW_MAX_ELEMENTS:
            self.values[key] = src.detach().reshape(-1).numpy().copy()

    def _restore(self, dst, src) -> None:
        key = self._key(src)
        if key in self.values and isinstance(dst, torch.Tensor) and not dst.is_meta:
            vals = self.values[key]
            if dst.numel() == vals.size:
                dst.detach().numpy().reshape(-1)[:] = vals.astype(dst.detach().numpy().dtype)

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is aten.copy_.default:
            dst, src = args[0], args[1]
            self._remember(dst, src) if dst.is_meta else self._restore(dst, src)
        elif func is aten._to_copy.default:
            src = args[0]
            self._remember(out, src) if isinstance(out, torch.Tensor) and out.is_meta else self._restore(out, src)
        return out


def _rank_devices(local_rank: int, local_world: int):
    """Each rank drives its own emulated GPU ``cuda:<local_rank>`` of a node of ``local_world``
    GPUs: emulated tensors report that device, ``device_count()`` is ``local_world``. Applied over
    the single-GPU patches of :mod:`tracegen.emulation.cuda_api`; returns the function that undoes it."""
    from tracegen.emulation import function_mode

    saved: list[tuple[Any, str, Any]] = []

    def patch(obj, attr, value):
        if hasattr(obj, attr):
            saved.append((obj, attr, getattr(obj, attr)))
            setattr(obj, attr, value)

    patch(function_mode, "_CUDA_DEV", torch.device("cuda", local_rank))
    for attr in ("device_count",):
        patch(torch.cuda, attr, lambda: local_world)
        patch(torch.accelerator, attr, lambda: local_world)
    patch(torch.cuda, "current_device", lambda: local_rank)
    for attr in ("current_device_index", "current_device_idx"):
        patch(torch.accelerator, attr, lambda: local_rank)

    def undo():
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)
    return undo


def _refuse_fsdp():
    """FSDP fails under emulation (FullyShardedDataParallel: torch's C++ accelerator checks find no
    device; fully_shard: parameters re-pointed with ``set_data`` across meta and real tensors), so
    both are refused up front with one line. Returns the function that restores them."""
    saved: list[tuple[Any, str, Any]] = []

    def refuse(name):
        def unsupported(*_a, **_k):
            raise CaptureError(f"emulation does not support FSDP ({name}): its parameter sharding needs real "
                               "device storage, which the emulated GPU does not have; use DDP, or capture one "
                               "rank's model without FSDP; no trace written")
        return unsupported

    try:
        import torch.distributed.fsdp as fsdp
    except ImportError:  # pragma: no cover - torch without distributed support
        return lambda: None
    saved.append((fsdp.FullyShardedDataParallel, "__init__", fsdp.FullyShardedDataParallel.__init__))
    fsdp.FullyShardedDataParallel.__init__ = refuse("FullyShardedDataParallel")
    for modname in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp",
                    "torch.distributed.fsdp._fully_shard"):
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        if hasattr(mod, "fully_shard"):
            saved.append((mod, "fully_shard", mod.fully_shard))
            mod.fully_shard = refuse("fully_shard")

    def undo():
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)
    return undo


@contextlib.contextmanager
def emulated_rank(rec: Recorder, rank: int, world: int) -> Iterator[RankState]:
    """torch.distributed redirected to the in-process backend for rank ``rank`` of ``world``,
    around an :func:`tracegen.emulation.emulated_gpu` session on ``rec``."""
    register_backend()
    st = RankState(rank=rank, world=world, rec=rec)
    original_init = dist.init_process_group
    original_backward = torch.autograd.backward
    saved = {name: getattr(dist, name) for name in _OBJECT_COLLECTIVES + ("is_nccl_available",
                                                                          "_verify_params_across_processes")}

    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                           group_name="", pg_options=None, device_id=None, **_kw):
        want_world = world_size if world_size not in (None, -1) else int(os.environ.get("WORLD_SIZE", world))
        want_rank = rank if rank not in (None, -1) else int(os.environ.get("RANK", st.rank))
        if want_world != st.world:
            raise CaptureError(f"the script asks for world size {want_world}, but --nproc is {st.world}; "
                               "no trace written")
        if want_rank != st.rank:
            raise CaptureError(f"the script gives rank {want_rank} to the process of rank {st.rank} "
                               f"(RANK={st.rank}); no trace written")
        st.initialized = True
        kw = {"timeout": timeout} if timeout is not None else {}
        return original_init(BACKEND, store=dist.HashStore(), world_size=st.world, rank=st.rank, **kw)

    def backward(*args, **kwargs):  # DDP waits for its buckets when backward ends
        out = original_backward(*args, **kwargs)
        if st.unwaited:
            for op in sorted(set(st.unwaited.values())):
                _join(st, op)
            st.unwaited.clear()
        return out

    _STATE.append(st)
    saved_hook, rec.graph_collective = rec.graph_collective, st.graph_replayed
    undo_devices = _rank_devices(rank, world)
    undo_fsdp = _refuse_fsdp()
    dist.init_process_group = init_process_group
    torch.autograd.backward = backward
    dist.is_nccl_available = lambda: True
    # DDP's construction-time check that every rank has the same parameter shapes compares values
    # all-gathered into GPU memory, which the emulated GPU does not hold: skipped (every rank runs
    # the same script; docs/emulation.md)
    dist._verify_params_across_processes = lambda *_a, **_k: None
    original_rebuild = dist.Reducer._rebuild_buckets

    def rebuild_buckets(reducer):
        with _ValueShadow():
            return original_rebuild(reducer)

    dist.Reducer._rebuild_buckets = rebuild_buckets
    for name in _OBJECT_COLLECTIVES:
        setattr(dist, name, _refuse_object_collective(name))
    try:
        yield st
    finally:
        rec.graph_collective = saved_hook
        undo_devices()
        undo_fsdp()
        dist.Reducer._rebuild_buckets = original_rebuild
        dist.init_process_group = original_init
        torch.autograd.backward = original_backward
        for name, value in saved.items():
            setattr(dist, name, value)
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        _STATE.remove(st)


__all__ = ["BACKEND", "EmulatedGroup", "RankState", "collective_ns", "emulated_rank", "register_backend",
           "NVLINK_GB_S", "NCCL_STEP_LATENCY_NS"]
