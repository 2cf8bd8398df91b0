"""The request-level serving simulator (replay/serve/, docs/serving.md "The request-level simulator"):
a hand-worked timeline, seeded arrivals, goodput bounds, the generated length table, bad input,
and agreement with the whole-run replay of a small captured run."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from replay.frontend.cli import main as replay_main
from replay.serve.metrics import metrics, parse_slo
from replay.serve.schedulers import names, scheduler
from replay.serve.sim import simulate
from replay.serve.steps import PriceTable, StepPrice
from replay.serve.workloads import (SHAREGPT_FILE, Workload, parse_workload, read_request_file, sharegpt_csv,
                                    sharegpt_like)

ROOT = Path(__file__).resolve().parent.parent
MS = 1_000_000


def _table(protocol: str, host_add_ms: int) -> PriceTable:
    """Known step prices (ms): host, GPU per shape (prefill tokens, decode requests)."""
    shapes = {(8, 0): (10, 8), (0, 2): (4, 5), (4, 0): (6, 3), (0, 1): (4, 2)}
    return PriceTable(protocol, {s: [StepPrice(host_ns=(h + host_add_ms) * MS, gpu_ns=g * MS)]
                                 for s, (h, g) in shapes.items()})


def _three_requests() -> Workload:
    # three requests of 4 prompt tokens and 2 output tokens (a prefill step and a decode step each),
    # all arriving at 0, two KV slots: requests 0 and 1 run together, request 2 after them
    return Workload("file", np.array([4, 4, 4]), np.array([2, 2, 2]), arrival_ns=np.zeros(3, np.int64))


@pytest.mark.parametrize("protocol, add, first, last, sched", [
    # none: step (8,0) 10 ms -> first tokens at 10; (0,2) max(4,5)=5 -> last at 15; request 2 admitted at
    # 15: (4,0) 6 ms -> first at 21; (0,1) max(4,2)=4 -> last at 25
    ("none", 0, [10, 10, 21], [15, 15, 25], "vllm"),
    # baseline: every step's host side 2 ms longer: 12, max(6,5)=6, 8, 6
    ("baseline", 2, [12, 12, 26], [18, 18, 32], "vllm"),
    # overlap (tokens handed out at the next step's start, its host work after them): (8,0) host 0-10,
    # GPU 0-8; (0,2) host 10-14 reads the first tokens at 10, GPU 10-15; the drain reads them at 15;
    # request 2 admitted at 14 (its slot freed one step late, at the drain): (4,0) host 14-21 (it
    # waits at 15 for the readback), GPU 15-18; (0,1) host 21-25 reads its first token at 21, GPU
    # 21-23; the drain reads the last at 25
    ("none", 0, [10, 10, 21], [15, 15, 25], "sglang"),
])
def test_hand_worked_timeline(protocol, add, first, last, sched):
    res = simulate(_three_requests(), _table(protocol, add), scheduler(sched), max_seqs=2, max_batched_tokens=16)
    assert (res.first_ns // MS).tolist() == first
    assert (res.last_ns // MS).tolist() == last
    assert res.steps == 4
    m = metrics(res, {})
    assert m["ttft_ns"]["mean"] == pytest.approx(np.mean(first) * MS)
    tpot = [b - a for a, b in zip(first, last)]  # two tokens: TPOT is the one gap
    assert m["tpot_ns"]["mean"] == pytest.approx(np.mean(tpot) * MS)
    assert m["output_tokens_per_s"] == pytest.approx(6 / (last[-1] * 1e-3))
    assert m["e2e_ns"]["p50"] == pytest.approx(last[0] * MS)
    # ITL: the gaps between consecutive tokens of each request, pooled (here one gap a request:
    # none [5, 5, 4] ms, baseline [6, 6, 6]); never a step's host period, never the first token's TTFT
    assert m["itl_ns"]["mean"] == pytest.approx(np.mean(tpot) * MS)
    assert m["itl_ns"]["p50"] == pytest.approx(np.percentile(tpot, 50) * MS)
    assert m["itl_ns"]["p99"] == pytest.approx(max(tpot) * MS)


def test_overlap_scheduler_frees_a_slot_one_step_late():
    """The overlap scheduler learns of a finish when it reads the step back, after launching the
    next: request 2 enters one step later than under vllm while request 0 still runs."""
    w = Workload("file", np.array([4, 4, 4]), np.array([4, 2, 2]), arrival_ns=np.zeros(3, np.int64))
    sync = simulate(w, _table("none", 0), scheduler("vllm"), 2, 16)
    over = simulate(w, _table("none", 0), scheduler("sglang"), 2, 16)
    assert sync.admit_ns[2] == 15 * MS  # after steps (8,0) 10 ms and (0,2) 5 ms
    assert over.admit_ns[2] > sync.admit_ns[2]


def test_static_batch_waits_for_an_empty_server():
    w = Workload("file", np.array([4, 4, 4]), np.array([2, 4, 2]), arrival_ns=np.zeros(3, np.int64))
    table = PriceTable("none", {s: [StepPrice(MS, MS)] for s in [(8, 0), (0, 2), (0, 1), (4, 0)]})
    cont = simulate(w, table, scheduler("vllm"), 2, 16)
    stat = simulate(w, table, scheduler("static"), 2, 16)
    assert cont.admit_ns[2] < stat.admit_ns[2]  # static: request 2 waits until request 1 is done too
    assert stat.admit_ns[2] >= stat.last_ns[1]


def test_scheduler_registry():
    assert {"vllm", "sglang", "static"} <= set(names())
    with pytest.raises(Exception, match="unknown scheduler"):
        scheduler("nope")


def test_poisson_arrivals_are_reproducible_by_seed():
    a = parse_workload("poisson:5", 400, "sharegpt", seed=3)
    b = parse_workload("poisson:5", 400, "sharegpt", seed=3)
    c = parse_workload("poisson:5", 400, "sharegpt", seed=4)
    assert np.array_equal(a.arrival_ns, b.arrival_ns) and np.array_equal(a.input_tokens, b.input_tokens)
    assert not np.array_equal(a.arrival_ns, c.arrival_ns)
    gaps = np.diff(a.arrival_ns) / 1e9
    assert gaps.min() >= 0 and 0.15 < gaps.mean() < 0.25  # 1 / 5 per s


def test_goodput_bounds():
    res = simulate(_three_requests(), _table("none", 0), scheduler("vllm"), 2, 16)
    assert metrics(res, parse_slo("ttft=1ns"))["goodput_requests_per_s"] == 0
    everything = metrics(res, parse_slo("ttft=1000s,tpot=1000s"))
    assert everything["goodput_requests_per_s"] == pytest.approx(everything["requests_per_s"])
    half = metrics(res, parse_slo("ttft=15ms"))  # requests 0 and 1 (TTFT 10 ms), not request 2 (21 ms)
    assert half["goodput_requests_per_s"] == pytest.approx(2 / 3 * half["requests_per_s"])


def test_slo_units():
    assert parse_slo("ttft=200ms,tpot=50us") == {"ttft": 200e6, "tpot": 50e3}
    with pytest.raises(Exception, match="unit"):
        parse_slo("ttft=200")


def test_shipped_length_table_is_the_generated_one():
    assert SHAREGPT_FILE.read_text() == sharegpt_csv(sharegpt_like())
    table = sharegpt_like()
    assert table.min() >= 1 and 100 < table[:, 0].mean() < 400 and 100 < table[:, 1].mean() < 400


def test_request_file_csv_and_jsonl(tmp_path):
    csv = tmp_path / "r.csv"
    csv.write_text("arrival_s,input_tokens,output_tokens\n0,10,2\n0.5,20,3\n")
    jl = tmp_path / "r.jsonl"
    jl.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 2}\n'
                  '{"arrival_s": 0.5, "input_tokens": 20, "output_tokens": 3}\n')
    for p in (csv, jl):
        w = read_request_file(str(p))
        assert w.arrival_ns.tolist() == [0, 500_000_000] and w.output_tokens.tolist() == [2, 3]


def _run(args):
    return CliRunner().invoke(replay_main, args, catch_exceptions=False)


@pytest.mark.parametrize("body, field", [
    ("arrival_s,input_tokens,output_tokens\n-1,10,2\n", "arrival_s"),
    ("arrival_s,input_tokens,output_tokens\n0,10,0\n", "output_tokens"),
    ("arrival_s,input_tokens,output_tokens\n1,10,2\n0.5,10,2\n", "arrival_s"),
])
def test_bad_request_files(tmp_path, body, field):
    f = tmp_path / "req.csv"
    f.write_text(body)
    r = _run(["serve", str(ROOT / "traces" / "serving.parquet"), "--workload", f"file:{f}", "--json"])
    assert r.exit_code == 2
    err = r.output.strip()  # the one error line and nothing else (no report)
    assert len(err.splitlines()) == 1 and str(f) in err and field in err
    plot = tmp_path / "out.png"  # a figure of latency against load needs load points, not a file
    r = _run(["serve", str(ROOT / "traces" / "serving.parquet"), "--workload", f"file:{f}", "--plot", str(plot)])
    assert r.exit_code == 2 and "--plot" in r.output and not plot.exists()


@pytest.mark.parametrize("args, word", [
    (["--workload", "poisson:0"], "rate"),
    (["--workload", "poisson:nan"], "rate"),
    (["--workload", "closed:4", "--slo", "ttft=200"], "unit"),
])
def test_bad_options(tmp_path, args, word):
    plot = tmp_path / "out.png"
    r = _run(["serve", str(ROOT / "traces" / "serving.parquet"), *args, "--plot", str(plot)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and word in r.output
    assert not plot.exists()


def test_a_trace_without_engine_step_markers_is_refused(tmp_path):
    # the shipped serving trace with its engine-step markers renamed: request markers, no steps
    import pyarrow as pa

    from fastrack_core.traceio import read_trace, write_trace

    t = read_trace(ROOT / "traces" / "serving.parquet")
    names = [n.replace("engine_step:", "other_step:") if n else n for n in t.table.column("name").to_pylist()]
    field = t.table.schema.field("name")
    table = t.table.set_column(t.table.schema.get_field_index("name"), field,
                               pa.array(names, pa.string()).dictionary_encode().cast(field.type))
    trace = write_trace(tmp_path / "no-steps.parquet", table, t.metadata)
    plot = tmp_path / "out.png"
    r = _run(["serve", str(trace), "--workload", "closed:4", "--plot", str(plot)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert str(trace) in r.output and "engine-step markers" in r.output
    assert not plot.exists()


# ---- against the whole-run replay of a small captured run

CAPTURE = ["--model", "tiny", "--requests", "8", "--concurrency", "4", "--input-len", "64", "--output-len", "8",
           "--max-len", "128"]


def example_requests(argv: list[str]) -> Workload:
    """The closed-loop workload examples/serving.py ran with ``argv`` (its own request draw)."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        spec = importlib.util.spec_from_file_location("serving_example", ROOT / "examples" / "serving.py")
        ex = importlib.util.module_from_spec(spec)
        sys.modules["serving_example"] = ex
        spec.loader.exec_module(ex)
    finally:
        sys.path.pop(0)
    opts = dict(zip(argv[::2], argv[1::2]))
    args = argparse.Namespace(seed=0, requests=int(opts["--requests"]), input_len=int(opts["--input-len"]),
                              output_len=int(opts["--output-len"]), range_ratio=0.5)
    reqs = ex.make_requests(args, ex.MODELS[opts["--model"]].vocab)
    return Workload("closed", np.array([len(r.prompt) for r in reqs]), np.array([r.output_len for r in reqs]),
                    concurrency=int(opts["--concurrency"]))


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    from tracegen.cli import main as tracegen_main

    out = tmp_path_factory.mktemp("serve") / "serving_tiny.parquet"
    r = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), str(ROOT / "examples" / "serving.py"), "--",
                                           *CAPTURE], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return out


def test_simulator_agrees_with_the_whole_run_replay(captured):
    """Same closed-loop workload (the capture's own requests), scheduler vllm (the example's
    synchronous loop): throughput and mean TTFT/TPOT within 5% under none and baseline."""
    from replay.pipeline.run import load_graph, replay_graph
    from replay.pipeline.serving import serving_metrics
    from replay.serve.steps import price_tables

    work = example_requests(CAPTURE)
    graph, _ = load_graph(captured)
    tables, steps = price_tables(graph, str(captured), ["none", "baseline"], "h100", None)
    for proto in ("none", "baseline"):
        rep = replay_graph(graph, proto)
        whole = serving_metrics(rep.graph, rep.schedule)
        sim = metrics(simulate(work, tables[proto], scheduler("vllm"), 4, 2048), {})
        assert sim["steps"] == len(steps)
        assert sim["output_tokens_per_s"] == pytest.approx(whole["output_tokens_per_s"], rel=0.05)
        assert sim["ttft_server_ns"]["mean"] == pytest.approx(whole["ttft_ns"]["mean"], rel=0.05)
        assert sim["tpot_ns"]["mean"] == pytest.approx(whole["tpot_ns"]["mean"], rel=0.05)
    assert tables["baseline"].period(0, 4) > tables["none"].period(0, 4)  # CC makes a decode step longer


def test_serve_command_json_and_plot(captured, tmp_path):
    plot = tmp_path / "lat.png"
    r = _run(["serve", str(captured), "--protocols", "none,baseline", "--workload", "poisson:50,200",
              "--requests", "40", "--max-seqs", "4", "--slo", "ttft=50ms,tpot=10ms", "--json", "--plot", str(plot)])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert [p["load"] for p in d["points"]] == [50.0, 200.0]
    rows = d["points"][1]["rows"]
    assert [x["protocol"] for x in rows] == ["none", "baseline"]
    assert rows[1]["ttft_ns"]["mean"] > rows[0]["ttft_ns"]["mean"]  # CC: slower steps, longer queues
    assert rows[1]["added_by_mechanism_ns_per_token"]
    assert plot.stat().st_size > 0


@pytest.fixture(scope="module")
def captured_overlap(tmp_path_factory):
    """A small capture of the overlap loop with CUDA-graph decode (modelled host time: the step
    prices of one shape are then equal, so the comparison with the whole run is not noise)."""
    from tracegen.cli import main as tracegen_main

    out = tmp_path_factory.mktemp("serve") / "serving_tiny_overlap.parquet"
    r = CliRunner().invoke(tracegen_main, ["capture", "--host-time", "modelled", "-o", str(out),
                                           str(ROOT / "examples" / "serving.py"), "--", *CAPTURE, "--cuda-graphs",
                                           "--overlap"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return out


def test_overlap_simulator_on_a_small_capture(captured_overlap):
    """The overlap scheduler over the overlap capture's own workload agrees with the whole-run
    replay (5%) under none and baseline; where the host first waits on the GPU (a pageable input
    copy of an eager step) it waits for the earlier steps' work, and the GPU work the host issued
    meanwhile queues (its busy time, not its span) behind the previous step."""
    from replay.pipeline.run import load_graph
    from replay.serve.steps import price_tables

    work = example_requests(CAPTURE)
    graph, _ = load_graph(captured_overlap)
    tables, _ = price_tables(graph, str(captured_overlap), ["none", "baseline"], "h100", None)
    _sglang_agrees_with_the_whole_run(graph, tables, work)


def _sglang_agrees_with_the_whole_run(graph, tables, work):
    """Under none and baseline, the sglang simulation of ``work`` over ``tables`` gives throughput and
    mean TTFT/TPOT within 5% of the whole-run replay of ``graph`` (the documented tolerance)."""
    from replay.pipeline.run import replay_graph
    from replay.pipeline.serving import serving_metrics

    for proto in ("none", "baseline"):
        rep = replay_graph(graph, proto)
        whole = serving_metrics(rep.graph, rep.schedule)
        sim = metrics(simulate(work, tables[proto], scheduler("sglang"), 4, 2048), {})
        assert sim["output_tokens_per_s"] == pytest.approx(whole["output_tokens_per_s"], rel=0.05)
        assert sim["ttft_server_ns"]["mean"] == pytest.approx(whole["ttft_ns"]["mean"], rel=0.05)
        assert sim["tpot_ns"]["mean"] == pytest.approx(whole["tpot_ns"]["mean"], rel=0.05)


@pytest.mark.parametrize("sched", names())
@pytest.mark.parametrize("fixture", ["captured", "captured_overlap"])
def test_cc_never_makes_serving_faster(request, fixture, sched):
    """A CC protocol only adds work: under every scheduler, on the synchronous and the overlap
    capture, baseline gives no more tokens/s and no lower mean TPOT or ITL than none; with equal
    output lengths the mean ITL (pooled gaps) is the mean TPOT."""
    from replay.pipeline.run import load_graph
    from replay.serve.steps import price_tables

    trace = request.getfixturevalue(fixture)
    graph, _ = load_graph(trace)
    tables, _ = price_tables(graph, str(trace), ["none", "baseline"], "h100", None)
    for c in (1, 4):
        work = parse_workload(f"closed:{c}", 4 * c, "fixed:64:8", 0)
        m = {p: metrics(simulate(work, tables[p], scheduler(sched), 4, 2048), {}) for p in ("none", "baseline")}
        assert m["baseline"]["output_tokens_per_s"] <= m["none"]["output_tokens_per_s"]
        assert m["baseline"]["tpot_ns"]["mean"] >= m["none"]["tpot_ns"]["mean"]
        for p in m.values():
            assert p["itl_ns"]["mean"] == pytest.approx(p["tpot_ns"]["mean"], rel=1e-6)


@pytest.mark.slow
def test_overlap_simulator_agrees_with_the_whole_run_replay(tmp_path):
    """The shipped serving trace's command (llama3-8b, CUDA-graph decode, overlap loop), scheduler
    sglang: throughput and mean TTFT/TPOT within 5% of the whole-run replay."""
    from replay.pipeline.run import load_graph
    from replay.serve.steps import price_tables
    from tracegen.cli import main as tracegen_main

    argv = ["--model", "llama3-8b", "--requests", "8", "--concurrency", "4", "--input-len", "256",
            "--output-len", "32", "--max-len", "2048"]
    out = tmp_path / "serving_8b.parquet"
    r = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), str(ROOT / "examples" / "serving.py"), "--",
                                           *argv, "--cuda-graphs", "--overlap"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    work = example_requests(argv)
    graph, _ = load_graph(out)
    tables, _ = price_tables(graph, str(out), ["none", "baseline"], "h100", None)
    _sglang_agrees_with_the_whole_run(graph, tables, work)


def test_pricing_a_step_replays_only_its_step_graph(captured):
    from replay.pipeline.run import load_graph
    from replay.serve.steps import captured_steps, step_graph

    graph, _ = load_graph(captured)
    steps = captured_steps(graph, str(captured))
    sub = step_graph(graph, steps[1].step)
    assert sub.n == int((graph.step == steps[1].step).sum()) and sub.n < graph.n // 4
    assert sub.dep_src.size == 0 or sub.dep_src.max() < sub.n  # no edge reaches outside the step
    sub.validate()
