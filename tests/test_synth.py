"""tracegen synth: random mix and memcpy microbenchmark."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tracegen.synth as synth
from fastrack_core.errors import ConfigError
from fastrack_core.schema import DepKind
from fastrack_core.traceio import read_trace
from tracegen.cli import main

FINISH_TO_START = (DepKind.PROGRAM, DepKind.STREAM, DepKind.EVENT)


def _run(*args: str):
    result = CliRunner().invoke(main, list(args))
    return result


def _random(tmp_path, name="r.parquet", ops=3000, seed=7, ranks=2, streams=3):
    path = tmp_path / name
    res = _run("synth", "random", "--ops", str(ops), "--seed", str(seed), "--ranks", str(ranks),
               "--streams", str(streams), "-o", str(path))
    assert res.exit_code == 0, res.output
    return path


class Ops:
    """A trace's columns as numpy, plus its edges (src, dst, kind)."""

    def __init__(self, path):
        tr = read_trace(path)  # full validation against the contract
        self.meta = tr.metadata
        t = tr.table
        self.n = t.num_rows
        for c in ("op_id", "rank", "thread", "stream", "start_ns", "dur_ns", "bytes", "correlation", "step"):
            setattr(self, c, t.column(c).to_numpy())
        self.kind = tr.column("kind")
        self.name = tr.column("name")
        self.copy_dir = tr.column("copy_dir")
        self.host_mem = tr.column("host_mem")
        self.end = self.start_ns + self.dur_ns
        deps = t.column("deps").combine_chunks()
        kinds = t.column("dep_kinds").combine_chunks()
        self.src = deps.values.to_numpy()
        self.dk = kinds.values.to_numpy()
        self.dst = np.repeat(np.arange(self.n), np.diff(deps.offsets.to_numpy()))

    def edges(self, kind):
        m = self.dk == int(kind)
        return self.src[m], self.dst[m]


@pytest.fixture(scope="module")
def rtrace(tmp_path_factory):
    return _random(tmp_path_factory.mktemp("synth"))


@pytest.fixture(scope="module")
def rops(rtrace):
    return Ops(rtrace)


def test_random_is_deterministic_per_seed(tmp_path):
    a = pq.read_table(_random(tmp_path, "a.parquet", ops=1500, seed=3))
    b = pq.read_table(_random(tmp_path, "b.parquet", ops=1500, seed=3))
    c = pq.read_table(_random(tmp_path, "c.parquet", ops=1500, seed=4))
    assert a.equals(b)
    assert not a.equals(c)


def test_random_counts_and_contract(rops):
    o = rops
    assert o.n == 3000
    assert np.array_equal(o.op_id, np.arange(o.n))
    assert set(o.rank.tolist()) == {0, 1}
    assert np.bincount(o.rank).tolist() == [1500, 1500]
    for r in (0, 1):
        assert np.unique(o.stream[(o.rank == r) & (o.stream >= 0)]).size == 3
        assert o.start_ns[o.rank == r].min() == 0  # times relative to the rank's origin
    # rows sorted by (rank, start)
    assert np.all(np.diff(o.rank) >= 0)
    same = np.diff(o.rank) == 0
    assert np.all(np.diff(o.start_ns)[same] >= 0)
    assert set(o.kind) == {"cpu", "runtime", "sync", "kernel", "memcpy", "memset"}
    copies = o.kind == "memcpy"
    assert set(zip(o.copy_dir[copies], o.host_mem[copies])) == {
        ("H2D", "pinned"), ("H2D", "pageable"), ("D2H", "pinned"), ("D2H", "pageable")}
    b = o.bytes[copies | (o.kind == "memset")]
    assert b.min() >= synth.MIN_COPY_BYTES and b.max() <= synth.MAX_COPY_BYTES
    assert np.all(o.bytes[~(copies | (o.kind == "memset"))] == 0)
    assert set(o.dk.tolist()) == {int(k) for k in (DepKind.PROGRAM, DepKind.LAUNCH, DepKind.STREAM,
                                                   DepKind.EVENT, DepKind.SYNC)}
    assert o.meta["source_format"] == "synthetic"
    assert o.meta["world_size"] == 2 and o.meta["ranks"] == [0, 1]
    assert "ops=3000" in o.meta["trace_name"]
    names = set(o.name[o.kind == "runtime"])
    assert {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaEventRecord", "cudaStreamWaitEvent"} <= names
    assert "cudaStreamSynchronize" in set(o.name[o.kind == "sync"])


def test_random_deps_are_topological(rops):
    """Deps point to earlier op ids, except sync deps: rows are sorted by start (conventions), and a
    blocking call often starts before the queued GPU op it waits for. The graph stays acyclic."""
    o = rops
    assert o.src.size > o.n
    assert np.all(o.rank[o.src] == o.rank[o.dst])
    not_sync = o.dk != int(DepKind.SYNC)
    assert np.all(o.src[not_sync] < o.dst[not_sync])
    g = nx.DiGraph()
    g.add_nodes_from(range(o.n))
    g.add_edges_from(zip(o.src.tolist(), o.dst.tolist()))
    assert nx.is_directed_acyclic_graph(g)


def test_random_host_threads_are_back_to_back(rops):
    o = rops
    host = np.isin(o.kind, ["cpu", "runtime", "sync"])
    assert np.all(o.thread[host] >= 0) and np.all(o.stream[host] == -1)
    assert np.all(o.thread[~host] == -1) and np.all(o.stream[~host] >= 0)
    for key in np.unique(np.stack([o.rank[host], o.thread[host]]), axis=1).T:
        idx = np.flatnonzero(host & (o.rank == key[0]) & (o.thread == key[1]))
        assert np.array_equal(o.start_ns[idx[1:]], o.end[idx[:-1]])  # no overlap, no gap
        # cpu ops fill gaps between calls: never two in a row
        cpu = o.kind[idx] == "cpu"
        assert not np.any(cpu[1:] & cpu[:-1])
    # program deps chain exactly the host ops of each thread
    s, d = o.edges(DepKind.PROGRAM)
    assert s.size == host.sum() - 2


def test_random_times_respect_every_dependency(rops):
    o = rops
    for kind in FINISH_TO_START:
        s, d = o.edges(kind)
        assert np.all(o.start_ns[d] >= o.end[s]), kind.label
    s, d = o.edges(DepKind.LAUNCH)
    assert np.all(o.start_ns[d] >= o.start_ns[s] + synth.LAUNCH_LATENCY_NS)
    assert np.all(o.correlation[s] == o.correlation[d]) and np.all(o.correlation[d] >= 0)
    s, d = o.edges(DepKind.SYNC)  # a sync op spans the wait: it ends after what it waits for
    assert np.all(o.end[d] >= o.end[s] + synth.SYNC_WAKE_NS)
    assert set(o.kind[d]) == {"sync"}


def test_random_gpu_starts_are_tight(rops):
    """Every GPU op starts at exactly the max of its constraints (the replay engine's rule), and
    every sync op ends exactly when its rule says: the captured timeline is self-consistent."""
    o = rops
    gpu = np.flatnonzero(o.stream >= 0)
    bound = np.full(o.n, np.iinfo(np.int64).min)
    s, d = o.edges(DepKind.LAUNCH)
    np.maximum.at(bound, d, o.start_ns[s] + synth.LAUNCH_LATENCY_NS)
    for kind in (DepKind.STREAM, DepKind.EVENT):
        s, d = o.edges(kind)
        np.maximum.at(bound, d, o.end[s])
    assert np.array_equal(o.start_ns[gpu], bound[gpu])
    sync = np.flatnonzero(o.kind == "sync")
    done = o.start_ns + synth.SYNC_CALL_NS
    s, d = o.edges(DepKind.SYNC)
    np.maximum.at(done, d, o.end[s] + synth.SYNC_WAKE_NS)
    assert np.array_equal(o.end[sync], done[sync])
    # each stream is FIFO: a stream dep links consecutive ops of a stream
    s, d = o.edges(DepKind.STREAM)
    assert np.all(o.stream[s] == o.stream[d])
    s, d = o.edges(DepKind.EVENT)
    assert np.all(o.stream[s] != o.stream[d])


def test_random_pageable_d2h_is_split(rops):
    o = rops
    pageable_d2h = np.flatnonzero((o.kind == "memcpy") & (o.copy_dir == "D2H") & (o.host_mem == "pageable"))
    assert pageable_d2h.size
    s_l, d_l = o.edges(DepKind.LAUNCH)
    s_s, d_s = o.edges(DepKind.SYNC)
    for i in pageable_d2h:
        call = s_l[d_l == i][0]
        assert o.name[call] == "cudaMemcpyAsync" and o.end[call] == o.start_ns[i]  # launch part ends at copy start
        waits = d_s[s_s == i]
        wait = waits[o.name[waits] == "cudaMemcpyAsync"][0]
        assert o.start_ns[wait] == o.end[call]


@pytest.mark.parametrize("ops", [1, 2, 5, 17])
def test_random_tiny_counts_exact(tmp_path, ops):
    o = Ops(_random(tmp_path, ops=ops, ranks=1))
    assert o.n == ops
    assert np.all(o.src[o.dk != int(DepKind.SYNC)] < o.dst[o.dk != int(DepKind.SYNC)])


def test_random_single_stream_has_no_events(tmp_path):
    o = Ops(_random(tmp_path, ops=800, ranks=1, streams=1))
    assert np.unique(o.stream[o.stream >= 0]).tolist() == [synth.FIRST_STREAM_ID]
    assert not np.any(o.dk == int(DepKind.EVENT))


def test_simulation_python_fallback_matches_jit():
    rng = np.random.default_rng(5)
    a = synth._random_rank(rng, 400, 3)
    cls, stream = a["cls"], a["stream"]
    # re-run the pass with the plain-Python function on the same inputs
    dur_in = a["dur"].copy()
    py = getattr(synth._simulate, "py_func", synth._simulate)
    cap = int(synth._CAP_BY_CLS[cls].sum()) + 3 * int(np.count_nonzero(cls == synth.C_SYNC_DEVICE))
    res = py(cls, stream, dur_in, 3, synth.LAUNCH_LATENCY_NS, synth.SYNC_CALL_NS, synth.SYNC_WAKE_NS, cap)
    for got, key in zip(res, ("start", "dur", "esrc", "edst", "ekind")):
        assert np.array_equal(got, a[key]), key


def test_random_rejects_more_ranks_than_ops(tmp_path):
    res = _run("synth", "random", "--ops", "2", "--seed", "1", "--ranks", "3", "-o", str(tmp_path / "x.parquet"))
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "--ops" in res.stderr


# --- memcpy microbenchmark -------------------------------------------------------------------

@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("memory", ["pinned", "pageable"])
def test_memcpy_microbench(tmp_path, direction, memory):
    path = tmp_path / "m.parquet"
    res = _run("synth", "memcpy", "--bytes", "1MiB", "--direction", direction, "--memory", memory,
               "--repeat", "5", "-o", str(path))
    assert res.exit_code == 0, res.output
    o = Ops(path)
    copies = np.flatnonzero(o.kind == "memcpy")
    assert copies.size == 5
    assert np.all(o.bytes[copies] == 1 << 20)
    assert set(o.copy_dir[copies]) == {direction.upper()} and set(o.host_mem[copies]) == {memory}
    assert set(o.kind) <= {"runtime", "memcpy", "sync"}
    assert np.count_nonzero(o.name == "cudaStreamSynchronize") == 5
    assert np.count_nonzero((o.kind == "runtime") & (o.name == "cudaMemcpyAsync")) == 5
    bw = synth.PINNED_COPY_BW_BYTES_PER_S if memory == "pinned" else synth.PAGEABLE_COPY_BW_BYTES_PER_S
    assert np.all(o.dur_ns[copies] == round((1 << 20) * 1e9 / bw) + synth.COPY_FIXED_NS)
    blocking = direction == "d2h" and memory == "pageable"
    assert o.n == 5 * (4 if blocking else 3)
    assert np.all(o.src < o.dst)
    for kind in FINISH_TO_START:
        s, d = o.edges(kind)
        assert np.all(o.start_ns[d] >= o.end[s])
    s, d = o.edges(DepKind.SYNC)
    assert np.all(o.end[d] >= o.end[s])
    # the copies are serialised: each starts after the previous one's stream sync returned
    assert np.all(o.start_ns[copies[1:]] > o.end[copies[:-1]])
    assert o.meta["source_format"] == "synthetic"


@pytest.mark.parametrize("text,expected", [
    ("4096", 4096), ("4KiB", 4096), ("1MiB", 1 << 20), ("1GiB", 1 << 30), ("1e9", 10**9),
    ("2GB", 2 * 10**9), ("1.5KiB", 1536), ("64 mib", 64 << 20), ("10B", 10),
])
def test_parse_size(text, expected):
    assert synth.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "12XB", "-4KiB", "0", "1.5", "1e-3KiB", "KiB", "4 KiB B"])
def test_parse_size_rejects(text):
    with pytest.raises(ConfigError, match="--bytes"):
        synth.parse_size(text)


def test_memcpy_bad_bytes_is_one_line_exit_2(tmp_path):
    out = tmp_path / "m.parquet"
    res = _run("synth", "memcpy", "--bytes", "12XB", "--direction", "h2d", "--memory", "pinned", "-o", str(out))
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1
    assert "--bytes" in res.stderr and "12XB" in res.stderr
    assert not out.exists()
