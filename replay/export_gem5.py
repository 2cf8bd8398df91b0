"""``replay export-gem5``: write a replay's transformed graph and parameters for the C++ core and gem5.

    replay export-gem5 TRACE --protocol fastrack [--preset h100-pcie] [--set pcie.latency_ns=900] -o DIR

writes into DIR (each file atomically; docs/gem5.md documents the formats):

* ``graph.bin``: the transformed graph (binary format version 2: header with counts, lanes
  with their discipline and pool maximum, nodes with their pool holds, CSR edges, end marker), the input of ``models/h100/cpp/fastrack_replay`` and of the
  ``FastrackReplayer`` gem5 SimObject;
* ``lanes.csv``: ``index,type,rank,servers,name`` of every lane (names for statistics);
* ``params.txt``: the parameters as ``section.key = value`` lines (``fastrack_replay --check-prices``);
* ``params.json``: model, preset, digest, every parameter, and the gem5 SimObject parameters
  derived from them;
* ``run_gem5.py``: a gem5 configuration script instantiating the SimObjects with those
  parameters (``build/NULL/gem5.opt DIR/run_gem5.py``); it checks the simulated time against
  ``expected.json`` and exits 1 on a mismatch;
* ``expected.json``: the Python replay's makespan (the simulated time of a gem5 run, whose
  tick 0 is the first node's start: ``expected_ticks``), per-rank makespans and per-lane busy time.

What the C++ core and the gem5 extension support is checked before anything is written; anything
else is refused with a one-line message and exit code 2 (:func:`check_protocol`,
:func:`check_params`, :func:`check_graph`).
"""

from __future__ import annotations

import io
import json
import pprint
from fractions import Fraction
from pathlib import Path
from typing import Any, Sequence

import click
import numpy as np

from fastrack.atomic import atomic_path, write_text_atomic
from fastrack.cli_support import reports_errors
from fastrack.errors import ConfigError, FastrackError, GraphError
from fastrack.schema import DepKind
from replay.engine import Schedule
from replay.graph import LaneType, OpGraph
from replay.results import ReplayResult

FORMAT_VERSION = 2
MAGIC = b"FTRKGRPH"
END_MAGIC = b"FTRKEND\0"
HEADER_BYTES = 64
SCHEDULE_MAGIC = b"FTRKSCHD"
TICKS_PER_NS = 1000  # gem5's default tick is 1 ps
CAPTURED = "captured"
# Protocols whose transformed graphs the C++ core is cross-checked against (tests/test_gem5_export.py).
SUPPORTED_PROTOCOLS = ("captured", "none", "baseline", "fastrack", "fastrack:direct", "fastrack:auth", "fastrack:overlap",
                       "ppcie", "cc-multi", "cc-multi:batched-meta", "cc-multi:keymgmt", "cc-multi:auth",
                       "cc-multi:overlap", "cc-multi:fastrack", "cc-multi:all")
# Hardware models the gem5 SimObjects mirror (their parameters, one by one: GEM5_PARAM_MAP).
SUPPORTED_MODELS = ("h100",)
MAX_TIME_NS = 1 << 60  # |durations|, lags and release times the core accepts
MAX_TICK = (1 << 64) - 1  # gem5's Tick is uint64
RATE_RANGE_GB_S = (1e-3, 1e12)  # rates the C++ core converts to exact fractions like replay.model.bytes_ns

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
    "ce": {
        "crypto_gb_s": ("copy_engine", "crypto_gb_s", "float"),
        "op_overhead_ns": ("copy_engine", "op_overhead", "ns"),
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
    },
    # the pool's growth and maximum shape the graph (its lanes' max_servers) and the core's engine
    # serves them; gem5's pool object only addresses the initial slots
    "bounce": {"slot_bytes": ("bounce_pool", "slot_size", "bytes"), "slots": ("bounce_pool", "slots", "count"),
               "growth": ("-", "-", "graph"), "max_slots": ("-", "-", "graph")},
    "direct": {"h2d": ("-", "-", "graph"), "d2h": ("-", "-", "graph"), "min_bytes": ("-", "-", "graph")},
    "topology": {k: ("-", "-", "graph") for k in (
        "gpus_per_node", "link", "nvlink_gb_s", "nvlink_latency_ns", "pcie_p2p_gb_s", "pcie_p2p_latency_ns",
        "internode_gb_s", "internode_latency_ns", "allreduce")},
    "keys": {k: ("-", "-", "graph") for k in ("usage_limit", "ivs_per_key", "rotation_stall_ns")},
}

# SimObject class and serving lane type of each attribute of the replayer (run_gem5.py).
GEM5_OBJECTS: dict[str, tuple[str, LaneType | None]] = {
    "pcie_h2d": ("FastrackPCIeLink", LaneType.PCIE_H2D),
    "pcie_d2h": ("FastrackPCIeLink", LaneType.PCIE_D2H),
    "cpu_crypto": ("FastrackCpuCrypto", LaneType.CPU_CRYPTO),
    "copy_engine": ("FastrackCopyEngine", LaneType.COPY_ENGINE),
    "gpu_auth": ("FastrackGpuAuth", LaneType.GPU_AUTH),
    "bounce_pool": ("FastrackBouncePool", None),
    "submit": ("FastrackSubmit", None),
}


# ---------------------------------------------------------------------------------------------
# the graph file


def graph_bytes_layout(graph: OpGraph) -> list[tuple[str, np.ndarray]]:
    """The arrays of format version 2, in file order, with their on-disk dtypes."""
    lanes = graph.lanes
    le = "<"
    return [
        ("lane_servers", np.ascontiguousarray(lanes.servers, dtype=le + "i4")),
        ("lane_type", np.ascontiguousarray(lanes.type, dtype="i1")),
        ("lane_rank", np.ascontiguousarray(lanes.rank, dtype=le + "i4")),
        ("lane_shared", np.ascontiguousarray(lanes.shared, dtype="i1")),
        ("lane_max_servers", np.ascontiguousarray(lanes.max_servers, dtype=le + "i4")),
        ("op_id", np.ascontiguousarray(graph.op_id, dtype=le + "i8")),
        ("rank", np.ascontiguousarray(graph.rank, dtype=le + "i4")),
        ("lane", np.ascontiguousarray(graph.lane, dtype=le + "i4")),
        ("kind", np.ascontiguousarray(graph.kind, dtype="i1")),
        ("category", np.ascontiguousarray(graph.category, dtype="i1")),
        ("dur", np.ascontiguousarray(graph.dur, dtype=le + "i8")),
        ("bytes", np.ascontiguousarray(graph.bytes, dtype=le + "i8")),
        ("order", np.ascontiguousarray(graph.order, dtype=le + "i8")),
        ("release", np.ascontiguousarray(graph.release, dtype=le + "i8")),
        ("group", np.ascontiguousarray(graph.group, dtype=le + "i8")),
        ("hold_lane", np.ascontiguousarray(graph.hold_lane, dtype=le + "i4")),
        ("hold_until", np.ascontiguousarray(graph.hold_until, dtype=le + "i8")),
        ("dep_ptr", np.ascontiguousarray(graph.dep_ptr, dtype=le + "i8")),
        ("dep_src", np.ascontiguousarray(graph.dep_src, dtype=le + "i8")),
        ("dep_kind", np.ascontiguousarray(graph.dep_kind, dtype="u1")),
        ("dep_lag", np.ascontiguousarray(graph.dep_lag, dtype=le + "i8")),
    ]


def write_graph(path: str | Path, graph: OpGraph) -> None:
    """Write ``graph`` in format version 2 (atomically)."""
    header = MAGIC + np.array([FORMAT_VERSION, HEADER_BYTES], "<u4").tobytes() + np.array(
        [graph.n, graph.num_edges, len(graph.lanes), 0, 0, 0], "<u8").tobytes()
    assert len(header) == HEADER_BYTES
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(header)
        for _, arr in graph_bytes_layout(graph):
            fh.write(arr.tobytes())
        fh.write(END_MAGIC)


def read_schedule(path: str | Path) -> dict[str, np.ndarray]:
    """A schedule written by ``fastrack_replay --schedule`` (version 2; tests compare it node by node)."""
    raw = Path(path).read_bytes()
    if raw[:8] != SCHEDULE_MAGIC:
        raise FastrackError("not a Fastrack schedule file", path=path)
    version = int(np.frombuffer(raw, "<u4", 1, 8)[0])
    if version != 2:
        raise FastrackError(f"schedule file version {version} is not supported (expected 2)", path=path)
    n, lanes = (int(x) for x in np.frombuffer(raw, "<u8", 2, 16))
    off = 32
    out = {}
    for name, dt, count in (("start", "<i8", n), ("finish", "<i8", n), ("crit_pred", "<i8", n), ("bound_by", "i1", n),
                            ("order", "<i8", n), ("slot_wait", "<i8", n), ("lane_servers", "<i8", lanes)):
        out[name] = np.frombuffer(raw, dt, count, off)
        off += count * np.dtype(dt).itemsize
    if off != len(raw):
        raise FastrackError(f"schedule file has {len(raw)} bytes, expected {off}", path=path)
    return out


def lanes_csv(graph: OpGraph) -> str:
    lanes = graph.lanes
    buf = io.StringIO()
    buf.write("index,type,rank,servers,name\n")
    for i, name in enumerate(lanes.names):
        clean = str(name).replace("\r", " ").replace("\n", " ")
        buf.write(f"{i},{LaneType(int(lanes.type[i])).label},{int(lanes.rank[i])},{int(lanes.servers[i])},{clean}\n")
    return buf.getvalue()


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
        if table not in params:
            raise ConfigError(f"parameter table [{table}] is missing; the gem5 extension expects it; export refused")


def check_graph(graph: OpGraph, makespan_ns: int) -> None:
    """Values the C++ core represents (it validates the same on reading) and a makespan gem5 can tick."""
    lanes = graph.lanes
    if len(lanes) and (lanes.type.min() < 0 or lanes.type.max() >= len(LaneType)):
        raise GraphError("the transformed graph has a lane type the C++ core does not know; export refused")
    if graph.num_edges and int(graph.dep_kind.max()) >= len(DepKind):
        raise GraphError(f"the transformed graph has dependency kind {int(graph.dep_kind.max())}, which the C++ "
                         "core does not know; export refused")
    for name, arr in (("duration", graph.dur), ("release time", graph.release), ("dependency lag", graph.dep_lag)):
        if arr.size and int(np.abs(arr).max()) > MAX_TIME_NS:
            raise GraphError(f"a {name} exceeds 2^60 ns, beyond what the C++ core accepts; export refused")
    if makespan_ns * TICKS_PER_NS > MAX_TICK:
        raise GraphError(f"the replay lasts {makespan_ns} ns, which is more than gem5's 64-bit tick counter holds at "
                         f"{TICKS_PER_NS} ticks/ns; export refused")


# ---------------------------------------------------------------------------------------------
# gem5 configuration


def gem5_objects(params: dict[str, dict[str, Any]] | None, parallel_auth: bool = False) -> dict[str, dict[str, Any]]:
    """SimObject parameters of the replayer's resource objects, from the model parameters (as
    Python literals ready for run_gem5.py): {attribute: {"class": ..., "params": {...}}}.
    ``parallel_auth``: the protocol authenticates in parallel (FastrackGpuAuth.parallel)."""
    if not params:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for attr, (cls, lane_type) in GEM5_OBJECTS.items():
        out[attr] = {"class": cls, "params": {}}
        if lane_type is not None:
            out[attr]["params"]["lane_type"] = lane_type.label
    for table, body in params.items():
        for key, value in body.items():
            attrs, pname, kind = GEM5_PARAM_MAP[table][key]
            if kind == "graph":
                continue
            for attr in attrs.split("+"):
                if kind == "float":
                    v: Any = float(value)
                elif kind == "ns":
                    v = f"{int(value)}ns"
                elif kind == "bytes":
                    v = f"{int(value)}B"
                else:
                    v = int(value)
                out[attr]["params"][pname] = v
    out["gpu_auth"]["params"]["parallel"] = bool(parallel_auth)
    return out


RUN_GEM5_TEMPLATE = '''\
# gem5 configuration written by `replay export-gem5` (Fastrack {version}); run it with a gem5
# built with the Fastrack extension (docs/gem5.md):
#
#     build/NULL/gem5.opt {dir_hint}/run_gem5.py [--with-memory] [--reprice --param OBJ.PARAM=VALUE ...]
#
# trace:    {trace}
# protocol: {protocol}   model: {model}   preset: {preset}   params digest: {digest}
#
# It replays graph.bin (the transformed graph) with the FastrackReplayer SimObject, whose node
# completions are gem5 events, and checks that the simulated time equals the Python replay's
# makespan (expected.json): exit code 0 when it does, 1 when it does not.
import argparse
import json
import os
import sys

import m5
from m5.objects import *  # noqa: F401,F403  (Root, FastrackReplayer, Fastrack* resources)
from m5.params import AddrRange

HERE = os.path.dirname(os.path.abspath(__file__))

parser = argparse.ArgumentParser(description="Fastrack replay in gem5")
parser.add_argument("--with-memory", action="store_true",
                    help="connect the bounce pool's staging port to a SimpleMemory (observational: "
                         "memory traffic does not change the replay's times)")
parser.add_argument("--no-check-prices", action="store_true",
                    help="do not re-price nodes with the SimObjects' parameters at start-up")
parser.add_argument("--param", action="append", default=[], metavar="OBJECT.PARAM=VALUE",
                    help="change a resource parameter, e.g. pcie_h2d.bandwidth_gb_s=25.0 (needs --reprice)")
parser.add_argument("--reprice", action="store_true",
                    help="use the SimObjects' prices instead of the exported durations (then the simulated "
                         "time is not compared with expected.json)")
args = parser.parse_args()

with open(os.path.join(HERE, "expected.json")) as fh:
    expected = json.load(fh)

RESOURCES = {resources}

for change in args.param:
    target, _, value = change.partition("=")
    obj, _, name = target.partition(".")
    if obj not in RESOURCES or not name or not value:
        sys.exit(f"--param {{change}}: expected OBJECT.PARAM=VALUE with OBJECT one of {{', '.join(sorted(RESOURCES))}}")
    RESOURCES[obj]["params"][name] = value

root = Root(full_system=False)
replayer = FastrackReplayer(
    graph=os.path.join(HERE, "graph.bin"),
    lanes=os.path.join(HERE, "lanes.csv"),
    check_prices=not args.no_check_prices,
    reprice=args.reprice,
)
objects = []
for attr, spec in sorted(RESOURCES.items()):
    obj = getattr(m5.objects, spec["class"])(**spec["params"])
    setattr(replayer, attr, obj)
    objects.append(obj)
if args.with_memory:
    if "bounce_pool" not in RESOURCES:
        sys.exit("--with-memory needs a model (this export has no bounce pool)")
    pool = RESOURCES["bounce_pool"]["params"]
    ranks = max(1, len(expected["per_rank"]))
    staging = ranks * int(pool["slots"]) * int(str(pool["slot_size"]).rstrip("B"))
    root.system = System(mem_ranges=[AddrRange(max(staging, 1 << 20))], mem_mode="timing")
    root.system.clk_domain = SrcClockDomain(clock="1GHz", voltage_domain=VoltageDomain())
    root.system.mem = SimpleMemory(range=root.system.mem_ranges[0], latency="100ns", bandwidth="64GiB/s")
    replayer.bounce_pool.system = root.system
    replayer.bounce_pool.mem_side = root.system.mem.port
root.replayer = replayer

m5.instantiate()
event = m5.simulate()
ticks = m5.curTick()
want = int(expected["expected_ticks"])
match = None if args.reprice else ticks == want
print(json.dumps({{"exit_cause": event.getCause(), "sim_ticks": ticks, "sim_ns": ticks / {ticks_per_ns},
                  "expected_ticks": want, "makespan_ns": expected["makespan_ns"], "match": match}}))
sys.exit(0 if match in (True, None) else 1)
'''


def run_gem5_script(objects: dict[str, Any], meta: dict[str, Any]) -> str:
    from fastrack import __version__

    return RUN_GEM5_TEMPLATE.format(version=__version__, resources=pprint.pformat(objects, indent=1, width=100),
                                    ticks_per_ns=TICKS_PER_NS, dir_hint="DIR", **meta)


# ---------------------------------------------------------------------------------------------
# the export


def expected_summary(graph: OpGraph, sched: Schedule, result: ReplayResult) -> dict[str, Any]:
    origin = int(sched.start.min()) if graph.n else 0
    makespan = int(result.makespan_ns)
    if graph.n and makespan != int(sched.finish.max()) - origin:
        raise GraphError(f"the replay's makespan {makespan} ns is not its last finish minus its first start; "
                         "the gem5 export assumes it is")
    return {
        "format_version": FORMAT_VERSION,
        "makespan_ns": makespan,
        "per_rank": [{"rank": r.rank, "makespan_ns": int(r.makespan_ns)} for r in result.per_rank],
        "origin_ns": origin,
        "ticks_per_ns": TICKS_PER_NS,
        "expected_ticks": makespan * TICKS_PER_NS,
        "nodes": graph.n,
        "edges": graph.num_edges,
        "resources": [{"index": i, "name": r["name"], "type": r["type"], "rank": r["rank"], "servers": r["servers"],
                       "ops": r["ops"], "busy_ns": r["busy_ns"],
                       **({"peak_servers": r["peak_servers"]} if "peak_servers" in r else {})}
                      for i, r in enumerate(result.resources)],
    }


def protocol_parallel_auth(protocol: str) -> bool:
    """Does ``protocol`` authenticate in parallel (the CC protocols' ``parallel_auth`` switch)?"""
    if protocol == CAPTURED:
        return False
    from replay.plugins import load_protocol

    proto = load_protocol(protocol)
    # CCProtocol keeps its switches in .options; the multi-GPU protocols in .host and .p2p
    modes = {bool(getattr(getattr(proto, attr, None), "parallel_auth", False))
             for attr in ("options", "host", "p2p") if getattr(proto, attr, None) is not None}
    if len(modes) > 1:
        raise ConfigError(f"protocol '{protocol}' authenticates host copies and GPU-to-GPU messages in different "
                          "modes; the gem5 FastrackGpuAuth has one mode; export refused")
    return modes == {True}


def write_export(out_dir: str | Path, graph: OpGraph, sched: Schedule, result: ReplayResult, *, trace: str = "",
                 protocol: str = CAPTURED, model_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write graph.bin, lanes.csv, params.json, run_gem5.py and expected.json into ``out_dir``
    (the graph already transformed and replayed). Returns the expected.json content."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output {out} exists and is not a directory")
    params = model_info.get("params") if model_info else None
    if params is not None:
        check_params(params)
    check_graph(graph, int(result.makespan_ns))
    out.mkdir(parents=True, exist_ok=True)
    expected = expected_summary(graph, sched, result)
    expected.update({"trace": str(trace), "protocol": protocol,
                     "model": model_info.get("model") if model_info else None,
                     "preset": model_info.get("preset") if model_info else None,
                     "params_digest": model_info.get("digest") if model_info else None})
    objects = gem5_objects(params, protocol_parallel_auth(protocol))
    write_graph(out / "graph.bin", graph)
    write_text_atomic(out / "lanes.csv", lanes_csv(graph))
    write_text_atomic(out / "params.json", json.dumps({
        "format_version": FORMAT_VERSION, "protocol": protocol,
        "model": expected["model"], "preset": expected["preset"], "params_digest": expected["params_digest"],
        "params": params, "gem5": objects,
        "rates_exact": {f"{t}.{k}": _fraction(v) for t, body in (params or {}).items() for k, v in body.items()
                        if GEM5_PARAM_MAP.get(t, {}).get(k, ("", "", ""))[2] == "float"},
    }, indent=2, sort_keys=True) + "\n")
    write_text_atomic(out / "params.txt", params_txt(params, protocol))
    write_text_atomic(out / "run_gem5.py", run_gem5_script(objects, {
        "trace": trace, "protocol": protocol, "model": expected["model"], "preset": expected["preset"],
        "digest": expected["params_digest"]}))
    write_text_atomic(out / "expected.json", json.dumps(expected, indent=2, sort_keys=True) + "\n")
    return expected


def params_txt(params: dict[str, dict[str, Any]] | None, protocol: str) -> str:
    """The parameters as ``section.key = value`` lines for the C++ driver (--check-prices)."""
    lines = ["# Fastrack export parameters, read by fastrack_replay --check-prices (docs/gem5.md)",
             "format_version = 1", f"model = {'h100' if params else 'none'}", f"protocol = {protocol}",
             f"protocol.parallel_auth = {int(protocol_parallel_auth(protocol))}"]
    for table, body in (params or {}).items():
        for key, value in body.items():
            lines.append(f"{table}.{key} = {value!r}" if isinstance(value, float) else f"{table}.{key} = {value}")
    return "\n".join(lines) + "\n"


def _fraction(value: float) -> list[int]:
    fr = Fraction(str(float(value))).limit_denominator(10_000)
    return [fr.numerator, fr.denominator]


def export(trace: str | Path, out_dir: str | Path, protocol: str = CAPTURED, model: str = "h100",
           preset: str | None = None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Replay ``trace`` under ``protocol`` and export it (see the module docstring)."""
    from replay.run import replay_trace

    check_protocol(protocol, model)
    rep = replay_trace(trace, protocol=protocol, model=model, preset=preset, overrides=overrides)
    return write_export(out_dir, rep.graph, rep.schedule, rep.result, trace=str(trace), protocol=protocol,
                        model_info=rep.result.model)


@click.command("export-gem5")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--protocol", default=CAPTURED, show_default=True,
              help=f"one of {', '.join(SUPPORTED_PROTOCOLS)}")
@click.option("--model", default="h100", show_default=True, help="Hardware model plug-in name.")
@click.option("--preset", default=None, help="Preset name or TOML file (default: the model's default).")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override one model parameter (repeatable).")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory to write graph.bin, lanes.csv, params.json, run_gem5.py, expected.json into.")
@reports_errors
def command(trace, protocol, model, preset, overrides, out_dir):
    """Export TRACE's transformed graph for the C++ core and gem5 (docs/gem5.md)."""
    exp = export(trace, out_dir, protocol=protocol, model=model, preset=preset, overrides=overrides)
    click.echo(f"wrote {out_dir}: {exp['nodes']} nodes, {exp['edges']} edges, makespan {exp['makespan_ns']} ns "
               f"(gem5: {exp['expected_ticks']} ticks); run: gem5.opt {Path(out_dir) / 'run_gem5.py'}")


__all__ = ["command", "export", "write_export", "write_graph", "read_schedule", "check_protocol", "check_params",
           "FORMAT_VERSION", "SUPPORTED_PROTOCOLS", "TICKS_PER_NS"]
