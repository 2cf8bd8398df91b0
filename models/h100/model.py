"""The cycle-approximate NVIDIA H100 TEE model (confidential computing on, Hopper, PCIe Gen5).

Prices (integer ns, rounded up):

* PCIe, per direction (full duplex: separate H2D and D2H lanes): ``ceil(bytes / bandwidth)`` of
  link occupancy, plus ``latency_ns`` on the edge to the next stage (latency does not occupy
  the link, so pipelined chunks overlap their latencies);
* CPU AES-GCM: ``ceil(bytes / call_bytes) * call_overhead_ns + ceil(bytes / core_gb_s)``: a
  fixed cost per AES-GCM call and a per-core streaming rate, fitted to ``openssl speed -evp
  aes-256-gcm`` (0.54 / 1.46 / 3.46 GB/s at 256 B / 1 KiB / 8 KiB): the size-dependent
  efficiency curve ``bytes / (call_overhead_ns + bytes / core_gb_s)``;
* copy-engine AES-GCM: ``op_overhead_ns + ceil(bytes / crypto_gb_s)`` per chunk per engine;
* GPU authentication: ``op_overhead_ns + ceil(bytes / rate)`` with ``rate = serial_gb_s`` or
  ``parallel_gb_s_per_sm * sms``;
* CC command submission: a fixed extra CPU time per launched op, by kind.

GPU-to-GPU (multi-GPU replays, docs/multi-gpu.md):

* link occupancy ``ceil(bytes / bandwidth)`` and a latency per ring step, for the bottleneck link
  of a ring of ``n`` GPUs: NVLink (or PCIe peer-to-peer where ``topology.link = "pcie"``) inside
  a node of ``topology.gpus_per_node`` GPUs, the network when the ring spans nodes;
* key rotation of the secure channels: the expected stall per message, ``rotation_stall_ns`` x the
  share of a key's lifetime the message uses (``(bytes/16 + invocations) / usage_limit`` or
  ``invocations / ivs_per_key``, whichever is larger), rounded up.

Resource lanes per rank: PCIe H2D, PCIe D2H, copy engines (``copy_engines`` servers), GPU
authentication (one server: one authentication at a time), CPU crypto workers (``threads``
servers; used only when ``threads > 1``). Host threads and streams come from the trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fastrack.schema import CopyDir, OpKind
from replay.graph import LaneType
from replay.model import HardwareModel, NsArray, bytes_ns, ceil_div, direct_rule

from .params import H100Params

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


class H100Model(HardwareModel):
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
    def ce_crypto_ns(self, nbytes: Any) -> NsArray:
        return np.int64(self.p.ce.op_overhead_ns) + bytes_ns(nbytes, self.p.ce.crypto_gb_s)

    def auth_ns(self, nbytes: Any, parallel: bool) -> NsArray:
        a = self.p.auth
        rate = a.parallel_gb_s_per_sm * self.p.gpu.sms if parallel else a.serial_gb_s
        return np.int64(a.op_overhead_ns) + bytes_ns(nbytes, rate)

    # ---- command submission
    def submit_ns(self, kind: Any) -> NsArray:
        s = self.p.submit
        lut = np.zeros(max(int(k) for k in OpKind) + 1, np.int64)
        lut[OpKind.KERNEL] = s.kernel_ns
        lut[OpKind.MEMCPY] = s.copy_ns
        lut[OpKind.MEMSET] = s.memset_ns
        lut[OpKind.COLLECTIVE] = s.collective_ns
        k = np.asarray(kind, dtype=np.int64)
        inside = (k >= 0) & (k < lut.size)
        return np.where(inside, lut[np.clip(k, 0, lut.size - 1)], 0).astype(np.int64)

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

    # ---- lanes
    def lane_specs(self) -> list[tuple[LaneType, str, int]]:
        return [
            (LaneType.PCIE_H2D, "pcie_h2d", 1),
            (LaneType.PCIE_D2H, "pcie_d2h", 1),
            (LaneType.COPY_ENGINE, "copy_engines", int(self.p.gpu.copy_engines)),
            (LaneType.GPU_AUTH, "gpu_auth", 1),
            (LaneType.CPU_CRYPTO, "cpu_crypto", int(self.p.cpu_crypto.threads)),
        ]
