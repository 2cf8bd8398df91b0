"""The ``TorchDispatchMode`` layer (below autograd, so it sees the backward pass too): every ATen
operator on an emulated tensor becomes GPU work on the recorder's timeline: kernels priced by
:mod:`tracegen.emulation.costmodel`, host<->device copies, and reads of GPU values (``.item()``, ``.cpu()``)
as D2H copies plus host synchronisations. Small tensors carry real values beside the emulation
(:mod:`tracegen.emulation.shadows`; stand-ins from :mod:`tracegen.emulation.reads`); copies of zero
bytes are not made (PyTorch returns before the copy). While the mode is active, storages moved to
the GPU (``torch.load(map_location="cuda")``) land on it too (:mod:`tracegen.emulation.storages`)."""

from __future__ import annotations

import math
import re
import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map

from fastrack_core.schema import CopyDir
from tracegen.emulation import costmodel
from tracegen.emulation.annotations import record_annotation
from tracegen.emulation.costmodel import TensorInfo
from tracegen.emulation.metacache import MetaOutputs
from tracegen.emulation.reads import STANDIN_NOTE, default_read
from tracegen.emulation.shadows import Shadows
from tracegen.emulation.storages import storages_to_emulated_gpu
from tracegen.emulation.tensors import (
    META,
    is_emulated,
    is_pinned_memory,
    leaves,
    mark_pinned,
    tensor_info,
)

if TYPE_CHECKING:
    from tracegen.emulation.timeline import Recorder

aten = torch.ops.aten
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

_NO_KERNEL = {
    aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default, aten.new_empty.default,
    aten.new_empty_strided.default, aten.resize_.default, aten.set_.source_Storage_storage_offset,
    aten.lift_fresh.default, aten.record_stream.default, aten.is_pinned.default, aten.is_same_size.default,
    aten._has_compatible_shallow_copy_type.default, aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
    aten.sym_storage_offset.default, aten.set_.source_Tensor, aten.set_.default, aten.set_.source_Storage,
    aten.set_.source_Tensor_storage_offset,  # torch.save's storage.cpu() views a storage: no kernel
}
_DATA_DEPENDENT = {aten.nonzero.default, aten.masked_select.default}
# views whose schema carries no alias annotation (autograd does not track them as views); free on CUDA
_UNSAFE_VIEWS = {aten._unsafe_view.default, aten.unsafe_split.Tensor, aten.unsafe_split_with_sizes.default,
                 aten.unsafe_chunk.default}
_ALLOC = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default, aten.new_empty.default,
          aten.new_empty_strided.default}
_INDEX_PUT = {aten.index_put_.default, aten.index_put.default, aten._index_put_impl_.default}


class DispatchMode(TorchDispatchMode):
    def __init__(self, rec: Recorder):
        super().__init__()
        self.rec = rec
        self.all_results: dict[int, weakref.ref] = {}
        self._views: dict[Any, bool] = {}
        self._argnames: dict[Any, list[str]] = {}
        self.shadows = Shadows()
        self.meta_outputs = MetaOutputs()  # result layouts per operator and argument signature
        self._priced: dict = {}  # (signature, TF32 switches) -> the kernels launched (_price)
        self._patches: list = []

    def __enter__(self):
        patch = storages_to_emulated_gpu()
        patch.__enter__()
        self._patches.append(patch)
        return super().__enter__()

    def __exit__(self, exc_type, exc_val, exc_tb):
        try:
            return super().__exit__(exc_type, exc_val, exc_tb)
        finally:
            self._patches.pop().__exit__(None, None, None)

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.rec.known_thread():  # a thread the capture did not start (autograd's, say)
            return func(*args, **kwargs)
        self.rec.enter()
        try:
            return self._handle(func, args, kwargs)
        finally:
            self.rec.leave()

    # ------------------------------------------------------------------------------------
    def _handle(self, func, args, kwargs):
        rec = self.rec
        ns = func.namespace
        if ns == "profiler":
            return self._profiler_op(func, args, kwargs)
        if ns == "c10d":  # collectives: the process group's backend records them (emulation/distributed.py)
            return func(*args, **kwargs)
        flat = leaves((args, kwargs))
        emu = [a for a in flat if is_emulated(a)]
        dev = kwargs.get("device")
        on_gpu = bool(emu) or (dev is not None and torch.device(dev).type == "meta")
        if not on_gpu:  # the script's own CPU tensor work
            return rec.clock.cpu_op(func, *args, **kwargs)
        if func is aten._local_scalar_dense.default or func is aten.item.default:
            if args[0].numel() != 1:
                raise RuntimeError(f"a Tensor with {args[0].numel()} elements cannot be converted to Scalar")
            return self._read_scalar(args[0])
        if func is aten.is_nonzero.default:
            return bool(self._read_scalar(args[0]))
        if func is aten._to_copy.default:
            return self._to_copy(func, args, kwargs)
        if func is aten.copy_.default:
            return self._copy_(func, args, kwargs)
        if func.overloadpacket is aten.to and isinstance(args[0], torch.Tensor):
            # under inference_mode ``aten::to`` arrives whole: a move to the CPU is a D2H copy and
            # a move of a CPU tensor to the device an H2D one, as ATen's to -> _to_copy -> copy_
            # (non_blocking and the source's pinned memory kept: one cudaMemcpyAsync, no sync)
            named = self._named_args(func, args, kwargs)
            dev = named.get("device")
            if dev is None and isinstance(named.get("other"), torch.Tensor):
                dev = named["other"].device
            kind = torch.device(dev).type if dev is not None else None
            if (kind == "cpu" and is_emulated(args[0])) or (kind == "meta" and not is_emulated(args[0])):
                kw = {"device": torch.device(kind), "dtype": named.get("dtype") or args[0].dtype,
                      "non_blocking": bool(named.get("non_blocking", False)),
                      "pin_memory": bool(named.get("pin_memory") or False)}
                return self._to_copy(aten._to_copy.default, (args[0],), kw)
        if func in _INDEX_PUT:
            args, kwargs = self._index_put_value(func, args, kwargs)
        # CPU tensors used by a GPU op: 0-d ones are scalars; others are copied to the device first
        if any(isinstance(a, torch.Tensor) and not a.is_meta and a.dim() > 0 for a in flat):
            args, kwargs = self._upload_cpu_tensors(args, kwargs, func)
        if func in _NO_KERNEL:
            out = rec.modeled(rec.spec.aten_view_host_ns, func, *args, **kwargs)
            if func in _ALLOC:
                self.shadows.storage(out, create=True)  # zero-filled: captures stay deterministic
            return out
        if self._is_view(func):
            # 'may alias' ops (view, reshape, contiguous, to): a kernel only when they copied
            out = func(*args, **kwargs)
            if _aliases_input(out, flat):
                rec.now += rec.spec.aten_view_host_ns
            else:
                rec.now += rec.spec.aten_op_host_ns
                self._price(func, args, kwargs, out)
                self.shadows.mirror(func, args, kwargs, out)
            return out
        if func in _DATA_DEPENDENT:
            return self._data_dependent(func, args, kwargs)
        try:
            out, key = self.meta_outputs.call(func, args, kwargs)  # as rec.modeled(aten_op_host_ns, func, ...)
        except (RuntimeError, NotImplementedError) as exc:
            return self._fallback(func, args, kwargs, exc)
        rec.now += rec.spec.aten_op_host_ns
        self._price(func, args, kwargs, out, key)
        if func.overloadpacket in (aten.all,) and isinstance(out, torch.Tensor):
            self.all_results[id(out)] = weakref.ref(out)
        self.shadows.mirror(func, args, kwargs, out)
        return out

    def _is_view(self, func) -> bool:
        v = self._views.get(func)
        if v is None:
            rets = func._schema.returns
            v = bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)
            v = v or func.is_view or func in _UNSAFE_VIEWS
            self._views[func] = v
        return v

    def _named_args(self, func, args, kwargs) -> dict:
        names = self._argnames.get(func)
        if names is None:
            names = [a.name for a in func._schema.arguments]
            self._argnames[func] = names
        d = dict(zip(names, args))
        d.update(kwargs)
        return d

    def _price(self, func, args, kwargs, out, key=None):
        """Launch the kernels ``func`` costs. ``key``: the signature of the call
        (from :meth:`MetaOutputs.call`), which with the TF32 switches determines the kernels, so a
        call with a signature priced before launches the same kernels again."""
        rec = self.rec
        tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
        cudnn_tf32 = torch.backends.cudnn.allow_tf32
        if key is not None:
            key = (key, tf32, cudnn_tf32)
            known = self._priced.get(key)
            if known is not None:
                if known[1] is not None:
                    rec.launch_kernels(*known)
                return
        name = func._schema.name
        flat_in = leaves((args, kwargs))
        ins = [tensor_info(a) for a in flat_in if isinstance(a, torch.Tensor)]
        flat_out = leaves(out)
        if flat_out and all(isinstance(o, torch.Tensor) and o.numel() == 0 for o in flat_out):
            if key is not None:
                self._priced[key] = (name, None, None)
            return  # an empty result: CUDA kernels return before launching (numel 0)
        outs = [tensor_info(o) for o in flat_out if isinstance(o, torch.Tensor)]
        named = self._named_args(func, args, kwargs)
        extra = {k: named[k] for k in ("is_causal", "groups", "output_mask", "mode", "hidden_size", "proj_size",
                                           "num_layers", "bidirectional", "batch_first", "accumulate", "max_q",
                                           "max_k") if k in named}
        if "max_k" in named:  # varlen attention: its work is in the sequence-length tensors' values
            extra.update(self._varlen_lengths(named))
            key = None
        if name.startswith("aten::_foreach_") or name.startswith("aten::_fused_"):
            extra["tensor_lists"] = [[tensor_info(t) for t in a] for a in args
                                     if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
        # positional ins for gemm ops: keep optional None slots so bias/a/b positions line up
        pos_ins = [(tensor_info(a) if isinstance(a, torch.Tensor) else None) for a in args if isinstance(a, torch.Tensor) or a is None]
        kernels = costmodel.price_op(name, pos_ins if costmodel.op_family(name) == "gemm" else ins, outs, rec.spec,
                                     args=extra, tf32=tf32, cudnn_tf32=cudnn_tf32)
        label = _label(name, ins)
        if key is not None:
            self._priced[key] = (name, kernels, label)
        rec.launch_kernels(name, kernels, label)

    def _varlen_lengths(self, named: dict) -> dict:
        """Query rows and key positions per sequence of a varlen attention call, from the values of
        its ``cu_seq_q``/``cum_seq_q``, ``seqused_k`` (else ``cu_seq_k``/``cum_seq_k``) metadata,
        where the emulator holds real values for them (else {}: the cost model bounds by shape)."""
        def values(name_a, name_b):
            t = named.get(name_a, named.get(name_b))
            if not isinstance(t, torch.Tensor) or not t.is_meta or self.shadows.is_standin(t):
                return None
            with _disable_current_modes():  # the emulator's own read: no op of the script
                v = self.shadows.view(t)
                return None if v is None else [int(x) for x in v.tolist()]

        cq, used, ck = values("cu_seq_q", "cum_seq_q"), values("seqused_k", "seqused_k"), values("cu_seq_k", "cum_seq_k")
        if cq is None or len(cq) < 2:
            return {}
        lq = [b - a for a, b in zip(cq, cq[1:])]
        lk = used if used is not None else ([b - a for a, b in zip(ck, ck[1:])] if ck is not None else None)
        if lk is None or len(lk) != len(lq):
            return {}
        return {"seq_lens_q": lq, "seq_lens_k": lk}

    # -- transfers and reads ----------------------------------------------------------------
    def _to_copy(self, func, args, kwargs):
        rec = self.rec
        src = args[0]
        dev = kwargs.get("device")
        dst_meta = dev is not None and torch.device(dev).type == "meta"
        if not src.is_meta and dst_meta:  # H2D
            out = rec.modeled(rec.spec.aten_op_host_ns, func, *args, **kwargs)
            nb = bool(kwargs.get("non_blocking", False))
            self._memcpy(CopyDir.H2D, src.numel() * src.element_size(), is_pinned_memory(src), nb, "aten::_to_copy")
            self.shadows.write(out, src)
            return out
        if src.is_meta and dev is not None and torch.device(dev).type == "cpu":  # D2H
            dtype = kwargs.get("dtype") or src.dtype
            nb = bool(kwargs.get("non_blocking", False))
            pinned = bool(kwargs.get("pin_memory", False))
            self._memcpy(CopyDir.D2H, src.numel() * src.element_size(), pinned, nb, "aten::_to_copy")
            self._note_standin(src)
            out = self.shadows.read(src, dtype, self._by_all(src))
            return mark_pinned(out) if pinned else out
        out = rec.modeled(rec.spec.aten_op_host_ns, func, *args, **kwargs)
        if src.is_meta and isinstance(out, torch.Tensor) and out.is_meta and out.dtype != src.dtype:
            if src.numel():
                self._price(func, args, kwargs, out)
        elif src.is_meta and isinstance(out, torch.Tensor) and out is not src:
            self._memcpy(CopyDir.D2D, src.numel() * src.element_size(), False, True, "aten::_to_copy")
        self.shadows.mirror(func, args, kwargs, out)
        return out

    def _copy_(self, func, args, kwargs):
        rec = self.rec
        dst, src = args[0], args[1]
        nb = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        if dst.is_meta and not src.is_meta:  # H2D: the copy has the source's bytes (broadcast on the GPU)
            self._memcpy(CopyDir.H2D, src.numel() * src.element_size(), is_pinned_memory(src), nb, "aten::copy_")
            self.shadows.write(dst, src)
            return dst
        if not dst.is_meta and src.is_meta:
            self._memcpy(CopyDir.D2H, src.numel() * src.element_size(), is_pinned_memory(dst), nb, "aten::copy_")
            self._note_standin(src)
            dst.copy_(self.shadows.read(src, dst.dtype, self._by_all(src)))
            return dst
        out = rec.modeled(rec.spec.aten_op_host_ns, func, *args, **kwargs)
        if (dst.dtype == src.dtype and dst.is_contiguous() and src.is_contiguous()
                and tuple(dst.shape) == tuple(src.shape)):
            self._memcpy(CopyDir.D2D, src.numel() * src.element_size(), False, True, "aten::copy_")
        elif dst.numel():
            self._price(func, args, kwargs, out)
        self.shadows.mirror(func, args, kwargs, out)
        return out

    def _memcpy(self, direction: CopyDir, nbytes: int, pinned: bool, non_blocking: bool, op_name: str):
        """A copy (+ its synchronisation), unless it has no bytes: PyTorch's copy_ returns before
        calling the runtime for an empty tensor, so a GPU sees neither a copy nor a sync."""
        if nbytes <= 0:
            return None
        return self.rec.memcpy(direction, nbytes, pinned, non_blocking, op_name)

    def _by_all(self, t: torch.Tensor) -> bool:
        ref = self.all_results.get(id(t))
        return ref is not None and ref() is t

    def _read_scalar(self, t: torch.Tensor):
        # PyTorch copies a scalar read into a pinned staging buffer, then synchronises the stream
        self._memcpy(CopyDir.D2H, t.element_size(), True, False, "aten::_local_scalar_dense")
        self._note_standin(t)
        return self.shadows.read(t, t.dtype, self._by_all(t)).item()

    def _note_standin(self, t: torch.Tensor) -> None:
        """Say once per capture (stderr, ``capture_notes``) that a value read back is a stand-in."""
        if t.numel() and (self.shadows.storage(t) is None or self.shadows.is_standin(t)):
            self.rec.note(STANDIN_NOTE)

    def _upload_cpu_tensors(self, args, kwargs, func):
        """Non-scalar CPU tensors given to a GPU op (index tensors of ``index``/``index_put_``,
        including the ones PyTorch builds from a Python list or range index): PyTorch moves them
        with ``.to(device)``: a blocking H2D copy from (here) pageable or pinned memory."""
        rec = self.rec

        def up(a):
            if isinstance(a, torch.Tensor) and not a.is_meta and a.dim() > 0:
                self._memcpy(CopyDir.H2D, a.numel() * a.element_size(), is_pinned_memory(a), False,
                             func._schema.name)
                m = rec.counted(a.to, META)
                self.shadows.write(m, a)
                return m
            return a

        return tree_map(up, args), tree_map(up, kwargs)

    def _index_put_value(self, func, args, kwargs):
        """``t[idx] = 3`` on a CUDA tensor: the value is a 0-d CPU tensor. PyTorch's index_put_
        runs ``masked_fill_`` with the value read on the host when the only index is a boolean mask
        on the device (no copy), else moves the value with ``.to(device)``: a blocking H2D copy."""
        named = self._named_args(func, args, kwargs)
        value, indices = named.get("values"), named.get("indices") or []
        if not (isinstance(value, torch.Tensor) and not value.is_meta and value.numel() == 1):
            return args, kwargs
        given = [i for i in indices if i is not None]
        masked = (not named.get("accumulate", False) and len(given) == 1 and given[0].is_meta
                  and given[0].dtype in (torch.bool, torch.uint8))
        if not masked and value.dim() > 0:
            return args, kwargs  # uploaded as any other CPU tensor
        if not masked:
            self._memcpy(CopyDir.H2D, value.element_size(), is_pinned_memory(value), False, func._schema.name)
        m = self.rec.counted(value.to, META)
        self.shadows.write(m, value)
        names = [a.name for a in func._schema.arguments]
        pos = names.index("values")
        if pos < len(args):
            return args[:pos] + (m,) + args[pos + 1:], kwargs
        return args, dict(kwargs, values=m)

    # -- special operators ----------------------------------------------------------------
    def _profiler_op(self, func, args, kwargs):
        rec = self.rec
        name = func._schema.name
        if "record_function_enter" in name:
            handle = func(*args, **kwargs)
            record_annotation(rec, str(args[0]) if args else "")  # request markers (annotations.py)
            m = _STEP_RE.match(str(args[0]) if args else "")
            if m:
                rec.saw_explicit_step = True
                rec.step_stack.append((handle, rec.explicit_step))
                rec.explicit_step = int(m.group(1))
            return handle
        if "record_function_exit" in name:
            if rec.step_stack and args and rec.step_stack[-1][0] is args[0]:
                rec.explicit_step = rec.step_stack.pop()[1]
            return func(*args, **kwargs)
        return func(*args, **kwargs)

    def _data_dependent(self, func, args, kwargs):
        """Data-dependent output sizes: assume every element is selected (see docs/emulation.md)."""
        rec = self.rec
        x = args[0]
        sh = self.shadows
        views = [sh.view(a) if isinstance(a, torch.Tensor) else a for a in args]
        real = None
        if all(v is not None for v in views):  # small inputs: the real result (its real size)
            real = func(*views, **kwargs)
            out = torch.empty(tuple(real.shape), dtype=real.dtype, device=META)
        elif func is aten.nonzero.default:
            out = torch.empty((x.numel(), x.dim()), dtype=torch.long, device=META)
        else:  # masked_select
            shape = torch.broadcast_shapes(tuple(x.shape), tuple(args[1].shape))
            out = torch.empty((math.prod(shape),), dtype=x.dtype, device=META)
        self._price(func, args, kwargs, out)
        rec.memcpy(CopyDir.D2H, 8, False, False, func._schema.name)  # the size read back
        if real is not None:
            sh.assign(out, real, any(sh.is_standin(a) for a in args if isinstance(a, torch.Tensor)))
        else:
            sh.mirror(func, args, kwargs, out)  # stand-ins for a small result of a large input
        return out

    def _fallback(self, func, args, kwargs, exc):
        """Boolean-mask indexing on meta tensors: the mask's real ``nonzero`` when it is small
        (shadowed), else every mask element selected; plus the D2H read of the count CUDA does."""
        if func is aten.index.Tensor:
            sh = self.shadows
            idx = []
            for i in args[1]:
                if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
                    v = sh.view(i)
                    if v is None:
                        n = i.numel()
                        idx.extend(torch.empty((n,), dtype=torch.long, device=META) for _ in range(i.dim()))
                        continue
                    nz = torch.nonzero(v)
                    for d in range(i.dim()):
                        m = torch.empty((nz.shape[0],), dtype=torch.long, device=META)
                        sh.assign(m, nz[:, d], sh.is_standin(i))
                        idx.append(m)
                else:
                    idx.append(i)
            self.rec.memcpy(CopyDir.D2H, 8, False, False, "aten::nonzero")
            out = func(args[0], idx)
            self._price(func, args, kwargs, out)
            sh.mirror(func, (args[0], idx), {}, out)
            return out
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
            # a composite without a meta kernel for its whole (torch.where(mask) / nonzero(as_tuple)
            # under inference_mode): its parts, through this mode (nonzero: the rule above)
            with self:
                return func.decompose(*args, **kwargs)
        out = self._standin_sized(func, args, kwargs)
        if out is None:
            raise exc
        return out

    def _standin_sized(self, func, args, kwargs):
        """An operator that has no meta kernel, typically because its output size depends on the
        data (``unique``, ``bincount``, ``repeat_interleave`` without ``output_size``,
        torchvision's ``nms``, a custom op): its CPU kernel runs on the inputs' values (the real
        ones of small tensors, else the stand-ins a read of them returns, as stride-0 views) and
        the result's shapes and dtypes become its emulated outputs; priced as one kernel of the
        operator plus the D2H read of the size CUDA does (docs/capture.md). None when the inputs
        are too large for that (:data:`STANDIN_CPU_MAX_ELEMENTS`) or the CPU kernel fails too."""
        flat, _ = tree_flatten((args, kwargs))
        emu = [a for a in flat if is_emulated(a)]
        if sum(a.numel() for a in emu) > STANDIN_CPU_MAX_ELEMENTS:
            return None
        sh = self.shadows
        standin = False

        def to_cpu(a):
            nonlocal standin
            if is_emulated(a):
                v = sh.view(a)
                if v is None or sh.is_standin(a):
                    standin = True
                if v is None:
                    v = torch.full((), default_read(a.dtype), dtype=a.dtype).expand(tuple(a.shape))
                return v
            if isinstance(a, torch.device) and a.type == "meta":
                return torch.device("cpu")
            return a

        try:
            with _plain_cpu():
                res = func(*tree_map(to_cpu, args), **tree_map(to_cpu, kwargs))
        except Exception:  # noqa: BLE001  (no CPU kernel either: the meta error stands)
            return None

        def to_meta(r):
            if isinstance(r, torch.Tensor):
                m = torch.empty_strided(tuple(r.shape), tuple(r.stride()), dtype=r.dtype, device=META)
                sh.assign(m, r, standin)
                return m
            return r

        out = tree_map(to_meta, res)
        self.rec.now += self.rec.spec.aten_op_host_ns
        self._price(func, args, kwargs, out)
        self.rec.memcpy(CopyDir.D2H, 8, False, False, func._schema.name)  # the size read back
        return out


STANDIN_CPU_MAX_ELEMENTS = 1 << 24
"""Largest total input size (elements) for which an operator without a meta kernel is run on the
CPU over stand-in values to learn its output size (:meth:`DispatchMode._standin_sized`): 16 Mi
elements, a CPU pass of tens of milliseconds. Assumption; larger inputs keep PyTorch's error."""


class _plain_cpu:
    """CPU work outside the emulator's modes, autograd and inference mode."""

    def __enter__(self):
        from torch.utils._python_dispatch import _disable_current_modes

        self._stack = [_disable_current_modes(), torch.no_grad(), torch.inference_mode(False)]
        for c in self._stack:
            c.__enter__()

    def __exit__(self, *exc):
        for c in reversed(self._stack):
            c.__exit__(*exc)
        return False


def _aliases_input(out, flat_inputs) -> bool:
    storages = {a.untyped_storage()._cdata for a in flat_inputs if isinstance(a, torch.Tensor)}
    outs = leaves(out)
    return all(o.untyped_storage()._cdata in storages for o in outs if isinstance(o, torch.Tensor))


def _label(name: str, ins: list[TensorInfo]) -> str:
    shapes = ", ".join("x".join(str(d) for d in t.shape) or "scalar" for t in ins[:3])
    dtype = ins[0].dtype if ins else ""
    return f"{name} [{shapes}] {dtype}".rstrip()


