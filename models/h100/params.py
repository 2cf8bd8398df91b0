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
    slots: int = _f("slots in a rank's bounce-buffer pool (a ring, reclaimed in order)", unit="count", min=1)


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
