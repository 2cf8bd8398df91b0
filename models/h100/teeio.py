"""TEE-IO and NVLS prices of the H100 model (mixed into :class:`fastrack_h100.model.H100Model`).

TEE-IO (the ``tee-io`` protocol, replay/protocols/teeio.py; docs/protocols.md "TEE-IO"): the GPU is a
TDISP device interface of the confidential VM, DMA lands in private memory, and the PCIe link
encrypts every TLP with IDE (AES-GCM in the link's IDE engines, at line rate). What IDE costs is
link bytes: each IDE TLP carries an IDE prefix, a MAC (one per ``ide_tlps_per_mac`` TLPs) and
optionally a plaintext CRC. The preset's PCIe bandwidth is an *achieved* payload rate, which
already pays each TLP's ``tlp_overhead_bytes``; IDE adds ``e`` bytes per TLP on the wire, so a
transfer of ``b`` bytes in ``t = ceil(b / tlp_payload_bytes)`` TLPs occupies the link as

    b + ceil(t * e * tlp_payload_bytes / (tlp_payload_bytes + tlp_overhead_bytes))

payload bytes would (the extra wire bytes converted at the achieved payload-per-wire-byte ratio),
with ``e = ide_prefix_bytes + ide_pcrc_bytes + ide_mac_bytes / ide_tlps_per_mac`` (integer
arithmetic: the numerator is ``t * (k * (prefix + pcrc) + mac) * payload``, ``k`` =
``ide_tlps_per_mac``). GPU-to-GPU traffic inside a node crosses NVLink encrypted (NVLE):
``nvlink_ratio`` of the plaintext bandwidth and ``nvlink_latency_ns`` more per ring step; over
PCIe peer-to-peer (``topology.link = "pcie"``) it pays the IDE bytes instead; between nodes it is
priced as without TEE (network encryption is not modelled).

NVLS (features CC switches off, replay/protocols/featuresoff.py): an all-reduce inside one
NVSwitch node run with NVLink multicast takes ``ceil(bytes per rank / nvls_allreduce_gb_s) +
nvls_latency_ns``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replay.model import NsArray, bytes_ns, ceil_div


class TeeIoPrices:
    """The prices of the optional ``[tee_io]`` and ``[features]`` tables (``self.p``: H100Params)."""

    p: Any

    # ---- TEE-IO: PCIe IDE
    @property
    def prices_tee_io(self) -> bool:
        """Does the preset carry the ``[tee_io]`` table?"""
        return self.p.tee_io is not None

    def _tee_io(self):
        t = self.p.tee_io
        if t is None:
            raise AttributeError("this preset has no [tee_io] table")
        return t

    def ide_wire_bytes(self, nbytes: Any) -> NsArray:
        """Payload-equivalent link occupancy of a DMA transfer of ``nbytes`` under PCIe IDE (module doc)."""
        t = self._tee_io()
        b = np.maximum(np.asarray(nbytes, dtype=np.int64), 0)
        pay = int(t.tlp_payload_bytes)
        tlps = ceil_div(b, pay)
        k = int(t.ide_tlps_per_mac)
        per_group = k * (int(t.ide_prefix_bytes) + int(t.ide_pcrc_bytes)) + int(t.ide_mac_bytes)
        extra = ceil_div(tlps * np.int64(per_group * pay), k * (pay + int(t.tlp_overhead_bytes)))
        return (b + extra).astype(np.int64)

    def ide_pcie_ns(self, nbytes: Any, direction) -> NsArray:
        """PCIe occupancy of ``nbytes`` under IDE: the plain price of its wire bytes."""
        return self.pcie_ns(self.ide_wire_bytes(nbytes), direction)

    def ide_latency_ns(self) -> int:
        return int(self._tee_io().ide_latency_ns)

    def tee_io_submit_ns(self) -> int:
        return int(self._tee_io().submit_ns)

    @property
    def tee_io_multicast(self) -> bool:
        return bool(self._tee_io().multicast)

    # ---- TEE-IO: GPU-to-GPU
    def _link_kind(self, n_gpus: int) -> str:
        t = self.p.topology
        return "network" if n_gpus > t.gpus_per_node else str(t.link)

    def tee_io_link_bytes(self, nbytes: Any, n_gpus: int) -> NsArray:
        """Payload-equivalent bytes of ``nbytes`` sent by one GPU of a ring of ``n_gpus`` under TEE-IO:
        NVLink: divided by ``nvlink_ratio``; PCIe peer-to-peer: the IDE wire bytes; network: unchanged."""
        b = np.maximum(np.asarray(nbytes, dtype=np.int64), 0)
        kind = self._link_kind(int(n_gpus))
        if kind == "nvlink":
            return np.ceil(b / float(self._tee_io().nvlink_ratio)).astype(np.int64)
        if kind == "pcie":
            return self.ide_wire_bytes(b)
        return b

    def tee_io_link_latency_ns(self, n_gpus: int) -> int:
        """Latency TEE-IO adds to one ring step: NVLE's on NVLink, IDE's over PCIe, none on the network."""
        kind = self._link_kind(int(n_gpus))
        t = self._tee_io()
        return int(t.nvlink_latency_ns) if kind == "nvlink" else int(t.ide_latency_ns) if kind == "pcie" else 0

    # ---- NVLS (the no-TEE reference's all-reduce where the NVSwitch supports multicast)
    def nvls_available(self, n_gpus: int) -> bool:
        """May an all-reduce of ``n_gpus`` ranks run as NVLS (inside one NVSwitch node, ``[features] nvls``)?"""
        f, t = self.p.features, self.p.topology
        return bool(f is not None and f.nvls and t.link == "nvlink" and 2 <= int(n_gpus) <= int(t.gpus_per_node))

    def nvls_allreduce_ns(self, nbytes: Any, n_gpus: int) -> NsArray:
        """Time of an NVLS all-reduce of ``nbytes`` per rank on ``n_gpus`` GPUs (only where available)."""
        f = self.p.features
        if not self.nvls_available(n_gpus):
            raise AttributeError(f"NVLS is not available for {int(n_gpus)} GPUs on this preset")
        return bytes_ns(nbytes, f.nvls_allreduce_gb_s) + np.int64(f.nvls_latency_ns)

    def registered_pinned(self) -> str:
        """Which pinned copies use cudaHostRegister'd memory (``[features] registered_pinned``; none without it)."""
        f = self.p.features
        return "none" if f is None else str(f.registered_pinned)
