"""The cycle-approximate NVIDIA H100 TEE model (confidential computing on, Hopper, PCIe Gen5).

Prices (integer ns, rounded up):

* PCIe, per direction (full duplex: separate H2D and D2H lanes): ``ceil(bytes / bandwidth)`` of
  link occupancy, plus ``latency_ns`` on the edge to the next stage (latency does not occupy
  the link, so pipelined chunks overlap their latencies);
* CPU AES-GCM: ``ceil(bytes / call_bytes) * call_overhead_ns + ceil(bytes / core_gb_s)``: a
  fixed cost per AES-GCM call and a per-core streaming rate, fitted to ``openssl speed -evp
  aes-256-gcm`` on one core (docs/model.md, "What is modelled"; the host presets differ only here);
* copy-engine secure copy (decrypt+verify, or encrypt+tag: one operation, one tag [S4]):
  ``op_overhead_ns + ceil(ceil(bytes / parts) / crypto_gb_s)`` per chunk, ``parts`` = 1, or
  ``gpu.copy_engines`` when the tag is computed in partial tags on every engine (Fastrack fix 2);
* pageable staging without CC: ``ceil(bytes / host.staging_copy_gb_s)`` on the calling thread;
* GPU authentication kernel: only with the optional ``[auth]`` table (Fastrack-paper emulation):
  ``op_overhead_ns + ceil(bytes / rate)`` with ``rate = serial_gb_s`` or
  ``parallel_gb_s_per_sm * sms``; 0 without it (the CE verifies the tag inside the copy);
* CC command submission, the driver path of one push per host call (docs/model.md "The driver
  path"): CPU AES-GCM of the pushbuffer segment and of the work-launch push
  (``submit.segment_bytes``, ``submit.wlc_push_bytes``), the doorbell's VM exits (``[tee]``), the
  work-launch round trip ``submit.<kind>_ns`` (priced by the most expensive kind the call submits);
  per copy a fixed crossing cost ``submit.crossing_ns`` on its direction's secure channel and the
  completion wait (CPU decryption of the ``submit.semaphore_bytes`` semaphore payload);
* the CPU TEE: traced host work scaled by ``tee.host_work_ratio`` under the CC protocols.

GPU-to-GPU (multi-GPU replays, docs/multi-gpu.md):

* link occupancy ``ceil(bytes / bandwidth)`` and a latency per ring step, for the bottleneck link
  of a ring of ``n`` GPUs: NVLink (or PCIe peer-to-peer where ``topology.link = "pcie"``) inside
  a node of ``topology.gpus_per_node`` GPUs, the network when the ring spans nodes;
* key rotation of the secure channels: the expected stall per message, ``rotation_stall_ns`` x the
  share of a key's lifetime the message uses (``(bytes/16 + invocations) / usage_limit`` or
  ``invocations / ivs_per_key``, whichever is larger), rounded up;
* the crypto page of encrypted staging: 4 KiB, one IV and tag each (a driver constant,
  ``replay.model.CRYPTO_PAGE_BYTES``); ``p2p.meta_bytes_per_page`` of IV and tag per page travel with
  the ciphertext;
* encrypted GPU-to-GPU messages: staging chunks of ``p2p.chunk_bytes``, a host synchronisation
  ``p2p.sync_ns`` per hand-off between engines (the CPU decrypts an encrypted completion
  semaphore), the copy-engine and submission prices above for the CE operations.

Resource lanes per rank: PCIe H2D, PCIe D2H, copy engines (``copy_engines`` servers), the
secure-copy channels of each direction (``GPU_CRYPTO`` key 0 = H2D, key 1 = D2H,
``ce.secure_channels_per_direction`` servers each), GPU authentication (one server), CPU crypto
workers (``threads`` servers; used only when ``threads > 1``). Host threads and streams come from the trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fastrack_core.schema import CopyDir, OpKind
from replay.graph import NO_LANE, LaneType, OpGraph
from replay.model import HardwareModel, NsArray, bytes_ns, ceil_div, direct_rule

from .params import CRYPTO_PAGE_BYTES, H100Params
from .teeio import TeeIoPrices  # TEE-IO and NVLS prices ([tee_io], [features]; models/h100/teeio.py)

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


class H100Model(TeeIoPrices, HardwareModel):
    """H100 with confidential computing: see the module docstring and docs/model.md."""

    name = "h100"
    Params = H100Params
    presets_dir = PRESETS_DIR
    default_preset = "h100-sxm"

    p: H100Params

    # ---- PCIe
    def pcie_ns(self, nbytes: Any, direction: CopyDir) -> NsArray:
        bw = self.p.pcie.d2h_bandwidth_gb_s if CopyDir(direction) == CopyDir.D2H else self.p.pcie.h2d_bandwidth_gb_s
        return bytes_ns(nbytes, bw)

    def pcie_latency_ns(self, direction: CopyDir) -> int:
        return int(self.p.pcie.latency_ns)

    # ---- CPU crypto
    def cpu_encrypt_ns(self, nbytes: Any) -> NsArray:
        c = self.p.cpu_crypto
        calls = np.maximum(ceil_div(nbytes, c.call_bytes), 1)
        return calls * np.int64(c.call_overhead_ns) + bytes_ns(nbytes, c.core_gb_s)

    def cpu_decrypt_ns(self, nbytes: Any) -> NsArray:
        return self.cpu_encrypt_ns(nbytes)  # AES-GCM is symmetric; the tag check costs one GHASH like tagging

    def cpu_crypto_gb_s(self, call_bytes: int) -> float:
        """Efficiency curve: one core's throughput when each call handles ``call_bytes`` (GB/s)."""
        c = self.p.cpu_crypto
        return call_bytes / (c.call_overhead_ns + call_bytes / c.core_gb_s)

    # ---- GPU crypto
    def ce_crypto_ns(self, nbytes: Any, parts: int = 1) -> NsArray:
        """One CE secure-copy operation of ``nbytes``; with ``parts`` > 1 its AES-GCM is spread over
        that many engines (partial tags combined, [S6]): the largest part, ``ceil(bytes / parts)``, sets the time."""
        share = ceil_div(nbytes, max(int(parts), 1))
        return np.int64(self.p.ce.op_overhead_ns) + bytes_ns(share, self.p.ce.crypto_gb_s)

    @property
    def ce_split_parts(self) -> int:
        """Engines a secure copy's crypto is spread over under Fastrack fix 2 (``gpu.copy_engines``)."""
        return int(self.p.gpu.copy_engines)

    def staging_copy_ns(self, nbytes: Any) -> NsArray:
        """Host memcpy between pageable memory and the driver's pinned staging buffer (no CC)."""
        return bytes_ns(nbytes, self.p.host.staging_copy_gb_s)

    @property
    def emulates_auth_kernel(self) -> bool:
        """Does the preset add the Fastrack paper's separate authentication kernel (optional ``[auth]``)?"""
        return self.p.auth is not None

    def auth_ns(self, nbytes: Any, parallel: bool) -> NsArray:
        a = self.p.auth
        if a is None:  # the tag is verified inside the CE operation [S4]: no separate stage to price
            return np.zeros(np.shape(nbytes), np.int64)
        rate = a.parallel_gb_s_per_sm * self.p.gpu.sms if parallel else a.serial_gb_s
        return np.int64(a.op_overhead_ns) + bytes_ns(nbytes, rate)

    # ---- command submission: the driver path of one push (docs/model.md "The driver path")
    def push_round_trip_ns(self, kind: Any) -> NsArray:
        """Work-launch round trip of one push per :class:`OpKind` code (``submit.<kind>_ns``; 0 for
        kinds that submit nothing): the host waits for it, and no op of the push starts before it."""
        s = self.p.submit
        lut = np.zeros(max(int(k) for k in OpKind) + 1, np.int64)
        lut[OpKind.KERNEL] = s.kernel_ns
        lut[OpKind.MEMCPY] = s.copy_ns
        lut[OpKind.MEMSET] = s.memset_ns
        lut[OpKind.COLLECTIVE] = s.collective_ns
        k = np.asarray(kind, dtype=np.int64)
        inside = (k >= 0) & (k < lut.size)
        return np.where(inside, lut[np.clip(k, 0, lut.size - 1)], 0).astype(np.int64)

    @property
    def push_segment_bytes(self) -> int:
        """Bytes of one push's pushbuffer segment, which the CPU encrypts (``submit.segment_bytes``)."""
        return int(self.p.submit.segment_bytes)

    @property
    def wlc_push_bytes(self) -> int:
        """Bytes of the work-launch push that carries a push to the GPU (``submit.wlc_push_bytes``)."""
        return int(self.p.submit.wlc_push_bytes)

    def crypto_call_ns(self, nbytes: int) -> int:
        """One AES-GCM call of ``nbytes`` on the CPU (0 for 0 bytes: a stage the preset leaves out)."""
        return int(np.asarray(self.cpu_encrypt_ns(int(nbytes))).item()) if nbytes > 0 else 0

    def push_encrypt_ns(self) -> int:
        """CPU encryption of one push: the segment and the work-launch push, one AES-GCM call each."""
        return self.crypto_call_ns(self.push_segment_bytes) + self.crypto_call_ns(self.wlc_push_bytes)

    def doorbell_exit_ns(self) -> int:
        """VM exits of one push's doorbell write in the CPU TEE (``tee.exit_ns x tee.exits_per_push``)."""
        return int(self.p.tee.exit_ns) * int(self.p.tee.exits_per_push)

    def submit_ns(self, kind: Any) -> NsArray:
        """Host time of one push of ``kind`` (0 for kinds that submit nothing): its CPU encryption, the
        doorbell's VM exits and the work-launch round trip."""
        rt = self.push_round_trip_ns(kind)
        fixed = np.int64(self.push_encrypt_ns() + self.doorbell_exit_ns())
        return np.where(rt > 0, rt + fixed, 0).astype(np.int64)

    def completion_ns(self) -> int:
        """The host's wait for a copy's completion once the GPU has released it: decrypt the encrypted
        semaphore payload (one AES-GCM call) and the VM exits of the wait (``tee.exits_per_wait``)."""
        dec = self.crypto_call_ns(int(self.p.submit.semaphore_bytes))  # decryption costs as encryption
        return dec + int(self.p.tee.exit_ns) * int(self.p.tee.exits_per_wait)

    def crossing_ns(self) -> int:
        """Fixed cost of one host<->GPU copy call on its direction's secure channel (``submit.crossing_ns``)."""
        return int(self.p.submit.crossing_ns)

    def copy_blocks_host(self, direction: CopyDir) -> bool:
        """Does a CC copy of ``direction`` block its calling thread until it completes?"""
        return self.p.submit.copy_blocks_host == "all" or CopyDir(direction) == CopyDir.D2H

    @property
    def host_work_ratio(self) -> float:
        """Multiplier on traced host work inside the CPU TEE (``tee.host_work_ratio``)."""
        return float(self.p.tee.host_work_ratio)

    # ---- re-pricing (replay/pipeline/reprice.py, an optional hook of the plug-in interface)
    #: parameters that only change what the pricing methods above return (durations and lags of
    #: derived nodes) or the servers of the lanes ``lane_specs`` sizes, never which nodes and edges a
    #: protocol builds, except through a price turning 0 or not (the re-pricer checks that); a range
    #: study re-prices a point that moves only these
    repriced_parameters = frozenset({
        "pcie.h2d_bandwidth_gb_s", "pcie.d2h_bandwidth_gb_s", "pcie.latency_ns",
        "cpu_crypto.call_bytes", "cpu_crypto.call_overhead_ns", "cpu_crypto.core_gb_s",
        "ce.crypto_gb_s", "ce.op_overhead_ns", "host.staging_copy_gb_s",
        "submit.kernel_ns", "submit.copy_ns", "submit.memset_ns", "submit.collective_ns", "submit.crossing_ns",
        "submit.segment_bytes", "submit.wlc_push_bytes", "submit.semaphore_bytes",
        "tee.exit_ns", "tee.exits_per_push", "tee.exits_per_wait", "tee.host_work_ratio", "bounce.max_slots",
        "ce.secure_channels_per_direction",
    })

    # ---- pool, threads, direct rule
    @property
    def bounce_slot_bytes(self) -> int:
        return int(self.p.bounce.slot_bytes)

    @property
    def bounce_slots(self) -> int:
        return int(self.p.bounce.slots)

    @property
    def bounce_max_slots(self) -> int:
        b = self.p.bounce
        return int(b.slots) if b.growth == "none" else max(int(b.max_slots), int(b.slots))

    @property
    def cpu_crypto_threads(self) -> int:
        return int(self.p.cpu_crypto.threads)

    def direct_eligible(self, copy_dir: Any, host_mem: Any, nbytes: Any) -> np.ndarray:
        return direct_rule(self.p.direct, copy_dir, host_mem, nbytes)

    # ---- GPU-to-GPU links (multi-GPU)
    def link_gb_s(self, n_gpus: int) -> float:
        """Bandwidth per GPU and direction of the bottleneck link of a ring of ``n_gpus`` GPUs."""
        t = self.p.topology
        if n_gpus > t.gpus_per_node:
            return float(t.internode_gb_s)
        return float(t.nvlink_gb_s if t.link == "nvlink" else t.pcie_p2p_gb_s)

    def link_latency_ns(self, n_gpus: int) -> int:
        """Latency of one step (one hop) of a ring of ``n_gpus`` GPUs."""
        t = self.p.topology
        if n_gpus > t.gpus_per_node:
            return int(t.internode_latency_ns)
        return int(t.nvlink_latency_ns if t.link == "nvlink" else t.pcie_p2p_latency_ns)

    def link_ns(self, nbytes: Any, n_gpus: int) -> NsArray:
        """Plaintext link occupancy of ``nbytes`` sent by one GPU of a ring of ``n_gpus`` (no latency)."""
        return bytes_ns(nbytes, self.link_gb_s(n_gpus))

    @property
    def default_allreduce(self) -> str:
        return str(self.p.topology.allreduce)

    def key_rotation_ns(self, nbytes: Any, invocations: Any) -> NsArray:
        """Expected key-rotation stall charged to a message of ``nbytes`` encrypted in ``invocations``
        AES-GCM operations (one IV each): the rotation stall x the share of a key's lifetime used."""
        k = self.p.keys
        b = np.asarray(nbytes, dtype=np.int64)
        inv = np.asarray(invocations, dtype=np.int64)
        usage = ceil_div(b, 16) + inv
        by_usage = ceil_div(usage * np.int64(k.rotation_stall_ns), k.usage_limit) if k.rotation_stall_ns else usage * 0
        by_iv = ceil_div(inv * np.int64(k.rotation_stall_ns), k.ivs_per_key) if k.rotation_stall_ns else inv * 0
        return np.maximum(by_usage, by_iv).astype(np.int64)

    # ---- encrypted GPU-to-GPU messages (replay/protocols/p2p.py)
    @property
    def p2p_chunk_bytes(self) -> int:
        """Bytes of one P2P staging chunk (``p2p.chunk_bytes``)."""
        return int(self.p.p2p.chunk_bytes)

    def p2p_meta_bytes(self, nbytes: Any) -> NsArray:
        """IV and tag bytes that travel with ``nbytes`` of ciphertext: one slot per crypto page (at least one)."""
        pages = np.maximum(ceil_div(nbytes, CRYPTO_PAGE_BYTES), 1)
        return (pages * np.int64(self.p.p2p.meta_bytes_per_page)).astype(np.int64)

    def p2p_sync_ns(self) -> int:
        """Host synchronisation per hand-off between engines (``p2p.sync_ns``)."""
        return int(self.p.p2p.sync_ns)

    # ---- lanes
    def lane_specs(self) -> list[tuple[LaneType, str, int]]:
        return [
            (LaneType.PCIE_H2D, "pcie_h2d", 1),
            (LaneType.PCIE_D2H, "pcie_d2h", 1),
            (LaneType.COPY_ENGINE, "copy_engines", int(self.p.gpu.copy_engines)),
            (LaneType.GPU_CRYPTO, "ce_secure_h2d", int(self.p.ce.secure_channels_per_direction)),
            (LaneType.GPU_AUTH, "gpu_auth", 1),
            (LaneType.CPU_CRYPTO, "cpu_crypto", int(self.p.cpu_crypto.threads)),
        ]

    def add_lanes(self, graph: OpGraph) -> OpGraph:
        """The base lanes plus the D2H secure-copy channel lane (``GPU_CRYPTO`` key 1) of every rank."""
        graph = super().add_lanes(graph)
        ranks = np.unique(graph.rank).astype(np.int64)
        new = ranks[graph.lanes.find_many(ranks, LaneType.GPU_CRYPTO, 1) == NO_LANE]
        if new.size == 0:
            return graph
        lanes, _ = graph.lanes.extend(new, int(LaneType.GPU_CRYPTO), 1,
                                      [f"rank{int(r)}/ce_secure_d2h" for r in new.tolist()],
                                      int(self.p.ce.secure_channels_per_direction))
        return graph.replace(lanes=lanes)
