"""The round-number H100 preset for hand-checkable times (graphs are built with tests/graphs.py)."""
from __future__ import annotations

# A round-number preset for hand-checkable times: 1 GB/s = 1 byte/ns, so 1 MB takes 1 ms.
ROUND = {
    "gpu": {"sms": 4, "copy_engines": 2},
    "pcie": {"h2d_bandwidth_gb_s": 1.0, "d2h_bandwidth_gb_s": 1.0, "latency_ns": 1000},
    "host": {"staging_copy_gb_s": 10.0},
    "cpu_crypto": {"core_gb_s": 1.0, "call_overhead_ns": 0, "call_bytes": 1_000_000, "threads": 1},
    "ce": {"crypto_gb_s": 2.0, "op_overhead_ns": 0, "secure_channels_per_direction": 1},
    # optional table: the emulated authentication kernel, used only by the GPU-to-GPU messages of
    # tests/test_multigpu.py (the host-copy CC path has no separate authentication stage)
    "auth": {"serial_gb_s": 0.5, "parallel_gb_s_per_sm": 1.0, "op_overhead_ns": 0},
    "submit": {"kernel_ns": 1000, "copy_ns": 1000, "memset_ns": 1000, "collective_ns": 1000,
               # the driver path's push encryptions and completion semaphore left out (0 bytes), no
               # crossing toll: a push is its 1 us round trip (tests/test_driver_path.py sets them)
               "segment_bytes": 0, "wlc_push_bytes": 0, "semaphore_bytes": 0, "crossing_ns": 0,
               "copy_blocks_host": "all"},
    # the CPU TEE: no cost (tests/test_driver_path.py sets it)
    "tee": {"host_work_ratio": 1.0, "exit_ns": 0, "exits_per_push": 0, "exits_per_wait": 0},
    "bounce": {"slot_bytes": 1_000_000, "slots": 2, "growth": "none", "max_slots": 2},
    "direct": {"h2d": "all", "d2h": "none", "min_bytes": 0},
    # multi-GPU (tests/test_multigpu.py): NVLink 10 GB/s = 10 bytes/ns, 1 us per ring step
    "topology": {"gpus_per_node": 8, "link": "nvlink", "nvlink_gb_s": 10.0, "nvlink_latency_ns": 1000,
                 "pcie_p2p_gb_s": 1.0, "pcie_p2p_latency_ns": 2000, "internode_gb_s": 1.0,
                 "internode_latency_ns": 5000, "allreduce": "ring"},
    "keys": {"usage_limit": 10**12, "ivs_per_key": 2**31, "rotation_stall_ns": 1_000_000},
    "p2p": {"chunk_bytes": 1_000_000, "meta_bytes_per_page": 32, "sync_ns": 1000},
    # TEE-IO (tests/test_teeio.py): an IDE MAC of 100 B per 1000 B TLP, no other TLP bytes, so a
    # transfer's wire bytes are 1.1x its bytes; NVLink encryption halves the link (0.5)
    "tee_io": {"tlp_payload_bytes": 1000, "tlp_overhead_bytes": 0, "ide_prefix_bytes": 0, "ide_mac_bytes": 100,
               "ide_pcrc_bytes": 0, "ide_tlps_per_mac": 1, "ide_latency_ns": 500, "submit_ns": 0,
               "nvlink_ratio": 0.5, "nvlink_latency_ns": 500, "multicast": False},
}


def round_raw(**changes) -> dict:
    """ROUND as a preset mapping (every key gets a source); ``changes``: {"pcie.latency_ns": 0}."""
    raw = {t: dict(v) for t, v in ROUND.items()}
    for dotted, value in changes.items():
        t, k = dotted.split(".")
        raw[t][k] = value
    for t in raw.values():
        for k in list(t):
            t[k + "_source"] = "test: round number"
    return raw


def round_model(*overrides: str, **changes):
    from fastrack_h100 import H100Model

    return H100Model.from_dict(round_raw(**changes), list(overrides), name="round")
