"""The exporter plug-in interface: hand a replay to another simulator, as files.

``replay export-<name> TRACE --protocol P [--model M] [--preset X] [--set K=V] -o DIR`` replays
TRACE (:mod:`replay.frontend.export` does it, and owns the command line) and asks the exporter registered
as ``<name>`` in the ``fastrack.exporters`` entry-point group to write its files into a new,
empty directory, which replaces DIR only once every file is written. An exporter never replays,
parses options or touches DIR itself: it checks what it supports and writes files.

A hardware-model package ships the exporters of its simulator models (the H100 plug-in ships
``gem5``: ``replay export-gem5``). Register an instance (or a class with a no-argument
constructor):

    [project.entry-points."fastrack.exporters"]
    gem5 = "fastrack_h100.gem5export:GEM5"

The model-free files (``graph.bin``, ``lanes.csv``, ``expected.json``) come from
:mod:`replay.exporters.graphfile`; an exporter that uses them calls
:func:`replay.exporters.graphfile.write_graph_files`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay.pipeline.engine import Schedule
from replay.graph import OpGraph
from replay.names import CAPTURED
from fastrack_core.errors import PluginError
from replay.plugins import EXPORTERS_GROUP, installed, load_entry
from replay.pipeline.results import ReplayResult


@dataclass(frozen=True)
class ExportJob:
    """A finished replay to export: the transformed graph, its schedule and summary, and what it
    was replayed from (``model_info``: ``{"model", "preset", "params", "digest"}``, ``None`` for
    the captured replay, which uses no model)."""

    graph: OpGraph
    schedule: Schedule
    result: ReplayResult
    trace: str = ""
    protocol: str = CAPTURED
    model_info: dict[str, Any] | None = None

    @property
    def params(self) -> dict[str, dict[str, Any]] | None:
        """The model's parameters, nested by table (``None`` without a model)."""
        return self.model_info.get("params") if self.model_info else None

    def identity(self) -> dict[str, Any]:
        """Where the replay came from: trace, protocol, model, preset, parameter digest."""
        info = self.model_info or {}
        return {"trace": str(self.trace), "protocol": self.protocol, "model": info.get("model"),
                "preset": info.get("preset"), "params_digest": info.get("digest")}


class Exporter(abc.ABC):
    """Base class of exporters. Subclasses set the class attributes and implement :meth:`write`.

    Class attributes:
        name: the registry name; the command is ``replay export-<name>``.
        description: one line, the command's help.
        protocols: the protocols it supports (shown in the help; :meth:`check` enforces them).
        files: the names of the files it writes into the export directory. An existing
            directory holding anything else is never replaced.
    """

    name: str = ""
    description: str = ""
    protocols: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    def check(self, protocol: str, model: str) -> None:
        """Refuse, before anything is replayed, a protocol or model it does not support (raise a
        :class:`~fastrack_core.errors.FastrackError`). The default accepts everything."""
        return None

    @abc.abstractmethod
    def write(self, out: Path, job: ExportJob) -> dict[str, Any]:
        """Write :attr:`files` into the new, empty directory ``out``; raise a
        :class:`~fastrack_core.errors.FastrackError` for anything it cannot represent (nothing is then
        kept). Returns a summary for :meth:`done_message`."""

    def done_message(self, out_dir: str | Path, summary: dict[str, Any]) -> str:
        """The line printed after a successful export."""
        return f"wrote {out_dir}"

    def __repr__(self) -> str:
        return f"<exporter {self.name}>"


# ----------------------------------------------------------------------------- the registry

def available_exporters() -> list[str]:
    """Names of the installed exporters, sorted (each is the command ``replay export-<name>``)."""
    return sorted(installed(EXPORTERS_GROUP))


def load_exporter(name: str):
    """The exporter registered as ``name`` (a :class:`replay.exporters.exporter.Exporter`)."""
    obj = load_entry(EXPORTERS_GROUP, "exporter", name)
    if isinstance(obj, type) and issubclass(obj, Exporter):
        obj = obj()
    if not isinstance(obj, Exporter):
        raise PluginError(f"exporter '{name}' is {obj!r}, not a replay.exporters.exporter.Exporter")
    return obj


__all__ = ["Exporter", "ExportJob", "available_exporters", "load_exporter"]
