"""Strict loader of hardware presets (TOML) and ``--set section.key=value`` overrides.

A hardware model declares its parameters as a *root* frozen dataclass whose fields are *section*
frozen dataclasses (one per TOML table); each section field is a typed value (``int``, ``float``,
``str`` or ``bool``) whose name carries its unit (``bandwidth_gb_s``, ``latency_ns``,
``slot_bytes``). Field metadata may add ``doc`` (one line), ``min``/``max`` and ``choices``.

A preset file looks like::

    [preset]
    name = "h100-sxm"
    description = "..."
    extends = "other-preset"        # optional: a preset name or a path relative to this file

    [pcie]
    latency_ns = 1000
    latency_ns_source = "assumption: ..."   # every key needs a sibling <key>_source string

The loader rejects unknown tables and keys (listing the known ones and the closest match, so a
wrong unit such as ``latency_us`` is caught), missing keys, missing sources, wrong types and
out-of-range values, always naming the file, the table and the key. ``extends`` lets a variant
state only what differs from its base.

A numeric key may carry an uncertainty range, ``key_range = [low, high]`` with its reason in
``key_range_source`` (or in ``key_source``): ``low <= value <= high``, both ends valid values of the
key (docs/model.md "Uncertainty ranges"; :attr:`Preset.ranges`, used by :mod:`replay.pipeline.ranges`).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from fastrack_core.errors import ConfigError, shown
# the preset file's grammar (key suffixes, [preset], extends and its merge) is the floor's, one
# definition for the machine description and this loader: docs/model.md, docs/machine.md
from fastrack_core.machine import (MACHINE_TABLES, PRESET_TABLE, RANGE_SOURCE_SUFFIX, RANGE_SUFFIX,  # noqa: F401
                                   SOURCE_SUFFIX, extends_path, merge_over, range_entry)
from fastrack_core.machine import param_name as _param_name
_TOML_CACHE: dict[tuple[str, int, int], dict[str, Any]] = {}  # see _read_toml
_TOML_CACHE_MAX = 64
_PRESET_KEYS = {"name": str, "description": str, "extends": str, "model": str}

# Unit suffixes a numeric key may end with (optionally followed by ``_per_<thing>``, e.g.
# ``parallel_gb_s_per_sm``); other numeric keys must declare metadata unit="count".
UNIT_SUFFIXES = ("_ns", "_gb_s", "_bytes", "_ratio")


@dataclass(frozen=True)
class Preset:
    """A loaded, validated preset."""

    name: str
    path: str  # the file it was read from ("" when built from a mapping)
    description: str
    values: Any  # instance of the model's root parameter dataclass
    sources: dict[str, dict[str, str]]  # section -> key -> source (overrides: "override: --set ...")
    # section -> key -> (low, high, reason): uncertainty ranges (``key_range``, docs/model.md "Uncertainty
    # ranges"); a key fixed by ``--set`` has none here and is listed in ``fixed_by_set`` ("section.key")
    ranges: dict[str, dict[str, tuple[Any, Any, str]]] = dataclasses.field(default_factory=dict)
    fixed_by_set: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """Every value as a nested plain dict (section -> key -> value)."""
        return {f.name: dataclasses.asdict(getattr(self.values, f.name)) for f in dataclasses.fields(self.values)
                if getattr(self.values, f.name) is not None}


def sections(root_cls: type) -> dict[str, type]:
    """Table name -> section dataclass of a root parameter dataclass. A field typed
    ``Section | None = None`` is an *optional* table (:func:`optional_sections`)."""
    out = {}
    for f in dataclasses.fields(root_cls):
        typ = _unwrap_optional(_resolve(root_cls, f))
        if not dataclasses.is_dataclass(typ):
            raise TypeError(f"{root_cls.__name__}.{f.name} must be a dataclass section")
        out[f.name] = typ
    return out


def optional_sections(root_cls: type) -> set[str]:
    """Tables a preset may omit (root fields that default to None)."""
    return {f.name for f in dataclasses.fields(root_cls) if f.default is None}


def _unwrap_optional(typ: Any) -> Any:
    import types
    import typing

    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return typ


def fields_of(section_cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(section_cls)}


def field_type(section_cls: type, f: dataclasses.Field) -> type:
    return _resolve(section_cls, f)


def _resolve(owner: type, f: dataclasses.Field) -> type:
    typ = f.type
    if isinstance(typ, str):  # from __future__ import annotations
        typ = _type_hints(owner)[f.name]
    return typ


@functools.lru_cache(maxsize=None)
def _type_hints(owner: type) -> dict[str, Any]:
    """``typing.get_type_hints`` of a parameter dataclass, evaluated once per class (a sweep
    loads a preset per point; evaluating the annotations again each time was a third of it)."""
    import typing

    return typing.get_type_hints(owner)


# --------------------------------------------------------------------------------------------
# loading


def resolve_preset_path(preset: str | Path | None, presets_dir: Path, default: str) -> Path:
    """A preset name (file stem in ``presets_dir``) or a path to a TOML file."""
    if preset is None or preset == "":
        preset = default
    p = Path(preset)
    if p.suffix == ".toml" or len(p.parts) > 1:
        if not p.is_file():
            raise ConfigError(f"preset file not found: {p}")
        return p
    cand = Path(presets_dir) / f"{preset}.toml"
    if not cand.is_file():
        known = ", ".join(available_presets(presets_dir)) or "(none)"
        raise ConfigError(f"unknown preset '{preset}'; available presets: {known} (or give a path to a .toml file)")
    return cand


def available_presets(presets_dir: Path) -> list[str]:
    d = Path(presets_dir)
    return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []


def _read_toml(path: Path) -> dict[str, Any]:
    """The parsed file (a fresh copy: callers edit it). Parsed once per file version (path, size,
    modification time), since a sweep loads the same preset for every point."""
    try:
        st = os.stat(path)
        key = (str(path), st.st_size, st.st_mtime_ns)
        parsed = _TOML_CACHE.get(key)
        if parsed is None:
            with open(path, "rb") as fh:
                parsed = tomllib.load(fh)
            if len(_TOML_CACHE) >= _TOML_CACHE_MAX:
                _TOML_CACHE.clear()
            _TOML_CACHE[key] = parsed
        return copy.deepcopy(parsed)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not valid TOML: byte {exc.start} is not UTF-8", path=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read preset: {exc.strerror}", path=path) from None


def _raw_with_bases(path: Path, seen: tuple[Path, ...] = (), model: str | None = None
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(merged tables without [preset], the file's own [preset] table), following ``extends``."""
    path = path.resolve()
    if path in seen:
        chain = " -> ".join(str(p) for p in seen + (path,))
        raise ConfigError(f"preset 'extends' forms a cycle: {chain}", path=path)
    raw = _read_toml(path)
    head = raw.pop(PRESET_TABLE, None)
    if not isinstance(head, dict):
        raise ConfigError(f"missing table [{PRESET_TABLE}] (with keys: {', '.join(_PRESET_KEYS)})", path=path)
    for key, value in head.items():
        if key not in _PRESET_KEYS:
            raise ConfigError(_unknown_msg(PRESET_TABLE, key, list(_PRESET_KEYS)), path=path)
        if not isinstance(value, _PRESET_KEYS[key]):
            raise ConfigError(f"[{PRESET_TABLE}] {key}: expected a string, got {_show(value)}", path=path)
    for key in ("name", "description"):
        if key not in head:
            raise ConfigError(f"[{PRESET_TABLE}] is missing key '{key}'", path=path)
    if model is not None and head.get("model", model) != model:
        raise ConfigError(f"[{PRESET_TABLE}] model: this preset is for model {shown(head['model'])}, not '{model}'",
                          path=path)
    for table, body in raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"'{table}' must be a table ([{table}]), got {_show(body)}", path=path)
    base_ref = head.get("extends")
    if not base_ref:
        return raw, head
    base, _ = _raw_with_bases(extends_path(base_ref, Path(path)), seen + (path,), model)
    return merge_over(base, raw), head


def load_preset(root_cls: type, path: Path, overrides: Iterable[str] | Mapping[str, Any] = (),
                model: str | None = None) -> Preset:
    """Load and validate a preset file for ``root_cls``, then apply ``--set`` overrides. ``model``: the
    loading model's name; a preset (or one it extends) whose ``[preset] model`` names another is refused."""
    path = Path(path)
    raw, head = _raw_with_bases(path, model=model)
    return _build(root_cls, raw, head, str(path), overrides)


def load_preset_dict(root_cls: type, raw: Mapping[str, Any], overrides: Iterable[str] | Mapping[str, Any] = (),
                     label: str = "<dict>") -> Preset:
    """Same as :func:`load_preset` for an in-memory mapping shaped like a preset file."""
    raw = {t: dict(b) if isinstance(b, Mapping) else b for t, b in raw.items()}
    head = raw.pop(PRESET_TABLE, {"name": label, "description": ""})
    return _build(root_cls, raw, dict(head), label if label != "<dict>" else "", overrides)


def _build(root_cls, raw, head, path: str, overrides) -> Preset:
    secs = sections(root_cls)
    where = path or None
    # the compute half of the machine description is read by fastrack_core.machine (docs/machine.md)
    raw = {t: b for t, b in raw.items() if t in secs or t not in MACHINE_TABLES}
    for table in raw:
        if table not in secs:
            raise ConfigError(_unknown_msg(None, table, list(secs) + [PRESET_TABLE]), path=where)
    values: dict[str, dict[str, Any] | None] = {}
    sources: dict[str, dict[str, str]] = {}
    ranges: dict[str, dict[str, tuple[Any, Any, str]]] = {}
    optional = optional_sections(root_cls)
    for table, cls in secs.items():
        if table not in raw and table in optional:
            values[table] = None
            continue
        if table not in raw:
            raise ConfigError(f"missing table [{table}] (keys: {', '.join(fields_of(cls))})", path=where)
        body = raw[table]
        flds = fields_of(cls)
        for key in body:
            if _param_name(key) not in flds:
                raise ConfigError(_unknown_msg(table, key, list(flds)), path=where)
        values[table], sources[table] = {}, {}
        for key, f in flds.items():
            if key not in body:
                raise ConfigError(f"[{table}] is missing key '{key}' ({_describe(cls, f)})", path=where)
            src = body.get(key + SOURCE_SUFFIX)
            if not isinstance(src, str) or not src.strip():
                raise ConfigError(
                    f"[{table}] {key} needs a source: add {key}{SOURCE_SUFFIX} = \"<where the value comes from>\" "
                    "or \"assumption: <why>\"", path=where)
            values[table][key] = _check_value(cls, f, body[key], f"[{table}] {key}", where)
            sources[table][key] = src.strip()
            rng = _check_range(cls, f, body, values[table][key], table, key, where)
            if rng is not None:
                ranges.setdefault(table, {})[key] = rng
    fixed = []
    for table, key, value, text in _parse_overrides(secs, overrides):
        if values[table] is None:
            raise ConfigError(f"--set {text}: table [{table}] is optional and this preset does not have it "
                              "(give the whole table in a preset file)", path=where)
        values[table][key] = value
        sources[table][key] = f"override: --set {text}"
        if ranges.get(table, {}).pop(key, None) is not None:  # the user's value is not an assumption
            fixed.append(f"{table}.{key}")
    root = root_cls(**{t: (None if values[t] is None else secs[t](**values[t])) for t in secs})
    return Preset(name=str(head.get("name", Path(path).stem if path else "")), path=path,
                  description=str(head.get("description", "")), values=root, sources=sources,
                  ranges={t: r for t, r in ranges.items() if r}, fixed_by_set=tuple(sorted(set(fixed))))


def _check_range(cls: type, f: dataclasses.Field, body: Mapping[str, Any], value: Any, table: str, key: str,
                 where: str | None) -> tuple[Any, Any, str] | None:
    """``key_range = [low, high]`` with its ``key_range_source``: (low, high, reason), or None without one.
    Refused: not two numbers of the key's type, low > high, the value outside, an end outside the
    key's valid range (:func:`value_range`)."""
    label = f"[{table}] {key}{RANGE_SUFFIX}"
    entry = range_entry(table, key, dict(body), where)
    if entry is None:
        return None
    rng, reason = entry
    typ = field_type(cls, f)
    if typ not in (int, float):
        raise ConfigError(f"{label}: only numeric keys take a range ({key} is {_type_name(typ)})", path=where)
    if not isinstance(rng, list) or len(rng) != 2:
        raise ConfigError(f"{label}: expected [low, high] (a list of two numbers), got {_show_shape(rng)}",
                          path=where)
    low, high = (_check_value(cls, f, v, f"{label} {end}", where) for v, end in zip(rng, ("low", "high")))
    if low > high:
        raise ConfigError(f"{label}: low must not exceed high, got low {_show(low)} > high {_show(high)}",
                          path=where)
    if not low <= value <= high:
        raise ConfigError(f"{label}: the value must lie inside [low, high], got {_show(value)} outside "
                          f"[{low}, {high}]", path=where)
    return low, high, reason


def _show_shape(value: Any) -> str:
    """What a malformed range is, by type and size (never its text)."""
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    return _show(value)


def _check_value(cls: type, f: dataclasses.Field, value: Any, label: str, where: str | None) -> Any:
    typ = field_type(cls, f)
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(typ)
    if ok is None:
        raise TypeError(f"{cls.__name__}.{f.name}: unsupported parameter type {typ}")
    if not ok:
        raise ConfigError(f"{label}: expected {_type_name(typ)}, got {_show(value)}", path=where)
    if typ is float:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{label}: expected a finite number, got {_show(value)}", path=where)
    meta = f.metadata
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(f"{label}: expected one of {', '.join(map(repr, choices))}, got {_show(value)}", path=where)
    lo, hi = value_range(f)
    if lo is not None and value < lo:
        raise ConfigError(f"{label}: must be >= {lo}, got {_show(value)}", path=where)
    if hi is not None and value > hi:
        raise ConfigError(f"{label}: must be <= {hi}, got {_show(value)}", path=where)
    if meta.get("exclusive_min") is not None and value <= meta["exclusive_min"]:
        raise ConfigError(f"{label}: must be > {meta['exclusive_min']}, got {_show(value)}", path=where)
    return value


# Bounds every numeric parameter gets from the unit in its name, on top of its own ``min``/``max``
# (docs/model.md "Parameter ranges"). They keep each cost a parameter can produce far inside
# int64 nanoseconds (a 16 TiB transfer at the slowest rate takes 1.8e16 ns) and each resource
# count small enough to allocate: a value outside is refused, never clamped.
UNIT_BOUNDS: tuple[tuple[str, float, float], ...] = (
    ("_ns", 0, 10**10),  # a fixed cost of at most 10 s per event
    ("_gb_s", 1e-3, 1e5),  # 1 MB/s .. 100 TB/s: slower rates would round to a free transfer
    ("_bytes", 0, 2**40),  # sizes of buffers, chunks and calls: at most 1 TiB
)
COUNT_MAX = 2**40  # a count (unit "count") without a max of its own


def value_range(f: dataclasses.Field) -> tuple[float | None, float | None]:
    """The valid range ``(min, max)`` of a numeric parameter: its own bounds, narrowed by the
    bounds of its unit (:data:`UNIT_BOUNDS`, :data:`COUNT_MAX`)."""
    meta = f.metadata
    lo, hi = meta.get("min"), meta.get("max")
    unit_lo, unit_hi = None, None
    for suffix, u_lo, u_hi in UNIT_BOUNDS:
        if f.name.endswith(suffix):
            unit_lo, unit_hi = u_lo, u_hi
    if meta.get("unit") == "count":
        unit_hi = COUNT_MAX
    if unit_lo is not None:
        lo = unit_lo if lo is None else max(lo, unit_lo)
    if unit_hi is not None:
        hi = unit_hi if hi is None else min(hi, unit_hi)
    return lo, hi


def _parse_overrides(secs: dict[str, type], overrides) -> list[tuple[str, str, Any, str]]:
    if isinstance(overrides, Mapping):
        items = [(k, v, f"{k}={v}") for k, v in overrides.items()]
    else:
        items = []
        for text in overrides:
            if not isinstance(text, str) or "=" not in text:
                raise ConfigError("--set: expected SECTION.KEY=VALUE (e.g. pcie.latency_ns=900)")
            k, v = text.split("=", 1)
            items.append((k.strip(), v.strip(), text))
    out = []
    for dotted, value, text in items:  # messages name the key, never the value (it may come from a file)
        dotted = str(dotted)
        shown = dotted if len(dotted) <= 60 else dotted[:57] + "..."
        if dotted.count(".") != 1:
            raise ConfigError("--set: expected SECTION.KEY=VALUE (e.g. pcie.latency_ns=900)")
        table, key = dotted.split(".")
        if table not in secs:
            raise ConfigError("--set: " + _unknown_msg(None, table, list(secs)))
        flds = fields_of(secs[table])
        if key not in flds:
            raise ConfigError("--set: " + _unknown_msg(table, key, list(flds)))
        f = flds[key]
        typ = field_type(secs[table], f)
        if isinstance(value, str):
            value = _parse_text(value, typ, f"--set {shown}")
        out.append((table, key, _check_value(secs[table], f, value, f"--set {shown}", None), text))
    return out


def _parse_text(text: str, typ: type, label: str) -> Any:
    t = text.strip()
    try:
        if typ is bool:
            if t.lower() in ("true", "1", "yes"):
                return True
            if t.lower() in ("false", "0", "no"):
                return False
            raise ValueError
        if typ is int:
            try:
                return int(t.replace("_", ""))
            except ValueError:
                f = float(t.replace("_", ""))  # sweeps may write 64.0 or 1e6: accept integral values
                if not f.is_integer():
                    raise
                return int(f)
        if typ is float:
            return float(t.replace("_", ""))
    except ValueError:
        hint = " (an integer; the unit is in the key name)" if typ is int else \
            " (a number; the unit is in the key name)" if typ is float else ""
        raise ConfigError(f"{label}: expected {_type_name(typ)}{hint}, got {_show(t)}") from None
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'":
        t = t[1:-1]
    return t


def _unknown_msg(table: str | None, key: str, known: list[str]) -> str:
    # the key itself is not repeated (it came from a file or a command line: docs/robustness.md)
    what = f"[{table}] unknown key {shown(key)}" if table else f"unknown table {shown(key)}"
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'? units are part of the key name)" if close else ""
    return f"{what}{hint}; known {'keys' if table else 'tables'}: {', '.join(known)}"


def _describe(cls: type, f: dataclasses.Field) -> str:
    doc = f.metadata.get("doc", "")
    return f"{_type_name(field_type(cls, f))}{': ' + doc if doc else ''}"


def _type_name(typ: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(typ, str(typ))


def _show(value: Any) -> str:
    if isinstance(value, str):  # text from a file is never pasted into messages (it may hold secrets)
        return f"str of {len(value)} characters"
    text = repr(value)
    if len(text) > 40:  # a long value is shown by its size, not pasted whole
        text = f"of {len(text)} characters" if isinstance(value, str) else f"with {len(text)} digits"
    return f"{type(value).__name__} {text}"


def schema_problems(root_cls: type) -> list[str]:
    """Model-definition checks (for tests): numeric keys carry a unit suffix or declare unit='count'."""
    problems = []
    for table, cls in sections(root_cls).items():
        for key, f in fields_of(cls).items():
            typ = field_type(cls, f)
            unit_part = key.split("_per_")[0] if "_per_" in key else key  # gb_s_per_sm: GB/s per SM
            if typ in (int, float) and not unit_part.endswith(UNIT_SUFFIXES) and f.metadata.get("unit") != "count":
                problems.append(f"[{table}] {key}: numeric key without a unit suffix {UNIT_SUFFIXES} or unit='count'")
            if not f.metadata.get("doc"):
                problems.append(f"[{table}] {key}: no doc")
    return problems
