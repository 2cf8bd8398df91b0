"""``none``: no TEE. Host<->GPU copies are priced by the hardware model like every other protocol.

Each H2D/D2H copy ``M`` becomes one PCIe transfer on its direction's lane (``model.pcie_ns``),
which inherits ``M``'s prerequisites; ``M`` stays on its stream with zero duration and completes
``model.pcie_latency_ns`` after the transfer. No bounce buffers, no crypto, no extra submission
cost. Copies from pinned (or unknown) host memory stay asynchronous for the host.

Copies from *pageable* host memory go through the driver's pinned staging buffer [S19]:

* H2D: the calling thread first waits for the stream's earlier work (it inherits ``M``'s
  prerequisites), then copies the data into staging (``host_staging``, ``model.staging_copy_ns``)
  and returns; the DMA streams behind that copy (it starts with it, and the copy completes
  ``latency`` after the later of the two);
* D2H: the DMA lands in staging and the calling thread copies it out as it lands (the
  ``host_staging`` node starts with the DMA); the call returns only once the copy completed and
  the data is out of staging (a ``sync_wait`` after both).

A pageable copy without a launching call (no host thread to charge) is treated as pinned.
Collectives of a multi-rank graph are priced as plaintext on the model's GPU-to-GPU topology
(:func:`.collectives.price_plain`), an all-reduce inside an NVSwitch node as NVLS where multicast
makes it faster (:func:`.featuresoff.price_reference`; CC switches multicast off). Everything else keeps its traced duration.
"""

from __future__ import annotations

import numpy as np

from fastrack_core.schema import CopyDir, DepKind, HostMem
from replay.graph import LaneType, OpGraph

from .base import Protocol
from .featuresoff import price_reference
from .copies import host_copies, launchers
from .editor import GraphEditor, copy_in_edges, lanes_required
from .kinds import DerivedKind
from .submit import redirect_program


def staging_ns(model, nbytes) -> np.ndarray:
    """The model's pageable staging copy (0 for a model that does not price it)."""
    f = getattr(model, "staging_copy_ns", None)
    return np.zeros(np.shape(nbytes), np.int64) if f is None else np.asarray(f(nbytes), np.int64)


class NoTEE(Protocol):
    name = "none"
    description = "no TEE: plain DMA over PCIe (pageable copies staged by the calling thread), priced by the " \
                  "same model as the TEE protocols"

    def apply(self, graph: OpGraph, model) -> OpGraph:
        g = model.add_lanes(price_reference(graph, model))  # NVLS where the NVSwitch multicasts
        ed = GraphEditor(g)
        cp = host_copies(g, launchers(g))
        if len(cp) == 0:
            return ed.build()
        h2d = cp.direction == CopyDir.H2D
        lane = np.where(h2d, model.lane_index(g, cp.rank, LaneType.PCIE_H2D),
                        model.lane_index(g, cp.rank, LaneType.PCIE_D2H))
        lanes_required(lane, "PCIe")
        dur = np.where(h2d, model.pcie_ns(cp.nbytes, CopyDir.H2D), model.pcie_ns(cp.nbytes, CopyDir.D2H))
        lat = np.where(h2d, model.pcie_latency_ns(CopyDir.H2D), model.pcie_latency_ns(CopyDir.D2H)).astype(np.int64)
        xfer = ed.add_nodes(DerivedKind.PCIE, cp.node, lane, dur, cp.nbytes)
        copy_in_edges(ed, cp.node, xfer)
        ed.add_edges(xfer, cp.node, DepKind.DATA, lat)
        _pageable_staging(ed, model, cp, h2d, lat)
        ed.set_dur(cp.node, 0)
        return ed.build()


def _pageable_staging(ed: GraphEditor, model, cp, h2d: np.ndarray, lat: np.ndarray) -> None:
    g = ed.g
    sel = np.flatnonzero((g.host_mem[cp.node] == HostMem.PAGEABLE) & (cp.launcher >= 0))
    if sel.size == 0:
        return
    sel = sel[np.lexsort((cp.node[sel], cp.launcher[sel]))]  # per call, copies in node order
    node, call, up = cp.node[sel], cp.launcher[sel], h2d[sel]
    host_lane = g.lane[call]
    stage = ed.add_nodes(DerivedKind.HOST_STAGING, node, host_lane, staging_ns(model, cp.nbytes[sel]),
                         cp.nbytes[sel], g.order[call])
    copy_in_edges(ed, node, stage)  # H2D: stream sync first; D2H: starts with the DMA
    down = np.flatnonzero(~up)
    wait = np.full(sel.size, -1, np.int64)
    wait[down] = ed.add_nodes(DerivedKind.SYNC_WAIT, node[down], host_lane[down], 0)
    ed.add_edges(stage[down], wait[down], DepKind.PROGRAM, 0)
    ed.add_edges(node[down], wait[down], DepKind.SYNC, 0)
    ed.add_edges(stage[up], node[up], DepKind.DATA, lat[sel][up])  # the DMA ends after the staged data
    end = np.where(up, stage, wait)  # the host node that ends each copy on the calling thread
    tail = np.arange(ed.n0, dtype=np.int64)
    first = np.r_[True, call[1:] != call[:-1]]
    prev = np.where(first, call, np.r_[-1, end[:-1]])
    ed.add_edges(prev, stage, DepKind.PROGRAM, 0)
    last = np.r_[first[1:], True]
    tail[call[last]] = end[last]
    redirect_program(ed, tail)


NONE = NoTEE()
