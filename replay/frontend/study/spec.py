"""What a study runs: :class:`StudySpec`, the ``--set`` options and the study TOML file.

A study is the cartesian product of its traces, protocols, presets and the values of each swept
parameter (``--set pcie.bandwidth_gb_s=16,32,64``: a comma separates values to sweep), or an
explicit list of points read from a study file (format in ``docs/studies.md`` and
:func:`load_study_file`).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path
from typing import Any, Mapping, Sequence

from fastrack_core.errors import ConfigError
from replay.plugins import DEFAULT_MODEL

PINNABLE = ("trace", "protocol", "preset")  # what a [[points]] entry may pin


@dataclasses.dataclass
class StudySpec:
    """What to run. ``grid`` maps ``section.key`` to the values swept (cartesian product);
    ``points``, when given, replaces the grid by an explicit list of parameter assignments,
    each optionally pinning ``trace``, ``protocol`` or ``preset`` (a value or a list)."""

    traces: list[str]
    protocols: list[str]
    presets: list[str | None] = dataclasses.field(default_factory=lambda: [None])
    grid: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    points: list[dict[str, Any]] | None = None
    model: str = DEFAULT_MODEL
    add_none: bool = True


def split_values(text: str, what: str) -> list[str]:
    """'a,b,c' -> ['a', 'b', 'c']; an empty list or an empty item is an error."""
    items = [v.strip() for v in text.split(",")]
    if not text.strip() or any(not v for v in items):
        raise ConfigError(f"{what}: empty value in list {text!r} (give values separated by commas, e.g. 16,32,64)")
    return items


def parse_set_options(options: Sequence[str]) -> dict[str, list[str]]:
    """``['pcie.bandwidth_gb_s=16,32', 'cpu.cores=8']`` -> {'pcie.bandwidth_gb_s': ['16', '32'], ...}."""
    grid: dict[str, list[str]] = {}
    for opt in options:
        name, sep, values = opt.partition("=")
        name = name.strip()
        if not sep or any("." not in part or not all(part.strip().split(".")) for part in name.split("+")):
            raise ConfigError(f"--set {opt!r}: expected SECTION.KEY=VALUE[,VALUE...]")
        if not values.strip():
            raise ConfigError(f"--set {name}: empty value list (give one or more values, e.g. {name}=16,32,64)")
        grid[name] = split_values(values, f"--set {name}")
    return grid


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables -> ``{'section.key': value}``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, name + "."))
        else:
            out[name] = v
    return out


def as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def override_text(name: str, value: Any) -> str:
    """``name=value`` as the model's override parser reads it (booleans in TOML spelling)."""
    if isinstance(value, bool):
        v = "true" if value else "false"
    elif isinstance(value, float):
        v = repr(value)
    else:
        v = str(value)
    return f"{name}={v}"


def _under(base: Path, paths: list[Any]) -> list[Any]:
    """Trace paths of a study file: relative ones are relative to the file's folder."""
    return [str(base / t) if not os.path.isabs(t) else t for t in paths]


def load_study_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a study TOML file (format in docs/studies.md). Trace paths are relative to the file.

    Returns a dict with the keys it sets among: traces, protocols, presets, model, grid, points,
    output, add_none.
    """
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("no such study file", path=path) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not valid TOML ({exc})", path=path) from None
    unknown = sorted(set(raw) - {"study", "grid", "points"})
    if unknown:
        raise ConfigError(f"unknown table(s) {', '.join(unknown)} (expected [study], [grid], [[points]])", path=path)
    study = raw.get("study", {})
    if not isinstance(study, dict):
        raise ConfigError("[study] must be a table", path=path)
    allowed = {"traces", "protocols", "presets", "model", "output", "add_none"}
    bad = sorted(set(study) - allowed)
    if bad:
        raise ConfigError(f"[study]: unknown key(s) {', '.join(bad)} (expected {', '.join(sorted(allowed))})", path=path)
    out: dict[str, Any] = {}
    base = path.parent
    for k in ("traces", "protocols", "presets"):
        if k in study:
            out[k] = _strings(study[k], f"[study] {k}", path)
            if not out[k]:
                raise ConfigError(f"[study] {k}: empty list", path=path)
    if "traces" in out:
        out["traces"] = _under(base, out["traces"])
    for k in ("model", "output"):
        if k in study and not isinstance(study[k], str):
            raise ConfigError(f"[study] {k}: expected a string, got a {_toml_type(study[k])}", path=path)
    if "model" in study:
        out["model"] = study["model"]
    if "output" in study:
        out["output"] = str(base / study["output"])
    if "add_none" in study:
        if not isinstance(study["add_none"], bool):  # "no" would be true to bool()
            raise ConfigError(f"[study] add_none: expected true or false, got a {_toml_type(study['add_none'])}",
                              path=path)
        out["add_none"] = study["add_none"]
    if "grid" in raw:
        if not isinstance(raw["grid"], dict):
            raise ConfigError("[grid] must be a table", path=path)
        out["grid"] = _read_grid(raw["grid"], path)
    if "points" in raw:
        if not isinstance(raw["points"], list) or not all(isinstance(p, dict) for p in raw["points"]):
            raise ConfigError("[[points]] must be an array of tables", path=path)
        out["points"] = _read_points(raw["points"], base, path)
    return out


_SCALARS = (bool, int, float, str)


def _toml_type(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}.get(
        type(v), type(v).__name__)


def _strings(value: Any, what: str, path: Path) -> list[str]:
    vals = as_list(value)
    for v in vals:
        if not isinstance(v, str):
            raise ConfigError(f"{what}: expected strings, got a {_toml_type(v)}", path=path)
    return vals


def _read_grid(table: Mapping[str, Any], path: Path) -> dict[str, list[Any]]:
    grid = {}
    for name, values in flatten(table).items():
        vals = as_list(values)
        if not vals:
            raise ConfigError(f"[grid] {name}: empty value list", path=path)
        for v in vals:
            if not isinstance(v, _SCALARS):
                raise ConfigError(f"[grid] {name}: expected numbers, strings or booleans, got a {_toml_type(v)}",
                                  path=path)
        grid[name] = vals
    return grid


def _read_points(entries: list[Mapping[str, Any]], base: Path, path: Path) -> list[dict[str, Any]]:
    """[[points]] -> parameter assignments; pinned trace/protocol/preset lists under ``@name``."""
    pts = []
    for i, p in enumerate(entries):
        flat = flatten({k: v for k, v in p.items() if k not in PINNABLE})
        pinned = {k: as_list(p[k]) for k in PINNABLE if k in p}
        for k, v in pinned.items():
            if not all(isinstance(x, str) for x in v):
                raise ConfigError(f"[[points]] #{i + 1}: {k} must be a string or strings", path=path)
        if "trace" in pinned:
            pinned["trace"] = _under(base, pinned["trace"])
        for k, v in flat.items():
            if not isinstance(v, (*_SCALARS, list)):
                raise ConfigError(f"[[points]] #{i + 1}: {k} is a {_toml_type(v)}, expected a value", path=path)
            if isinstance(v, list):
                raise ConfigError(f"[[points]] #{i + 1}: {k} is a list; a point takes one value per parameter "
                                  "(sweep lists in [grid])", path=path)
        pts.append(flat | {f"@{k}": v for k, v in pinned.items()})
    if not pts:
        raise ConfigError("[[points]] is empty", path=path)
    return pts
