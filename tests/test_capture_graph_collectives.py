"""Collectives inside CUDA graphs under tracegen capture --nproc N: a graph captured with
collectives in it runs them again at every replay, each replay taking the group's next sequence
numbers, so that the ranks' replays match one to one (docs/emulation.md, CUDA graphs)."""

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from fastrack_core.schema import DepKind  # noqa: E402
from fastrack_core.traceio import read_trace  # noqa: E402
from tracegen.cli import main as tracegen_main  # noqa: E402
from tracegen.ranks import capture_rank, merge_ranks, rank_env  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "serving.py"
F32, BF16 = 4, 2

# eager all-reduce, a graph holding an all-reduce and an all-gather replayed REPLAYS times, eager all-reduce
GRAPH_SCRIPT = """
import os, torch, torch.distributed as dist
REPLAYS = 3
dist.init_process_group("nccl")
world = dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(1024, device="cuda")
dist.all_reduce(x)                                                  # 4096 B
g = torch.cuda.CUDAGraph()
out = torch.empty(256 * world, device="cuda")
with torch.cuda.graph(g):
    y = x * 2
    dist.all_reduce(y)                                              # 4096 B
    dist.all_gather_into_tensor(out, y[:256])                       # 1024 B per rank
for _ in range(REPLAYS):
    g.replay()
dist.all_reduce(x)                                                  # 4096 B
torch.cuda.synchronize()
"""
REPLAYS = 3
GRAPH_COLLECTIVES = [("all_reduce", 1024 * F32), ("all_gather", 256 * F32)]


@pytest.fixture()
def ranks(monkeypatch):
    """Capture every rank of a script in this process (as the child processes do) and merge."""
    from tracegen import emulation

    emulation.preload()

    def run(script, world=2):
        tables = []
        for r in range(world):
            for k, v in rank_env(r, world).items():
                monkeypatch.setenv(k, v)
            tables.append(capture_rank(script, [], r, world))
        return merge_ranks(tables, world)
    return run


def _script(tmp_path, body):
    p = tmp_path / "work.py"
    p.write_text(textwrap.dedent(body))
    return p


def _graph_collectives(df, rank):
    """The rank's collectives launched by a cudaGraphLaunch, and those launches."""
    d = df[df["rank"] == rank]
    launches = d[(d.kind == "runtime") & (d.name == "cudaGraphLaunch")]
    coll = d[d.kind == "collective"]
    return coll[coll.correlation.isin(set(launches.correlation))], launches


def test_each_replay_records_the_collectives_of_its_graph(ranks, tmp_path):
    table = ranks(_script(tmp_path, GRAPH_SCRIPT))
    df = table.to_pandas()
    for rank in (0, 1):
        coll = df[(df["rank"] == rank) & (df.kind == "collective")].sort_values("coll_seq")
        in_graph, launches = _graph_collectives(df, rank)
        assert len(launches) == REPLAYS
        assert len(in_graph) == REPLAYS * len(GRAPH_COLLECTIVES)
        # numbered in issue order, the replays between the two eager all-reduces
        assert list(coll.coll_seq) == list(range(2 + REPLAYS * len(GRAPH_COLLECTIVES)))
        eager = ("all_reduce", 1024 * F32)
        assert list(zip(coll.coll_type, coll.coll_bytes)) == [eager] + GRAPH_COLLECTIVES * REPLAYS + [eager]
        assert set(in_graph.coll_seq) == set(range(1, 1 + REPLAYS * len(GRAPH_COLLECTIVES)))
        # each replay's collectives hang off its one launch call
        for corr, group in in_graph.groupby("correlation"):
            assert list(zip(group.sort_values("coll_seq").coll_type, group.sort_values("coll_seq").coll_bytes)) \
                == GRAPH_COLLECTIVES
            call = launches[launches.correlation == corr].op_id.iloc[0]
            for deps, kinds in zip(group.deps, group.dep_kinds):
                assert dict(zip(deps, kinds)).get(call) == DepKind.LAUNCH
    # partnered across the ranks: same type, bytes, group and sequence
    by_op = df.set_index("op_id")
    for _, row in df[df.kind == "collective"].iterrows():
        partners = [d for d, k in zip(row.deps, row.dep_kinds) if k == DepKind.COLLECTIVE]
        assert len(partners) == 1
        other = by_op.loc[partners[0]]
        assert other["rank"] != row["rank"]
        assert (other.coll_type, other.coll_bytes, other.coll_group, other.coll_seq) == (
            row.coll_type, row.coll_bytes, row.coll_group, row.coll_seq)
    # the same script again: the same trace
    assert ranks(_script(tmp_path, GRAPH_SCRIPT)).equals(table)


def test_a_barrier_inside_a_graph_capture_fails_as_cuda_fails_it(ranks, tmp_path):
    body = GRAPH_SCRIPT.replace("    dist.all_reduce(y)  ", "    dist.barrier()\n    dist.all_reduce(y)  ")
    assert "dist.barrier()" in body
    with pytest.raises(Exception, match="operation not permitted when stream is capturing"):
        ranks(_script(tmp_path, body))


# ----------------------------------------------------------------------------- the serving example

# 4 requests of 24 prompt + 6 output tokens at concurrency 2 (two rounds of two requests)
REQUESTS, CONCURRENCY, OUTPUT_LEN = 4, 2, 6
TINY = ["--model", "tiny", "--requests", str(REQUESTS), "--concurrency", str(CONCURRENCY), "--input-len", "24",
        "--output-len", str(OUTPUT_LEN), "--range-ratio", "1", "--max-len", "64"]
TP = 2


def _tiny_config():
    """The tiny model's config, read from the example itself."""
    name = "serving_example_config"
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        mod = sys.modules[name] = importlib.util.module_from_spec(spec)  # its dataclasses look themselves up
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(EXAMPLE.parent))
        sys.modules.pop(name, None)
    return mod.MODELS["tiny"]


def _capture(out):
    r = CliRunner().invoke(tracegen_main, ["capture", "--overwrite", "--host-time", "modelled", "--nproc", str(TP),
                                           "-o", str(out), str(EXAMPLE), "--", *TINY, "--tp", "--cuda-graphs"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return read_trace(out).table


def test_tensor_parallel_serving_replays_its_collectives_from_cuda_graphs(tmp_path):
    """--tp --cuda-graphs on 2 ranks: every decode-only step is one cudaGraphLaunch of the bucket's
    graph, whose forward holds two all-reduces per layer (attention output and MLP down
    projections, [rows, dim]) and one all-gather of the logits ([rows, vocab / tp] per rank).
    A request's prefill step samples its first token, so each round of CONCURRENCY requests runs
    OUTPUT_LEN - 1 decode-only steps, all in the graph of bucket CONCURRENCY."""
    cfg = _tiny_config()
    path = tmp_path / "tp_graphs.parquet"
    df = _capture(path).to_pandas()
    per_graph = [("all_reduce", CONCURRENCY * cfg.dim * BF16)] * (2 * cfg.layers) + [
        ("all_gather", CONCURRENCY * (cfg.vocab // TP) * BF16)]
    replays = (REQUESTS // CONCURRENCY) * (OUTPUT_LEN - 1)
    keys = {}
    for rank in range(TP):
        in_graph, launches = _graph_collectives(df, rank)
        assert len(launches) == replays
        assert len(in_graph) == replays * len(per_graph)
        for _, group in in_graph.groupby("correlation"):
            g = group.sort_values("coll_seq")
            assert list(zip(g.coll_type, g.coll_bytes)) == per_graph
        coll = df[(df["rank"] == rank) & (df.kind == "collective")].sort_values("coll_seq")
        assert list(coll.coll_seq) == list(range(len(coll)))  # eager prefills and replays share one numbering
        keys[rank] = list(zip(coll.coll_type, coll.coll_bytes, coll.coll_group, coll.coll_seq))
    assert keys[0] == keys[1]
    from replay.pipeline.run import replay_trace
    from replay.pipeline.serving import serving_metrics

    rep = replay_trace(path, "baseline")
    m = serving_metrics(rep.graph, rep.schedule)
    assert m["complete_requests"] == REQUESTS and m["output_tokens"] == REQUESTS * OUTPUT_LEN
    labels = {rep.graph.kind_label(k) for k in set(rep.graph.kind.tolist())}
    assert {"p2p_submit", "p2p_link"} <= labels, labels


def test_tensor_parallel_serving_with_cuda_graphs_is_the_same_every_run(tmp_path):
    assert _capture(tmp_path / "a.parquet").equals(_capture(tmp_path / "b.parquet"))
