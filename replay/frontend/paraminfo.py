"""What a parameter or a result column means, for people: its unit, its one-line doc, its source,
and the axis label a figure gives it.

Units come from the key names (the rule of :mod:`replay.config`: ``_ns``, ``_gb_s``, ``_bytes``,
``_ratio``, optionally ``_per_<thing>``; other numeric keys declare ``unit="count"``), docs from the
model's field metadata, sources from the preset's ``<key>_source`` strings. Used by
``replay list params``, ``fastrack.params()`` and every figure's axis labels.
"""

from __future__ import annotations

from typing import Any

# key suffix -> unit as printed
UNIT_NAMES = {"_ns": "ns", "_gb_s": "GB/s", "_bytes": "bytes", "_ratio": "ratio"}
SCALE_PREFIX = "scale."  # what-if factors in study tables (replay.frontend.study.points.SCALE_PREFIX)

# result columns of the study table (docs/studies.md): label and unit as drawn (``*_ns`` in ms)
METRICS = {
    "makespan_ns": ("makespan", "ms"),
    "captured_span_ns": ("captured span", "ms"),
    "slowdown": ("slowdown vs no TEE", "x"),
    "change": ("makespan change", "%"),
    "ops": ("trace ops", "count"),
    "nodes": ("graph nodes", "count"),
}


def unit_of(key: str, meta: dict[str, Any] | None = None) -> str:
    """The unit of a parameter key (``h2d_bandwidth_gb_s`` -> ``GB/s``; ``parallel_gb_s_per_sm`` ->
    ``GB/s per sm``); ``meta["unit"]`` (e.g. ``count``) when the key has no unit suffix; ``""`` for
    strings and flags."""
    key = key.rsplit(".", 1)[-1]
    base, _, per = key.partition("_per_")
    for suffix, name in UNIT_NAMES.items():
        if base.endswith(suffix):
            return f"{name} per {per.replace('_', ' ')}" if per else name
    return (meta or {}).get("unit", "")


def _strip_unit(key: str) -> str:
    base, _, per = key.partition("_per_")
    for suffix in UNIT_NAMES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base + (f" per {per}" if per else "")


def axis_label(column: str) -> str:
    """A readable axis label with the unit: ``pcie.h2d_bandwidth_gb_s`` -> ``pcie: h2d bandwidth
    (GB/s)``, ``makespan_ns`` -> ``makespan (ms)``, ``cp_pcie_ns`` -> ``critical path: pcie (ms)``,
    ``scale.kernel`` -> ``kernel duration factor (x)``. Unknown columns are returned unchanged."""
    if column in METRICS:
        label, unit = METRICS[column]
        return f"{label} ({unit})"
    if column.startswith("cp_") and column.endswith("_ns"):
        return f"critical path: {column[3:-3].replace('_', ' ')} (ms)"
    if column.startswith(SCALE_PREFIX):
        return f"{column[len(SCALE_PREFIX):]} duration factor (x)"
    if "." in column:
        names = column.split("+")  # a tied axis: a+b set to the same value
        unit = unit_of(names[0], _field_meta(names[0]))
        sections = [n.split(".", 1)[0] for n in names]
        keys = [_strip_unit(n.split(".", 1)[1]).replace("_", " ") for n in names]
        if len(set(sections)) == 1:
            words = [k.split() for k in keys]  # "d2h bandwidth", "h2d bandwidth" -> "d2h = h2d bandwidth"
            n = 0
            while n < min(map(len, words)) - 1 and len({tuple(w[len(w) - n - 1:]) for w in words}) == 1:
                n += 1
            tail = " ".join(words[0][len(words[0]) - n:]) if n else ""
            heads = [" ".join(w[: len(w) - n]) for w in words]
            text = f"{sections[0].replace('_', ' ')}: {' = '.join(heads)}" + (f" {tail}" if tail else "")
        else:
            text = " = ".join(f"{sec.replace('_', ' ')}: {k}" for sec, k in zip(sections, keys))
        return f"{text} ({unit})" if unit else text
    return column


def _field_meta(name: str, model: str | None = None) -> dict[str, Any]:
    """Field metadata of ``section.key`` in the default (or given) model; {} when unknown."""
    try:
        info = {r["name"]: r for r in _fields(model)}
    except Exception:  # noqa: BLE001 - labels must never fail a figure: no model, no metadata
        return {}
    return info.get(name, {})


def _fields(model: str | None) -> list[dict[str, Any]]:
    from replay import config
    from replay.plugins import DEFAULT_MODEL, load_model

    cls = load_model(model or DEFAULT_MODEL)
    out = []
    for table, sec in config.sections(cls.Params).items():
        for key, f in config.fields_of(sec).items():
            typ = config.field_type(sec, f)
            out.append({"name": f"{table}.{key}", "type": getattr(typ, "__name__", str(typ)),
                        "unit": unit_of(key, dict(f.metadata)), "doc": f.metadata.get("doc", "")})
    return out


def parameter_table(model: str | None = None, preset: str | None = None) -> list[dict[str, Any]]:
    """One dict per parameter of ``model`` with ``preset``'s value and source: name, type, unit,
    value, doc, source (sorted by name; optional tables the preset leaves out are omitted)."""
    from replay.plugins import DEFAULT_MODEL, load_model

    hw = load_model(model or DEFAULT_MODEL).from_preset(preset)
    values, sources = hw.params, hw.sources
    rows = []
    for r in _fields(model):
        table, key = r["name"].split(".", 1)
        if table not in values:
            continue
        rows.append({**r, "value": values[table].get(key), "source": sources.get(table, {}).get(key, ""),
                     "preset": hw.preset_name})
    return sorted(rows, key=lambda r: r["name"])


__all__ = ["METRICS", "UNIT_NAMES", "axis_label", "parameter_table", "unit_of"]
