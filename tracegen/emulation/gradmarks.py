"""Gradient-ready markers (docs/conventions.md rule 7): one zero-length ``cpu`` op named
``AccumulateGrad`` per parameter per backward, on the host thread, at the moment the autograd
engine has produced that parameter's gradient, with ``bytes`` = the gradient's size.

``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped for the capture: before
backward runs, the graph is walked from its roots and a post-hook is put on every
``AccumulateGrad`` node (the hook PyTorch DDP uses to launch its bucket all-reduces); the hooks
are removed when backward returns. ``torch.autograd.grad`` accumulates nothing and writes none.
``replay --data-parallel`` reads the markers (docs/multi-gpu.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from fastrack_core.schema import OpKind

if TYPE_CHECKING:
    from tracegen.emulation.timeline import Recorder

MARKER = "AccumulateGrad"


def _accumulators(roots) -> list:
    """The AccumulateGrad nodes reachable from the roots' grad_fn (each once)."""
    seen: set[int] = set()
    out = []
    stack = [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if hasattr(fn, "variable"):  # AccumulateGrad: the leaf whose .grad it fills
            out.append(fn)
            continue
        stack.extend(nf for nf, _ in fn.next_functions if nf is not None)
    return out


def install_grad_markers(rec: "Recorder") -> Callable[[], None]:
    """Wrap ``torch.autograd.backward`` for the capture; returns the function that unwraps it."""
    original = torch.autograd.backward

    def marker(nbytes: int):
        def hook(_grad_inputs, _grad_outputs):
            rec.enter()
            try:
                rec.ops[rec.host(OpKind.CPU, MARKER, 0)].bytes = nbytes
            finally:
                rec.leave()
        return hook

    def backward(tensors, *args, **kwargs):
        roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        handles = []
        for acc in _accumulators(roots):
            var = acc.variable
            handles.append(acc.register_hook(marker(var.numel() * var.element_size())))
        try:
            return original(tensors, *args, **kwargs)
        finally:
            for h in handles:
                h.remove()

    torch.autograd.backward = backward
    return lambda: setattr(torch.autograd, "backward", original)
