"""Parameters of the H100 TEE model: one frozen dataclass per preset table, units in key names.

Values live in ``presets/*.toml`` (each with a ``<key>_source``); docs/model.md explains each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# CRYPTO_PAGE_BYTES is fixed by the driver's encryption format, not a tunable of the model (so not
# a preset key); it is defined once, in the model interface
from replay.model import CRYPTO_PAGE_BYTES, DirectParams


def _f(doc: str, **meta):
    return field(metadata={"doc": doc, **meta})


@dataclass(frozen=True)
class GpuParams:
    sms: int = _f("streaming multiprocessors (scale the emulated parallel authentication kernel, [auth])",
                  unit="count", min=1, max=4096)
    copy_engines: int = _f("async copy engines (servers of the CE lane; Fastrack fix 2 splits a secure copy's "
                           "crypto over them)", unit="count", min=1, max=64)


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
    threads: int = _f("CPU threads that encrypt/decrypt one transfer (1 = the calling thread)", unit="count", min=1, max=1024)


@dataclass(frozen=True)
class CeParams:
    crypto_gb_s: float = _f("AES-GCM throughput of one copy engine (decrypt+verify or encrypt+tag), GB/s",
                            exclusive_min=0)
    op_overhead_ns: int = _f("fixed cost per copy-engine secure-copy operation (one chunk, one tag)", min=0)
    secure_channels_per_direction: int = _f("CE channels that process the secure copies of one direction, each "
                                            "in IV order (servers of the per-direction secure-copy lane)",
                                            unit="count", min=1, max=64)


@dataclass(frozen=True)
class HostParams:
    staging_copy_gb_s: float = _f("one host thread's memcpy between pageable memory and the driver's pinned "
                                  "staging buffer (pageable copies without CC), GB/s", exclusive_min=0)


@dataclass(frozen=True)
class AuthParams:
    """Optional table: a separate GPU authentication kernel as in the Fastrack paper's emulated setup. The
    shipped H100 has none (the copy engine verifies the tag inside the decrypting copy), so the default
    presets omit it and authentication costs nothing beyond the CE operation."""

    serial_gb_s: float = _f("GPU authentication throughput with a serial GHASH chain, GB/s", exclusive_min=0)
    parallel_gb_s_per_sm: float = _f("parallel authentication throughput per SM, GB/s (x gpu.sms)",
                                     exclusive_min=0)
    op_overhead_ns: int = _f("fixed cost per authentication operation (one chunk)", min=0)


@dataclass(frozen=True)
class SubmitParams:
    """One push (encrypted pushbuffer segment) per host submission call, as the UVM driver performs it
    under CC (docs/model.md "The driver path"): the CPU encrypts the segment and the work-launch push,
    rings the doorbell and waits for the work-launch round trip; a copy then waits for its encrypted
    completion semaphore. The round trip is priced by the most expensive kind of GPU op the call submits
    (a cudaGraphLaunch is one push, whatever its size)."""

    kernel_ns: int = _f("work-launch round trip of one push that launches kernels (doorbell -> the GPU "
                        "decrypts the segment and writes its GPFIFO entry -> the CPU sees the launch "
                        "semaphore): host wait, and the GPU-side delay of each op it submits", min=0)
    copy_ns: int = _f("same for a push that issues a copy", min=0)
    memset_ns: int = _f("same for a push that issues a memset", min=0)
    collective_ns: int = _f("same for a push that launches a collective kernel", min=0)
    segment_bytes: int = _f("bytes of the pushbuffer segment of one push, which the CPU encrypts (one AES-GCM "
                            "call priced by [cpu_crypto]; 0: the stage is left out)", min=0, max=1 << 20)
    wlc_push_bytes: int = _f("bytes of the work-launch-channel push that carries one push to the GPU, also "
                             "CPU-encrypted (one AES-GCM call; 0: left out)", min=0, max=1 << 20)
    semaphore_bytes: int = _f("bytes of the encrypted completion-semaphore payload the CPU decrypts when it "
                              "waits for a push (one AES-GCM call; 0: left out)", min=0, max=1 << 20)
    crossing_ns: int = _f("fixed cost of one host<->GPU data crossing (one H2D/D2H copy call) on the secure "
                          "channel of its direction, before its data path (serialised per context)", min=0)
    copy_blocks_host: str = _f("which CC copies block the calling thread until they complete: all (every "
                               "H2D/D2H copy, non_blocking or not) | d2h (H2D copies return once encrypted)",
                               choices=("all", "d2h"))


@dataclass(frozen=True)
class TeeParams:
    """The CPU TEE (TDX / SEV-SNP guest) around the host program, applied under the CC protocols."""

    host_work_ratio: float = _f("multiplier on the traced host work (CPU time between and inside CUDA calls) "
                                "in a confidential VM: memory encryption and integrity on DRAM accesses",
                                min=1.0, max=10.0)
    exit_ns: int = _f("one VM exit round trip of the guest (guest -> TDX module / hypervisor -> guest)", min=0)
    exits_per_push: int = _f("VM exits per push (the MMIO doorbell write), charged on the host and the launch",
                             unit="count", min=0, max=64)
    exits_per_wait: int = _f("VM exits per wait for a push's completion (an interrupt instead of polling)",
                             unit="count", min=0, max=64)


@dataclass(frozen=True)
class BounceParams:
    slot_bytes: int = _f("size of one bounce (staging) buffer slot, at least one 4 KiB crypto page; transfers are "
                         "chunked by it", min=CRYPTO_PAGE_BYTES)
    slots: int = _f("slots a rank's bounce-buffer pool starts with (a slot is reclaimed as soon as it is freed)",
                    unit="count", min=1, max=2**20)
    growth: str = _f("what the pool does when every slot is in use: double (the driver's policy) | none (wait)",
                     choices=("double", "none"))
    max_slots: int = _f("slots the pool may grow to by doubling (below slots: no growth)", unit="count", min=1,
                        max=1 << 20)


@dataclass(frozen=True)
class TopologyParams:
    """GPU-to-GPU interconnect of a data-parallel job (docs/multi-gpu.md)."""

    gpus_per_node: int = _f("GPUs per node (share one NVLink/NVSwitch domain); larger rings cross the network",
                            unit="count", min=1, max=2**16)
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
class P2PParams:
    """Encrypted GPU-to-GPU messages (docs/multi-gpu.md section 3): staging and per-message costs."""

    chunk_bytes: int = _f("bytes of one P2P staging chunk: one CE push (and one host synchronisation) per chunk "
                          "and side unless metadata is batched per message", min=CRYPTO_PAGE_BYTES)
    meta_bytes_per_page: int = _f("IV + tag bytes per crypto page that travel with the ciphertext", min=0)
    sync_ns: int = _f("host synchronisation per hand-off between engines (CPU polls and decrypts an encrypted "
                      "completion semaphore)", min=0)


@dataclass(frozen=True)
class TeeIoParams:
    """Optional table: TEE-IO (TDISP with PCIe IDE link encryption, NVLink encryption between GPUs), the
    ``tee-io`` protocol's prices (docs/protocols.md "TEE-IO"); prices in models/h100/teeio.py."""

    tlp_payload_bytes: int = _f("data bytes per PCIe TLP of a DMA transfer (max payload size)", min=16, max=4096)
    tlp_overhead_bytes: int = _f("per-TLP bytes already on the link without IDE (framing, sequence number, header, "
                                 "LCRC): the achieved pcie bandwidth carries them", min=0, max=256)
    ide_prefix_bytes: int = _f("bytes of the IDE TLP prefix each IDE TLP carries", min=0, max=256)
    ide_mac_bytes: int = _f("bytes of one IDE MAC (AES-GCM tag) on the link", min=0, max=256)
    ide_pcrc_bytes: int = _f("bytes of the optional plaintext CRC per IDE TLP (0: not enabled)", min=0, max=256)
    ide_tlps_per_mac: int = _f("TLPs one MAC covers (IDE TLP aggregation: 1 = a MAC per TLP)", unit="count",
                               min=1, max=8)
    ide_latency_ns: int = _f("latency the IDE engines add to one DMA transfer (encrypt at the sender, decrypt "
                             "and verify at the receiver), paid per transfer like pcie.latency_ns", min=0)
    submit_ns: int = _f("CPU time of one work submission under TEE-IO beyond the no-TEE launch (the pushbuffer "
                        "sits in private memory the GPU reads over IDE: no CPU encryption)", min=0)
    nvlink_ratio: float = _f("share of the plaintext NVLink bandwidth left with NVLink encryption (NVLE)",
                             exclusive_min=0, max=1.0)
    nvlink_latency_ns: int = _f("latency NVLink encryption adds to one ring step", min=0)
    multicast: bool = _f("NVLink multicast (NVLS all-reduce) stays available under TEE-IO")


@dataclass(frozen=True)
class FeaturesParams:
    """Optional table: platform features that CC switches off (docs/protocols.md "Features CC switches
    off"): what the no-TEE reference may use, and which of the trace's memory the CC protocols lose."""

    nvls: bool = _f("the GPUs' NVSwitch supports multicast (NVLink SHARP): an all-reduce inside one node may run "
                    "as NVLS without CC (only with topology.link = nvlink)")
    nvls_allreduce_gb_s: float = _f("algorithm bandwidth of an NVLS all-reduce inside one node (bytes per rank / "
                                    "time), GB/s", exclusive_min=0)
    nvls_latency_ns: int = _f("fixed latency of one NVLS all-reduce", min=0)
    registered_pinned: str = _f("which pinned copies of a trace use memory pinned with cudaHostRegister, which CC "
                                "refuses (they fall back to pageable): none | all", choices=("none", "all"))


@dataclass(frozen=True)
class H100Params:
    gpu: GpuParams
    pcie: PcieParams
    host: HostParams
    cpu_crypto: CpuCryptoParams
    ce: CeParams
    submit: SubmitParams
    bounce: BounceParams
    direct: DirectParams
    topology: TopologyParams
    keys: KeyParams
    p2p: P2PParams
    tee: TeeParams
    auth: AuthParams | None = None  # optional table (Fastrack-paper emulation only)
    tee_io: TeeIoParams | None = None  # optional table: the tee-io protocol's prices
    features: FeaturesParams | None = None  # optional table: features CC switches off
