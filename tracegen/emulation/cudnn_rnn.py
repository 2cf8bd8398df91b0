"""cuDNN RNNs (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) as a CUDA GPU runs them.

On CUDA, ``torch.lstm``/``gru``/``rnn_tanh``/``rnn_relu`` go to ATen's ``_cudnn_rnn`` when
``at::cudnn_is_acceptable`` holds (cuDNN enabled, input float32, float16 or float64); its
backward is ``_cudnn_rnn_backward``. On the meta device the same calls take ATen's generic
path, a loop of unfused per-time-step cell operators, which is not what the GPU runs. This module
calls ``_cudnn_rnn`` itself for the dense (not packed) input forms; the kernels it stands for are
priced by :func:`tracegen.emulation.costmodel.rnn_kernels` (one GEMM over all time steps for the
input projection per layer and direction, then one recurrent GEMM and one pointwise cell kernel
per time step: cuDNN's standard algorithm). ``_cudnn_rnn_backward`` has no meta kernel in
PyTorch; :func:`_ensure_backward_meta` registers one (output shapes only) the first time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tracegen.emulation.tensors import META

if TYPE_CHECKING:
    from tracegen.emulation.timeline import Recorder

# cudnnRNNMode_t values as ATen passes them to _cudnn_rnn
MODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
GATES = {0: 1, 1: 1, 2: 4, 3: 3}
_CUDNN_DTYPES = (torch.float32, torch.float16, torch.float64)  # at::cudnn_is_acceptable
_LIB = None  # the torch.library registration of the backward meta kernel, kept alive


def call(rec: Recorder, kind: str, args, kwargs):
    """``torch.<kind>(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
    batch_first)`` through ``_cudnn_rnn``; None when CUDA would not use cuDNN here (or the input
    is packed), so the caller runs the call as it is."""
    names = ["input", "hx", "params", "has_biases", "num_layers", "dropout", "train", "bidirectional",
             "batch_first"]
    if kwargs or len(args) != len(names):
        return None  # the packed-sequence overload (data, batch_sizes, ...) or an unknown form
    d = dict(zip(names, args))
    x, hx, params = d["input"], d["hx"], list(d["params"])
    if not (isinstance(x, torch.Tensor) and x.is_meta and x.dtype in _CUDNN_DTYPES and x.dim() == 3
            and torch.backends.cudnn.enabled and params):
        return None
    mode = MODES[kind]
    if mode == 2:
        if not (isinstance(hx, (list, tuple)) and len(hx) == 2):
            return None
        h0, c0 = hx
    else:
        h0, c0 = hx, None
    if not isinstance(h0, torch.Tensor):
        return None
    hidden = params[0].shape[0] // GATES[mode]
    proj = h0.shape[-1] if mode == 2 and h0.shape[-1] != hidden else 0
    stride0 = (4 if d["has_biases"] else 2) + (1 if proj else 0)
    buf = torch.empty((sum(p.numel() for p in params),), dtype=x.dtype, device=META)
    _ensure_backward_meta()
    out = rec.counted(torch.ops.aten._cudnn_rnn.default, x, params, stride0, buf, h0, c0, mode, hidden, proj,
                      int(d["num_layers"]), bool(d["batch_first"]), float(d["dropout"]), bool(d["train"]),
                      bool(d["bidirectional"]), [], None)
    output, hy, cy = out[0], out[1], out[2]
    return (output, hy, cy) if mode == 2 else (output, hy)


def _backward_meta(input, weight, weight_stride0, weight_buf, hx, cx, output, grad_output, grad_hy, grad_cy,
                   mode, hidden_size, proj_size, num_layers, batch_first, dropout, train, bidirectional,
                   batch_sizes, dropout_state, reserve, output_mask):
    """Shapes of ``_cudnn_rnn_backward``'s outputs: gradients like input, hx, cx and each weight."""
    dx = torch.empty_like(input) if output_mask[0] else None
    dhx = torch.empty_like(hx) if output_mask[1] else None
    dcx = torch.empty_like(cx) if (output_mask[2] and cx is not None) else None
    dw = [torch.empty_like(w) for w in weight] if output_mask[3] else []
    return dx, dhx, dcx, dw


def _ensure_backward_meta() -> None:
    global _LIB
    if _LIB is not None or torch._C._dispatch_has_kernel_for_dispatch_key("aten::_cudnn_rnn_backward", "Meta"):
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_cudnn_rnn_backward", _backward_meta, "Meta")
    _LIB = lib
