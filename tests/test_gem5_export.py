"""The gem5 export (``replay export-gem5``: replay/frontend/export.py, the H100 plug-in's
fastrack_h100/gem5export.py) and the gem5-free C++ core (its driver models/h100/cpp; the generic
headers replay/cpp/fastrack) against the Python replay.

The C++ driver must give the same integer-ns results as replay.pipeline.engine / replay.pipeline.results: the
makespan, per-rank makespans, per-lane busy time, and, node by node, start, finish, the binding
prerequisite and the visiting order. Inputs: hand-made traces, random graphs exercising every
engine rule (multi-server lanes, barrier groups, launch edges, negative stream lags, release
times, tied order keys), seeded synthetic traces for every available protocol, and the real
Kineto traces of tests/data, converted here. The C++ pricing formulas are compared with the
Python model on many values.

The core is compiled once per session into a temporary directory with -Wall -Wextra -Werror
(about 5 s): every test that needs it is marked slow (CI's second pass). They skip (saying so)
only when no C++ compiler exists. The generated gem5 configuration runs here against a stand-in
``m5`` package (M5_STUB below) that records the SimObjects it is given, since CI has no gem5.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastrack_core.errors import ConfigError
from fastrack_core.schema import DepKind
from fastrack_h100 import gem5export
from fastrack_h100.gem5export import GEM5, SUPPORTED_PROTOCOLS, check_params
from replay.frontend import export as replay_export
from replay.pipeline.engine import schedule
from replay.graph import Lanes, OpGraph
from replay.exporters.graphfile import END_MAGIC, HEADER_BYTES, read_schedule, write_graph
from replay.pipeline.results import summarize
from replay.pipeline.run import replay_trace
from test_build import launch_trace, two_rank_collective
from tracefactory import write

ROOT = Path(__file__).resolve().parent.parent
CPP = ROOT / "models" / "h100" / "cpp"
CORE = ROOT / "replay" / "cpp"  # the generic core's include directory (fastrack/graph.hh, engine.hh, results.hh)
DATA = Path(__file__).resolve().parent / "data"
# real traces (tests/data, see SOURCES.md), converted by the tests: fixed inputs, whatever sits in traces/
REAL_TRACES = ("h100_bert_small_uncased.json.gz", "h100_qwen1.5_0.5b_chat.json.gz", "v100_dlrm_8rank")
WARN = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wshadow", "-Wconversion", "-Wno-sign-conversion"]


def write_export(out_dir, graph, sched, result, **kw) -> dict:
    """The gem5 export of an already replayed graph (what ``replay export-gem5`` writes)."""
    return replay_export.write_export(GEM5, out_dir, graph, sched, result, **kw)


def _compiler() -> str | None:
    for cand in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if cand and shutil.which(cand):
            return cand
    return None


@pytest.fixture(scope="session")
def core(tmp_path_factory) -> dict[str, Path]:
    """Build fastrack_replay and fastrack_price (through the Makefile when make exists)."""
    cxx = _compiler()
    if cxx is None:
        pytest.skip("no C++ compiler (g++, c++, clang++ or $CXX) on this machine: the C++ core cannot be built")
    out = tmp_path_factory.mktemp("fastrack-core")
    if shutil.which("make"):
        proc = subprocess.run(["make", "-C", str(CPP), f"BUILD_DIR={out}", f"CXX={cxx}"], capture_output=True, text=True)
        assert proc.returncode == 0, f"the C++ core does not build warning-free:\n{proc.stdout}\n{proc.stderr}"
    else:
        for name in ("fastrack_replay", "fastrack_price"):
            proc = subprocess.run([cxx, *WARN, "-O2", f"-I{CPP}", f"-I{CORE}", "-o", str(out / name), str(CPP / f"{name}.cpp")],
                                  capture_output=True, text=True)
            assert proc.returncode == 0, f"{name} does not build warning-free:\n{proc.stderr}"
    return {"replay": out / "fastrack_replay", "price": out / "fastrack_price"}


def run_core(core, export_dir: Path, schedule_out: Path | None = None, *extra: str, rc: int = 0) -> dict:
    cmd = [str(core["replay"]), str(export_dir), *extra]
    if schedule_out is not None:
        cmd += ["--schedule", str(schedule_out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == rc, proc.stderr
    return json.loads(proc.stdout)


def assert_same(core, export_dir: Path, graph: OpGraph, sched, expected: dict) -> dict:
    """The C++ driver's results equal the Python replay's, node by node, and every derived node
    is priced by the C++ formulas exactly as the Python model priced it."""
    checked = (export_dir / "params.txt").exists()
    got = run_core(core, export_dir, export_dir / "cpp-schedule.bin", *(["--check-prices"] if checked else []))
    if checked and "priced" in got["price_check"]:
        assert got["price_check"]["mismatches"] == 0, got["price_check"]
        # the kinds with a C++ formula: 16..23 and cpu_recrypt (31)
        derived = int((((graph.kind >= 16) & (graph.kind <= 23)) | (graph.kind == 31)).sum())
        assert got["price_check"]["priced"] == derived
    cs = read_schedule(export_dir / "cpp-schedule.bin")
    assert np.array_equal(cs["order"], sched.order), "visiting order differs"
    assert np.array_equal(cs["start"], sched.start), _first_diff(graph, cs["start"], sched.start, "start")
    assert np.array_equal(cs["finish"], sched.finish), _first_diff(graph, cs["finish"], sched.finish, "finish")
    assert np.array_equal(cs["crit_pred"], sched.crit_pred), "binding prerequisite differs"
    assert np.array_equal(cs["bound_by"], sched.bound_by.astype(np.int8)), "binding kind differs"
    assert np.array_equal(cs["slot_wait"], sched.slot_wait), "slot waits differ"
    assert np.array_equal(cs["lane_servers"], sched.lane_servers), "pool sizes differ"
    assert got["makespan_ns"] == expected["makespan_ns"]
    assert got["origin_ns"] == expected["origin_ns"] == (int(sched.start.min()) if graph.n else 0)
    assert got["per_rank"] == expected["per_rank"]
    assert [(r["name"], r["busy_ns"], r["ops"], r["servers"], r.get("peak_servers")) for r in got["resources"]] == \
        [(r["name"], r["busy_ns"], r["ops"], r["servers"], r.get("peak_servers")) for r in expected["resources"]]
    return got


def _first_diff(graph, a, b, what):
    i = int(np.flatnonzero(a != b)[0])
    return f"{what} of {graph.node_label(i)}: C++ {int(a[i])}, Python {int(b[i])}"


def export_replay(tmp_path: Path, trace: Path, protocol: str = "captured", **kw):
    rep = replay_trace(trace, protocol=protocol, **kw)
    out = tmp_path / f"export-{protocol}"
    expected = write_export(out, rep.graph, rep.schedule, rep.result, trace=str(trace), protocol=protocol,
                            model_info=rep.result.model)
    return rep, out, expected


def available_protocols() -> list[str]:
    try:
        from replay.plugins import available_protocols as avail
        installed = set(avail())
    except Exception:  # the registry is optional for the captured replay
        installed = set()
    return [p for p in SUPPORTED_PROTOCOLS if p == "captured" or p in installed]


PROTOCOLS = available_protocols()
# real traces (single-rank, larger): the host-side protocols; the multi-GPU ones run on the
# hand-made and synthetic traces above
REAL_PROTOCOLS = [p for p in PROTOCOLS if p in ("captured", "none", "baseline", "fastrack")]


# ---------------------------------------------------------------------------------------------
# random graphs: every engine rule


def random_graph(seed: int, n: int = 300) -> OpGraph:
    """A random schedulable graph: nodes on levels (edges go to higher levels; barrier groups
    within a level, so contracting them keeps it acyclic), lanes with 1-3 servers, every edge
    kind, negative STREAM lags, LAUNCH edges, release times, coarse (often tied) order keys."""
    rng = np.random.default_rng(seed)
    n_lanes = int(rng.integers(1, 8))
    n_ranks = int(rng.integers(1, 4))
    level = np.sort(rng.integers(0, max(2, n // 6), n))
    lane = np.where(rng.random(n) < 0.1, -1, rng.integers(0, n_lanes, n)).astype(np.int32)
    dur = rng.integers(0, 100, n).astype(np.int64)
    srcs, dsts, kinds, lags = [], [], [], []
    prev_on_lane: dict[int, int] = {}
    for i in range(n):
        lower = np.flatnonzero(level < level[i])
        if lower.size:
            for s in rng.choice(lower, size=min(lower.size, int(rng.integers(0, 4))), replace=False):
                k = int(rng.integers(0, len(DepKind)))
                srcs.append(int(s)), dsts.append(i), kinds.append(k)
                lags.append(int(rng.integers(-40, 5)) if k == DepKind.STREAM else int(rng.integers(0, 30)))
        p = prev_on_lane.get(int(lane[i]))
        if p is not None and level[p] < level[i] and rng.random() < 0.5:
            srcs.append(p), dsts.append(i), kinds.append(int(DepKind.STREAM)), lags.append(int(rng.integers(-60, 3)))
        if lane[i] >= 0:
            prev_on_lane[int(lane[i])] = i
    group = np.full(n, -1, np.int64)
    gid = 0
    for lv in np.unique(level):
        members = np.flatnonzero(level == lv)
        rng.shuffle(members)
        while members.size >= 2 and rng.random() < 0.4:
            k = int(rng.integers(2, min(4, members.size) + 1))
            group[members[:k]] = gid
            gid += 1
            members = members[k:]
    order = np.argsort(np.asarray(dsts, np.int64), kind="stable")
    dst = np.asarray(dsts, np.int64)[order]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    z = np.zeros(n, np.int64)
    # lanes of every type, each in order or shared at random; one more lane is a pool (1-3 servers
    # growing up to 1-6) that some ungrouped nodes hold until one of their successors (or
    # themselves) finishes; ranks share it, so holds also wait on other ranks' returns
    servers = rng.integers(1, 4, n_lanes + 1).astype(np.int32)
    max_servers = servers.copy()
    max_servers[-1] += int(rng.integers(0, 4))
    hold_lane = np.full(n, -1, np.int32)
    hold_until = np.full(n, -1, np.int64)
    succ: dict[int, list[int]] = {}
    for a, b in zip(srcs, dsts):
        succ.setdefault(a, []).append(b)
    for i in np.flatnonzero((rng.random(n) < 0.25) & (group < 0)):
        hold_lane[i] = n_lanes
        hold_until[i] = int(rng.choice(succ.get(int(i), []) + [int(i)]))
    lane_type = np.append(rng.integers(0, 10, n_lanes), 10).astype(np.int8)
    return OpGraph(
        op_id=np.arange(n, dtype=np.int64) * 3 + 7, origin=np.arange(n, dtype=np.int64),
        rank=rng.integers(0, n_ranks, n).astype(np.int32), kind=np.full(n, 3, np.int8),
        category=np.zeros(n, np.int8), lane=lane, dur=dur, bytes=rng.integers(0, 1 << 20, n).astype(np.int64),
        copy_dir=np.zeros(n, np.int8), host_mem=np.zeros(n, np.int8), name=np.zeros(n, np.int32),
        order=(rng.integers(0, 20, n) * 10).astype(np.int64),
        release=np.where(rng.random(n) < 0.3, rng.integers(-20, 500, n), 0).astype(np.int64),
        group=group, dep_ptr=ptr, dep_src=np.asarray(srcs, np.int64)[order],
        dep_kind=np.asarray(kinds, np.uint8)[order], dep_lag=np.asarray(lags, np.int64)[order],
        lanes=Lanes(rank=rng.integers(0, n_ranks, n_lanes + 1).astype(np.int32), type=lane_type,
                    key=np.arange(n_lanes + 1, dtype=np.int64), servers=servers,
                    names=tuple(f"lane {i}, \"quoted\"" for i in range(n_lanes + 1)),
                    shared=rng.random(n_lanes + 1) < 0.5, max_servers=max_servers),
        names=("x",), captured_start=z.copy(), captured_dur=z.copy(), step=np.full(n, -1, np.int32),
        hold_lane=hold_lane, hold_until=hold_until,
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_schedule_identically(core, tmp_path, seed):
    g = random_graph(seed, n=int(np.random.default_rng(seed).integers(1, 400)))
    s = schedule(g)
    res = summarize(g, s, "captured", g.n)
    expected = write_export(tmp_path / "x", g, s, res)
    assert_same(core, tmp_path / "x", g, s, expected)


# ---------------------------------------------------------------------------------------------
# traces: hand-made, synthetic, real


@pytest.mark.slow
@pytest.mark.parametrize("ops", [launch_trace, two_rank_collective], ids=["launch", "collective"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_hand_made_traces(core, tmp_path, ops, protocol):
    trace = write(tmp_path / "t.parquet", ops())
    rep, out, expected = export_replay(tmp_path, trace, protocol)
    assert expected["makespan_ns"] == rep.result.makespan_ns
    assert_same(core, out, rep.graph, rep.schedule, expected)


def synth(tmp_path: Path, ops: int, seed: int, ranks: int = 1) -> Path:
    from tracegen.synth import command as synth_command

    path = tmp_path / f"synth-{ops}-{seed}-{ranks}.parquet"
    r = CliRunner().invoke(synth_command, ["random", "--ops", str(ops), "--seed", str(seed), "--ranks", str(ranks),
                                           "-o", str(path)])
    assert r.exit_code == 0, r.output
    return path


@pytest.mark.slow
@pytest.mark.parametrize("seed,ranks", [(1, 1), (2, 2), (3, 1), (4, 3)])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_synthetic_traces(core, tmp_path, seed, ranks, protocol):
    trace = synth(tmp_path, 1500, seed, ranks)
    rep, out, expected = export_replay(tmp_path, trace, protocol)
    assert_same(core, out, rep.graph, rep.schedule, expected)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["baseline", "fastrack:direct"])
def test_reprice_equals_a_python_replay_with_other_parameters(core, tmp_path, protocol):
    """Re-pricing an export with other rates (durations only) gives the Python replay under those rates.
    Only rates that price node durations alone: PCIe and CE rates also set the one-page tails of the
    CC data path, which are edge lags (docs/protocols.md), and re-pricing keeps exported lags. The
    CPU AES-GCM rate prices the driver path's push encryption too, which grows each launch's lag
    (replay/protocols/submit.py), and the completion wait's semaphore decryption (a p2p_sync node
    the core replays as given): those stages are left out (0 bytes) on both sides."""
    trace = synth(tmp_path, 1500, 11, 2)
    no_push_crypto = ["submit.segment_bytes=0", "submit.wlc_push_bytes=0", "submit.semaphore_bytes=0"]
    rep, out, _ = export_replay(tmp_path, trace, protocol, overrides=no_push_crypto)
    changes = {"cpu_crypto.core_gb_s": 1.7, "cpu_crypto.call_overhead_ns": 300}
    text = (out / "params.txt").read_text()
    for k, v in changes.items():
        text = "\n".join(f"{k} = {v!r}" if line.startswith(k + " =") else line for line in text.splitlines()) + "\n"
    (out / "params.txt").write_text(text)
    got = run_core(core, out, None, "--check-prices", rc=1)  # exported durations no longer match
    assert got["price_check"]["mismatches"] > 0 and "priced" in got["price_check"]["first"]
    got = run_core(core, out, None, "--reprice")
    other = replay_trace(trace, protocol=protocol, overrides=no_push_crypto + [f"{k}={v}" for k, v in changes.items()])
    assert other.result.makespan_ns != rep.result.makespan_ns
    assert got["makespan_ns"] == other.result.makespan_ns
    assert [r["busy_ns"] for r in got["resources"]] == [r["busy_ns"] for r in other.result.resources]


@pytest.fixture(scope="session")
def real_traces(tmp_path_factory) -> dict[str, Path]:
    """The real traces of tests/data converted once (``tracegen convert``), by name."""
    from tracegen.cli import main as tracegen_main

    out = tmp_path_factory.mktemp("real-traces")
    paths = {}
    for name in REAL_TRACES:
        paths[name] = out / f"{name}.parquet"
        r = CliRunner().invoke(tracegen_main, ["convert", str(DATA / name), "-o", str(paths[name])])
        assert r.exit_code == 0, r.output
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("protocol", REAL_PROTOCOLS)
@pytest.mark.parametrize("name", REAL_TRACES)
def test_real_traces(core, tmp_path, real_traces, name, protocol):
    rep, out, expected = export_replay(tmp_path, real_traces[name], protocol)
    assert_same(core, out, rep.graph, rep.schedule, expected)


# ---------------------------------------------------------------------------------------------
# the command line and its refusals


@pytest.mark.slow
def test_cli_writes_every_file(core, tmp_path):
    from replay.frontend.cli import main

    trace = write(tmp_path / "t.parquet", launch_trace())
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["export-gem5", str(trace), "--protocol", "captured", "-o", str(out)])
    assert r.exit_code == 0, r.output
    for name in ("graph.bin", "lanes.csv", "params.json", "run_gem5.py", "expected.json"):
        assert (out / name).is_file(), name
    exp = json.loads((out / "expected.json").read_text())
    assert exp["makespan_ns"] == 140 and exp["expected_ticks"] == 140_000 and exp["format_version"] == 2
    compile((out / "run_gem5.py").read_text(), "run_gem5.py", "exec")  # valid Python
    got = run_core(core, out)
    assert got["makespan_ns"] == 140 and {r["name"] for r in got["resources"]} == {"rank0/thread 1", "rank0/gpu0/stream 7"}
    assert not list(out.glob("*.part"))


def test_unsupported_protocol_is_refused(tmp_path):
    from replay.frontend.cli import main

    trace = write(tmp_path / "t.parquet", launch_trace())
    r = CliRunner().invoke(main, ["export-gem5", str(trace), "--protocol", "warp-drive", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "not supported by the gem5 export" in r.output and "captured" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_unsupported_model_is_refused(tmp_path):
    from replay.frontend.cli import main

    trace = write(tmp_path / "t.parquet", launch_trace())
    proto = next((p for p in PROTOCOLS if p != "captured"), "none")
    r = CliRunner().invoke(main, ["export-gem5", str(trace), "--protocol", proto, "--model", "blackwell",
                                  "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "model 'blackwell'" in r.output


def test_rate_outside_the_exact_range_is_refused():
    from replay.plugins import load_model

    H100Model = load_model("h100")
    params = H100Model.from_preset().params
    check_params(params)
    params["pcie"]["h2d_bandwidth_gb_s"] = 1e-5
    with pytest.raises(ConfigError, match="pcie.h2d_bandwidth_gb_s .* outside the range"):
        check_params(params)
    params = H100Model.from_preset().params
    params["pcie"]["mystery_ns"] = 3
    with pytest.raises(ConfigError, match="pcie.mystery_ns has no counterpart"):
        check_params(params)


def test_parameter_refusal_through_the_cli(tmp_path):
    from replay.frontend.cli import main

    trace = write(tmp_path / "t.parquet", launch_trace())
    r = CliRunner().invoke(main, ["export-gem5", str(trace), "--protocol", "none", "--set",
                                  "pcie.h2d_bandwidth_gb_s=0.00001", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "must be >= 0.001" in r.output


def test_gem5_parameters_mirror_the_preset(tmp_path):
    trace = write(tmp_path / "t.parquet", launch_trace())
    rep, out, _ = export_replay(tmp_path, trace, "none", preset="h100-pcie")
    p = json.loads((out / "params.json").read_text())
    params, gem5 = p["params"], p["gem5"]
    assert p["preset"] == "h100-pcie"
    assert gem5["pcie_h2d"]["params"]["bandwidth_gb_s"] == params["pcie"]["h2d_bandwidth_gb_s"]
    assert gem5["pcie_d2h"]["params"]["latency"] == f"{params['pcie']['latency_ns']}ns"
    assert "gpu_auth" not in gem5 and "auth" not in params  # no [auth] table: nothing for FastrackGpuAuth to price
    assert gem5["bounce_pool"]["params"]["slot_size"] == f"{params['bounce']['slot_bytes']}B"
    assert gem5["copy_engine"]["params"]["engines"] == params["gpu"]["copy_engines"]
    assert gem5["pcie_h2d"]["class"] == "FastrackPCIeLink" and gem5["pcie_h2d"]["params"]["lane_type"] == "pcie_h2d"
    assert gem5["copy_engine"]["params"]["parallel_auth"] is False
    _, out2, _ = export_replay(tmp_path / "f", trace, "fastrack")
    assert json.loads((out2 / "params.json").read_text())["gem5"]["copy_engine"]["params"]["parallel_auth"] is True


def test_parallel_auth_is_declared_by_the_protocol():
    from replay.plugins import load_protocol

    assert gem5export.protocol_parallel_auth("captured") is False
    assert load_protocol("none").parallel_auth_modes() == frozenset()
    assert load_protocol("baseline").parallel_auth_modes() == {False}
    assert load_protocol("fastrack:auth").parallel_auth_modes() == {True}
    assert load_protocol("cc-multi:all").parallel_auth_modes() == {True}
    assert [gem5export.protocol_parallel_auth(p) for p in ("none", "baseline", "fastrack", "cc-multi:auth")] == \
        [False, False, True, True]
    from replay.protocols.multigpu import System

    class Mixed(type(load_protocol("fastrack").host)):  # a host path that mixes both modes
        def parallel_auth_modes(self):
            return frozenset({True, False})

    mixed = System(load_protocol("fastrack").host, load_protocol("fastrack").p2p, "mixed", name="mixed")
    mixed.host = Mixed.__new__(Mixed)
    assert mixed.parallel_auth_modes() == {True, False}


def test_export_gem5_is_a_plugin_command():
    """replay/frontend/cli.py names no plug-in: export-gem5 comes from the fastrack.exporters entry point."""
    from replay.frontend.cli import main
    from replay.exporters.exporter import available_exporters, load_exporter

    assert "gem5" in available_exporters() and load_exporter("gem5") is GEM5
    cli_source = (ROOT / "replay" / "frontend" / "cli.py").read_text()
    assert "gem5" not in cli_source and "h100" not in cli_source
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0 and "export-gem5" in r.output
    r = CliRunner().invoke(main, ["export-gem5", "--help"])
    assert r.exit_code == 0 and "ppcie" in r.output and "params.txt" in r.output


# ---------------------------------------------------------------------------------------------
# run_gem5.py, run against a stand-in m5 package (tests/gem5_standin: gem5's configuration rules,
# no simulator; it loads the extension's real FastrackObjects.py)

STANDIN = Path(__file__).resolve().parent / "gem5_standin"
SIMOBJECTS = ROOT / "models" / "h100" / "gem5" / "FastrackObjects.py"


@pytest.fixture(scope="module")
def m5_stub() -> Path:
    return STANDIN


def run_script_raw(m5_stub: Path, export_dir: Path, *args: str, ticks: int, cwd: Path) -> subprocess.CompletedProcess:
    """Run export_dir/run_gem5.py with the stand-in m5 (what gem5.opt export_dir/run_gem5.py does)."""
    env = {**os.environ, "PYTHONPATH": str(m5_stub), "M5_STUB_RECORD": str(cwd / "m5-record.json"),
           "M5_STUB_TICKS": str(ticks), "M5_STUB_SIMOBJECTS": str(SIMOBJECTS)}
    (cwd / "m5-record.json").unlink(missing_ok=True)
    return subprocess.run([sys.executable, str(export_dir / "run_gem5.py"), *args], capture_output=True, text=True,
                          env=env, cwd=cwd)


def run_script(m5_stub: Path, export_dir: Path, *args: str, ticks: int, cwd: Path) -> tuple[int, dict, dict]:
    """Run export_dir/run_gem5.py with the stand-in m5: (exit code, printed JSON, SimObject tree)."""
    proc = run_script_raw(m5_stub, export_dir, *args, ticks=ticks, cwd=cwd)
    assert proc.returncode in (0, 1) and proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1]), \
        json.loads((cwd / "m5-record.json").read_text())


def _resources(tree: dict) -> dict:
    """The replayer's resource objects in a recorded tree, as params.json's gem5 section writes them."""
    return {a: {"class": o["class"], "params": o["params"]} for a, o in tree["children"]["replayer"]["children"].items()}


def test_run_gem5_builds_the_exported_simobjects(m5_stub, tmp_path):
    trace = write(tmp_path / "t.parquet", two_rank_collective())
    _, out, expected = export_replay(tmp_path, trace, "fastrack", preset="h100-pcie")
    gem5 = json.loads((out / "params.json").read_text())["gem5"]
    rc, printed, tree = run_script(m5_stub, out, ticks=expected["expected_ticks"], cwd=tmp_path)
    assert rc == 0 and printed["match"] is True and printed["sim_ticks"] == expected["expected_ticks"]
    assert printed["sim_ns"] == expected["makespan_ns"] and printed["makespan_ns"] == expected["makespan_ns"]
    replayer = tree["children"]["replayer"]
    assert replayer["class"] == "FastrackReplayer"
    assert replayer["params"] == {"graph": str(out / "graph.bin"), "lanes": str(out / "lanes.csv"),
                                  "check_prices": True, "reprice": False}
    assert _resources(tree) == gem5
    assert gem5["copy_engine"]["params"]["parallel_auth"] is True and gem5["pcie_h2d"]["params"]["bandwidth_gb_s"] > 0

    rc, printed, _ = run_script(m5_stub, out, ticks=expected["expected_ticks"] + 1, cwd=tmp_path)
    assert rc == 1 and printed["match"] is False  # another simulated time is a mismatch

    rc, printed, tree = run_script(m5_stub, out, "--reprice", "--param", "pcie_h2d.bandwidth_gb_s=25.0",
                                   "--no-check-prices", "--with-memory", ticks=7, cwd=tmp_path)
    replayer = tree["children"]["replayer"]
    assert rc == 0 and printed["match"] is None
    assert replayer["params"]["reprice"] is True and replayer["params"]["check_prices"] is False
    assert replayer["children"]["pcie_h2d"]["params"]["bandwidth_gb_s"] == "25.0"
    pool = gem5["bounce_pool"]["params"]
    staging = 2 * pool["slots"] * int(pool["slot_size"].rstrip("B"))  # two ranks
    assert tree["children"]["system"]["params"]["mem_ranges"] == [{"AddrRange": max(staging, 1 << 20)}]
    assert replayer["children"]["bounce_pool"]["children"]["mem_side"] == "port SimpleMemory.port"
    assert replayer["children"]["bounce_pool"]["params"]["system"] == "object system"


def _presets() -> list[str]:
    from replay.plugins import load_model

    names = sorted(p.stem for p in load_model("h100").presets_dir.glob("*.toml"))
    assert names, "no H100 presets found"
    return names


@pytest.mark.parametrize("preset", _presets())
def test_every_preset_exports_what_gem5_accepts(m5_stub, tmp_path, preset):
    """Every shipped preset's export, under every supported protocol, configures in the strict
    stand-in: no parameter without a default left unset, none unknown. No shipped preset has the
    optional [auth] table, so no export of one has a gpu_auth object (gem5 would stop at start-up
    with "fatal: replayer.gpu_auth.op_overhead without default or user set value")."""
    trace = write(tmp_path / "t.parquet", two_rank_collective())
    assert {"none", "baseline", "fastrack", "ppcie", "cc-multi:fastrack"} <= set(PROTOCOLS)
    for protocol in PROTOCOLS:
        _, out, expected = export_replay(tmp_path / protocol.replace(":", "_"), trace, protocol, preset=preset)
        gem5 = json.loads((out / "params.json").read_text())["gem5"]
        if protocol == "captured":  # measured durations: no model, nothing to price
            assert gem5 == {}
        else:
            assert set(gem5) == {"pcie_h2d", "pcie_d2h", "cpu_crypto", "copy_engine", "bounce_pool", "submit"}
            assert gem5["copy_engine"]["params"]["parallel_auth"] is gem5export.protocol_parallel_auth(protocol)
        proc = run_script_raw(m5_stub, out, ticks=expected["expected_ticks"], cwd=tmp_path)
        assert proc.returncode == 0, f"{preset} {protocol}: {proc.stderr}"
        assert json.loads(proc.stdout.strip().splitlines()[-1])["match"] is True
        assert _resources(json.loads((tmp_path / "m5-record.json").read_text())) == gem5


def test_an_auth_table_exports_the_auth_object(m5_stub, tmp_path):
    """A preset with the optional [auth] table (the emulated authentication kernel) exports
    FastrackGpuAuth with every parameter, in the protocol's mode, like the copy engine."""
    from replay.plugins import load_model

    sxm = load_model("h100").presets_dir / "h100-sxm.toml"
    preset = tmp_path / "auth.toml"
    src = '"assumption: a test value"'
    preset.write_text(f"[preset]\nname = \"auth\"\ndescription = \"emulated auth kernel\"\nextends = {json.dumps(str(sxm))}\n"
                      f"\n[auth]\nserial_gb_s = 20.0\nserial_gb_s_source = {src}\nparallel_gb_s_per_sm = 1.5\n"
                      f"parallel_gb_s_per_sm_source = {src}\nop_overhead_ns = 300\nop_overhead_ns_source = {src}\n")
    trace = write(tmp_path / "t.parquet", launch_trace())
    for protocol, parallel in (("baseline", False), ("fastrack", True)):
        _, out, expected = export_replay(tmp_path / protocol, trace, protocol, preset=str(preset))
        p = json.loads((out / "params.json").read_text())
        auth = p["gem5"]["gpu_auth"]
        assert auth == {"class": "FastrackGpuAuth", "params": {
            "lane_type": "gpu_auth", "serial_gb_s": 20.0, "parallel_gb_s_per_sm": 1.5, "op_overhead": "300ns",
            "sms": p["params"]["gpu"]["sms"], "parallel": parallel}}
        assert p["gem5"]["copy_engine"]["params"]["parallel_auth"] is parallel
        rc, printed, tree = run_script(m5_stub, out, ticks=expected["expected_ticks"], cwd=tmp_path)
        assert rc == 0 and printed["match"] is True and _resources(tree) == p["gem5"]


def test_the_standin_refuses_what_gem5_refuses(m5_stub, tmp_path):
    """The stand-in m5 is as strict as gem5's parameter system: a parameter without a default left
    unset stops the run at instantiate() with gem5's message, and an unknown parameter, a value of
    the wrong type or an unknown enum value is refused when it is set."""
    trace = write(tmp_path / "t.parquet", launch_trace())
    _, out, expected = export_replay(tmp_path, trace, "baseline")
    good = (out / "params.json").read_text()
    ticks = expected["expected_ticks"]

    def with_gem5(change) -> subprocess.CompletedProcess:
        p = json.loads(good)
        change(p["gem5"])
        (out / "params.json").write_text(json.dumps(p))
        return run_script_raw(m5_stub, out, ticks=ticks, cwd=tmp_path)

    # what every export of a default preset did before: the auth object without the [auth] table
    proc = with_gem5(lambda g: g.update(gpu_auth={"class": "FastrackGpuAuth", "params": {
        "lane_type": "gpu_auth", "sms": 132, "parallel": False}}))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == "fatal: replayer.gpu_auth.op_overhead without default or user set value"
    assert not (tmp_path / "m5-record.json").exists()  # stopped before anything was built
    proc = with_gem5(lambda g: g["copy_engine"]["params"].pop("crypto_gb_s"))
    assert proc.returncode == 1 and "fatal: replayer.copy_engine.crypto_gb_s without default" in proc.stderr
    # unknown parameters, from params.json or from the command line
    proc = with_gem5(lambda g: g["submit"]["params"].update(kernel_us="3ns"))
    assert proc.returncode != 0 and "AttributeError: Class FastrackSubmit has no parameter kernel_us" in proc.stderr
    (out / "params.json").write_text(good)
    proc = run_script_raw(m5_stub, out, "--reprice", "--param", "copy_engine.engine=4", ticks=ticks, cwd=tmp_path)
    assert proc.returncode != 0 and "Class FastrackCopyEngine has no parameter engine" in proc.stderr
    # values gem5 cannot convert
    proc = with_gem5(lambda g: g["pcie_h2d"]["params"].update(latency=700))
    assert proc.returncode != 0 and "Error setting param FastrackPCIeLink.latency" in proc.stderr
    proc = with_gem5(lambda g: g["pcie_h2d"]["params"].update(lane_type="pcie_sideways"))
    assert proc.returncode != 0 and "Enum param got bad value 'pcie_sideways'" in proc.stderr
    proc = with_gem5(lambda g: g["bounce_pool"]["params"].update(slot_size=4096))
    assert proc.returncode != 0 and "FastrackBouncePool.slot_size" in proc.stderr
    # and the export as written passes
    proc = with_gem5(lambda g: None)
    assert proc.returncode == 0 and json.loads(proc.stdout.strip().splitlines()[-1])["match"] is True


def test_the_standin_reads_the_real_declarations(m5_stub, tmp_path):
    """The stand-in's parameters are FastrackObjects.py's: which are required (no default) is read
    from the file gem5 builds, not copied into the test."""
    probe = ("import json, m5.objects as o\n"
             "print(json.dumps({c: sorted(k for k, d in getattr(o, c)._params.items() if d.required)\n"
             "                  for c in ('FastrackGpuAuth', 'FastrackCopyEngine', 'FastrackReplayer')}))\n")
    env = {**os.environ, "PYTHONPATH": str(m5_stub), "M5_STUB_SIMOBJECTS": str(SIMOBJECTS)}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "FastrackGpuAuth": ["op_overhead", "parallel_gb_s_per_sm", "serial_gb_s", "sms"],
        "FastrackCopyEngine": ["crypto_gb_s", "engines", "op_overhead"],
        "FastrackReplayer": ["graph"]}


def test_run_gem5_is_the_same_script_for_every_export(tmp_path):
    """run_gem5.py holds no data: it is the plug-in's gem5/run_gem5.py, byte for byte."""
    trace = write(tmp_path / "t.parquet", launch_trace())
    _, a, _ = export_replay(tmp_path / "a", trace, "captured")
    _, b, _ = export_replay(tmp_path / "b", trace, "baseline", preset="h100-pcie")
    shipped = (ROOT / "models" / "h100" / "gem5" / "run_gem5.py").read_bytes()
    assert (a / "run_gem5.py").read_bytes() == shipped == (b / "run_gem5.py").read_bytes()


def test_data_never_becomes_code(m5_stub, tmp_path):
    """A preset name and a trace path with line breaks and Python in them stay data: the generated
    files hold them only as JSON strings, and running the script executes none of it."""
    from replay.frontend.cli import main
    from replay.plugins import load_model

    payload = "x\nimport os; os.system('touch PWNED')\n#"
    sxm = load_model("h100").presets_dir / "h100-sxm.toml"
    preset = tmp_path / "evil.toml"
    preset.write_text(f"[preset]\nname = {json.dumps(payload)}\ndescription = {json.dumps(payload)}\n"
                      f"extends = {json.dumps(str(sxm))}\n")
    folder = tmp_path / "in\nimport os; os.system('touch PWNED')\n#"
    folder.mkdir()
    trace = write(folder / "t.parquet", launch_trace())
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["export-gem5", str(trace), "--protocol", "baseline", "--preset", str(preset),
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "params.json").read_text())["preset"] == payload  # the data went through...
    assert json.loads((out / "expected.json").read_text())["trace"] == str(trace)
    script = (out / "run_gem5.py").read_text()
    assert "PWNED" not in script and "os.system" not in script  # ...but not into the code
    calls = {n.func.attr for n in ast.walk(ast.parse(script)) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute)}
    assert "system" not in calls
    for name in ("params.txt", "lanes.csv"):
        assert "PWNED" not in (out / name).read_text()
    expected = json.loads((out / "expected.json").read_text())
    rc, printed, _ = run_script(m5_stub, out, ticks=expected["expected_ticks"], cwd=tmp_path)
    assert rc == 0 and printed["match"] is True
    assert not list(tmp_path.rglob("PWNED")) and not (Path.cwd() / "PWNED").exists()


# ---------------------------------------------------------------------------------------------
# the output directory: all or nothing


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_failed_export_leaves_the_previous_one_intact(tmp_path, monkeypatch):
    trace = write(tmp_path / "t.parquet", launch_trace())
    rep = replay_trace(trace, protocol="none")
    out = tmp_path / "out"
    write_export(out, rep.graph, rep.schedule, rep.result, trace=str(trace), protocol="none",
                 model_info=rep.result.model)
    first = _snapshot(out)
    assert set(first) == set(GEM5.files)

    def boom(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(gem5export, "params_txt", boom)  # after graph.bin, lanes.csv, expected.json, params.json
    rep2 = replay_trace(trace, protocol="fastrack")
    with pytest.raises(OSError, match="simulated"):
        write_export(out, rep2.graph, rep2.schedule, rep2.result, trace=str(trace), protocol="fastrack",
                     model_info=rep2.result.model)
    assert _snapshot(out) == first  # not one file of the failed export
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "t.parquet"]  # no temporary left behind

    monkeypatch.undo()
    write_export(out, rep2.graph, rep2.schedule, rep2.result, trace=str(trace), protocol="fastrack",
                 model_info=rep2.result.model)
    second = _snapshot(out)
    assert set(second) == set(GEM5.files) and json.loads(second["expected.json"])["protocol"] == "fastrack"
    assert all(second[n] != first[n] for n in ("expected.json", "params.json", "params.txt"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "t.parquet"]


def test_a_failed_export_creates_nothing(tmp_path, monkeypatch):
    trace = write(tmp_path / "t.parquet", launch_trace())
    rep = replay_trace(trace, protocol="baseline")
    monkeypatch.setattr(gem5export, "params_txt", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        write_export(tmp_path / "a" / "b" / "out", rep.graph, rep.schedule, rep.result, protocol="baseline",
                     model_info=rep.result.model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_output_that_is_a_file_or_holds_other_files_is_refused(tmp_path):
    from replay.frontend.cli import main

    trace = write(tmp_path / "t.parquet", launch_trace())
    rep = replay_trace(trace)
    (tmp_path / "file").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        write_export(tmp_path / "file", rep.graph, rep.schedule, rep.result)
    assert (tmp_path / "file").read_text() == "mine"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    r = CliRunner().invoke(main, ["export-gem5", str(trace), "-o", str(mine)])
    assert r.exit_code == 2 and "does not write" in r.output and len(r.output.strip().splitlines()) == 1
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


# ---------------------------------------------------------------------------------------------
# the plug-in on its own


@pytest.mark.slow
def test_the_h100_plugin_installs_on_its_own(tmp_path):
    """models/h100/pyproject.toml builds the plug-in alone (the third-party route): the installed
    package brings its model, presets, exporter and gem5 configuration, and exports."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "models" / "h100", src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                           "--no-index", "--target", str(site), str(src)], capture_output=True, text=True)
    if proc.returncode != 0 and "setuptools" in proc.stderr and "No module named" in proc.stderr:
        pytest.skip("setuptools is not installed: the plug-in cannot be built offline")
    assert proc.returncode == 0, proc.stderr
    trace = write(tmp_path / "t.parquet", launch_trace())
    check = f"""
import importlib.metadata as md, json, sys
import fastrack_h100
from replay.frontend.cli import main
assert fastrack_h100.__file__.startswith({str(site)!r}), fastrack_h100.__file__
eps = {{(e.group, e.name): e.value for e in md.distribution("fastrack-h100").entry_points}}
assert eps == {{("fastrack.models", "h100"): "fastrack_h100:H100Model",
               ("fastrack.exporters", "gem5"): "fastrack_h100.gem5export:GEM5",
               ("fastrack.presets", "h100"): "fastrack_h100:presets"}}, eps
sys.argv = ["replay", "export-gem5", {str(trace)!r}, "--protocol", "baseline", "--preset", "h100-pcie",
            "-o", {str(tmp_path / "out")!r}]
main()
"""
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(site)}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "run_gem5.py").read_bytes() == (src / "gem5" / "run_gem5.py").read_bytes()
    assert json.loads((tmp_path / "out" / "params.json").read_text())["preset"] == "h100-pcie"
    # the gem5 extension and the C++ core ship with it, and build from there (docs/gem5.md)
    installed = site / "fastrack_h100"
    for rel in ("gem5/SConscript", "gem5/FastrackObjects.py", "gem5/fastrack_replayer.cc", "gem5/fastrack_replayer.hh",
                "gem5/fastrack_resources.cc", "gem5/fastrack_resources.hh", "cpp/Makefile", "cpp/fastrack_replay.cpp",
                "cpp/fastrack_price.cpp", "cpp/fastrack/hw.hh", "cpp/fastrack/pricing.hh"):
        assert (installed / rel).read_bytes() == (src / rel).read_bytes(), rel
    cxx = _compiler()
    if cxx and shutil.which("make"):
        env = {k: v for k, v in os.environ.items() if k != "FASTRACK_REPLAY_CPP"}
        proc = subprocess.run(["make", "-C", str(installed / "cpp"), f"CXX={cxx}", "CXXFLAGS=-O0",
                               f"BUILD_DIR={tmp_path / 'build'}", f"PYTHON={sys.executable}"],
                              capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got = run_core({"replay": tmp_path / "build" / "fastrack_replay"}, tmp_path / "out", None, "--check-prices")
        assert got["makespan_ns"] == json.loads((tmp_path / "out" / "expected.json").read_text())["makespan_ns"]
        assert got["price_check"]["mismatches"] == 0


# ---------------------------------------------------------------------------------------------
# the driver validates its input


@pytest.fixture
def good_export(tmp_path):
    g = random_graph(5, 50)
    s = schedule(g)
    write_export(tmp_path / "good", g, s, summarize(g, s, "captured", g.n))
    return tmp_path / "good", g


def _run_bad(core, path) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(core["replay"]), str(path)], capture_output=True, text=True)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)  # a message, never a crash
    assert proc.stderr.startswith("error: ") and proc.stdout == ""
    return proc


@pytest.mark.slow
def test_bad_magic_version_and_truncation(core, good_export, tmp_path):
    src, _ = good_export
    raw = (src / "graph.bin").read_bytes()
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"PK\x03\x04" + raw[4:])
    assert "bad magic" in _run_bad(core, bad).stderr
    bad.write_bytes(raw[:8] + (7).to_bytes(4, "little") + raw[12:])
    assert "version 7 is not supported" in _run_bad(core, bad).stderr
    bad.write_bytes(raw[:-100])
    assert "truncated or corrupt" in _run_bad(core, bad).stderr
    bad.write_bytes(raw[:20])
    assert "too short" in _run_bad(core, bad).stderr
    bad.write_bytes(raw[:16] + (1 << 62).to_bytes(8, "little") + raw[24:])  # absurd node count
    assert "imply" in _run_bad(core, bad).stderr
    bad.write_bytes(raw[:-8] + b"XXXXXXXX")
    assert "end marker" in _run_bad(core, bad).stderr
    assert "cannot open" in _run_bad(core, tmp_path / "missing.bin").stderr


def _patched(g: OpGraph, tmp_path: Path, **changes) -> Path:
    path = tmp_path / "patched.bin"
    write_graph(path, g.replace(**changes))
    return path


@pytest.mark.slow
def test_bad_references_are_messages(core, good_export, tmp_path):
    _, g = good_export
    assert g.num_edges > 0
    src = g.dep_src.copy()
    src[0] = g.n + 5
    assert "does not exist" in _run_bad(core, _patched(g, tmp_path, dep_src=src)).stderr
    lane = g.lane.copy()
    lane[3] = len(g.lanes) + 2
    assert "which does not exist" in _run_bad(core, _patched(g, tmp_path, lane=lane)).stderr
    dur = g.dur.copy()
    dur[1] = -5
    assert "duration -5" in _run_bad(core, _patched(g, tmp_path, dur=dur)).stderr
    kind = g.dep_kind.copy()
    kind[0] = 42
    assert "unknown kind 42" in _run_bad(core, _patched(g, tmp_path, dep_kind=kind)).stderr
    ptr = g.dep_ptr.copy()
    ptr[1], ptr[2] = ptr[2] + 1, ptr[1]
    assert "dependency index" in _run_bad(core, _patched(g, tmp_path, dep_ptr=ptr)).stderr
    lanes = g.lanes
    bad_lanes = Lanes(rank=lanes.rank, type=lanes.type, key=lanes.key, servers=np.zeros_like(lanes.servers),
                      names=lanes.names)
    assert "servers" in _run_bad(core, _patched(g, tmp_path, lanes=bad_lanes)).stderr
    import dataclasses

    raw = bytearray(_patched(g, tmp_path).read_bytes())
    raw[HEADER_BYTES + 9 * len(lanes)] = 2  # lane 0's discipline (after servers, types, ranks)
    (tmp_path / "shared.bin").write_bytes(bytes(raw))
    assert "discipline 2" in _run_bad(core, tmp_path / "shared.bin").stderr
    top = lanes.max_servers.copy()
    top[0] = 0
    assert "may grow to 0" in _run_bad(core, _patched(g, tmp_path, lanes=dataclasses.replace(lanes, max_servers=top))).stderr
    holder = int(np.flatnonzero(g.hold_lane >= 0)[0])
    until = g.hold_until.copy()
    until[holder] = g.n + 3
    assert "does not exist" in _run_bad(core, _patched(g, tmp_path, hold_until=until)).stderr
    until = g.hold_until.copy()
    until[int(np.flatnonzero(g.hold_lane < 0)[0])] = 0
    assert "never holds" in _run_bad(core, _patched(g, tmp_path, hold_until=until)).stderr
    lane = g.lane.copy()
    lane[holder] = g.hold_lane[holder]
    assert "is a pool" in _run_bad(core, _patched(g, tmp_path, lane=lane)).stderr
    # a 64-bit edge source beyond the core's 32-bit node index: refused by position, the value not echoed
    raw = bytearray(_patched(g, tmp_path).read_bytes())
    at = HEADER_BYTES + 14 * len(lanes) + 70 * g.n + 8 * (g.n + 1)  # dep_src[0] (the documented layout)
    assert int.from_bytes(raw[at:at + 8], "little", signed=True) == int(g.dep_src[0])
    raw[at:at + 8] = (1 << 40).to_bytes(8, "little", signed=True)
    (tmp_path / "wide.bin").write_bytes(bytes(raw))
    err = _run_bad(core, tmp_path / "wide.bin").stderr
    assert "array 'dep_src' entry 0 is outside the 32-bit range" in err and str(1 << 40) not in err
    assert err.count("\n") == 1


@pytest.mark.slow
def test_cycles_are_named(core, tmp_path):
    from test_engine import graph

    g = graph([1, 1, 1], deps=[(0, 1, DepKind.DATA, 0), (1, 2, DepKind.DATA, 0), (2, 0, DepKind.DATA, 0)])
    err = _run_bad(core, _patched(g, tmp_path)).stderr
    assert "dependency cycle through 3 node(s)" in err and "op 0" in err
    g = graph([1, 1], deps=[(0, 1, DepKind.DATA, 0)], group=[4, 4])
    assert "same collective group" in _run_bad(core, _patched(g, tmp_path)).stderr


@pytest.mark.slow
def test_lanes_csv_must_match(core, good_export):
    src, _ = good_export
    (src / "lanes.csv").write_text("index,type,rank,servers,name\n0,stream,0,1,only one\n")
    assert "lanes listed" in _run_bad(core, src).stderr


def test_format_layout_is_as_documented(good_export):
    src, g = good_export
    raw = (src / "graph.bin").read_bytes()
    assert raw[:8] == b"FTRKGRPH" and raw[-8:] == END_MAGIC
    version, header = np.frombuffer(raw, "<u4", 2, 8)
    n, e, lanes, flags = np.frombuffer(raw, "<u8", 4, 16)
    assert (version, header, n, e, lanes, flags) == (2, HEADER_BYTES, g.n, g.num_edges, len(g.lanes), 0)
    assert len(raw) == HEADER_BYTES + 14 * lanes + 70 * n + 8 * (n + 1) + 17 * e + 8


# ---------------------------------------------------------------------------------------------
# pricing: the C++ formulas against the Python model


@pytest.mark.slow
def test_rate_fractions_match_python(core):
    rng = np.random.default_rng(7)
    vals = np.exp(rng.uniform(np.log(1e-3), np.log(1e12), 3000)).tolist()
    vals += [round(float(v), int(d)) for v, d in zip(rng.uniform(0.01, 200, 2000), rng.integers(0, 8, 2000))]
    vals += [float(a) / float(b) for a, b in zip(rng.integers(1, 30000, 2000), rng.integers(1, 30000, 2000))]
    vals += [4.15, 3.46, 0.54, 1.46, 1 / 3, 0.1 + 0.2, 9999.99995, 132 * 1.0, 114 * 1.1]
    vals = [v for v in vals if v >= 1e-3]
    out = subprocess.run([str(core["price"])], input="".join(f"fraction {v!r}\n" for v in vals),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    for v, line in zip(vals, out, strict=True):
        f = Fraction(str(v)).limit_denominator(10_000)
        assert line == f"{f.numerator} {f.denominator}", v


@pytest.mark.slow
def test_h100_prices_match_the_python_model(core):
    from fastrack_core.schema import CopyDir
    from replay.plugins import load_model

    H100Model = load_model("h100")

    rng = np.random.default_rng(3)
    sizes = np.concatenate([[0, 1, 255, 256, 4095, 4096, 4097, 2 << 20], rng.integers(0, 1 << 28, 300)]).astype(np.int64)
    for preset, overrides in (("h100-sxm", ()), ("h100-pcie", ()),
                              ("h100-sxm-aesni", ()),
                              ("h100-sxm", ("pcie.h2d_bandwidth_gb_s=25.3", "cpu_crypto.core_gb_s=3.333",
                                            "ce.op_overhead_ns=17"))):
        hw = H100Model.from_preset(preset, overrides)
        p = hw.params
        q = []
        for b in sizes.tolist():
            q.append(f"pcie {p['pcie']['h2d_bandwidth_gb_s']!r} {p['pcie']['latency_ns']} {b}")
            q.append(f"pcie {p['pcie']['d2h_bandwidth_gb_s']!r} {p['pcie']['latency_ns']} {b}")
            c = p["cpu_crypto"]
            q.append(f"cpu {c['core_gb_s']!r} {c['call_overhead_ns']} {c['call_bytes']} {b}")
            q.append(f"ce {p['ce']['crypto_gb_s']!r} {p['ce']['op_overhead_ns']} {b}")
            q.append(f"ce {p['ce']['crypto_gb_s']!r} {p['ce']['op_overhead_ns']} {b} {p['gpu']['copy_engines']}")
            q.append(f"chunks {p['bounce']['slot_bytes']} {p['bounce']['slots']} {b}")
        s = p["submit"]
        q += [f"submit {s['kernel_ns']} {s['copy_ns']} {s['memset_ns']} {s['collective_ns']} {k}" for k in range(8)]
        out = subprocess.run([str(core["price"])], input="\n".join(q) + "\n", capture_output=True, text=True,
                             check=True).stdout.split()
        want = []
        for b in sizes.tolist():
            want += [int(hw.pcie_ns(b, CopyDir.H2D)), int(hw.pcie_ns(b, CopyDir.D2H)), int(hw.cpu_encrypt_ns(b)),
                     int(hw.ce_crypto_ns(b)), int(hw.ce_crypto_ns(b, hw.ce_split_parts)),
                     max(1, -(-b // hw.bounce_slot_bytes))]
        # a cc_submit node is the work-launch round trip; the push's CPU encryption is cpu_encrypt nodes
        want += [int(v) for v in hw.push_round_trip_ns(np.arange(8))]
        assert [int(v) for v in out] == want, (preset, overrides)


def test_makefile_is_the_documented_entry_point():
    text = (CPP / "Makefile").read_text()
    for flag in ("-Wall", "-Wextra", "-Werror", "-std=c++17"):
        assert flag in text


# ---------------------------------------------------------------------------------------------
# the plug-in's C++ builds from its own folder plus a declared include path


def test_the_replay_core_headers_are_found():
    """replay.cpp_headers names the include directory of the replay core: from this checkout (an
    editable install) or from site-packages alike."""
    from replay.cpp_headers import CORE_HEADERS, include_dir

    inc = include_dir()
    assert inc == CORE.resolve() and all((inc / "fastrack" / h).is_file() for h in CORE_HEADERS)
    proc = subprocess.run([sys.executable, "-m", "replay.cpp_headers"], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0 and proc.stdout == f"{inc}\n", proc.stderr


def _plugin_sources() -> list[Path]:
    h100 = ROOT / "models" / "h100"
    return sorted(p for p in (*h100.glob("cpp/**/*"), *h100.glob("gem5/*"))
                  if p.suffix in (".hh", ".cc", ".cpp") and "build" not in p.relative_to(h100).parts)


def test_the_plugin_cpp_includes_nothing_outside_its_folder():
    """The H100 plug-in's C++ includes the replay core as "fastrack/x.hh" (on the include path),
    never by a relative path out of its folder, which would only resolve inside this checkout."""
    sources = _plugin_sources()
    assert {p.name for p in sources} >= {"pricing.hh", "hw.hh", "fastrack_replay.cpp", "fastrack_resources.hh",
                                         "fastrack_replayer.hh", "fastrack_replayer.cc"}
    for path in sources:
        for target in re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', path.read_text(), re.MULTILINE):
            assert ".." not in Path(target).parts and "replay" not in Path(target).parts, f"{path.name}: {target}"


def _installed_layout(root: Path) -> Path:
    """The plug-in and the replay core headers as an installation lays them out (site-packages/
    fastrack_h100/{cpp,gem5}, site-packages/replay/cpp), away from any checkout."""
    site = root / "site-packages"
    for sub in ("cpp", "gem5"):
        shutil.copytree(ROOT / "models" / "h100" / sub, site / "fastrack_h100" / sub,
                        ignore=shutil.ignore_patterns("build", "__pycache__"))
    shutil.copytree(CORE / "fastrack", site / "replay" / "cpp" / "fastrack")
    assert not (site / "fastrack_h100" / "gem5" / ".." / ".." / ".." / "replay").exists()  # no checkout around it
    return site


def test_the_driver_builds_outside_a_checkout(tmp_path):
    """make in an installed copy of the plug-in's cpp/: the replay core comes from
    FASTRACK_REPLAY_CPP, or, without it, from the installed replay package (python -m
    replay.cpp_headers); a wrong directory is one clear message."""
    cxx = _compiler()
    if cxx is None or not shutil.which("make"):
        pytest.skip("no C++ compiler or no make on this machine: the driver cannot be built")
    site = _installed_layout(tmp_path)
    cpp = site / "fastrack_h100" / "cpp"
    make = ["make", "-C", str(cpp), f"CXX={cxx}", "CXXFLAGS=-O0"]
    proc = subprocess.run([*make, f"BUILD_DIR={tmp_path / 'b1'}", f"FASTRACK_REPLAY_CPP={site / 'replay' / 'cpp'}",
                           str(tmp_path / "b1" / "fastrack_replay")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"-I{site / 'replay' / 'cpp'}" in proc.stdout
    g = random_graph(3, 60)
    s = schedule(g)
    expected = write_export(tmp_path / "x", g, s, summarize(g, s, "captured", g.n))
    got = run_core({"replay": tmp_path / "b1" / "fastrack_replay"}, tmp_path / "x")
    assert got["makespan_ns"] == expected["makespan_ns"]
    # no FASTRACK_REPLAY_CPP: the installed replay package says where its headers are
    env = {k: v for k, v in os.environ.items() if k != "FASTRACK_REPLAY_CPP"}
    proc = subprocess.run([*make, f"BUILD_DIR={tmp_path / 'b2'}", f"PYTHON={sys.executable}", "-n"],
                          capture_output=True, text=True, env=env)
    from replay.cpp_headers import include_dir

    assert proc.returncode == 0 and f"-I{include_dir()} " in proc.stdout, proc.stdout + proc.stderr
    proc = subprocess.run([*make, f"BUILD_DIR={tmp_path / 'b3'}", f"FASTRACK_REPLAY_CPP={tmp_path}"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode != 0 and "replay core headers (fastrack/graph.hh) are not in" in proc.stderr
    assert not (tmp_path / "b3").exists()


class _Node:
    def __init__(self, path: str):
        self.abspath = path

    def srcnode(self):
        return self


def _run_sconscript(path: Path, arguments: dict[str, str] | None = None) -> dict:
    """Execute a gem5 SConscript against stand-ins for what gem5's build gives it; returns what it
    declared: {"cpppath": [...], "sources": {...}, "sim_objects": [...], "exit": code or None}."""
    here = str(path.parent)
    seen: dict = {"cpppath": [], "sources": {}, "sim_objects": [], "exit": None}

    class Env(dict):
        def Dir(self, p):
            return _Node(p if os.path.isabs(p) else os.path.join(here, p))

        def subst(self, text):
            return "-I/opt/gem5/include" if "CCFLAGS" in text else ""

        def Append(self, CPPPATH=()):
            seen["cpppath"] += [n.abspath for n in CPPPATH]

    env = Env(CPPPATH=["/opt/gem5/src", "/opt/gem5/build/NULL", here])

    def Exit(code):
        raise SystemExit(code)

    scope = {
        "Import": lambda *a: None, "env": env, "ARGUMENTS": dict(arguments or {}), "Exit": Exit,
        "Dir": lambda p: _Node(p if os.path.isabs(p) else os.path.normpath(os.path.join(here, p))),
        "SimObject": lambda f, sim_objects, enums: seen["sim_objects"].extend(sim_objects),
        "Source": lambda f, append: seen["sources"].update({f: append}),
        "DebugFlag": lambda *a: None, "CompoundFlag": lambda *a: None,
    }
    try:
        exec(compile(path.read_text(), str(path), "exec"), scope)
    except SystemExit as e:
        seen["exit"] = e.code
    return seen


def test_the_sconscript_declares_where_the_replay_core_is(tmp_path, monkeypatch, capsys):
    """The gem5 SConscript puts the plug-in's cpp/ and the replay core on gem5's include path,
    the core from FASTRACK_REPLAY_CPP (scons argument or environment), else this checkout's
    replay/cpp, else the installed replay package (python3 -m replay.cpp_headers)."""
    from replay.cpp_headers import include_dir

    monkeypatch.delenv("FASTRACK_REPLAY_CPP", raising=False)
    h100 = ROOT / "models" / "h100"
    seen = _run_sconscript(h100 / "gem5" / "SConscript")
    assert seen["exit"] is None and seen["cpppath"] == [str(h100 / "cpp"), str(CORE)]
    assert set(seen["sources"]) == {"fastrack_resources.cc", "fastrack_replayer.cc"}
    for append in seen["sources"].values():
        flags = append["CCFLAGS"]
        assert flags[:3] == ["-Wall", "-Wextra", "-Werror"]
        isystem = flags[4::2]
        assert "/opt/gem5/src" in isystem and "/opt/gem5/include" in isystem
        assert not {str(h100 / "cpp"), str(CORE), str(h100 / "gem5")} & set(isystem)  # ours stay -Wextra clean
    declared = [n.name for n in ast.parse((h100 / "gem5" / "FastrackObjects.py").read_text()).body
                if isinstance(n, ast.ClassDef) and n.name != "FastrackLaneType"]
    assert sorted(seen["sim_objects"]) == sorted(declared)  # gem5 generates params for every SimObject

    site = _installed_layout(tmp_path)
    script = site / "fastrack_h100" / "gem5" / "SConscript"
    mine = site / "replay" / "cpp"
    seen = _run_sconscript(script, {"FASTRACK_REPLAY_CPP": str(mine)})
    assert seen["cpppath"] == [str(site / "fastrack_h100" / "cpp"), str(mine)]
    monkeypatch.setenv("FASTRACK_REPLAY_CPP", str(mine))
    assert _run_sconscript(script)["cpppath"][1] == str(mine)
    monkeypatch.delenv("FASTRACK_REPLAY_CPP")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert _run_sconscript(script)["cpppath"][1] == str(include_dir())  # the installed replay package
    capsys.readouterr()
    seen = _run_sconscript(script, {"FASTRACK_REPLAY_CPP": str(tmp_path)})
    assert seen["exit"] == 2 and seen["cpppath"] == []
    assert "FASTRACK_REPLAY_CPP" in capsys.readouterr().err


def test_output_that_is_a_symbolic_link_is_refused(tmp_path):
    from replay.frontend.cli import main

    trace = write(tmp_path / "t.parquet", launch_trace())
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    r = CliRunner().invoke(main, ["export-gem5", str(trace), "-o", str(link)])
    assert r.exit_code == 2 and "symbolic link" in r.output and len(r.output.strip().splitlines()) == 1
    assert link.is_symlink() and list(real.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# the proof script (benchmarks/tools/gem5_proof.py): its cases exist and export; it refuses no gem5


def _proof_module():
    from scriptload import load_script

    return load_script("benchmarks/tools/gem5_proof.py")


def test_the_proof_script_cases_are_exportable(tmp_path):
    proof = _proof_module()
    root = Path(__file__).resolve().parent.parent
    for name, (trace, _args) in proof.CASES.items():
        assert trace.startswith("traces/") or trace in proof.SYNTH or trace == proof.THREADS, name
        if trace.startswith("traces/"):
            assert (root / trace).is_file(), name
    proof.write_threads(tmp_path / proof.THREADS)
    runner = CliRunner()
    from replay.frontend.cli import main as replay_main

    res = runner.invoke(replay_main, ["export-gem5", str(tmp_path / proof.THREADS), "--protocol", "baseline",
                                      "-o", str(tmp_path / "x")])
    assert res.exit_code == 0, res.output
    lanes = {r["name"] for r in json.loads((tmp_path / "x" / "expected.json").read_text())["resources"]}
    assert {"rank0/csl_h2d", "rank0/csl_d2h"} <= lanes  # the case exists to contend the channel locks


def test_the_proof_script_refuses_a_missing_gem5(tmp_path, capsys):
    proof = _proof_module()
    assert proof.main(["--gem5", str(tmp_path / "nope" / "gem5.opt"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a file" in err
    assert not (tmp_path / "o").exists()
