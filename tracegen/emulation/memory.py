"""The memory-statistics API of ``torch.cuda`` on the emulated GPU, which allocates nothing:
``memory_stats()`` has the caching allocator's real key set with documented values, and
``set_per_process_memory_fraction`` is checked as PyTorch checks it and remembered
(``docs/emulation.md``)."""

from __future__ import annotations

from typing import Any

STAT_ARRAYS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
               "active_bytes", "inactive_split_bytes", "requested_bytes")
"""Statistics kept per pool (``all``, ``small_pool``, ``large_pool``), each with ``current``,
``peak``, ``allocated``, ``freed`` (PyTorch's ``THCPModule_memoryStats``)."""
POOLS = ("all", "small_pool", "large_pool")
STAT_FIELDS = ("current", "peak", "allocated", "freed")
SINGLE_STATS = ("oversize_allocations", "oversize_segments")
COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free")
MAX_SPLIT_SIZE = -1
"""``max_split_size`` as PyTorch reports it when ``PYTORCH_CUDA_ALLOC_CONF`` sets none (SIZE_MAX
read as a signed 64-bit integer)."""


def memory_stats_nested() -> dict[str, Any]:
    """``torch.cuda.memory_stats_as_nested_dict()`` of the emulated GPU: every count and byte
    figure 0 (nothing is allocated), ``max_split_size`` -1."""
    out: dict[str, Any] = {k: 0 for k in COUNTERS}
    out["max_split_size"] = MAX_SPLIT_SIZE
    for name in STAT_ARRAYS:
        out[name] = {pool: {f: 0 for f in STAT_FIELDS} for pool in POOLS}
    for name in SINGLE_STATS:
        out[name] = {f: 0 for f in STAT_FIELDS}
    return out


def memory_stats() -> dict[str, Any]:
    """``torch.cuda.memory_stats()``: the nested statistics flattened to dotted keys, sorted."""
    flat: list[tuple[str, Any]] = []

    def walk(prefix: str, obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            flat.append((prefix, obj))

    walk("", memory_stats_nested())
    return dict(sorted(flat))


class MemoryFraction:
    """``set_per_process_memory_fraction`` / ``get_per_process_memory_fraction``: the fraction is
    validated as PyTorch does and remembered; it limits nothing (no allocation is made)."""

    def __init__(self):
        self.fraction = 1.0

    def set(self, fraction, device=None) -> None:
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if fraction < 0 or fraction > 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        self.fraction = fraction

    def get(self, device=None) -> float:
        return self.fraction
