"""The H100 model's gem5 exporter: ``replay export-gem5`` (registered as ``gem5`` in the
``fastrack.exporters`` entry-point group; docs/gem5.md).

It writes, into the export directory (:mod:`replay.frontend.export` makes it all or nothing):

* ``graph.bin``, ``lanes.csv``, ``expected.json``: the model-free files (:mod:`replay.exporters.graphfile`),
  read by the C++ core in ``cpp/`` (``fastrack_replay``) and by the ``FastrackReplayer`` SimObject;
* ``params.json``: model, preset, digest, every parameter, the exact fraction of every rate, and
  the gem5 SimObject parameters derived from them (``gem5``: :func:`gem5_objects`);
* ``params.txt``: the parameters as ``section.key = value`` lines (``fastrack_replay --check-prices``);
* ``run_gem5.py``: the gem5 configuration ``gem5/run_gem5.py``, copied unchanged: it reads
  ``params.json`` and ``expected.json`` next to it, so nothing from the trace or the preset is
  ever pasted into code.

What the C++ core and the gem5 extension support is checked before anything is kept; anything
else is refused with a one-line message (:func:`check_protocol`, :func:`check_params`, and
:func:`replay.exporters.graphfile.check_graph`).
"""

from __future__ import annotations

import json
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any

from fastrack_core.atomic import write_text_atomic
from fastrack_core.errors import ConfigError
from replay.exporters.exporter import Exporter, ExportJob
from replay.graph import LaneType
from replay.exporters.graphfile import FORMAT_VERSION, MAX_TIME_NS, write_graph_files
from replay.names import CAPTURED
from replay.plugins import load_protocol
from replay.protocols import Protocol

from .model import H100Model

# Protocols whose transformed graphs the C++ core is cross-checked against (tests/test_gem5_export.py).
SUPPORTED_PROTOCOLS = (CAPTURED, "none", "baseline", "fastrack", "fastrack:direct", "fastrack:auth", "fastrack:overlap",
                       "ppcie", "cc-multi", "cc-multi:auth", "cc-multi:overlap", "cc-multi:fastrack")
# Hardware models the gem5 SimObjects mirror (their parameters, one by one: GEM5_PARAM_MAP).
SUPPORTED_MODELS = (H100Model.name,)
RATE_RANGE_GB_S = (1e-3, 1e12)  # rates the C++ core converts to exact fractions like replay.model.bytes_ns
RUN_GEM5 = "gem5/run_gem5.py"  # the configuration script, in this package

# Every H100 preset parameter and where it goes in gem5: (SimObject attribute, parameter, kind).
# kind: "float" (a number, unit in the name), "ns" (a gem5 Latency, written "<n>ns"),
# "bytes" (a gem5 MemorySize, written "<n>B"), "count" (an integer), "graph" (used by the protocol
# transform only: it shapes the graph (direct-path rule) or prices parts of it the C++ core replays
# but does not re-price (collectives on the GPU-to-GPU topology, key rotation); gem5 gets it only in
# params.json).
GEM5_PARAM_MAP: dict[str, dict[str, tuple[str, str, str]]] = {
    "gpu": {"sms": ("gpu_auth", "sms", "count"), "copy_engines": ("copy_engine", "engines", "count")},
    "pcie": {
        "h2d_bandwidth_gb_s": ("pcie_h2d", "bandwidth_gb_s", "float"),
        "d2h_bandwidth_gb_s": ("pcie_d2h", "bandwidth_gb_s", "float"),
        "latency_ns": ("pcie_h2d+pcie_d2h", "latency", "ns"),
    },
    "cpu_crypto": {
        "core_gb_s": ("cpu_crypto", "core_gb_s", "float"),
        "call_overhead_ns": ("cpu_crypto", "call_overhead", "ns"),
        "call_bytes": ("cpu_crypto", "call_size", "bytes"),
        "threads": ("cpu_crypto", "threads", "count"),
    },
    "host": {"staging_copy_gb_s": ("-", "-", "graph")},
    "ce": {
        "crypto_gb_s": ("copy_engine", "crypto_gb_s", "float"),
        "op_overhead_ns": ("copy_engine", "op_overhead", "ns"),
        "secure_channels_per_direction": ("-", "-", "graph"),
    },
    "auth": {
        "serial_gb_s": ("gpu_auth", "serial_gb_s", "float"),
        "parallel_gb_s_per_sm": ("gpu_auth", "parallel_gb_s_per_sm", "float"),
        "op_overhead_ns": ("gpu_auth", "op_overhead", "ns"),
    },
    "submit": {
        "kernel_ns": ("submit", "kernel", "ns"),
        "copy_ns": ("submit", "copy", "ns"),
        "memset_ns": ("submit", "memset", "ns"),
        "collective_ns": ("submit", "collective", "ns"),
        # the driver path's other push stages: cpu_encrypt nodes (priced by their bytes like any CPU
        # AES-GCM), the crossing toll and the completion wait (p2p_sync nodes the core replays as given)
        **{k: ("-", "-", "graph") for k in ("segment_bytes", "wlc_push_bytes", "semaphore_bytes", "crossing_ns",
                                            "copy_blocks_host")},
    },
    "tee": {k: ("-", "-", "graph") for k in ("host_work_ratio", "exit_ns", "exits_per_push", "exits_per_wait")},
    # the pool's growth and maximum shape the graph (its lanes' max_servers) and the core's engine
    # serves them; gem5's pool object only addresses the initial slots
    "bounce": {"slot_bytes": ("bounce_pool", "slot_size", "bytes"), "slots": ("bounce_pool", "slots", "count"),
               "growth": ("-", "-", "graph"), "max_slots": ("-", "-", "graph")},
    "direct": {"h2d": ("-", "-", "graph"), "d2h": ("-", "-", "graph"), "min_bytes": ("-", "-", "graph")},
    "topology": {k: ("-", "-", "graph") for k in (
        "gpus_per_node", "link", "nvlink_gb_s", "nvlink_latency_ns", "pcie_p2p_gb_s", "pcie_p2p_latency_ns",
        "internode_gb_s", "internode_latency_ns", "allreduce")},
    "keys": {k: ("-", "-", "graph") for k in ("usage_limit", "ivs_per_key", "rotation_stall_ns")},
    "p2p": {k: ("-", "-", "graph") for k in ("chunk_bytes", "meta_bytes_per_page", "sync_ns")},
    # TEE-IO and the features CC switches off (models/h100/teeio.py): priced into the exported graph
    # (tee-io is not a gem5 protocol; NVLS sets collective durations), no SimObject of their own
    "tee_io": {k: ("-", "-", "graph") for k in (
        "tlp_payload_bytes", "tlp_overhead_bytes", "ide_prefix_bytes", "ide_mac_bytes", "ide_pcrc_bytes",
        "ide_tlps_per_mac", "ide_latency_ns", "submit_ns", "nvlink_ratio", "nvlink_latency_ns", "multicast")},
    "features": {k: ("-", "-", "graph") for k in ("nvls", "nvls_allreduce_gb_s", "nvls_latency_ns",
                                                   "registered_pinned")},
}

# Tables a preset may omit (the emulated authentication kernel: H100Params.auth).
OPTIONAL_TABLES = ("auth", "tee_io", "features")

# SimObject class, serving lane type and pricing table of each attribute of the replayer (run_gem5.py).
# An object is exported only when the parameters have its table: an object without its prices would
# leave parameters without a default unset, which gem5 refuses at start-up ("without default or user
# set value"). No shipped preset has [auth], so their exports have no gpu_auth object (the GPU_AUTH
# lanes, which no protocol uses then, are served by no object).
GEM5_OBJECTS: dict[str, tuple[str, LaneType | None, str]] = {
    "pcie_h2d": ("FastrackPCIeLink", LaneType.PCIE_H2D, "pcie"),
    "pcie_d2h": ("FastrackPCIeLink", LaneType.PCIE_D2H, "pcie"),
    "cpu_crypto": ("FastrackCpuCrypto", LaneType.CPU_CRYPTO, "cpu_crypto"),
    "copy_engine": ("FastrackCopyEngine", LaneType.COPY_ENGINE, "ce"),
    "gpu_auth": ("FastrackGpuAuth", LaneType.GPU_AUTH, "auth"),
    "bounce_pool": ("FastrackBouncePool", None, "bounce"),
    "submit": ("FastrackSubmit", None, "submit"),
}
# The protocol's authentication mode (Protocol.parallel_auth_modes) on the objects whose prices depend
# on it: the copy engine spreads a host copy's secure copy over every engine (fix 2), and the emulated
# authentication kernel runs at the parallel rate.
PARALLEL_AUTH_PARAMS = {"copy_engine": "parallel_auth", "gpu_auth": "parallel"}


# ---------------------------------------------------------------------------------------------
# what is supported


def check_protocol(protocol: str, model: str) -> None:
    """Refuse, before replaying, what the C++ core / gem5 extension does not support."""
    if protocol not in SUPPORTED_PROTOCOLS:
        raise ConfigError(
            f"protocol '{protocol}' is not supported by the gem5 export: the C++ core is cross-checked only for "
            f"{', '.join(SUPPORTED_PROTOCOLS)}")
    if protocol != CAPTURED and model not in SUPPORTED_MODELS:
        raise ConfigError(
            f"model '{model}' is not supported by the gem5 export: the gem5 SimObjects mirror the parameters of "
            f"{', '.join(SUPPORTED_MODELS)} only")


def check_params(params: dict[str, dict[str, Any]]) -> None:
    """Every parameter must have a counterpart in the gem5 extension, and rates must be in the range
    the C++ core converts exactly."""
    for table, body in params.items():
        known = GEM5_PARAM_MAP.get(table)
        if known is None:
            raise ConfigError(f"parameter table [{table}] has no counterpart in the gem5 extension "
                              f"(known: {', '.join(GEM5_PARAM_MAP)}); export refused")
        for key, value in body.items():
            if key not in known:
                raise ConfigError(f"parameter {table}.{key} has no counterpart in the gem5 extension; export refused")
            kind = known[key][2]
            if kind == "float":
                lo, hi = RATE_RANGE_GB_S
                if not (lo <= float(value) <= hi):
                    raise ConfigError(f"parameter {table}.{key} = {value!r} GB/s is outside the range the C++ core "
                                      f"prices exactly ({lo:g} .. {hi:g} GB/s); export refused")
            elif kind in ("ns", "bytes", "count"):
                if int(value) != value or not (0 <= int(value) <= MAX_TIME_NS):
                    raise ConfigError(f"parameter {table}.{key} = {value!r} is not an integer in 0 .. 2^60; "
                                      "export refused")
        missing = set(known) - set(body)
        if missing:
            raise ConfigError(f"parameter table [{table}] lacks {', '.join(sorted(missing))}, which the gem5 "
                              "extension expects; export refused")
    for table in GEM5_PARAM_MAP:
        if table not in params and table not in OPTIONAL_TABLES:
            raise ConfigError(f"parameter table [{table}] is missing; the gem5 extension expects it; export refused")


def protocol_parallel_auth(protocol: str) -> bool:
    """Does ``protocol`` authenticate in parallel (:meth:`replay.protocols.Protocol.parallel_auth_modes`)?
    gem5's FastrackGpuAuth has one mode, so a protocol mixing both is refused."""
    if protocol == CAPTURED:
        return False
    proto = load_protocol(protocol)
    modes = proto.parallel_auth_modes() if isinstance(proto, Protocol) else frozenset()
    if len(modes) > 1:
        raise ConfigError(f"protocol '{protocol}' authenticates host copies and GPU-to-GPU messages in different "
                          "modes; the gem5 FastrackGpuAuth has one mode; export refused")
    return modes == {True}


# ---------------------------------------------------------------------------------------------
# the files


def gem5_objects(params: dict[str, dict[str, Any]] | None, parallel_auth: bool = False) -> dict[str, dict[str, Any]]:
    """SimObject parameters of the replayer's resource objects, from the model parameters (JSON
    values run_gem5.py passes to the SimObjects): {attribute: {"class": ..., "params": {...}}}, for
    the objects whose table ``params`` has (:data:`GEM5_OBJECTS`); every parameter without a default
    in gem5/FastrackObjects.py is set. ``parallel_auth``: the protocol authenticates in parallel
    (FastrackCopyEngine.parallel_auth, FastrackGpuAuth.parallel: :data:`PARALLEL_AUTH_PARAMS`)."""
    if not params:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for attr, (cls, lane_type, table) in GEM5_OBJECTS.items():
        if table not in params:
            continue  # nothing to price with: the object would lack its required parameters
        out[attr] = {"class": cls, "params": {}}
        if lane_type is not None:
            out[attr]["params"]["lane_type"] = lane_type.label
    for table, body in params.items():
        for key, value in body.items():
            attrs, pname, kind = GEM5_PARAM_MAP[table][key]
            if kind == "graph":
                continue
            for attr in attrs.split("+"):
                if attr not in out:
                    continue  # a shared parameter (gpu.sms) of an object not exported
                if kind == "float":
                    v: Any = float(value)
                elif kind == "ns":
                    v = f"{int(value)}ns"
                elif kind == "bytes":
                    v = f"{int(value)}B"
                else:
                    v = int(value)
                out[attr]["params"][pname] = v
    for attr, pname in PARALLEL_AUTH_PARAMS.items():
        if attr in out:
            out[attr]["params"][pname] = bool(parallel_auth)
    return out


def params_json(job: ExportJob, objects: dict[str, dict[str, Any]]) -> str:
    params = job.params
    identity = job.identity()
    return json.dumps({
        "format_version": FORMAT_VERSION, "protocol": job.protocol,
        "model": identity["model"], "preset": identity["preset"], "params_digest": identity["params_digest"],
        "params": params, "gem5": objects,
        "rates_exact": {f"{t}.{k}": _fraction(v) for t, body in (params or {}).items() for k, v in body.items()
                        if GEM5_PARAM_MAP.get(t, {}).get(k, ("", "", ""))[2] == "float"},
    }, indent=2, sort_keys=True) + "\n"


def params_txt(params: dict[str, dict[str, Any]] | None, protocol: str, parallel_auth: bool) -> str:
    """The parameters as ``section.key = value`` lines for the C++ driver (--check-prices)."""
    lines = ["# Fastrack export parameters, read by fastrack_replay --check-prices (docs/gem5.md)",
             "format_version = 1", f"model = {H100Model.name if params else 'none'}", f"protocol = {protocol}",
             f"protocol.parallel_auth = {int(parallel_auth)}"]
    for table, body in (params or {}).items():
        for key, value in body.items():
            lines.append(f"{table}.{key} = {value!r}" if isinstance(value, float) else f"{table}.{key} = {value}")
    return "\n".join(lines) + "\n"


def run_gem5_script() -> str:
    """The gem5 configuration (``gem5/run_gem5.py`` of this package), the same for every export."""
    return resources.files(__package__).joinpath(RUN_GEM5).read_text(encoding="utf-8")


def _fraction(value: float) -> list[int]:
    fr = Fraction(str(float(value))).limit_denominator(10_000)
    return [fr.numerator, fr.denominator]


class Gem5Exporter(Exporter):
    """``replay export-gem5``: the H100 model for the C++ core and the gem5 extension."""

    name = "gem5"
    description = "Export TRACE's transformed graph for the C++ core and gem5 (docs/gem5.md)."
    protocols = SUPPORTED_PROTOCOLS
    files = ("graph.bin", "lanes.csv", "params.json", "params.txt", "run_gem5.py", "expected.json")

    def check(self, protocol: str, model: str) -> None:
        check_protocol(protocol, model)

    def write(self, out: Path, job: ExportJob) -> dict[str, Any]:
        """Write every file into ``out``; returns the content of expected.json."""
        if job.params is not None:
            check_params(job.params)
        expected = write_graph_files(out, job.graph, job.schedule, job.result, job.identity())
        parallel_auth = protocol_parallel_auth(job.protocol)
        write_text_atomic(out / "params.json", params_json(job, gem5_objects(job.params, parallel_auth)))
        write_text_atomic(out / "params.txt", params_txt(job.params, job.protocol, parallel_auth))
        write_text_atomic(out / "run_gem5.py", run_gem5_script())
        return expected

    def done_message(self, out_dir: str | Path, summary: dict[str, Any]) -> str:
        return (f"wrote {out_dir}: {summary['nodes']} nodes, {summary['edges']} edges, makespan "
                f"{summary['makespan_ns']} ns (gem5: {summary['expected_ticks']} ticks); run: gem5.opt "
                f"{Path(out_dir) / 'run_gem5.py'}")


GEM5 = Gem5Exporter()

__all__ = ["GEM5", "Gem5Exporter", "GEM5_OBJECTS", "GEM5_PARAM_MAP", "PARALLEL_AUTH_PARAMS", "SUPPORTED_MODELS",
           "SUPPORTED_PROTOCOLS", "check_params", "check_protocol", "gem5_objects", "params_txt", "protocol_parallel_auth"]
