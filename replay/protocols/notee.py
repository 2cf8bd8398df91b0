"""``none``: no TEE. Host<->GPU copies are priced by the hardware model like every other protocol.

Each H2D/D2H copy ``M`` becomes one PCIe transfer on its direction's lane (``model.pcie_ns``),
which inherits ``M``'s prerequisites; ``M`` stays on its stream with zero duration and completes
``model.pcie_latency_ns`` after the transfer. No bounce buffers, no crypto, no extra submission
cost, copies stay asynchronous for the host. Collectives of a multi-rank graph are priced as
plaintext on the model's GPU-to-GPU topology (:func:`.collectives.price_plain`). Everything else
keeps its traced duration.
"""

from __future__ import annotations

import numpy as np

from fastrack.schema import CopyDir, DepKind
from replay.graph import LaneType, OpGraph

from .base import Protocol
from .collectives import price_plain
from .copies import host_copies, launchers
from .editor import GraphEditor, copy_in_edges, lanes_required
from .kinds import DerivedKind


class NoTEE(Protocol):
    name = "none"
    description = "no TEE: plain DMA over PCIe, priced by the same model as the TEE protocols"

    def apply(self, graph: OpGraph, model) -> OpGraph:
        g = model.add_lanes(price_plain(graph, model))
        ed = GraphEditor(g)
        cp = host_copies(g, launchers(g, ed.edge_dst))
        if len(cp) == 0:
            return ed.build()
        h2d = cp.direction == CopyDir.H2D
        lane = np.where(h2d, model.lane_index(g, cp.rank, LaneType.PCIE_H2D),
                        model.lane_index(g, cp.rank, LaneType.PCIE_D2H))
        lanes_required(lane, "PCIe")
        dur = np.where(h2d, model.pcie_ns(cp.nbytes, CopyDir.H2D), model.pcie_ns(cp.nbytes, CopyDir.D2H))
        lat = np.where(h2d, model.pcie_latency_ns(CopyDir.H2D), model.pcie_latency_ns(CopyDir.D2H))
        xfer = ed.add_nodes(DerivedKind.PCIE, cp.node, lane, dur, cp.nbytes)
        copy_in_edges(ed, cp.node, xfer)
        ed.add_edges(xfer, cp.node, DepKind.DATA, lat)
        ed.dur[cp.node] = 0
        return ed.build()


NONE = NoTEE()
