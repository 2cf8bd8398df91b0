"""The ``TorchFunctionMode`` layer: ``device="cuda"`` arguments become ``meta``; emulated tensors
report ``device == cuda:0`` and ``is_cuda``; ``pin_memory=True`` factories; ``autocast("cuda")``
(ATen's autocast does not act on meta tensors); the kernel choices CUDA makes where the meta
device would take another path: the SDPA backend (grouped-query attention included), the fused
dropout kernel, cuDNN RNNs, and ``nn.MultiheadAttention``'s inner calls (docs/emulation.md, "Kernels
CUDA chooses")."""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING

import torch
from torch.overrides import TorchFunctionMode

from tracegen.emulation import cudnn_rnn, printing
from tracegen.emulation.indexing import host_side_index
from tracegen.emulation.tensors import META, is_cuda_device, map_device, map_leaves, mark_pinned

if TYPE_CHECKING:
    from tracegen.emulation.timeline import Recorder

aten = torch.ops.aten

_DEVICE_GET = torch._C.TensorBase.device.__get__
_IS_CUDA_GET = torch._C.TensorBase.is_cuda.__get__
_DATA_FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray}
_CUDA_DEV = torch.device("cuda", 0)

# autocast("cuda") lists (subset of ATen's autocast_mode.cpp, at the functional level)
_AUTOCAST_LOW = {
    torch.nn.functional.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__,
    torch.mm, torch.Tensor.mm, torch.bmm, torch.Tensor.bmm, torch.addmm, torch.Tensor.addmm, torch.baddbmm,
    torch.Tensor.baddbmm, torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d,
    torch.nn.functional.scaled_dot_product_attention, torch.einsum,
}
_AUTOCAST_FP32 = {
    torch.nn.functional.softmax, torch.softmax, torch.Tensor.softmax, torch.nn.functional.log_softmax,
    torch.log_softmax, torch.Tensor.log_softmax, torch.nn.functional.cross_entropy, torch.nn.functional.nll_loss,
    torch.nn.functional.layer_norm, torch.layer_norm, torch.nn.functional.group_norm, torch.nn.functional.mse_loss,
    torch.nn.functional.binary_cross_entropy_with_logits, torch.exp, torch.Tensor.exp, torch.log, torch.Tensor.log,
    torch.pow, torch.Tensor.pow, torch.rsqrt, torch.Tensor.rsqrt, torch.sum, torch.Tensor.sum, torch.cumsum,
    torch.Tensor.cumsum, torch.nn.functional.softplus, torch.nn.functional.l1_loss, torch.logsumexp,
    torch.nn.functional.kl_div, torch.nn.functional.smooth_l1_loss, torch.norm, torch.Tensor.norm,
}


_SDPA = torch.nn.functional.scaled_dot_product_attention
_SDP_FLASH, _SDP_EFFICIENT, _SDP_MATH = 1, 2, 0
# Python-level composites whose inner calls (linear, SDPA, dropout) must meet this mode, as they
# meet autocast and the SDPA dispatcher on CUDA (the mode would otherwise be off inside them)
_REDISPATCH = {torch.nn.functional.multi_head_attention_forward}
_F_DROPOUT = torch.nn.functional.dropout
_RNNS = {torch.lstm: "lstm", torch.gru: "gru", torch.rnn_tanh: "rnn_tanh", torch.rnn_relu: "rnn_relu"}


def _sdp_choice(q, k, mask, enable_gqa: bool = False) -> int:
    """The SDPA backend PyTorch picks on an H100 (flash for fp16/bf16 without a mask, else
    memory-efficient), honouring torch.backends.cuda.*_sdp_enabled(). Grouped-query attention
    (``enable_gqa``, fewer key/value heads dividing the query heads) is admitted by the flash
    constraints of ATen's sdp_utils.cpp (``backend_supports_grouped_query_attention``); the
    memory-efficient one is taken with equal head counts only."""
    b = torch.backends.cuda
    half = q.dtype in (torch.float16, torch.bfloat16)
    hq, hk = q.shape[1], k.shape[1]
    same_heads = hq == hk
    gqa_ok = same_heads or (enable_gqa and hk > 0 and hq % hk == 0)
    hd = q.shape[-1]
    if b.flash_sdp_enabled() and half and mask is None and hd % 8 == 0 and hd <= 256 and gqa_ok:
        return _SDP_FLASH
    if b.mem_efficient_sdp_enabled() and same_heads and hd % 8 == 0:
        return _SDP_EFFICIENT
    return _SDP_MATH


class FunctionMode(TorchFunctionMode):
    def __init__(self, rec: Recorder):
        super().__init__()
        self.rec = rec
        self.cast_cache: dict[int, tuple[weakref.ref, torch.Tensor]] = {}

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        rec = self.rec
        if func is _DEVICE_GET or func == _DEVICE_GET:
            t = args[0]
            return _CUDA_DEV if t.is_meta else func(*args)
        if func is _IS_CUDA_GET or func == _IS_CUDA_GET:
            return True if args[0].is_meta else func(*args)
        rec.enter()
        try:
            return self._handle(func, types_, args, kwargs)
        finally:
            rec.leave()

    def _handle(self, func, types_, args, kwargs):
        rec = self.rec
        if func is torch.Tensor.record_stream:
            return None
        if printing.handles(func) and isinstance(args[0], torch.Tensor) and args[0].is_meta:
            return printing.call(rec, func, args, kwargs)  # f"{loss:.4f}", print(t): a read, as on a GPU
        args = host_side_index(func, args)  # list/range indices, `t[i] = 3`: host data as on CUDA
        if func is torch.Tensor.cuda:
            nb = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            return rec.counted(args[0].to, META, non_blocking=nb)
        if func is torch.Tensor.to:
            args = tuple(map_device(a) if i > 0 else a for i, a in enumerate(args))
            if len(args) > 1 and isinstance(args[1], int) and not isinstance(args[1], bool):
                args = (args[0], META) + args[2:]
        pin = kwargs.get("pin_memory")
        if "device" in kwargs:
            dev = kwargs["device"]
            if isinstance(dev, int) and not isinstance(dev, bool):
                dev = "cuda"
            if is_cuda_device(dev):
                if func in _DATA_FACTORIES:
                    kw = dict(kwargs)
                    kw.pop("device")
                    cpu = rec.counted(func, *args, **kw)
                    return rec.counted(cpu.to, META)
                kwargs = dict(kwargs, device=META)
        if pin:
            kwargs = dict(kwargs)
            kwargs.pop("pin_memory")
            return mark_pinned(rec.counted(func, *args, **kwargs))
        if (func in _AUTOCAST_LOW or func in _AUTOCAST_FP32) and torch.is_autocast_enabled("cuda"):
            args, kwargs = self._autocast(func, args, kwargs)
            with _autocast_off():
                if func is _SDPA:
                    return self._sdpa(args, kwargs)
                return rec.counted(func, *args, **kwargs)
        if func is _SDPA:
            return self._sdpa(args, kwargs)
        if func in _REDISPATCH:
            with self:  # the composite's own calls come back through this mode
                return rec.counted(torch.overrides.redispatch_function, func, types_, args, kwargs)
        if func is _F_DROPOUT or func is torch.dropout:
            return self._dropout(func, args, kwargs)
        if func in _RNNS:
            out = cudnn_rnn.call(self.rec, _RNNS[func], args, kwargs)
            if out is not None:
                return out
        return rec.counted(func, *args, **kwargs)

    def _dropout(self, func, args, kwargs):
        """Out-of-place dropout in training on CUDA is ATen's fused ``native_dropout`` (one kernel
        writing the output and the mask; its backward is one ``native_dropout_backward`` kernel),
        taken when 0 < p < 1 and the input is not empty (``is_fused_kernel_acceptable`` in
        Dropout.cpp). The meta device takes the unfused bernoulli_/div_/mul path instead. In-place
        dropout is unfused on CUDA too and is left as is."""
        names = ["input", "p", "training", "inplace"] if func is _F_DROPOUT else ["input", "p", "train"]
        d = dict(zip(names, args))
        d.update(kwargs)
        x = d.get("input")
        p = d.get("p", 0.5)
        train = d.get("training", d.get("train", True))
        if (isinstance(x, torch.Tensor) and x.is_meta and train and not d.get("inplace", False)
                and isinstance(p, (int, float)) and 0.0 < p < 1.0 and x.numel() > 0):
            return self.rec.counted(torch.native_dropout, x, float(p), True)[0]
        return self.rec.counted(func, *args, **kwargs)

    def _sdpa(self, args, kwargs):
        """scaled_dot_product_attention on emulated tensors: pick the fused kernel CUDA would pick
        (the meta device always takes the math path) and call it directly."""
        names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
        d = dict(zip(names, args))
        d.update(kwargs)
        q, k, v = d["query"], d["key"], d["value"]
        mask = d.get("attn_mask")
        if not (isinstance(q, torch.Tensor) and q.is_meta and q.dim() == 4 and k.dim() == 4):
            return self.rec.counted(_SDPA, *args, **kwargs)
        choice = _sdp_choice(q, k, mask, bool(d.get("enable_gqa") or False))
        dropout, causal, scale = float(d.get("dropout_p") or 0.0), bool(d.get("is_causal") or False), d.get("scale")
        if choice == _SDP_FLASH:
            out = self.rec.counted(aten._scaled_dot_product_flash_attention, q, k, v, dropout, causal, False,
                                   scale=scale)
            return out[0]
        if choice == _SDP_EFFICIENT:
            if mask is not None and mask.dtype == torch.bool:
                mask = torch.zeros(mask.shape, dtype=q.dtype, device=META)
            need_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
            out = self.rec.counted(aten._scaled_dot_product_efficient_attention, q, k, v, mask, need_lse, dropout,
                                   causal, scale=scale)
            return out[0]
        return self.rec.counted(_SDPA, *args, **kwargs)

    def _autocast(self, func, args, kwargs):
        low = func in _AUTOCAST_LOW
        target = torch.get_autocast_dtype("cuda") if low else torch.float32

        def cast(t):
            if not (isinstance(t, torch.Tensor) and t.is_meta and t.is_floating_point()):
                return t
            if t.dtype == target or t.dtype == torch.float64:
                return t
            if low and t.is_leaf and t.requires_grad:  # autocast caches casts of weights
                hit = self.cast_cache.get(id(t))
                if hit is not None and hit[0]() is t:
                    return hit[1]
                out = t.to(target)
                self.cast_cache[id(t)] = (weakref.ref(t), out)
                return out
            return t.to(target)

        if func is torch.nn.functional.cross_entropy or func is torch.nn.functional.nll_loss:
            return (cast(args[0]),) + tuple(args[1:]), kwargs
        return map_leaves(cast, args), map_leaves(cast, kwargs)


@contextlib.contextmanager
def _autocast_off():
    prev = torch.is_autocast_enabled("cuda")
    torch.set_autocast_enabled("cuda", False)
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", prev)


