"""Plug-in registries: hardware models and protocols by name, through entry points.

* group ``fastrack.models``: ``name = "package.module:ModelClass"`` (a subclass of
  :class:`replay.model.HardwareModel`);
* group ``fastrack.protocols``: ``name = "package.module:OBJECT"``, a protocol object (callable
  ``(graph, model) -> graph``, see :class:`replay.protocols.Protocol`), a class building one, or
  a :class:`ProtocolAlias` (another name, resolved when loaded). ``NAME+OPT[+OPT]`` loads
  ``NAME`` and applies options through its ``with_options(("OPT", ...))`` (a protocol without
  that method takes no options);
* group ``fastrack.exporters``: ``name = "package.module:OBJECT"``, an
  :class:`replay.exporters.exporter.Exporter` (or a class building one); it becomes the command
  ``replay export-<name>``;
* group ``fastrack.importers``: ``name = "package.module:OBJECT"``, an object with ``sniff(path) ->
  bool`` and ``load(path) -> fastrack_core.traceio.Trace``: a trace format ``replay`` reads directly, in
  memory (tracegen registers ``kineto``: Kineto JSON; replay never imports tracegen by name).

Any installed distribution may add entries (``[project.entry-points."fastrack.models"]`` in its
pyproject.toml); names are unique across distributions. Unknown names raise
:class:`~fastrack_core.errors.PluginError` listing what is installed.
"""

from __future__ import annotations


import functools
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from fastrack_core.errors import PluginError, shown

MODELS_GROUP = "fastrack.models"
DEFAULT_MODEL = "h100"  # the model every command uses unless told otherwise (shipped with Fastrack)
PROTOCOLS_GROUP = "fastrack.protocols"
EXPORTERS_GROUP = "fastrack.exporters"
IMPORTERS_GROUP = "fastrack.importers"
PARQUET_MAGIC = b"PAR1"


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


def installed(group: str) -> dict[str, str]:
    """Name -> ``module:object`` of every installed plug-in of ``group`` (without loading any)."""
    return {n: ep.value for n, ep in sorted(_entries(group).items())}


def load_entry(group: str, what: str, name: str) -> Any:
    eps = _entries(group)
    if name not in eps:
        known = ", ".join(sorted(eps)) or "(none installed)"
        raise PluginError(f"unknown {what} {shown(name)}; installed {what}s: {known}")
    try:
        return eps[name].load()
    except Exception as exc:  # a broken third-party plug-in: say which one
        raise PluginError(f"{what} '{name}' ({eps[name].value}) failed to load: {type(exc).__name__}: {exc}") from exc


def load_model(name: str) -> type:
    """The hardware-model class registered as ``name``; build it with ``.from_preset(preset, overrides)``."""
    from replay.model import HardwareModel

    cls = load_entry(MODELS_GROUP, "model", name)
    if not (isinstance(cls, type) and issubclass(cls, HardwareModel)):
        raise PluginError(f"model '{name}' is {cls!r}, not a subclass of replay.model.HardwareModel")
    return cls


class ProtocolAlias:
    """An entry point that stands for another protocol name (which may carry ``+options``)."""

    def __init__(self, target: str):
        self.target = target

    def __repr__(self) -> str:
        return f"<alias of {self.target}>"


def load_protocol(name: str, _seen: tuple[str, ...] = ()):
    """The protocol registered as ``name`` (``NAME+OPT+...``: with options, see the module doc);
    call it as ``protocol(graph, model) -> new graph``."""
    base, *opts = [part.strip() for part in name.split("+")]
    if opts:
        obj = load_protocol(base, _seen)
        if not hasattr(obj, "with_options"):
            raise PluginError(f"protocol {shown(base)} takes no options (asked for {shown(name)})")
        return obj.with_options(tuple(opts))
    obj = load_entry(PROTOCOLS_GROUP, "protocol", name)
    if isinstance(obj, ProtocolAlias):
        if name in _seen:
            raise PluginError(f"protocol alias '{name}' refers to itself through {' -> '.join(_seen)}")
        return load_protocol(obj.target, (*_seen, name))
    if isinstance(obj, type):
        try:
            obj = obj()
        except TypeError as exc:
            raise PluginError(f"protocol '{name}': cannot instantiate {obj.__name__}: {exc}") from exc
    if not callable(obj):
        raise PluginError(f"protocol '{name}' is {obj!r}, which is not callable as protocol(graph, model)")
    return obj


def available_importers() -> list[str]:
    """Names of the installed trace importers (formats replay reads besides Parquet), sorted."""
    return sorted(_entries(IMPORTERS_GROUP))


def importer_for(path: str) -> Any | None:
    """The installed importer that recognises ``path``, or None: a Parquet file (the trace format)
    needs none and scans no plug-in; a file no importer recognises is left to the Parquet reader
    (whose error says what it is not). An importer that fails to load raises PluginError."""
    try:
        with open(path, "rb") as fh:
            if fh.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC:
                return None
    except OSError:
        return None  # the reader reports it
    for name in available_importers():
        obj = load_entry(IMPORTERS_GROUP, "importer", name)
        if not (callable(getattr(obj, "sniff", None)) and callable(getattr(obj, "load", None))):
            raise PluginError(f"importer '{name}' is {obj!r}, which has no sniff(path) and load(path)")
        if obj.sniff(path):
            return obj
    return None


__all__ = ["installed", "available_importers", "importer_for", "available_models", "available_protocols", "load_model",
           "load_protocol", "ProtocolAlias", "DEFAULT_MODEL", "EXPORTERS_GROUP", "IMPORTERS_GROUP", "MODELS_GROUP", "PROTOCOLS_GROUP"]
