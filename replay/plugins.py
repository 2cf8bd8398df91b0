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
* group ``fastrack.importers``: ``name = "package.module:OBJECT"``, an input format: a
  ``tracegen.importers.Importer`` (the interface and its contract are stated there), the same
  entries ``tracegen convert`` and its ``--format`` read. ``replay`` uses the part it needs, by
  duck typing (it never imports tracegen): ``sniff_bytes``, ``order``, ``sniff(path, head)`` and
  ``load(path) -> fastrack_core.traceio.Trace`` (:func:`importer_for`).

Any installed distribution may add entries (``[project.entry-points."fastrack.models"]`` in its
pyproject.toml); names are unique across distributions. Unknown names raise
:class:`~fastrack_core.errors.PluginError` listing what is installed.
"""

from __future__ import annotations


import functools
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from fastrack_core.errors import PluginError, closest, shown
from fastrack_core.sniff import PARQUET_MAGIC, head, is_nsys_report

MODELS_GROUP = "fastrack.models"
DEFAULT_MODEL = "h100"  # the model every command uses unless told otherwise (shipped with Fastrack)
PROTOCOLS_GROUP = "fastrack.protocols"
EXPORTERS_GROUP = "fastrack.exporters"
IMPORTERS_GROUP = "fastrack.importers"


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
        raise PluginError(f"unknown {what} {shown(name)}{closest(name, eps)}; installed {what}s: {known}")
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
    """Names of the installed input formats (``tracegen convert``'s and replay's), sorted."""
    return sorted(_entries(IMPORTERS_GROUP))


def load_importer(name: str) -> Any:
    """The input format registered as ``name`` (a ``tracegen.importers.Importer``, checked here by
    what replay uses of it)."""
    obj = load_entry(IMPORTERS_GROUP, "importer", name)
    if isinstance(obj, type):
        try:
            obj = obj()
        except TypeError as exc:
            raise PluginError(f"importer '{name}': cannot instantiate {obj.__name__}: {exc}") from exc
    if not (callable(getattr(obj, "sniff", None)) and callable(getattr(obj, "load", None))):
        raise PluginError(f"importer '{name}' is {obj!r}, which has no sniff(path, head) and load(path)")
    n = getattr(obj, "sniff_bytes", None)
    if not (isinstance(n, int) and n > 0) or not isinstance(getattr(obj, "order", None), int):
        raise PluginError(f"importer '{name}' ({obj!r}) declares no positive int sniff_bytes and int order")
    return obj


def importers() -> list[Any]:
    """Every installed input format, in detection order (ascending ``(order, name)``)."""
    found = [(load_importer(n), n) for n in available_importers()]
    return [imp for imp, _ in sorted(found, key=lambda pair: (pair[0].order, pair[1]))]


def importer_for(path: str) -> Any | None:
    """The installed importer that recognises the file ``path`` (the first, in detection order,
    whose ``sniff`` accepts the file's first ``sniff_bytes`` bytes), or None: a Parquet file (the
    trace format) needs none and scans no plug-in, and neither does an Nsight Systems report (the
    Parquet reader's hint says what to do with it); a file no importer recognises is left to the
    Parquet reader (whose error says what it is not). A format replay does not read directly is
    returned too: its ``load`` refuses with one line. An importer that fails to load raises
    PluginError."""
    try:
        with open(path, "rb") as fh:
            if fh.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC:
                return None
    except OSError:
        return None  # the reader reports it
    if is_nsys_report(path):
        return None
    found = importers()
    first = head(path, max((imp.sniff_bytes for imp in found), default=1))
    for imp in found:
        if imp.sniff(path, first[: imp.sniff_bytes]):
            return imp
    return None


__all__ = ["installed", "available_importers", "importers", "importer_for", "load_importer", "available_models", "available_protocols", "load_model",
           "load_protocol", "ProtocolAlias", "DEFAULT_MODEL", "EXPORTERS_GROUP", "IMPORTERS_GROUP", "MODELS_GROUP", "PROTOCOLS_GROUP"]
