"""Real values of small emulated tensors ("shadows").

An emulated GPU tensor is a ``meta`` tensor: no memory, no values. For every small emulated
*storage* (:data:`SHADOW_MAX_ELEMENTS` integer/boolean or :data:`SHADOW_MAX_FLOAT_ELEMENTS`
floating-point elements at most) the emulator keeps a CPU storage of the same size beside it
(an attribute of the meta storage object), and runs each ATen operator a second time on the CPU
views of those storages, so that the values a script reads back (``.item()``, ``.tolist()``,
``bool(t)``, stop criteria, masks, positions, token ids) are the ones the GPU would hold. A view
of a shadowed storage sees the CPU storage through its own offset, sizes and strides, so views,
in-place updates through views and dtype views need no extra bookkeeping.

Where an operator reads a storage that has no shadow (a large tensor: logits, activations,
weights), its small results get the stand-in values of :mod:`tracegen.emulation.reads` and their
storage is marked as holding stand-ins. Later operators on stand-ins compute integer and boolean
results for real from the stand-in values (so flags, counters and lengths built on them behave);
a floating-point result of stand-ins is the float stand-in (1.0, so a loss computed from stand-in
logits reads 1.0; GradScaler's ``found_inf`` flag reads 0.0, nothing found), and indices chosen
from stand-in data follow the index rule (:func:`reads.standin_index`), so that an ``argmax`` over a copy of stand-in logits does not
collapse to index 0.

Shadow work runs inside the dispatch handler: it adds nothing to the virtual timeline and launches
nothing. Random operators on shadows draw from a private generator (:data:`SHADOW_SEED`), never
from the script's CPU generator.
"""

from __future__ import annotations

import torch

from tracegen.emulation.reads import default_read, standin_index
from tracegen.emulation.tensors import leaves, map_leaves

SHADOW_MAX_ELEMENTS = 65_536
"""Shadow limit of integer and boolean tensors (token ids, masks, positions, indices, counters), in
elements: batch x length up to 64 Ki tokens (e.g. 32 x 2048); at most 512 KiB (int64) each.
Assumption: large enough for the control data of real serving and training loops, small enough
that a CPU operator on it takes microseconds."""
SHADOW_MAX_FLOAT_ELEMENTS = 4_096
"""Shadow limit of floating-point (and complex) tensors, in elements: loss and metric scalars,
per-sample values, thresholds, small score vectors. Assumption: model weights and activations of
any real model are larger, so the emulation never computes a model on the CPU (a bf16 GEMM there
costs milliseconds); a toy model small enough to fit is computed for real."""
SHADOW_MAX_BYTES = SHADOW_MAX_ELEMENTS * 8
"""The largest shadow, in bytes (a storage is judged by the dtype of the tensor that creates it;
a checkpoint storage loaded by ``torch.load`` counts as bytes)."""
SHADOW_SEED = 0
"""Seed of the private CPU generator random operators on shadows draw from."""

_SHADOW = "_fastrack_shadow"  # attribute of a meta UntypedStorage: its CPU twin
_STANDIN = "_fastrack_standin"  # attribute of a meta UntypedStorage: it holds stand-in values
_CPU = torch.device("cpu")

aten = torch.ops.aten

# operators whose integer result is an index into a dimension: (output position, "reduce" | "along")
_INDEX_OPS = {
    aten.argmax.default: (0, "reduce"), aten.argmin.default: (0, "reduce"),
    aten.max.dim: (1, "reduce"), aten.min.dim: (1, "reduce"), aten.kthvalue.default: (1, "reduce"),
    aten.mode.default: (1, "reduce"), aten.median.dim: (1, "reduce"), aten.nanmedian.dim: (1, "reduce"),
    aten.topk.default: (1, "along"), aten.sort.default: (1, "along"), aten.sort.stable: (1, "along"),
    aten.argsort.default: (0, "along"), aten.argsort.stable: (0, "along"),
    aten.multinomial.default: (0, "along"),
}


# operators whose written float flag reads "nothing wrong found" over unknown data (the healthy
# path): GradScaler's found_inf, which the float stand-in (1.0) would turn into a skipped step
_HEALTHY_FLAGS = {aten._amp_foreach_non_finite_check_and_unscale_.default}


def shadow_limit_bytes(dtype: torch.dtype) -> int:
    """The largest storage, in bytes, a tensor of ``dtype`` gets a shadow for."""
    limit = _LIMITS.get(dtype)
    if limit is None:
        elements = SHADOW_MAX_FLOAT_ELEMENTS if (dtype.is_floating_point or dtype.is_complex) else SHADOW_MAX_ELEMENTS
        limit = _LIMITS[dtype] = min(elements * dtype.itemsize, SHADOW_MAX_BYTES)
    return limit


_LIMITS: dict[torch.dtype, int] = {}


def _is_meta(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_meta


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


class Shadows:
    """The CPU twins of small emulated storages, and the operator mirror that keeps them current."""

    def __init__(self):
        self.gen = torch.Generator().manual_seed(SHADOW_SEED)
        self._writes: dict = {}

    # -- storages and views -----------------------------------------------------------------
    @staticmethod
    def storage(t: torch.Tensor, create: bool = False):
        """The CPU twin of ``t``'s storage (made, zero-filled, when ``create`` and small), or None."""
        s = t.untyped_storage()
        cs = getattr(s, _SHADOW, None)
        n = s.nbytes()
        if cs is not None and cs.nbytes() == n:
            return cs
        if n > shadow_limit_bytes(t.dtype):
            if cs is not None:
                setattr(s, _SHADOW, None)
            return None
        if cs is None:
            if not create:
                return None
            cs = torch.UntypedStorage(n)
            setattr(s, _SHADOW, cs)
            setattr(s, _STANDIN, False)
            if n:
                with _plain():
                    torch.empty(0, dtype=torch.uint8).set_(cs).zero_()
            return cs
        old = cs.nbytes()  # the meta storage was resized: keep the bytes, zeros after them
        cs.resize_(n)
        if n > old:
            with _plain():
                torch.empty(0, dtype=torch.uint8).set_(cs)[old:].zero_()
        return cs

    def view(self, t: torch.Tensor, create: bool = False):
        """A CPU tensor with ``t``'s dtype, offset, sizes and strides over the shadow, or None."""
        cs = self.storage(t, create)
        if cs is None:
            return None
        with _plain():
            return torch.empty(0, dtype=t.dtype).set_(cs, t.storage_offset(), t.size(), t.stride())

    @staticmethod
    def is_standin(t: torch.Tensor) -> bool:
        return bool(getattr(t.untyped_storage(), _STANDIN, False))

    @staticmethod
    def _mark(t: torch.Tensor, standin: bool) -> None:
        s = t.untyped_storage()
        if standin:
            setattr(s, _STANDIN, True)
        elif t.is_contiguous() and t.numel() * t.element_size() == s.nbytes():
            setattr(s, _STANDIN, False)  # fully overwritten with real values

    # -- writes from the host or reads to the host ------------------------------------------
    def write(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """``dst`` (emulated) now holds ``src`` (a CPU tensor, broadcastable): an H2D copy."""
        v = self.view(dst, create=True)
        if v is not None:
            with _plain():
                v.copy_(src)
            self._mark(dst, False)

    def read(self, t: torch.Tensor, dtype: torch.dtype | None = None, produced_by_all: bool = False):
        """The values of emulated ``t`` as a new CPU tensor (stand-ins where it has no shadow)."""
        dtype = dtype or t.dtype
        v = self.view(t)
        with _plain():
            if v is None:
                return torch.full(tuple(t.shape), default_read(dtype, produced_by_all), dtype=dtype)
            return v.to(dtype=dtype, copy=True)

    def assign(self, t: torch.Tensor, values: torch.Tensor, standin: bool) -> None:
        """Emulated ``t`` (a fresh result) holds ``values`` (CPU), computed from stand-ins or not."""
        v = self.view(t, create=True)
        if v is not None:
            with _plain():
                v.copy_(values)
            self._mark(t, standin)

    def standin(self, t: torch.Tensor, value) -> None:
        """Fill emulated ``t``'s shadow (if any) with ``value`` and mark it as stand-in values."""
        v = self.view(t)
        if v is not None:
            with _plain():
                v.copy_(value) if isinstance(value, torch.Tensor) else v.fill_(value)
            self._mark(t, True)

    # -- the operator mirror ----------------------------------------------------------------
    def mirror(self, func, args, kwargs, out) -> None:
        """After ``func`` ran on emulated tensors (giving ``out``): bring every shadow it wrote
        up to date: computed from the input shadows, or stand-ins (module docstring)."""
        if torch.Tag.inplace_view in func.tags:
            return  # metadata-only in-place ops (unsqueeze_, transpose_, ...): values unchanged
        out_flat = leaves(out)
        writes = self._written_args(func, args, kwargs)
        if not any(_is_meta(o) and o.untyped_storage().nbytes() <= shadow_limit_bytes(o.dtype) for o in out_flat) and \
                not any(self.storage(w) is not None for w in writes):
            return  # nothing small written: the common case for large models
        in_flat = [a for a in leaves((args, kwargs)) if _is_meta(a)]
        in_keys = {_storage_key(a) for a in in_flat}
        fresh = [(i, o) for i, o in enumerate(out_flat)
                 if _is_meta(o) and _storage_key(o) not in in_keys and self.storage(o, create=True) is not None]
        writes = [w for w in writes if self.storage(w) is not None]
        if not fresh and not writes:
            return
        known = all(self.storage(a) is not None for a in in_flat)
        standin_in = any(self.is_standin(a) for a in in_flat)
        rule = _INDEX_OPS.get(func)
        if known and not (standin_in and rule is not None):
            try:
                self._compute(func, args, kwargs, out_flat, fresh, writes, standin_in)
                if standin_in:  # a float computed from stand-ins is the float stand-in (1.0)
                    for t in [o for _, o in fresh] + writes:
                        if t.is_floating_point() or t.is_complex():
                            self.standin(t, 0.0 if func in _HEALTHY_FLAGS else default_read(t.dtype))
                return
            except (RuntimeError, NotImplementedError, IndexError, ValueError, TypeError):
                pass  # no CPU kernel, or stand-in values out of range: stand-ins below
        self._standins(func, args, kwargs, fresh, writes, rule)

    def _written_args(self, func, args, kwargs) -> list[torch.Tensor]:
        spots = self._writes.get(func)
        if spots is None:
            spots = [(i, a.name, a.kwarg_only) for i, a in enumerate(func._schema.arguments)
                     if a.alias_info is not None and a.alias_info.is_write]
            self._writes[func] = spots
        found = []
        for i, name, kwarg_only in spots:
            v = kwargs.get(name) if (kwarg_only or i >= len(args)) else args[i]
            found.extend(t for t in (v if isinstance(v, (list, tuple)) else [v]) if _is_meta(t))
        return found

    def _compute(self, func, args, kwargs, out_flat, fresh, writes, standin_in):
        passed = {}

        def to_cpu(a):
            if _is_meta(a):
                v = self.view(a)
                passed.setdefault(id(a), (a, v))
                return v
            if isinstance(a, torch.device) and a.type == "meta":
                return _CPU
            return a

        sargs, skw = map_leaves(to_cpu, args), map_leaves(to_cpu, kwargs)
        seeded = torch.Tag.nondeterministic_seeded in func.tags
        if seeded and any(a.name == "generator" for a in func._schema.arguments):
            skw = dict(skw, generator=self.gen)
            seeded = False
        with _plain():
            if seeded:  # a random op without a generator argument: keep the script's CPU RNG intact
                state = torch.default_generator.get_state()
                torch.default_generator.manual_seed(int(torch.randint(0, 2**62, (), generator=self.gen)))
                try:
                    res = func(*sargs, **skw)
                finally:
                    torch.default_generator.set_state(state)
            else:
                res = func(*sargs, **skw)
            res_flat = leaves(res)
            staged = []
            for i, o in fresh:
                r = res_flat[i] if i < len(res_flat) else None
                if not isinstance(r, torch.Tensor) or tuple(r.shape) != tuple(o.shape):
                    raise RuntimeError("shadow result does not match")
                staged.append((o, r))
            for w in writes:  # in-place / out= ops normally wrote into the views they were given
                a, v = passed.get(id(w), (w, None))
                if v is not None and (v.untyped_storage().data_ptr() != self.storage(w).data_ptr()
                                      or tuple(v.shape) != tuple(w.shape)):
                    staged.append((w, v))
            for o, r in staged:
                self.view(o).copy_(r)
        for _, o in fresh:
            self._mark(o, standin_in)
        for w in writes:
            self._mark(w, standin_in)

    def _standins(self, func, args, kwargs, fresh, writes, rule):
        produced_by_all = func.overloadpacket is aten.all
        idx_pos = rule[0] if rule else None
        for i, o in fresh:
            if i == idx_pos:
                named = dict(zip((a.name for a in func._schema.arguments), args))
                named.update(kwargs)
                self.standin(o, _index_values(func, rule[1], args, named, o))
            else:
                self.standin(o, default_read(o.dtype, produced_by_all))
        for w in writes:
            self.standin(w, 0.0 if func in _HEALTHY_FLAGS else default_read(w.dtype, produced_by_all))


def _index_values(func, kind, args, named, out: torch.Tensor) -> torch.Tensor:
    """Stand-in indices (reads.standin_index) for the index output of ``func``, shaped like ``out``."""
    src = args[0]
    dim = named.get("dim")
    if func is aten.multinomial.default:
        dim = -1
    if kind == "reduce":
        n = src.numel() if dim is None else (src.size(dim) if src.dim() else 1)
        return torch.full(tuple(out.shape), standin_index(n, 0), dtype=out.dtype)
    dim = -1 if dim is None else dim
    n = src.size(dim) if src.dim() else 1
    if out.dim() == 0:
        return torch.full((), standin_index(n, 0), dtype=out.dtype)
    d = dim % out.dim()
    k = out.size(d)
    col = torch.tensor([standin_index(n, j) for j in range(k)], dtype=out.dtype)
    shape = [1] * out.dim()
    shape[d] = k
    return col.view(shape).expand(tuple(out.shape))


class _plain:
    """CPU work on shadows: no autograd graph, outside inference mode (shadow views are made fresh
    each time, so they never become inference tensors mutated later). What ``torch.no_grad()``
    and ``torch.inference_mode(False)`` do, in that order, without their Python wrappers."""

    __slots__ = ("_grad", "_inference")

    def __enter__(self):
        self._grad = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        self._inference = torch._C._InferenceMode(False)
        self._inference.__enter__()

    def __exit__(self, *exc):
        self._inference.__exit__(*exc)
        torch._C._set_grad_enabled(self._grad)
        return False
