"""The compiled core (``replay.pipeline._engine``, replay/cpp) against the numba engine (replay/pipeline/engine_numba.py).

The C++ scheduler and critical-path walk are the reference (docs/architecture.md, "Twins"); the
numba kernels are the fallback of an install without a C++ compiler and must give identical
results. The cases run through the shared harness (tests/twins.py, pair ``engine``: both engines
in one process, ``replay.pipeline.engine.use_engine``), which compares every field of the Schedule
(values and dtypes), the issue order, the acyclicity check, the critical path (with the graph's
categories and with callers' own codes) and the GraphError messages: hand-made graphs with every
rule and every error, the random graphs of test_gem5_export, hand-made traces through whole
replays, and a hypothesis property over random graphs with barrier groups, pools, negative
STREAM lags, shared and in-order lanes, multi-server lanes, release times and tied order keys
(cycles and pool errors included).

``test_the_extensions_are_built`` fails when a C++ compiler and the Python headers exist but an
extension module does not import: CI, which installs with ``pip install -e .``, proves the build.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import numpy as np
import pytest
import twins
from hypothesis import given, settings, strategies as st

from fastrack_core.errors import ConfigError, GraphError
from fastrack_core.schema import DepKind
from graphs import graph
from replay.pipeline import engine
from replay.graph import LaneType
from replay.pipeline.results import critical_path, path_totals

ROOT = Path(__file__).resolve().parent.parent
F = DepKind.SYNC
POOL = LaneType.BOUNCE_POOL
SHARED = LaneType.COPY_ENGINE
needs_native = twins.needs_native("engine")


@pytest.mark.parametrize("pair", sorted(twins.PAIRS))
def test_the_extensions_are_built(pair):
    module = twins.PAIRS[pair].module
    why = twins.why_not_buildable()
    if not twins.built(pair) and why is not None:
        pytest.skip(f"setup.py cannot build {module} on this machine: {why}")
    assert twins.built(pair), (f"{module} does not import although it can be built here: run "
                               "`pip install -e .` or `python setup.py build_ext --inplace`")
    if pair == "engine" and os.environ.get(engine.ENGINE_VAR, "auto") in ("", "auto", "native") \
            and not os.environ.get("FASTRACK_NO_JIT"):
        assert engine.engine_name() == "native"


def _replay(g):
    """Everything the engine and the critical path give for ``g`` (or the error and whether the
    graph is acyclic)."""
    try:
        s = engine.schedule(g)
    except GraphError as e:
        return {"error": twins.Raised.of(e), "acyclic": engine.is_acyclic(g)}
    return {"schedule": s, "issue": engine.topological_order(g), "acyclic": engine.is_acyclic(g),
            "critical_path": critical_path(g, s)}


# ---------------------------------------------------------------------------------------------
# hand-made graphs: every rule and every error


HAND = {
    "lanes": graph([10, 20, 1], deps=[(1, 2, F, 5)], lanes=[0, 0, 1]),
    "launch": graph([100, 50], deps=[(0, 1, DepKind.LAUNCH, 7)], lanes=[0, 1]),
    "negative stream lag": graph([10, 10], deps=[(0, 1, DepKind.STREAM, -3)], lanes=[0, 0]),
    "shared lane": graph([10, 10, 10, 5], deps=[(0, 2, F, 30)], lanes=[0, 1, 1, 1], types=[0, SHARED],
                         servers=[1, 2], release=[0, 5, 0, 1]),
    "groups": graph([10, 5, 40, 5], deps=[(0, 1, F, 0), (2, 3, F, 0)], lanes=[0, 1, 2, 3], group=[-1, 7, -1, 7]),
    "pool waits": graph([5, 5, 5, 5], deps=[(0, 1, F, 0), (2, 3, F, 0)], types=[POOL], servers=[1],
                        max_servers=[1], holds=[(0, 1, 0), (2, 3, 0)], release=[0, 0, 1, 0]),
    "pool grows": graph([5, 5, 5], deps=[(0, 1, F, 0), (1, 2, F, 0)], types=[POOL], servers=[1],
                        holds=[(0, 2, 0), (1, 2, 0)]),
    "ties": graph([1, 1, 1, 1], lanes=[0, 0, 1, 1], order=[5, 5, 5, 0], servers=[1, 1]),
    "empty": graph([]),
}
ERRORS = {
    "cycle": graph([1, 1, 1], deps=[(0, 1, F, 0), (1, 2, F, 0), (2, 1, F, 0)]),
    "edge inside a group": graph([1, 1], deps=[(0, 1, F, 0)], group=[3, 3]),
    "cycle through a group": graph([1, 1, 1], deps=[(0, 1, F, 0), (1, 2, F, 0)], group=[7, -1, 7]),
    "pool return before the take": graph([5, 5], release=[100, 0], types=[POOL], holds=[(0, 1, 0)]),
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_made_graphs(name):
    got = twins.agree("engine", lambda: _replay(HAND[name]))
    assert got["acyclic"] is True
    s = got["schedule"]
    if name == "pool waits":  # the rule is exercised: node 2 waits 9 ns for node 1's slot
        assert s.slot_wait.tolist() == [0, 0, 9, 0]
    if name == "pool grows":
        assert s.lane_servers.tolist() == [2]


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_have_the_same_messages(name):
    g = ERRORS[name]
    got = twins.agree("engine", lambda: engine.schedule(g))
    assert isinstance(got, twins.Raised) and got.type == "GraphError", got
    if name != "pool return before the take":
        twins.agree("engine", lambda: engine.topological_order(g), expect=got)
        twins.agree("engine", lambda: engine.is_acyclic(g), expect=False)


def test_is_acyclic_with_extra_edges():
    chain = graph([1, 1, 1, 1], deps=[(0, 1, F, 0), (1, 2, F, 0)], group=[-1, -1, 5, 5])
    for src, dst, want in (([2], [0], False), ([3], [0], False), ([0], [3], True), ([], [], True)):
        twins.agree("engine", lambda s=src, d=dst: engine.is_acyclic(chain, np.array(s, np.int64), np.array(d, np.int64)),
                    expect=want)


# ---------------------------------------------------------------------------------------------
# random graphs and whole replays


@needs_native
@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_of_the_gem5_tests(seed):
    from test_gem5_export import random_graph

    g = random_graph(seed, n=int(np.random.default_rng(seed).integers(1, 400)))
    assert twins.agree("engine", lambda: _replay(g))["acyclic"] is True


@needs_native
def test_own_path_codes():
    """path_totals with int64 codes of the caller's own (what replay.pipeline.serving passes)."""
    from test_gem5_export import random_graph

    g = random_graph(5, 300)

    def walk():
        s = engine.schedule(g)
        codes = (np.arange(g.n) % 5).astype(np.int64)
        last = int(np.argmax(s.finish))
        return path_totals(g, s, last, int(s.finish[last]), int(s.start.min()), codes,
                           np.arange(5, 5 + len(DepKind), dtype=np.int64), 5 + len(DepKind), 3, 4).tolist()

    assert sum(twins.agree("engine", walk)) > 0


@needs_native
@pytest.mark.parametrize("protocol", ["captured", "baseline", "fastrack"])
@pytest.mark.parametrize("trace", ["launch_trace", "two_rank_collective"])
def test_whole_replays(tmp_path, protocol, trace):
    import test_build
    from replay.pipeline.run import replay_trace
    from tracefactory import write

    path = write(tmp_path / "t.parquet", getattr(test_build, trace)())

    def run():
        rep = replay_trace(path, protocol=protocol)
        return {"schedule": rep.schedule, "issue": engine.topological_order(rep.graph),
                "result": rep.result.to_dict()}

    twins.agree("engine", run)


# ---------------------------------------------------------------------------------------------
# the property: random graphs with every rule, errors included


@st.composite
def any_graphs(draw, idle_lanes: int = 0):
    """Lanes 0..3 (each in order or shared, 1-3 servers), lane 4 a pool (1-2 servers, often
    fixed, else growing up to 4) that some ungrouped nodes hold until a successor or, now and then,
    any node (so a return may precede its take);
    edges of every kind between any nodes (mostly forward: cycles occur), negative STREAM lags,
    barrier groups, release times and coarse order keys (ties). ``idle_lanes`` more lanes that no
    node uses (a graph of many ranks, for the compiled core's layout of many lanes)."""
    n = draw(st.integers(1, 30))
    durs = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    lanes = draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n))
    edges = []
    for dst in range(n):
        for src in draw(st.lists(st.integers(0, n - 1), max_size=3, unique=True)):
            if src == dst or (src > dst and draw(st.integers(0, 9)) > 0):  # one backward edge in ten
                continue
            kind = draw(st.sampled_from(list(DepKind)))
            lag = draw(st.integers(-40, 5)) if kind == DepKind.STREAM else draw(st.integers(0, 20))
            edges.append((src, dst, kind, lag))
    group = draw(st.lists(st.sampled_from([-1] * 6 + [0, 1, 2]), min_size=n, max_size=n))
    succ = {i: [i] for i in range(n)}
    for src, dst, _, _ in edges:
        succ[src].append(dst)
    holds = []
    for i in draw(st.lists(st.integers(0, n - 1), max_size=n, unique=True)):
        if group[i] < 0:  # mostly until a successor (or itself); one in eight until any node
            anyone = draw(st.integers(0, 7)) == 0
            holds.append((i, draw(st.integers(0, n - 1)) if anyone else draw(st.sampled_from(succ[i])), 4))
    servers = draw(st.lists(st.integers(1, 3), min_size=4, max_size=4)) + [draw(st.integers(1, 2))]
    types = [draw(st.sampled_from([LaneType.HOST_THREAD, LaneType.STREAM, LaneType.PCIE_H2D, SHARED]))
             for _ in range(4)] + [POOL]
    if max(lanes) < 3:
        lanes[-1] = 3
    max_servers = servers[:4] + [draw(st.sampled_from([servers[4], servers[4], 4]))] + [1] * idle_lanes
    servers, types = servers + [1] * idle_lanes, types + [LaneType.STREAM] * idle_lanes
    return graph(durs, edges, lanes=lanes, servers=servers, types=types, holds=holds, group=group,
                 max_servers=max_servers,
                 release=draw(st.lists(st.integers(-10, 60), min_size=n, max_size=n)),
                 order=[10 * k for k in draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))])


@needs_native
@settings(max_examples=150, deadline=None)
@given(any_graphs())
def test_both_engines_agree_on_random_graphs(g):
    twins.agree("engine", lambda: _replay(g))


@needs_native
@settings(max_examples=100, deadline=None)
@given(any_graphs(idle_lanes=4096))
def test_both_engines_agree_on_random_graphs_of_many_lanes(g):
    """With 4,096 lanes or more (kRenumberMinLanes, replay/cpp/fastrack/engine.hh) the compiled
    issue order runs on the nodes renumbered by order key: same issue order, same schedule, same
    errors as the numba engine, which never renumbers."""
    twins.agree("engine", lambda: _replay(g))


# ---------------------------------------------------------------------------------------------
# the extension's own guards, the engine switch, imports


@needs_native
def test_wrong_arrays_are_refused_not_read():
    from replay.pipeline import _engine as NATIVE

    g = HAND["lanes"]
    arrays = list(engine._arrays(g))
    out = (np.empty(g.n, np.int64), np.empty(g.n, np.int64), np.empty(g.n, np.int32), np.empty(g.n, np.int8),
           np.empty(g.n, np.int32), np.empty(g.n, np.int64), np.empty(len(g.lanes), np.int64))
    bad_src = list(arrays)
    bad_src[11] = np.array([7], np.int32)  # an edge from node 7 of 3
    with pytest.raises(ValueError, match="edge comes from a node that does not exist"):
        NATIVE.schedule(tuple(bad_src), out)
    wrong_dtype = list(arrays)
    wrong_dtype[4] = g.dur.astype(np.int32)
    with pytest.raises(TypeError, match="dur"):
        NATIVE.schedule(tuple(wrong_dtype), out)
    wide_src = list(arrays)  # node indices are 32 bits (replay.graph.INDEX): a wider array is refused, not read
    wide_src[11] = g.dep_src.astype(np.int64)
    with pytest.raises(TypeError, match="dep_src must be .* int32"):
        NATIVE.schedule(tuple(wide_src), out)
    with pytest.raises(TypeError, match="crit_pred must be .* int32"):
        NATIVE.schedule(tuple(arrays), out[:2] + (np.empty(g.n, np.int64),) + out[3:])
    with pytest.raises(ValueError, match="start"):
        NATIVE.schedule(tuple(arrays), (np.empty(1, np.int64),) + out[1:])
    with pytest.raises(ValueError, match="out of range"):
        NATIVE.is_acyclic(tuple(arrays), np.array([0], np.int64), np.array([3], np.int64))
    s = NATIVE.schedule(tuple(arrays), out)
    assert s == (NATIVE.OK, -1, 3)


def test_engine_switch(monkeypatch):
    before = engine.engine_name()
    try:
        assert engine.use_engine("numba") == before and engine.engine_name() == "numba"
        monkeypatch.setenv(engine.ENGINE_VAR, "fortran")
        with pytest.raises(ConfigError, match="FASTRACK_ENGINE"):
            engine._choose()
        monkeypatch.setenv(engine.ENGINE_VAR, "auto")
        monkeypatch.setenv("FASTRACK_NO_JIT", "1")
        assert engine._choose() is None  # plain Python kernels
    finally:
        engine.use_engine(before)


@needs_native
def test_a_replay_does_not_import_numba(tmp_path):
    from test_build import launch_trace
    from tracefactory import write

    trace = write(tmp_path / "t.parquet", launch_trace())
    code = ("import sys\nfrom replay.frontend.cli import main\n"
            f"sys.argv = ['replay', '--protocol', 'baseline', {str(trace)!r}, '--json']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'numba' not in sys.modules, 'numba was imported'\n"
            "from replay.pipeline import engine\nassert engine.engine_name() == 'native'\n")
    env = {k: v for k, v in os.environ.items() if k not in ("FASTRACK_ENGINE", "FASTRACK_NO_JIT")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-c", code.replace("not in sys.modules", "in sys.modules").replace(
        "== 'native'", "== 'numba'")], capture_output=True, text=True, env={**env, "FASTRACK_ENGINE": "numba"},
        cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]  # the switch does reach the numba kernels


@pytest.mark.skipif(twins.why_not_buildable() is not None, reason=f"no C++ toolchain: {twins.why_not_buildable()}")
@pytest.mark.parametrize("module", ["engine_module.cpp", "build_module.cpp", "edit_module.cpp"])
def test_the_extension_source_is_warning_free(module):
    """Each extension module, the core and fastrack/pybuffer.hh it includes compile under the
    driver's warnings (Makefile)."""
    cxx = next(c for c in (os.environ.get("CXX") or "g++", "g++", "c++", "clang++") if shutil.which(c))
    warn = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wshadow", "-Wconversion",
            "-Wno-sign-conversion"]
    proc = subprocess.run([cxx, *warn, "-fsyntax-only", "-isystem", sysconfig.get_paths()["include"],
                           f"-I{ROOT / 'replay' / 'cpp'}", str(ROOT / "replay" / "cpp" / module)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_module_refuses_a_wrong_array_in_one_style():
    """fastrack/pybuffer.hh: a wrong dtype, a read-only output or a 2-D array raises TypeError
    naming the module function and the array, in every extension module."""
    import importlib

    mods = {}
    for name in ("replay.pipeline._engine", "replay.pipeline._build", "replay.protocols._edit"):
        try:
            mods[name] = importlib.import_module(name)
        except ImportError:
            pytest.skip(f"{name} is not built")
    i64 = np.zeros(1, np.int64)
    with pytest.raises(TypeError, match=r"^replay\.pipeline\._build\.encode: array values must be a C-contiguous 1-D int64 "
                                        r"array$"):
        mods["replay.pipeline._build"].encode(i64.astype(np.int32), np.zeros(1, np.int32))
    codes = np.zeros(1, np.int32)
    codes.flags.writeable = False
    with pytest.raises(TypeError, match=r"^replay\.pipeline\._build\.encode: array codes must be a writable C-contiguous 1-D "
                                        r"int32 array$"):
        mods["replay.pipeline._build"].encode(i64, codes)
    with pytest.raises(TypeError, match="^replay.pipeline._engine.walk_path: array start must be a C-contiguous 1-D int64"):
        mods["replay.pipeline._engine"].walk_path(np.zeros((1, 1), np.int64), i64, i64, np.zeros(1, np.int8), i64, 0, 0, 0,
                                         i64, i64, 0, 0, 0, 0, 0, np.zeros(8, np.int64))
    with pytest.raises(TypeError, match="^replay.protocols._edit.merge_edges: array old_kind must be a C-contiguous "
                                        "1-D uint8 array$"):
        mods["replay.protocols._edit"].merge_edges(i64, np.zeros(0, np.int32), np.zeros(0, np.int8),
                                                   np.zeros(0, np.int64), [], i64, np.zeros(0, np.int32),
                                                   np.zeros(0, np.uint8), np.zeros(0, np.int64))
    assert mods["replay.pipeline._build"].encode(np.array([5, 5, 3], np.int64), np.zeros(3, np.int32)) == \
        np.array([5, 3], np.int64).tobytes()


def test_only_the_extension_modules_include_python():
    """Python.h comes in through fastrack/pybuffer.hh, and only into the extension modules: the
    core headers, the standalone driver and the gem5 sources build without Python."""
    cpp = ROOT / "replay" / "cpp"
    modules = sorted(cpp.glob("*_module.cpp"))
    assert [p.name for p in modules] == ["build_module.cpp", "edit_module.cpp", "engine_module.cpp"]
    for p in modules:  # the one buffer helper, first (Python.h must precede the standard headers)
        includes = [line for line in p.read_text().splitlines() if line.startswith("#include")]
        assert includes[0].startswith('#include "fastrack/pybuffer.hh"'), p.name
        assert "Py_buffer" not in p.read_text() and "PyObject_GetBuffer" not in p.read_text(), p.name
    others = [p for p in (*cpp.rglob("*.hh"), *(ROOT / "models" / "h100" / "cpp").rglob("*.[ch]*"))
              if p.name != "pybuffer.hh" and p.is_file()]
    assert others
    for p in others:
        text = p.read_text()
        assert "pybuffer.hh" not in text and "Python.h" not in text, p


def test_the_core_has_one_home():
    """The generic headers live under replay/cpp/fastrack only; the H100 pricing under models."""
    core = {p.name for p in (ROOT / "replay" / "cpp" / "fastrack").glob("*.hh")}
    assert {"graph.hh", "engine.hh", "results.hh", "view.hh"} <= core
    h100 = {p.name for p in (ROOT / "models" / "h100" / "cpp" / "fastrack").glob("*.hh")}
    assert h100 == {"hw.hh", "pricing.hh"}
    tree = ast.parse((ROOT / "setup.py").read_text())
    (value,) = [n.value for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and n.target.id == "ACCELERATORS"]
    modules = ast.literal_eval(value)
    assert ("replay.pipeline._engine", ["replay/cpp/engine_module.cpp"], ["replay/cpp"]) in modules
    for _, sources, includes in modules:  # everything a build needs ships in the sdist
        manifest = (ROOT / "MANIFEST.in").read_text()
        assert all(str(Path(p).parent) in manifest for p in sources) and all(d in manifest for d in includes)


@pytest.mark.slow
@pytest.mark.skipif(twins.why_not_buildable() is not None, reason=f"no C++ toolchain: {twins.why_not_buildable()}")
def test_an_sdist_ships_the_core_and_builds_it(tmp_path):
    """``setup.py sdist`` carries the headers and the module source (MANIFEST.in), and the
    extension builds from the unpacked sdist alone."""
    dist = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path), "sdist",
                           "-d", str(dist)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (archive,) = dist.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        for need in ("replay/cpp/engine_module.cpp", "replay/cpp/fastrack/engine.hh", "replay/cpp/fastrack/graph.hh",
                     "replay/cpp/fastrack/results.hh", "replay/cpp/fastrack/view.hh", "setup.py"):
            assert need in names, need
        tar.extractall(tmp_path / "src", filter="data")
    (src,) = (tmp_path / "src").iterdir()
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], capture_output=True,
                          text=True, cwd=src)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((src / "replay" / "pipeline").glob("_engine*.so")) or list((src / "replay" / "pipeline").glob("_engine*.pyd"))


# ---------------------------------------------------------------------------------------------
# re-timing in a given placement order (prediction ranges: replay/pipeline/ranges.py)


def _retimed(g, scale):
    """The schedule of ``g`` without its barrier groups (which retime declines), and ``retime``
    of it in that schedule's placement order with the durations as they are and multiplied by
    ``scale`` (None after a cycle)."""
    import dataclasses

    g = dataclasses.replace(g, group=np.full(g.n, -1, np.int64))
    try:
        s = engine.schedule(g)
    except GraphError:
        return None
    same = engine.retime(g, s.order, s.lane_servers)
    other = dataclasses.replace(g, dur=np.asarray(g.dur * np.asarray(scale[:g.n]), np.int64))
    return {"schedule": s, "same": same, "other": engine.retime(other, s.order, s.lane_servers)}


@settings(max_examples=150, deadline=None)
@given(any_graphs(), st.lists(st.integers(0, 3), min_size=30, max_size=30))
def test_retiming_in_a_schedules_own_order_gives_that_schedule(g, scale):
    got = twins.agree("engine", lambda: _retimed(g, scale))
    if got is None or got["same"] is None:  # (a cycle; a pool grown past its maximum to break a deadlock)
        return
    start, finish = got["same"]
    assert np.array_equal(start, got["schedule"].start) and np.array_equal(finish, got["schedule"].finish)


def test_retiming_keeps_the_order_a_shared_lane_served():
    # two nodes on one shared lane: node 2 waits for node 0. With node 0 short (1 ns) the lane
    # serves node 2 (ready at 1) before node 1 (released at 3); with node 0 long (10 ns) the
    # schedule serves node 1 first, but re-timed in the short graph's order the lane still serves
    # node 2 first: the estimate is later than the schedule (prediction ranges schedule the
    # points that decide a range's end for this reason)
    import dataclasses

    g = graph([10, 4, 4], deps=[(0, 2, F, 0)], lanes=[0, 1, 1], types=[0, SHARED], servers=[1, 1],
              release=[0, 3, 0], order=[0, 1, 2])
    short = dataclasses.replace(g, dur=np.asarray([1, 4, 4], np.int64))
    s = engine.schedule(short)
    assert s.start.tolist() == [0, 5, 1]
    assert engine.schedule(g).start.tolist() == [0, 3, 10]
    start, finish = twins.agree("engine", lambda: engine.retime(g, s.order, s.lane_servers))
    assert start.tolist() == [0, 14, 10] and finish.tolist() == [10, 18, 14]


def test_retime_declines_an_order_that_does_not_fit():
    g = HAND["lanes"]
    s = engine.schedule(g)
    assert twins.agree("engine", lambda: engine.retime(g, s.order[::-1].copy(), s.lane_servers)) is None
    assert twins.agree("engine", lambda: engine.retime(HAND["groups"], np.arange(4), np.ones(4, np.int64))) is None
    assert engine.retime(g, s.order[:1], s.lane_servers) is None


# ---------------------------------------------------------------------------------------------
# resizing lanes without changing a schedule (prediction ranges skip such points exactly)


def _resized(g, servers, max_servers):
    import dataclasses

    servers = np.asarray(servers, np.int32)
    lanes = dataclasses.replace(g.lanes, servers=servers, max_servers=np.maximum(np.asarray(max_servers, np.int32), servers))
    return dataclasses.replace(g, lanes=lanes)


@settings(max_examples=300, deadline=None)
@given(any_graphs(), st.booleans(), st.lists(st.integers(-1, 3), min_size=5, max_size=5),
       st.lists(st.integers(0, 4), min_size=5, max_size=5))
def test_a_resize_the_rule_keeps_keeps_the_schedule(g, no_negative_lags, more, top):
    """Whenever resize_keeps_schedule says a resize keeps the schedule, the resized graph's
    schedule starts and finishes every node as before (both engines)."""
    import dataclasses

    if no_negative_lags:  # (the pool half of the rule needs the pass to pop in time order)
        g = dataclasses.replace(g, dep_lag=np.maximum(g.dep_lag, 0))
    try:
        s = engine.schedule(g)
    except GraphError:
        return
    k = len(g.lanes)
    servers = np.maximum(1, g.lanes.servers[:5] + np.asarray(more[:k]))
    max_servers = g.lanes.max_servers[:5] + np.asarray(top[:k])
    if not engine.resize_keeps_schedule(g.lanes, engine.lane_slack(g, s), servers, np.maximum(max_servers, servers)):
        return
    g2 = _resized(g, servers, max_servers)
    s2 = twins.agree("engine", lambda: engine.schedule(g2))
    assert np.array_equal(s2.start, s.start) and np.array_equal(s2.finish, s.finish)
    assert np.array_equal(s2.slot_wait, s.slot_wait)


def _channel_graph(second_ready: int):
    """Two copies' CE operations on one shared channel (lane 1, one server); node 2 holds a pool
    server (lane 2: 1 server, up to 4) from its start until node 3 finishes."""
    return graph([5, 10, 10, 3], deps=[(0, 1, F, 0), (0, 2, F, second_ready), (2, 3, F, 0)],
                 lanes=[0, 1, 1, 0], types=[LaneType.HOST_THREAD, SHARED, POOL], servers=[1, 1, 1],
                 max_servers=[1, 1, 4], holds=[(2, 3, 2)], order=[0, 1, 2, 3])


def test_a_second_channel_changes_nothing_where_the_first_was_never_busy():
    g = _channel_graph(second_ready=20)  # node 2 ready at 25, after node 1 ended (15)
    s = engine.schedule(g)
    slack = engine.lane_slack(g, s)
    assert not slack.bound[1] and not slack.waited[2] and slack.final[2] == 1 and slack.monotone
    more = np.asarray([1, 2, 1]), np.asarray([1, 2, 4])
    assert engine.resize_keeps_schedule(g.lanes, slack, *more)
    assert np.array_equal(engine.schedule(_resized(g, *more)).start, s.start)
    # the pool may start larger or stop growing at 1 (its size never passed 1), not stop below it
    assert engine.resize_keeps_schedule(g.lanes, slack, [1, 1, 3], [1, 1, 3])
    assert engine.resize_keeps_schedule(g.lanes, slack, [1, 1, 1], [1, 1, 1])
    # fewer servers on the channel lane, or an in-order lane resized: not decided by the rule
    assert not engine.resize_keeps_schedule(g.lanes, slack, [2, 1, 1], [2, 1, 4])


def test_a_second_channel_is_scheduled_where_the_first_was_busy():
    g = _channel_graph(second_ready=0)  # both CE operations ready at 5: node 2 waits for node 1
    s = engine.schedule(g)
    assert s.start.tolist()[:3] == [0, 5, 15]
    slack = engine.lane_slack(g, s)
    assert slack.bound[1]
    more = np.asarray([1, 2, 1]), np.asarray([1, 2, 4])
    assert not engine.resize_keeps_schedule(g.lanes, slack, *more)
    assert engine.schedule(_resized(g, *more)).start.tolist()[:3] == [0, 5, 5]  # (and it would have changed)


def test_a_pool_that_made_a_holder_wait_is_not_resized_by_the_rule():
    # nodes 1 and 2 each hold the pool's one server (it cannot grow) until they end: node 2 waits
    g = graph([5, 10, 10], deps=[(0, 1, F, 0), (0, 2, F, 0)], lanes=[0, 1, 2],
              types=[LaneType.HOST_THREAD, SHARED, SHARED, POOL], servers=[1, 1, 1, 1],
              max_servers=[1, 1, 1, 1], holds=[(1, 1, 3), (2, 2, 3)], order=[0, 1, 2])
    s = engine.schedule(g)
    assert s.start.tolist() == [0, 5, 15] and s.slot_wait.tolist() == [0, 0, 10]
    slack = engine.lane_slack(g, s)
    assert slack.waited[3]
    assert not engine.resize_keeps_schedule(g.lanes, slack, [1, 1, 1, 2], [1, 1, 1, 2])
    # a negative lag anywhere: the pass may pop out of time order, so no pool is resized by the rule
    neg = graph([5, 10, 10], deps=[(0, 1, DepKind.STREAM, -2), (0, 2, F, 20)], lanes=[0, 1, 2],
                types=[LaneType.HOST_THREAD, SHARED, SHARED, POOL], servers=[1, 1, 1, 1],
                max_servers=[1, 1, 1, 4], holds=[(1, 1, 3)], order=[0, 1, 2])
    assert not engine.lane_slack(neg, engine.schedule(neg)).monotone
    assert not engine.resize_keeps_schedule(neg.lanes, engine.lane_slack(neg, engine.schedule(neg)), [1, 1, 1, 2], [1, 1, 1, 4])
