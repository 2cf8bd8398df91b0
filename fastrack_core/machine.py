"""The machine description: one preset TOML names the whole GPU server, read by both halves.

A preset file (shipped by a hardware-model plug-in, e.g. ``models/h100/presets/*.toml``) holds
every hardware fact once. The replay's hardware model reads its tables through its strict loader
(``replay.config``); the emulated capture's cost model (``tracegen.emulation.costmodel``) reads
the **compute half** through this module: the tables in :data:`COMPUTE_TABLES` plus the facts of
the replay's tables that both halves use (:data:`SHARED_FACTS`: the SM count, the PCIe copy rates
and latency, the pageable staging rate). docs/machine.md describes the format.

Presets are found through the entry-point group :data:`GROUP` (``fastrack.presets``): each entry
``name = "package:folder"`` names an installed package and the folder of ``*.toml`` presets
inside it. The folder is located with ``importlib.util.find_spec``, so no code of the plug-in
runs (the capture never imports a model package). This module imports nothing of ours but the
floor's errors, and returns plain data (dicts of numbers and strings).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastrack_core.errors import ConfigError, shown

GROUP = "fastrack.presets"
SOURCE_SUFFIX = "_source"
RANGE_SUFFIX = "_range"  # key_range = [low, high], with key_range_source: as the replay's loader
RANGE_SOURCE_SUFFIX = RANGE_SUFFIX + SOURCE_SUFFIX
PRESET_TABLE = "preset"
_PRESET_KEYS = {"name": str, "description": str, "extends": str, "model": str}


@dataclass(frozen=True)
class Fact:
    """One key of the compute half: its type, valid range and one line of meaning (units are in
    the key's name: ``_ns``, ``_gb_s``, ``_bytes``, ``_tflops``, ``_mhz``, ``_ratio``)."""

    type: type
    doc: str
    lo: float | None = None
    hi: float | None = None
    exclusive_lo: bool = False


def _f(doc, lo=None, hi=None, exclusive_lo=False):
    return Fact(float, doc, lo, hi, exclusive_lo)


def _i(doc, lo=None, hi=None):
    return Fact(int, doc, lo, hi)


# Tables the machine description owns (the replay's loader leaves them to this module).
COMPUTE_TABLES: dict[str, dict[str, Fact]] = {
    "compute": {
        "gpu_name": Fact(str, "the name torch.cuda.get_device_name() reports"),
        "memory_bytes": _i("device memory the emulated GPU reports (get_device_properties, mem_get_info)", 1, 2**50),
        "hbm_gb_s": _f("peak device-memory (HBM) bandwidth, GB/s", 0, 1e6, True),
        "boost_clock_mhz": _i("SM boost clock, MHz (informational: the peaks below include it)", 1, 10**5),
        "bf16_dense_tflops": _f("dense BF16/FP16 tensor-core peak, TFLOP/s", 0, 1e6, True),
        "fp8_dense_tflops": _f("dense FP8 tensor-core peak, TFLOP/s", 0, 1e6, True),
        "tf32_dense_tflops": _f("dense TF32 tensor-core peak, TFLOP/s", 0, 1e6, True),
        "fp32_tflops": _f("FP32 peak without tensor cores, TFLOP/s", 0, 1e6, True),
        "fp64_tflops": _f("FP64 peak (tensor core where the GPU has one), TFLOP/s", 0, 1e6, True),
    },
    "runtime": {
        "launch_kernel_ns": _i("host time of one cudaLaunchKernel call", 0, 10**10),
        "memcpy_call_ns": _i("host time of one cudaMemcpyAsync call (without any wait)", 0, 10**10),
        "memset_call_ns": _i("host time of one cudaMemsetAsync call", 0, 10**10),
        "sync_return_ns": _i("from the end of the awaited GPU work to a synchronise call's return", 0, 10**10),
        "event_call_ns": _i("host time of one cudaEventRecord / cudaStreamWaitEvent call", 0, 10**10),
        "launch_latency_ns": _i("from the end of a launch call to the earliest start of its GPU op", 0, 10**10),
    },
    "host_cpu": {
        "speed_ratio": _f("Python speed of the GPU server's host CPU relative to the reference host "
                          "(2 = the script's Python runs in half the time)", 0, 1000, True),
    },
}

# Facts of the replay model's tables that the compute half reads too: each is defined once, in
# the table where the replay's model declares it.
SHARED_FACTS: dict[str, dict[str, Fact]] = {
    "gpu": {"sms": _i("streaming multiprocessors", 1, 4096)},
    "pcie": {
        "h2d_bandwidth_gb_s": _f("achieved host-to-device bandwidth of a pinned copy, GB/s", 1e-3, 1e5),
        "d2h_bandwidth_gb_s": _f("achieved device-to-host bandwidth of a pinned copy, GB/s", 1e-3, 1e5),
        "latency_ns": _i("one-way latency of a DMA transfer", 0, 10**10),
    },
    "host": {"staging_copy_gb_s": _f("one host thread's copy between pageable memory and the driver's pinned "
                                     "staging buffer: the rate of a pageable copy, GB/s", 1e-3, 1e5)},
}

# Optional table: overrides of the cost model's calibrated factors (names of GpuSpec fields,
# checked by the cost model), for a GPU whose kernels behave unlike Hopper's.
COSTMODEL_TABLE = "costmodel"
MACHINE_TABLES = frozenset(COMPUTE_TABLES) | {COSTMODEL_TABLE}


@dataclass(frozen=True)
class Machine:
    """The compute half of one preset, as plain data."""

    name: str
    path: str
    description: str
    facts: dict[str, dict[str, Any]]  # table -> key -> value (COMPUTE_TABLES and SHARED_FACTS)
    sources: dict[str, dict[str, str]]  # table -> key -> source
    costmodel: dict[str, Any] = field(default_factory=dict)  # [costmodel] overrides, unchecked names
    ranges: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)

    def fact(self, table: str, key: str) -> Any:
        return self.facts[table][key]


# ----------------------------------------------------------------------------- finding presets

@functools.lru_cache(maxsize=None)
def preset_folders() -> tuple[tuple[str, Path], ...]:
    """(entry name, folder) of every installed preset folder, sorted by entry name."""
    from importlib.metadata import entry_points

    out = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        module, _, folder = ep.value.partition(":")
        try:
            spec = importlib.util.find_spec(module.strip())
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue  # a plug-in whose package is gone: its presets are not offered
        base = Path(next(iter(spec.submodule_search_locations)))
        path = base / (folder.strip() or "presets")
        if path.is_dir():
            out.append((ep.name, path))
    return tuple(out)


def preset_names() -> list[str]:
    """Names of every installed preset (file stems), sorted."""
    return sorted({p.stem for _, d in preset_folders() for p in d.glob("*.toml")})


def preset_path(preset: str | Path) -> Path:
    """A preset name (file stem in an installed preset folder) or a path to a TOML file."""
    p = Path(preset)
    if p.suffix == ".toml" or len(p.parts) > 1:
        if not p.is_file():
            raise ConfigError("no such preset file", path=str(p))
        return p
    found = [d / f"{preset}.toml" for _, d in preset_folders() if (d / f"{preset}.toml").is_file()]
    if not found:
        known = ", ".join(preset_names()) or f"(none installed: no package declares the entry-point group {GROUP}; reinstall, pip install -e .)"
        raise ConfigError(f"unknown preset name {shown(preset)}; available presets: {known} "
                          "(or give a path to a .toml file)")
    if len(found) > 1:
        raise ConfigError(f"preset {p.stem} is shipped by more than one plug-in ({', '.join(map(str, found))}); "
                          "give its path")
    return found[0]


# ----------------------------------------------------------------------------- reading

def read_tables(path: Path, _seen: tuple[Path, ...] = ()) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """(every table but [preset], merged over the ``extends`` chain, base first; the file's own
    [preset] table)."""
    path = Path(path).resolve()
    if path in _seen:
        raise ConfigError(f"preset 'extends' forms a cycle ({len(_seen) + 1} files)", path=str(path))
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not valid TOML: byte {exc.start} is not UTF-8", path=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read preset: {exc.strerror}", path=str(path)) from None
    head = raw.pop(PRESET_TABLE, None)
    if not isinstance(head, dict):
        raise ConfigError(f"missing table [{PRESET_TABLE}]", path=str(path))
    for key, value in head.items():
        if key not in _PRESET_KEYS:
            raise ConfigError(f"[{PRESET_TABLE}] unknown key {shown(key)}; known keys: {', '.join(_PRESET_KEYS)}",
                              path=str(path))
        if not isinstance(value, str):
            raise ConfigError(f"[{PRESET_TABLE}] {key}: expected a string, got a {type(value).__name__}",
                              path=str(path))
    for table, body in raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"[{table}] must be a table, got a {type(body).__name__}", path=str(path))
    ref = head.get("extends")
    if not ref:
        return raw, head
    merged, _ = read_tables(extends_path(ref, path), _seen + (path,))
    return merge_over(merged, raw), head


def extends_path(ref: str, path: Path) -> Path:
    """The file ``[preset] extends = ref`` of the preset at ``path`` names: a preset name (``.toml``
    added, next to ``path``) or a path (relative to ``path``'s folder). One line, naming neither the
    value nor the file it resolved to, when there is none."""
    base = Path(ref)
    if base.suffix != ".toml":
        base = base.with_suffix(".toml") if len(base.parts) > 1 else Path(f"{ref}.toml")
    if not base.is_absolute():
        base = path.parent / base
    if not base.is_file():
        raise ConfigError(f"[{PRESET_TABLE}] extends: no such preset next to this file", path=str(path))
    return base


def merge_over(base: dict[str, dict[str, Any]], raw: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The tables of a preset over those of the one it extends (``base``, a fresh copy): keys
    replace keys, and a value restated without its range drops the base's range (the range
    brackets a value, not a key)."""
    merged = {t: dict(body) for t, body in base.items()}
    for table, body in raw.items():
        into = merged.setdefault(table, {})
        for key in body:
            if param_name(key) == key and key + RANGE_SUFFIX not in body:
                into.pop(key + RANGE_SUFFIX, None)
                into.pop(key + RANGE_SOURCE_SUFFIX, None)
        into.update(body)
    return merged


def param_name(key: str) -> str:
    """The fact a preset key belongs to: ``x``, ``x_source``, ``x_range``, ``x_range_source`` -> ``x``."""
    for suffix in (RANGE_SOURCE_SUFFIX, SOURCE_SUFFIX, RANGE_SUFFIX):
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return key


def has_compute_half(preset: str | Path) -> bool:
    """Does the preset (with what it extends) hold every table of the compute half?"""
    tables, _ = read_tables(preset_path(preset))
    return all(t in tables for t in COMPUTE_TABLES)


def load_machine(preset: str | Path) -> Machine:
    """The compute half of ``preset`` (a name or a path), validated: every key of
    :data:`COMPUTE_TABLES` and :data:`SHARED_FACTS` present, typed, in range and with a source.
    A preset without the compute half (e.g. a TEE-only preset of the replay) is refused."""
    path = preset_path(preset)
    tables, head = read_tables(path)
    where = str(path)
    missing = [t for t in COMPUTE_TABLES if t not in tables]
    if missing:
        raise ConfigError(f"the preset has no compute half (no table {', '.join(f'[{t}]' for t in missing)}); "
                          "an emulated capture needs one (docs/machine.md)", path=where)
    facts: dict[str, dict[str, Any]] = {}
    sources: dict[str, dict[str, str]] = {}
    ranges: dict[str, dict[str, tuple[float, float]]] = {}
    for schema, strict in ((COMPUTE_TABLES, True), (SHARED_FACTS, False)):
        for table, keys in schema.items():
            body = tables.get(table)
            if body is None:
                raise ConfigError(f"missing table [{table}] (the compute half reads {', '.join(keys)})", path=where)
            if strict:
                _no_unknown_keys(table, body, keys, where)
            facts[table], sources[table] = {}, {}
            for key, fact in keys.items():
                if key not in body:
                    raise ConfigError(f"[{table}] is missing key '{key}' ({fact.doc})", path=where)
                src = body.get(key + SOURCE_SUFFIX)
                if not isinstance(src, str) or not src.strip():
                    raise ConfigError(f"[{table}] {key} needs a source: add {key}{SOURCE_SUFFIX} = \"...\" "
                                      "(where the value comes from, or \"assumption: ...\")", path=where)
                value = _checked(table, key, fact, body[key], where)
                facts[table][key], sources[table][key] = value, src.strip()
                rng = _checked_range(table, key, fact, body, value, where)
                if rng is not None:
                    ranges.setdefault(table, {})[key] = rng
    costmodel, cm_sources = {}, {}
    for key, value in (tables.get(COSTMODEL_TABLE) or {}).items():
        if param_name(key) != key:
            continue
        src = tables[COSTMODEL_TABLE].get(key + SOURCE_SUFFIX)
        if not isinstance(src, str) or not src.strip():
            raise ConfigError(f"[{COSTMODEL_TABLE}] {key} needs a source: add {key}{SOURCE_SUFFIX}", path=where)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"[{COSTMODEL_TABLE}] {key}: expected a number, got a {type(value).__name__}",
                              path=where)
        costmodel[key], cm_sources[key] = value, src.strip()
    if cm_sources:
        sources[COSTMODEL_TABLE] = cm_sources
    return Machine(name=str(head.get("name", path.stem)), path=where, description=str(head.get("description", "")),
                   facts=facts, sources=sources, costmodel=costmodel, ranges=ranges)


def _no_unknown_keys(table: str, body: dict, keys: dict[str, Fact], where: str) -> None:
    for key in body:
        if param_name(key) not in keys:
            import difflib

            close = difflib.get_close_matches(key, list(keys), n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'? units are part of the key name)" if close else ""
            raise ConfigError(f"[{table}] unknown key {shown(key)}{hint}; known keys: {', '.join(keys)}", path=where)


def _checked(table: str, key: str, fact: Fact, value: Any, where: str) -> Any:
    label = f"[{table}] {key}"
    if fact.type is str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{label}: expected a non-empty string, got a {type(value).__name__}", path=where)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (fact.type is int and isinstance(value, float)):
        raise ConfigError(f"{label}: expected {'an integer' if fact.type is int else 'a number'} "
                          f"(the unit is in the key name), got a {type(value).__name__}", path=where)
    value = fact.type(value)
    if not math.isfinite(value):
        raise ConfigError(f"{label}: expected a finite number", path=where)
    if fact.lo is not None and (value <= fact.lo if fact.exclusive_lo else value < fact.lo):
        raise ConfigError(f"{label}: must be {'>' if fact.exclusive_lo else '>='} {fact.lo}", path=where)
    if fact.hi is not None and value > fact.hi:
        raise ConfigError(f"{label}: must be <= {fact.hi}", path=where)
    return value


def range_entry(table: str, key: str, body: dict, where: str | None) -> tuple[Any, str] | None:
    """The preset grammar of a range, for every reader of a preset: ``(key_range's value, reason)``,
    or None without a range. The reason is ``key_range_source`` (a non-empty string) or, when that
    is absent, the key's own ``key_source`` (docs/model.md, "Uncertainty ranges"). A
    ``key_range_source`` without a range is refused. The value of the range is the caller's to
    check (it knows the key's type and valid values)."""
    if key + RANGE_SUFFIX not in body:
        if key + RANGE_SOURCE_SUFFIX in body:
            raise ConfigError(f"[{table}] {key}{RANGE_SOURCE_SUFFIX} without {key}{RANGE_SUFFIX} = [low, high]",
                              path=where)
        return None
    reason = body.get(key + RANGE_SOURCE_SUFFIX)
    if reason is None:  # the reason is then part of the key's own source
        reason = body.get(key + SOURCE_SUFFIX, "")
    elif not isinstance(reason, str) or not reason.strip():
        raise ConfigError(f"[{table}] {key}{RANGE_SOURCE_SUFFIX}: expected a non-empty string saying why these "
                          f"two ends, got a {type(reason).__name__}", path=where)
    return body[key + RANGE_SUFFIX], str(reason).strip()


def _checked_range(table: str, key: str, fact: Fact, body: dict, value: Any, where: str) -> tuple[float, float] | None:
    """``<key>_range = [low, high]`` (:func:`range_entry`): the range the source allows; the value
    must lie in it."""
    label = f"[{table}] {key}{RANGE_SUFFIX}"
    entry = range_entry(table, key, body, where)
    if entry is None:
        return None
    rng = entry[0]
    if fact.type is str:
        raise ConfigError(f"{label}: only numeric keys take a range", path=where)
    ok = (isinstance(rng, list) and len(rng) == 2
          and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in rng))
    if not ok:
        raise ConfigError(f"{label}: expected [low, high] (two numbers)", path=where)
    lo, hi = float(rng[0]), float(rng[1])
    if lo > hi:
        raise ConfigError(f"{label}: low must not exceed high", path=where)
    if not lo <= value <= hi:
        raise ConfigError(f"{label}: the value of {key} must lie in [low, high]", path=where)
    return lo, hi
