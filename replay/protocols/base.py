"""The protocol plug-in interface: a pure function ``(graph, model) -> new graph``.

A protocol decides what work exists (which nodes and edges a transfer becomes); the hardware
model prices that work; the engine schedules it. Contract of :meth:`Protocol.apply`:

* the input graph is never modified (numpy arrays included); a new :class:`OpGraph` is returned;
* deterministic: the same graph and model always give the same output;
* every derived node keeps ``origin`` (the trace op it derives from), gets a kind code >= 16
  labelled in ``OpGraph.kind_names`` and a :class:`~replay.graph.Category`;
* bytes are conserved: the bytes of the chunks a copy becomes on each stage sum to the copy's.

Register an instance (or a class with a no-argument constructor) under the
``fastrack.protocols`` entry-point group.
"""

from __future__ import annotations

import abc

from replay.graph import OpGraph


class Protocol(abc.ABC):
    """Base class of protocols. Subclasses set ``name``/``description`` and implement ``apply``."""

    name: str = ""
    description: str = ""

    @abc.abstractmethod
    def apply(self, graph: OpGraph, model) -> OpGraph:
        """Transform ``graph`` under hardware ``model`` (a :class:`replay.model.HardwareModel`)."""

    def parallel_auth_modes(self) -> frozenset[bool]:
        """The GPU-authentication modes the transform uses: ``True`` parallel, ``False`` serial;
        both when it mixes them (say, host copies serial and GPU-to-GPU messages parallel), none
        when it authenticates nothing (the default). Exporters to simulators with one mode per
        GPU read it (the gem5 ``FastrackGpuAuth.parallel``)."""
        return frozenset()

    def __call__(self, graph: OpGraph, model) -> OpGraph:
        return self.apply(graph, model)

    def __repr__(self) -> str:
        return f"<protocol {self.name}>"
