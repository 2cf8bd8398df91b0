"""Plug-in registries: hardware models and protocols by name, through entry points.

* group ``fastrack.models``: ``name = "package.module:ModelClass"`` (a subclass of
  :class:`replay.model.HardwareModel`);
* group ``fastrack.protocols``: ``name = "package.module:OBJECT"``, a protocol object (callable
  ``(graph, model) -> graph``, see :class:`replay.protocols.Protocol`) or a class building one;
* group ``fastrack.exporters``: ``name = "package.module:OBJECT"``, an
  :class:`replay.exporter.Exporter` (or a class building one); it becomes the command
  ``replay export-<name>``.

Any installed distribution may add entries (``[project.entry-points."fastrack.models"]`` in its
pyproject.toml); names are unique across distributions. Unknown names raise
:class:`~fastrack.errors.PluginError` listing what is installed.
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from fastrack.errors import PluginError

MODELS_GROUP = "fastrack.models"
DEFAULT_MODEL = "h100"  # the model every command uses unless told otherwise (shipped with Fastrack)
PROTOCOLS_GROUP = "fastrack.protocols"
EXPORTERS_GROUP = "fastrack.exporters"


@functools.lru_cache(maxsize=None)
def _entries(group: str) -> dict[str, EntryPoint]:
    """Installed plug-ins of a group (scanned once per process: sweeps load them per point)."""
    return {ep.name: ep for ep in entry_points(group=group)}


def available_models() -> list[str]:
    """Names of the installed hardware models, sorted."""
    return sorted(_entries(MODELS_GROUP))


def available_protocols() -> list[str]:
    """Names of the installed protocols, sorted."""
    return sorted(_entries(PROTOCOLS_GROUP))


def available_exporters() -> list[str]:
    """Names of the installed exporters, sorted (each is the command ``replay export-<name>``)."""
    return sorted(_entries(EXPORTERS_GROUP))


def _load(group: str, what: str, name: str) -> Any:
    eps = _entries(group)
    if name not in eps:
        known = ", ".join(sorted(eps)) or "(none installed)"
        raise PluginError(f"unknown {what} '{name}'; installed {what}s: {known}")
    try:
        return eps[name].load()
    except Exception as exc:  # a broken third-party plug-in: say which one
        raise PluginError(f"{what} '{name}' ({eps[name].value}) failed to load: {type(exc).__name__}: {exc}") from exc


def load_model(name: str) -> type:
    """The hardware-model class registered as ``name``; build it with ``.from_preset(preset, overrides)``."""
    from replay.model import HardwareModel

    cls = _load(MODELS_GROUP, "model", name)
    if not (isinstance(cls, type) and issubclass(cls, HardwareModel)):
        raise PluginError(f"model '{name}' is {cls!r}, not a subclass of replay.model.HardwareModel")
    return cls


def load_protocol(name: str):
    """The protocol registered as ``name``: call it as ``protocol(graph, model) -> new graph``."""
    obj = _load(PROTOCOLS_GROUP, "protocol", name)
    if isinstance(obj, type):
        try:
            obj = obj()
        except TypeError as exc:
            raise PluginError(f"protocol '{name}': cannot instantiate {obj.__name__}: {exc}") from exc
    if not callable(obj):
        raise PluginError(f"protocol '{name}' is {obj!r}, which is not callable as protocol(graph, model)")
    return obj


def load_exporter(name: str):
    """The exporter registered as ``name`` (a :class:`replay.exporter.Exporter`)."""
    from replay.exporter import Exporter

    obj = _load(EXPORTERS_GROUP, "exporter", name)
    if isinstance(obj, type) and issubclass(obj, Exporter):
        obj = obj()
    if not isinstance(obj, Exporter):
        raise PluginError(f"exporter '{name}' is {obj!r}, not a replay.exporter.Exporter")
    return obj


__all__ = ["available_exporters", "available_models", "available_protocols", "load_exporter", "load_model",
           "load_protocol", "DEFAULT_MODEL", "EXPORTERS_GROUP", "MODELS_GROUP", "PROTOCOLS_GROUP"]
