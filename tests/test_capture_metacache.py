"""Remembered result layouts of operators on emulated tensors (tracegen.emulation.metacache): a
repeated call returns fresh meta tensors with exactly the layout the meta kernel returns, in-place
calls return their first argument, and nothing that would change the result is left out of the
signature."""

import pytest
import torch

from tracegen.emulation.metacache import MetaOutputs as _MetaOutputs

aten = torch.ops.aten
M = torch.device("meta")


class MetaOutputs(_MetaOutputs):
    def call(self, func, args, kwargs):
        return super().call(func, args, kwargs)[0]


def _layout(t):
    if isinstance(t, (tuple, list)):
        return type(t), [_layout(x) for x in t]
    if not isinstance(t, torch.Tensor):
        return t
    return (tuple(t.shape), t.stride(), t.dtype, t.storage_offset(), t.untyped_storage().nbytes(), t.is_meta,
            t.requires_grad, t._base is None)


CALLS = [
    (aten.add.Tensor, lambda: (torch.empty(4, 8, device=M), torch.empty(8, device=M)), {}),
    (aten.mul.Tensor, lambda: (torch.empty(4, 8, device=M).t(), 2), {}),
    (aten.mm.default, lambda: (torch.empty(16, 8, device=M, dtype=torch.bfloat16),
                               torch.empty(8, 4, device=M, dtype=torch.bfloat16)), {}),
    (aten.sum.dim_IntList, lambda: (torch.empty(3, 5, 7, device=M), [1], True), {}),
    (aten.native_layer_norm.default, lambda: (torch.empty(2, 6, 8, device=M), [8], torch.empty(8, device=M),
                                              torch.empty(8, device=M), 1e-5), {}),
    (aten._foreach_add.Scalar, lambda: ([torch.empty(3, device=M), torch.empty(2, 2, device=M)], 1.5), {}),
    (aten.clone.default, lambda: (torch.empty(4, 6, device=M)[:, ::2],), {"memory_format": torch.preserve_format}),
]


@pytest.mark.parametrize("func,make,kwargs", CALLS, ids=[str(c[0]) for c in CALLS])
def test_a_repeated_call_has_the_kernels_layout(func, make, kwargs):
    cache = MetaOutputs()
    direct = func(*make(), **kwargs)
    first = cache.call(func, make(), kwargs)
    again = cache.call(func, make(), kwargs)
    assert cache.misses == 1 and cache.hits == 1
    assert _layout(first) == _layout(direct) == _layout(again)
    a, b = (again, first) if isinstance(again, torch.Tensor) else (again[0], first[0])
    assert a.untyped_storage()._cdata != b.untyped_storage()._cdata  # a fresh result


def test_scalar_types_are_part_of_the_signature():
    cache = MetaOutputs()
    x = torch.empty(3, dtype=torch.int64, device=M)
    assert cache.call(aten.add.Tensor, (x, 1), {}).dtype == torch.int64
    assert cache.call(aten.add.Tensor, (x, 1.0), {}).dtype == torch.float32
    assert cache.call(aten.add.Tensor, (torch.empty(3, dtype=torch.bool, device=M), True), {}).dtype == torch.bool
    assert cache.hits == 0 and cache.misses == 3


def test_the_default_dtype_is_part_of_the_signature():
    cache = MetaOutputs()
    x = torch.empty(3, dtype=torch.int64, device=M)
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert cache.call(aten.add.Tensor, (x, 0.5), {}).dtype == torch.float64
    finally:
        torch.set_default_dtype(old)
    assert cache.call(aten.add.Tensor, (x, 0.5), {}).dtype == old


def test_in_place_calls_return_their_argument_and_foreach_scalars_count_by_type():
    cache = MetaOutputs()
    x = torch.empty(4, device=M)
    assert cache.call(aten.add_.Tensor, (x, torch.empty(4, device=M)), {}) is x
    y = torch.empty(4, device=M)
    assert cache.call(aten.add_.Tensor, (y, torch.empty(4, device=M)), {}) is y
    ts = [torch.empty(3, device=M), torch.empty(5, device=M)]
    assert cache.call(aten._foreach_mul_.ScalarList, (ts, [0.5, 0.25]), {}) is None
    assert cache.call(aten._foreach_mul_.ScalarList, (ts, [0.1, 0.2]), {}) is None  # new values, same signature
    assert cache.hits == 2 and cache.misses == 2


def test_a_failing_call_fails_every_time_and_views_are_not_remembered():
    cache = MetaOutputs()
    a, b = torch.empty(3, device=M), torch.empty(4, device=M)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            cache.call(aten.add.Tensor, (a, b), {})
    x = torch.empty(2, 6, device=M)
    v = cache.call(aten.view.default, (x, [3, 4]), {})
    assert v.untyped_storage()._cdata == x.untyped_storage()._cdata
    assert cache.hits == 0 and cache.misses == 0


def test_cpu_tensors_and_generators_run_the_kernel_each_time():
    cache = MetaOutputs()
    x = torch.empty(3, device=M)
    cache.call(aten.add.Tensor, (x, torch.tensor(2.0)), {})
    cache.call(aten.add.Tensor, (x, torch.tensor(2.0)), {})
    cache.call(aten.normal.float_Tensor, (0.0, torch.empty(2, device=M)), {"generator": torch.Generator()})
    assert cache.hits == 0 and cache.misses == 0


def test_the_signature_comes_back_with_the_result():
    cache = _MetaOutputs()
    x = torch.empty(2, 6, device=M)
    out, key = cache.call(aten.neg.default, (x,), {})
    assert key is not None and cache.call(aten.neg.default, (torch.empty(2, 6, device=M),), {})[1] == key
    assert cache.call(aten.neg.default, (torch.empty(2, 7, device=M),), {})[1] != key
    assert cache.call(aten.view.default, (x, [12]), {})[1] is None
