"""Parameters of the H100 TEE model: one frozen dataclass per preset table, units in key names.

Values live in ``presets/*.toml`` (each with a ``<key>_source``); docs/model.md explains each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.model import DirectParams


def _f(doc: str, **meta):
    return field(metadata={"doc": doc, **meta})


@dataclass(frozen=True)
class GpuParams:
    sms: int = _f("streaming multiprocessors (scale parallel authentication)", unit="count", min=1)
    copy_engines: int = _f("async copy engines usable for secure copies (servers of the CE lane)", unit="count", min=1)


@dataclass(frozen=True)
class PcieParams:
    h2d_bandwidth_gb_s: float = _f("achieved host-to-device bandwidth, GB/s (1 GB/s = 1 byte/ns)", exclusive_min=0)
    d2h_bandwidth_gb_s: float = _f("achieved device-to-host bandwidth, GB/s", exclusive_min=0)
    latency_ns: int = _f("one-way latency of a DMA transfer, paid per transfer stage", min=0)


@dataclass(frozen=True)
class CpuCryptoParams:
    core_gb_s: float = _f("AES-256-GCM throughput of one core on large buffers, GB/s", exclusive_min=0)
    call_overhead_ns: int = _f("fixed cost of one AES-GCM call (IV setup, tag finalisation)", min=0)
    call_bytes: int = _f("bytes per AES-GCM call (one tag and IV per call)", min=1)
    threads: int = _f("CPU threads that encrypt/decrypt one transfer (1 = the calling thread)", unit="count", min=1)


@dataclass(frozen=True)
class CeParams:
    crypto_gb_s: float = _f("AES-GCM throughput of one copy engine, GB/s", exclusive_min=0)
    op_overhead_ns: int = _f("fixed cost per copy-engine crypto operation (one chunk)", min=0)


@dataclass(frozen=True)
class AuthParams:
    serial_gb_s: float = _f("GPU authentication throughput with a serial GHASH chain, GB/s", exclusive_min=0)
    parallel_gb_s_per_sm: float = _f("parallel authentication throughput per SM, GB/s (x gpu.sms)",
                                     exclusive_min=0)
    op_overhead_ns: int = _f("fixed cost per authentication operation (one chunk)", min=0)


@dataclass(frozen=True)
class SubmitParams:
    kernel_ns: int = _f("extra CPU time to encrypt/sign one kernel launch under CC", min=0)
    copy_ns: int = _f("extra CPU time to encrypt/sign one copy submission under CC", min=0)
    memset_ns: int = _f("extra CPU time to encrypt/sign one memset under CC", min=0)
    collective_ns: int = _f("extra CPU time to encrypt/sign one collective kernel launch under CC", min=0)


@dataclass(frozen=True)
class BounceParams:
    slot_bytes: int = _f("size of one bounce (staging) buffer slot; transfers are chunked by it", min=1)
    slots: int = _f("slots a rank's bounce-buffer pool starts with (a slot is reclaimed as soon as it is freed)",
                    unit="count", min=1)
    growth: str = _f("what the pool does when every slot is in use: double (the driver's policy) | none (wait)",
                     choices=("double", "none"))
    max_slots: int = _f("slots the pool may grow to by doubling (below slots: no growth)", unit="count", min=1,
                        max=1 << 20)


@dataclass(frozen=True)
class TopologyParams:
    """GPU-to-GPU interconnect of a data-parallel job (docs/multi-gpu.md)."""

    gpus_per_node: int = _f("GPUs per node (share one NVLink/NVSwitch domain); larger rings cross the network",
                            unit="count", min=1)
    link: str = _f("GPU-to-GPU link inside a node: nvlink (NVLink/NVSwitch) | pcie (no NVLink: PCIe peer path)",
                   choices=("nvlink", "pcie"))
    nvlink_gb_s: float = _f("achieved NVLink bandwidth per GPU and direction, GB/s", exclusive_min=0)
    nvlink_latency_ns: int = _f("latency of one ring step over NVLink", min=0)
    pcie_p2p_gb_s: float = _f("achieved GPU-to-GPU bandwidth over PCIe (link = pcie), per direction, GB/s",
                              exclusive_min=0)
    pcie_p2p_latency_ns: int = _f("latency of one ring step over PCIe peer-to-peer", min=0)
    internode_gb_s: float = _f("network bandwidth per GPU and direction between nodes, GB/s", exclusive_min=0)
    internode_latency_ns: int = _f("latency of one ring step between nodes", min=0)
    allreduce: str = _f("all-reduce algorithm of collectives whose trace does not name one: ring | tree",
                        choices=("ring", "tree"))


@dataclass(frozen=True)
class KeyParams:
    """AES-GCM key and IV limits of the secure GPU-to-GPU channels (open-gpu-kernel-modules)."""

    usage_limit: int = _f("key usage limit: bytes/16 + invocations per key before rotation", unit="count", min=1)
    ivs_per_key: int = _f("IVs a channel may use before its 32-bit counter forces rotation", unit="count", min=1)
    rotation_stall_ns: int = _f("data-path stall while a key is rotated (all channels of the key idle)", min=0)


@dataclass(frozen=True)
class H100Params:
    gpu: GpuParams
    pcie: PcieParams
    cpu_crypto: CpuCryptoParams
    ce: CeParams
    auth: AuthParams
    submit: SubmitParams
    bounce: BounceParams
    direct: DirectParams
    topology: TopologyParams
    keys: KeyParams
