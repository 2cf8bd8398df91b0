"""Output shapes of operators on emulated tensors, remembered per input signature.

Many ATen operators compute the shapes, strides and dtypes of their results on the ``meta``
device in Python (``torch._refs``/``torch._prims`` decompositions and ``torch._meta_registrations``:
type promotion, broadcasting, stride propagation), at tens to hundreds of microseconds a call.
A training or decoding loop calls the same operator on the same shapes over and over, so
:class:`MetaOutputs` keeps, for each operator and **signature** of its arguments, the layout of
the results it returned, and the next call with that signature gets fresh ``meta`` tensors of
that layout (``empty_strided``) instead of running the meta kernel again.

The signature is everything a meta kernel reads: the operator; each tensor's dtype, sizes,
strides, storage offset, ``requires_grad`` and conjugate/negative bits; each other argument's
type and value (``1``, ``1.0`` and ``True`` differ); and the default dtype. A call is looked up
only when its arguments are all ``meta`` tensors or plain values (int, float, bool, str, None,
dtype, device, layout, memory format, and lists/tuples of those); anything else (a CPU tensor, a
generator, a symbolic size) runs the meta kernel. Only functional operators are remembered (no
argument written, no result aliasing an argument: the schema says so), and only results that a
fresh ``empty_strided`` reproduces exactly: plain ``meta`` tensors with storage offset 0, a storage
of exactly the size their sizes and strides need, none sharing a storage with another result or
an argument, no autograd history; tuples and lists of those, ``None`` and plain numbers. A call
that raises is not remembered (the next one raises again). Results are the same ``meta`` tensors
the kernel would have returned, so what is recorded does not change.
"""

from __future__ import annotations

import torch

from tracegen.emulation.tensors import leaves

_EMPTY_STRIDED = torch.empty_strided  # ATen's empty_strided (no torch-function handler runs: see call)
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
_META = torch.device("meta")
_TENSORS = (torch.Tensor, torch.nn.Parameter)
_VALUES = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout,
                     torch.memory_format})
_CONSTS = (int, float, bool, type(None))
_UNCACHEABLE = object()  # a signature whose results cannot be rebuilt (the kernel runs each time)
_KIND: dict = {}  # operator -> _kind(operator)
_FOREACH: dict = {}  # operator -> a _foreach_ operator
_RETURNS_SELF = ("r", 0)  # an in-place call: the result is the first argument
_RETURNS_NONE = ("c", None)


class _NoKey(Exception):
    pass


def _kind(func):
    """``"f"``: a functional operator (no argument written, no result aliasing an argument);
    ``"i"``: an in-place operator that writes its first argument (``self``, a tensor or a tensor
    list) only and returns it or nothing, without changing its sizes or strides; None: neither."""
    k = _KIND.get(func, False)
    if k is False:
        s = func._schema
        tags = func.tags
        k = None
        if not func.is_view and torch.Tag.dynamic_output_shape not in tags and \
                torch.Tag.data_dependent_output not in tags and torch.Tag.inplace_view not in tags:
            written = [i for i, a in enumerate(s.arguments) if a.alias_info is not None]
            if not written and s.returns and all(r.alias_info is None for r in s.returns):
                k = "f"
            elif written == [0] and s.arguments[0].alias_info.is_write and not s.arguments[0].kwarg_only and \
                    s.name.endswith("_") and len(s.returns) <= 1 and \
                    all(r.alias_info is not None and r.alias_info.is_write for r in s.returns):
                k = "i"
        _KIND[func] = k
        _FOREACH[func] = s.name.startswith("aten::_foreach_")
    return k


def _sig(v):
    tv = type(v)
    if tv in _TENSORS:
        if not v.is_meta:
            raise _NoKey
        return (v.dtype, v.shape, v.stride(), v.storage_offset(), v.requires_grad, v.is_conj(), v.is_neg())
    if tv in _VALUES:
        return (tv, v)
    if tv is list or tv is tuple:
        return (tv, tuple([_sig(x) for x in v]))
    raise _NoKey


def _sig_typed(v):
    """:func:`_sig` with numbers by type only (``_foreach_`` operators: their meta kernels read
    the count and types of their scalars, never the values, which change every optimizer step)."""
    tv = type(v)
    if tv is float or tv is int or tv is bool:
        return tv
    if tv is list or tv is tuple:
        return (tv, tuple([_sig_typed(x) for x in v]))
    return _sig(v)


def _storage_nbytes(shape, stride, itemsize: int) -> int:
    if 0 in shape:
        return 0
    return itemsize * (1 + sum((n - 1) * s for n, s in zip(shape, stride)))


def _layout(out, seen: set):
    """How to rebuild ``out`` (nested tuples of ``("t", sizes, strides, dtype)``, ``("c", value)``,
    ``("s", type, items)``), or None when a fresh ``empty_strided`` would not reproduce it."""
    to = type(out)
    if to is torch.Tensor:
        if not out.is_meta or out.layout is not torch.strided or out._base is not None or out.requires_grad \
                or out.storage_offset() != 0 or out.is_conj() or out.is_neg():
            return None
        st = out.untyped_storage()
        key = st._cdata
        shape, stride = tuple(out.shape), out.stride()
        if key in seen or st.nbytes() != _storage_nbytes(shape, stride, out.element_size()):
            return None
        seen.add(key)
        return ("t", shape, stride, out.dtype)
    if to in _CONSTS:
        return ("c", out)
    if to is tuple or to is list:
        items = []
        for o in out:
            d = _layout(o, seen)
            if d is None:
                return None
            items.append(d)
        return ("s", to, tuple(items))
    return None


def _rebuild(d):
    k = d[0]
    if k == "t":
        return _EMPTY_STRIDED(d[1], d[2], dtype=d[3], device=_META)
    if k == "c":
        return d[1]
    return d[1](_rebuild(x) for x in d[2])


class MetaOutputs:
    """The remembered result layouts of one capture (module docstring)."""

    def __init__(self):
        self._known: dict = {}
        self.hits = 0
        self.misses = 0

    def call(self, func, args, kwargs):
        """``func(*args, **kwargs)``, an operator on emulated tensors: ``(result, signature)``
        (signature None when the call has none: it was not looked up)."""
        kind = _kind(func)
        if kind is None or (kind == "i" and not args):
            return func(*args, **kwargs), None
        sig = _sig_typed if _FOREACH.get(func) else _sig
        try:
            key = (func, torch.get_default_dtype(), sig(args), sig(tuple(kwargs.items())) if kwargs else None)
        except _NoKey:
            return func(*args, **kwargs), None
        d = self._known.get(key)
        if d is not None:
            if d is _UNCACHEABLE:
                return func(*args, **kwargs), key
            self.hits += 1
            if d is _RETURNS_SELF:
                return args[0], key
            with _NO_TORCH_FUNCTION():
                return _rebuild(d), key
        out = func(*args, **kwargs)
        self.misses += 1
        if kind == "i":  # the kernel only checked the arguments: the same call returns the same
            same = sig(args[0]) == key[2][1][0]
            d = _RETURNS_SELF if same and out is args[0] else _RETURNS_NONE if same and out is None else None
        else:
            seen = {a.untyped_storage()._cdata for a in leaves((args, kwargs)) if type(a) in _TENSORS}
            d = _layout(out, seen)
        self._known[key] = _UNCACHEABLE if d is None else d
        return out, key
