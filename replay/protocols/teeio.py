"""``tee-io``: TEE-IO, the GPU as a trusted device of the confidential VM (TDISP with PCIe IDE link
encryption: Blackwell with Intel TDX Connect or AMD SEV-TIO; docs/protocols.md "TEE-IO").

Under TDISP the GPU's device interface is locked to the confidential VM and attested; its DMA
carries the IDE stream's T bit and the trusted IOMMU lets it into the VM's private memory
([S60]). So there is no bounce buffer and no CPU AES-GCM: a copy is the plain DMA of ``none``,
and the link encrypts it in its IDE engines at line rate. What the link encryption costs is
bytes and latency, both priced by the model (models/h100/teeio.py): every transfer's PCIe
occupancy is the plain price of its IDE wire bytes (prefix, MAC and optional PCRC per TLP,
``model.ide_pcie_ns``) and its latency grows by ``model.ide_latency_ns()``. GPU-to-GPU traffic
of a multi-rank graph stays NCCL's plaintext algorithm on NVLink encrypted by the link (NVLE,
[S61]): each collective's bytes become ``model.tee_io_link_bytes`` (NVLink: over
``tee_io.nvlink_ratio``; PCIe peer-to-peer: IDE bytes) and each step pays
``model.tee_io_link_latency_ns``; no copy-engine staging, no per-message pushes. Multicast (NVLS)
stays off unless ``tee_io.multicast`` (then an all-reduce takes NVLS where the no-TEE reference
would, :mod:`.featuresoff`). Registered host memory works (DMA reaches private memory).
A submission costs ``tee_io.submit_ns`` more than without TEE (0 by default: the pushbuffer is
private memory the GPU reads over IDE), charged as the CC submission is (:mod:`.submit`). The VM
is still a CPU TEE: host work is scaled by the model's ``host_work_ratio`` as under the CC path
(:func:`.submit.scale_host_work`); the doorbell is a private MMIO write, so no VM exits are charged.

The transform: collectives priced as above, then the submission (when priced), then exactly the
``none`` transform (:mod:`.notee`: PCIe lanes, pageable staging, asynchronous pinned copies) with
the model seen through its IDE prices. A model without TEE-IO prices (a third-party model) is
refused by name unless it has none of them at all, in which case the link is priced as
plaintext and a warning says so once.
"""

from __future__ import annotations

import logging

import numpy as np

from fastrack_core.errors import ConfigError
from fastrack_core.schema import OpKind
from replay.graph import OpGraph

from .base import Protocol
from .collectives import find, wire
from .editor import GraphEditor
from .featuresoff import multicast_off, nvls_instances
from .notee import NONE
from .submit import add_submission, redirect_program, scale_host_work

log = logging.getLogger(__name__)
_WARNED: set[str] = set()


class _IdeView:
    """The model as ``none`` sees it under TEE-IO: PCIe priced by IDE wire bytes and latency;
    collectives already priced (``prices_links`` False, so ``none`` keeps their durations)."""

    prices_links = False

    def __init__(self, model):
        self._m = model

    def __getattr__(self, name):
        return getattr(self._m, name)

    def pcie_ns(self, nbytes, direction):
        return self._m.ide_pcie_ns(nbytes, direction)

    def pcie_latency_ns(self, direction) -> int:
        return int(self._m.pcie_latency_ns(direction)) + int(self._m.ide_latency_ns())


class _NvleNvls:
    """NVLS prices of the model with NVLink encryption (for ``tee_io.multicast = true``)."""

    def __init__(self, model):
        self._m = model

    def nvls_available(self, n_gpus: int) -> bool:
        return self._m.nvls_available(n_gpus)

    def nvls_allreduce_ns(self, nbytes, n_gpus: int):
        m = self._m
        return np.asarray(m.nvls_allreduce_ns(m.tee_io_link_bytes(nbytes, n_gpus), n_gpus), np.int64) + \
            np.int64(m.tee_io_link_latency_ns(n_gpus))


class _FlatSubmit:
    """``submit_ns`` of one flat TEE-IO submission cost, whatever the kind (for :func:`.submit.add_submission`)."""

    def __init__(self, cost: int):
        self.cost = int(cost)

    def submit_ns(self, kind):
        return np.full(np.shape(kind), self.cost, np.int64)


def tee_io_collectives(graph: OpGraph, model) -> OpGraph:
    """Every collective instance priced on the model's topology under TEE-IO (module doc). Sizes a
    trace lacks are inferred with the plaintext prices, so the encryption's cost comes on top of
    the measured duration. Unchanged when the graph has no collectives or the model prices no links."""
    if not np.any(graph.kind == OpKind.COLLECTIVE) or not model.prices_links:
        return graph
    col = find(graph, model)
    if len(col) == 0:
        return graph
    wb, steps = wire(col.ctype, col.algo, col.n, col.nbytes)
    t = np.zeros(len(col), np.int64)
    for k in np.unique(col.n).tolist():
        m = col.n == k
        lat = int(model.link_latency_ns(int(k))) + int(model.tee_io_link_latency_ns(int(k)))
        t[m] = np.asarray(model.link_ns(model.tee_io_link_bytes(wb[m], int(k)), int(k)), np.int64) + steps[m] * lat
    if model.tee_io_multicast:
        nv = nvls_instances(graph, col, _NvleNvls(model), t)
        t = np.where(nv >= 0, nv, t)
    dur = graph.dur.copy()
    dur[col.node] = t[col.inst]
    return graph.replace(dur=dur)


def _tee_io_model(model, name: str):
    """``model`` if it prices TEE-IO; a plaintext stand-in (warned once) for a model with no TEE-IO
    prices at all; ConfigError for an H100-style model whose preset lacks the ``[tee_io]`` table."""
    priced = getattr(model, "prices_tee_io", None)
    if priced is None:
        key = str(getattr(model, "name", type(model).__name__))
        if key not in _WARNED:
            _WARNED.add(key)
            log.warning("protocol '%s': model '%s' prices no TEE-IO (IDE/NVLE); its link encryption is taken as "
                        "free (plaintext DMA and collectives)", name, key)
        return None
    if not priced:
        raise ConfigError(f"protocol '{name}' needs the preset's [tee_io] table (IDE and NVLink-encryption prices, "
                          "docs/protocols.md); this preset has none: add it or extend a preset that has it",
                          path=getattr(model, "preset_path", None) or None)
    return model


class TeeIO(Protocol):
    name = "tee-io"
    description = ("TEE-IO (TDISP + PCIe IDE: Blackwell with TDX Connect or SEV-TIO): DMA straight into private "
                   "memory, no bounce buffer, no CPU crypto; IDE prefix/MAC bytes and latency on every PCIe "
                   "transfer; NVLink encrypted (NVLE) between GPUs")
    # the features of .featuresoff this protocol keeps or loses (replay list protocols)
    features_note = "registered host memory works; multicast (NVLS) only with tee_io.multicast = true"

    def apply(self, graph: OpGraph, model) -> OpGraph:
        m = _tee_io_model(model, self.name)
        if m is None:  # a model without TEE-IO prices: plain DMA and plaintext collectives, as none
            return NONE.apply(multicast_off(graph), model)
        if not m.tee_io_multicast:
            graph = multicast_off(graph)
        g = tee_io_collectives(graph, m)
        cost = int(m.tee_io_submit_ns())
        ratio = float(getattr(m, "host_work_ratio", 1.0))
        if cost > 0 or ratio != 1.0:
            ed = GraphEditor(g)
            scale_host_work(ed, m)  # the CPU TEE's own cost on host work ([tee], as under the CC path)
            if cost > 0:
                redirect_program(ed, add_submission(ed, _FlatSubmit(cost)))
            g = ed.build()
        return NONE.apply(g, _IdeView(m))


TEE_IO = TeeIO()

__all__ = ["TeeIO", "TEE_IO", "tee_io_collectives"]
