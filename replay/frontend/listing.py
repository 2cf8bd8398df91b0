"""``replay list protocols|presets|params``: what is installed, with units, values and sources.

Protocols and models arrive by entry point (:mod:`replay.plugins`), presets are the model's TOML
files, parameters come with the unit of their key name, the model's one-line doc and the preset's
``<key>_source`` (:mod:`replay.frontend.paraminfo`). ``--json`` prints a JSON array for scripts.
"""

from __future__ import annotations

import json

import click

from fastrack_core.cli_support import reports_errors
from replay.names import CAPTURED
from replay.frontend.options import json_option, model_option, preset_option


@click.group("list")
def command() -> None:
    """List installed protocols, a model's presets, or a preset's parameters (units, values, sources)."""


@command.command("protocols")
@json_option
@reports_errors
def protocols_cmd(as_json: bool) -> None:
    """Installed protocol plug-ins (entry-point group fastrack.protocols), and 'captured'."""
    from replay.plugins import PROTOCOLS_GROUP, installed

    from replay.protocols.featuresoff import FEATURES, features_off_by

    rows = [{"name": CAPTURED, "provides": "(built in: measured durations, no hardware model)"}]
    rows += [{"name": n, "provides": v} for n, v in installed(PROTOCOLS_GROUP).items()]
    off_by: dict[str, list[str]] = {f.name: [] for f in FEATURES}
    for r in rows[1:]:  # the features CC switches off, per protocol (replay/protocols/featuresoff.py)
        obj = _loaded(r["name"])
        off = features_off_by(obj)
        if off:
            r["features_off"] = [{"feature": f.name, "source": f.source} for f in off]
            for f in off:
                off_by[f.name].append(r["name"])
        if getattr(obj, "features_note", ""):
            r["features_note"] = obj.features_note
    if as_json:
        click.echo(json.dumps(rows))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        click.echo(f"{r['name']:<{width}}  {r['provides']}")
    click.echo("\nfeatures CC switches off (graph transforms applied before the protocol's data path):")
    for f in FEATURES:
        click.echo(f"  {f.name}: {f.what}")
        click.echo(f"    off under: {', '.join(off_by[f.name]) or '(none installed)'}")
        click.echo(f"    source: {f.source}")
    for r in rows:
        if r.get("features_note"):
            click.echo(f"  {r['name']}: {r['features_note']}")


def _loaded(name: str):
    """The protocol object registered as ``name`` (None when it cannot be loaded: listed all the same)."""
    from replay.plugins import load_protocol

    try:
        return load_protocol(name)
    except Exception:  # noqa: BLE001 - a broken plug-in must not hide the others from the list
        return None


@command.command("presets")
@model_option
@json_option
@reports_errors
def presets_cmd(model: str, as_json: bool) -> None:
    """Presets of a hardware model, with their descriptions (the default marked *)."""
    from replay.plugins import load_model

    cls = load_model(model)
    rows = []
    for name in cls.available_presets():
        hw = cls.from_preset(name)
        rows.append({"name": name, "default": name == cls.default_preset, "description": hw.preset_description,
                     "file": hw.preset_path})
    if as_json:
        click.echo(json.dumps(rows))
        return
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        click.echo(f"{r['name']:<{width}} {'*' if r['default'] else ' '} {r['description']}")


@command.command("params")
@model_option
@preset_option
@json_option
@click.option("--sources/--no-sources", default=True, show_default=True,
              help="Print each value's source under it (the text report; --json always has them).")
@reports_errors
def params_cmd(model: str, preset: str | None, as_json: bool, sources: bool) -> None:
    """Every parameter of a preset: name, value, unit, what it means and where the value comes from.
    Names are what --set and sweeps take (SECTION.KEY)."""
    from replay.frontend.paraminfo import parameter_table

    rows = parameter_table(model, preset)
    if as_json:
        click.echo(json.dumps(rows, default=str))
        return
    if rows:
        click.echo(f"model {model}, preset {rows[0]['preset']}")
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        value = f"{r['value']}" + (f" {r['unit']}" if r["unit"] else "")
        click.echo(f"{r['name']:<{width}}  {value:<16}  {r['doc']}")
        if sources and r["source"]:
            click.echo(f"{'':<{width}}  source: {r['source']}")


__all__ = ["command"]
