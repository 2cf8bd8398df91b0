"""The engine options of examples/serving.py (docs/serving.md, "The serving example"): each one
captured at --model tiny under modelled host time, checked in the trace, and replayed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from fastrack_core.schema import DepKind  # noqa: E402
from fastrack_core.traceio import read_trace  # noqa: E402
from tracegen.cli import main as tracegen_main  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "serving.py"
# 4 requests of 24 prompt + 6 output tokens at concurrency 2: 2 prefill steps, the rest decode
TINY = ["--model", "tiny", "--requests", "4", "--concurrency", "2", "--input-len", "24", "--output-len", "6",
        "--range-ratio", "1", "--max-len", "64"]
LAUNCHES = ("cudaLaunchKernel", "cudaGraphLaunch")


def _capture(out, *args, nproc=None):
    opts = ["capture", "--overwrite", "--host-time", "modelled", "-o", str(out)]
    if nproc:
        opts += ["--nproc", str(nproc)]
    r = CliRunner().invoke(tracegen_main, [*opts, str(EXAMPLE), "--", *TINY, *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return read_trace(out).table.to_pandas()


def _issuing_thread(df, gpu_ops):
    """The host thread of the runtime call that launched each GPU op (by correlation id)."""
    rt = df[df.kind == "runtime"]
    by_corr = dict(zip(rt.correlation, rt.thread))
    return {by_corr[c] for c in gpu_ops.correlation}


def _serving(path, protocol):
    from replay.pipeline.run import replay_trace
    from replay.pipeline.serving import serving_metrics

    rep = replay_trace(path, protocol)
    return serving_metrics(rep.graph, rep.schedule)


def test_copy_thread_issues_the_copies_off_the_scheduler_thread(tmp_path):
    """--copy-thread (SGLang's CC fix): every H2D input copy of a step is issued by the input-copy
    thread and every --overlap token readback by the readback thread, never by the scheduler
    thread that launches the forwards; the scheduler takes each copy's event through a queue
    handoff (a SYNC edge from the copy thread's queue.put). Under baseline CC the host-synchronous
    readback then blocks the readback thread, not the scheduler: TPOT grows less than in the same
    loop without the copy threads."""
    path = tmp_path / "ct.parquet"
    df = _capture(path, "--cuda-graphs", "--overlap", "--copy-thread")
    steps = df[df.step >= 0]
    launches = steps[(steps.kind == "runtime") & steps.name.isin(LAUNCHES)]
    assert set(launches.thread) == {1}
    mem = steps[steps.kind == "memcpy"]
    assert _issuing_thread(df, mem[mem.copy_dir == "H2D"]) == {2}
    assert _issuing_thread(df, mem[mem.copy_dir == "D2H"]) == {3}
    assert (mem.copy_dir == "D2H").sum() == launches.step.nunique()  # one readback per forward
    # the scheduler's queue.get of a copy event depends on the input-copy thread's queue.put
    names, threads = dict(zip(df.op_id, df.name)), dict(zip(df.op_id, df.thread))
    gets = df[(df.name == "queue.get") & (df.thread == 1)]
    senders = {threads[s] for deps, kinds in zip(gets.deps, gets.dep_kinds) for s, k in zip(deps, kinds)
               if k == int(DepKind.SYNC) and names[s] == "queue.put"}
    assert senders == {2, 3}
    # the same command twice: the same trace (the copy threads' ops belong to the step that handed them over)
    again = _capture(tmp_path / "ct2.parquet", "--cuda-graphs", "--overlap", "--copy-thread")
    assert again.equals(df)

    plain = tmp_path / "plain.parquet"
    _capture(plain, "--cuda-graphs", "--overlap")
    growth = {}
    for name, trace in (("copy-thread", path), ("plain", plain)):
        m = {p: _serving(trace, p) for p in ("none", "baseline")}
        assert m["baseline"]["complete_requests"] == 4 and m["baseline"]["output_tokens"] == 24
        growth[name] = m["baseline"]["tpot_ns"]["mean"] / m["none"]["tpot_ns"]["mean"] - 1
    assert 0 < growth["copy-thread"] < growth["plain"], growth


def test_async_output_processes_outputs_on_their_own_thread(tmp_path):
    """--async-output (vLLM's asynchronous output processor): the scheduler thread hands each
    step's read-back tokens to the output thread through a queue and goes on with the next step;
    the output thread detokenizes and writes every token and finish marker, the scheduler thread
    keeps the arrivals and the engine-step markers. Its work for step k starts before the
    scheduler thread has launched step k+1's forward (they overlap)."""
    path = tmp_path / "ao.parquet"
    df = _capture(path, "--async-output")
    kind = df.name.str.extract(r"^(?:request:([a-z_]+):|range_push:(engine_step):)").bfill(axis=1)[0]
    assert set(df.thread[kind.isin(["first_token", "token", "finish"])]) == {2}
    assert set(df.thread[kind.isin(["arrive", "engine_step"])]) == {1}
    assert (kind == "finish").sum() == 4 and (kind == "token").sum() == 4 * 5
    names, threads = dict(zip(df.op_id, df.name)), dict(zip(df.op_id, df.thread))
    gets = df[(df.name == "queue.get") & (df.thread == 2)]
    assert len(gets) and all(any(k == int(DepKind.SYNC) and names[s] == "queue.put" and threads[s] == 1
                                 for s, k in zip(deps, kinds)) for deps, kinds in zip(gets.deps, gets.dep_kinds))
    out_ops = df[(df.thread == 2) & kind.isin(["first_token", "token"])]
    launches = df[(df.thread == 1) & (df.kind == "runtime") & df.name.isin(LAUNCHES)]
    for k in sorted(set(out_ops.step))[:-1]:
        assert out_ops.start_ns[out_ops.step == k].min() < launches.start_ns[launches.step == k + 1].max(), k
    for p in ("none", "baseline"):
        m = _serving(path, p)
        assert m["complete_requests"] == 4 and m["output_tokens"] == 24, p


def test_tensor_parallel_capture_has_two_all_reduces_per_layer_on_every_rank(tmp_path):
    """--tp under tracegen capture --nproc 2: each rank holds half the heads, the FFN and the LM
    head; every forward runs two all-reduces per layer (after the attention's output projection
    and after the MLP's down projection) and one all-gather of the logits, the same collectives
    in the same order on both ranks; only rank 0 (the engine's frontend) writes request markers.
    Under baseline CC the all-reduces take CC's encrypted GPU-to-GPU path."""
    path = tmp_path / "tp.parquet"
    df = _capture(path, "--tp", "--overlap", nproc=2)
    layers = 2  # tiny
    assert set(df["rank"]) == {0, 1}
    coll = df[df.kind == "collective"]
    forwards = df[(df["rank"] == 0) & (df.kind == "runtime") & (df.name == "cudaLaunchKernel") & (df.step >= 0)]
    n_fwd = forwards.step.nunique()
    per_rank = {r: list(zip(c.sort_values("coll_seq").coll_type, c.sort_values("coll_seq").coll_bytes))
                for r, c in coll.groupby("rank")}
    assert per_rank[0] == per_rank[1]
    types = [t for t, _ in per_rank[0]]
    assert types.count("all_reduce") == 2 * layers * n_fwd and types.count("all_gather") == n_fwd
    # one forward: the layers' all-reduces, then the logits' all-gather
    assert types[:2 * layers + 1] == ["all_reduce"] * (2 * layers) + ["all_gather"]
    ranks_with_markers = set(df["rank"][df.name.str.startswith("request:")])
    assert ranks_with_markers == {0}
    # each rank holds half the model (tiny: 8 query / 4 KV heads of 32, FFN 688): QKV weights of
    # (4 + 2 * 2) x 32 = 256 rows, gate/up of 2 x 344, an LM head of 1024 / 2 rows, K/V cache rows of 2 heads
    kernels = df.name[df.kind == "kernel"]
    linears = kernels[kernels.str.startswith("aten::linear")]
    for rows in (256, 688, 512):
        assert linears.str.contains(rf", {rows}x256\]").any(), rows
    assert not linears.str.contains(r", (?:1376|1024)x256\]").any()  # no whole gate/up or LM head
    caches = kernels[kernels.str.startswith("aten::index_copy_")]
    assert len(caches) and caches.str.contains(r"^aten::index_copy_ \[\d+x2x32,").all()
    from replay.pipeline.run import replay_trace

    for p in ("none", "baseline"):
        m = _serving(path, p)
        assert m["complete_requests"] == 4 and m["output_tokens"] == 24, p
    rep = replay_trace(path, "baseline")
    labels = {rep.graph.kind_label(k) for k in set(rep.graph.kind.tolist())}
    assert {"p2p_submit", "p2p_link"} <= labels, labels


def test_tensor_parallel_refuses_a_model_that_does_not_split(tmp_path):
    r = CliRunner().invoke(tracegen_main, ["capture", "--nproc", "3", "-o", str(tmp_path / "x.parquet"), str(EXAMPLE),
                                           "--", *TINY, "--tp"], catch_exceptions=False)
    assert r.exit_code == 2 and not (tmp_path / "x.parquet").exists()
    assert "does not split evenly" in r.output


def test_tensor_parallel_without_ranks_is_refused_with_one_line():
    r = subprocess.run([sys.executable, str(EXAMPLE), *TINY, "--tp"], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "WORLD_SIZE"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--nproc" in r.stderr


def _steps(df):
    """Per profiler step: (engine-step marker, H2D copies, D2H copies, graph launches, request markers)."""
    out = []
    for _, g in df[df.step >= 0].groupby("step"):
        marker = [n[len("range_push:"):] for n in g.name if n.startswith("range_push:engine_step:")]
        mem = g[g.kind == "memcpy"]
        out.append((marker, int((mem.copy_dir == "H2D").sum()), int((mem.copy_dir == "D2H").sum()),
                    int((g.name == "cudaGraphLaunch").sum()), [n for n in g.name if n.startswith("request:")]))
    return out


def test_multi_step_runs_decode_rounds_from_one_scheduling(tmp_path):
    """--multi-step 4 (vLLM's multi-step scheduling), hand-worked on TINY (2 requests at a time, 24
    prompt + 6 output tokens each): a prefill step alone, then two decode rounds of 4 GPU steps per
    pair of requests. Every GPU step is a profiler step with its own engine-step marker (the
    context grows by one position per request and step); only the step that schedules a round
    copies inputs H2D (the later ones advance them on the GPU); each step's tokens are read back
    D2H one step later, the round's last two at its end; the second round's last three steps are
    rows of finished requests (their tokens dropped: no markers). The whole run replays with
    every request complete, and CC costs the multi-step loop less than the loop that schedules
    every step (fewer host-blocking input copies per token)."""
    path = tmp_path / "ms.parquet"
    df = _capture(path, "--cuda-graphs", "--multi-step", "4")
    steps = _steps(df)
    half = [(["engine_step:48:0:48"], None, 1, 0)] + [([f"engine_step:0:2:{50 + 2 * j}"], None, d2h, 1)
                                                    for j, d2h in enumerate([0, 1, 1, 2, 0, 1, 1, 2])]
    assert len(steps) == 2 * len(half)
    for k, ((marker, h2d, d2h, graphs, _), (want_marker, _, want_d2h, want_graphs)) in enumerate(zip(steps, half * 2)):
        assert (marker, d2h, graphs) == (want_marker, want_d2h, want_graphs), k
        assert (h2d > 0) == (k % 9 in (0, 1, 5)), k  # the prefill step and each round's first step
    first_pair = [m for s in steps[:9] for m in s[4]]
    for rid in (0, 1):
        assert first_pair.count(f"request:token:{rid}") == 5 and first_pair.count(f"request:finish:{rid}") == 1
    assert all(not s[4] for k, s in enumerate(steps) if k % 9 in (7, 8))  # dropped tokens: no markers

    sync = tmp_path / "sync.parquet"
    _capture(sync, "--cuda-graphs")
    lost = {}
    for name, trace in (("multi-step", path), ("sync", sync)):
        m = {p: _serving(trace, p) for p in ("none", "baseline")}
        assert m["baseline"]["complete_requests"] == 4 and m["baseline"]["output_tokens"] == 24
        lost[name] = 1 - m["baseline"]["output_tokens_per_s"] / m["none"]["output_tokens_per_s"]
    assert 0 < lost["multi-step"] < lost["sync"], lost


@pytest.mark.parametrize("args, field", [(["--multi-step", "0"], "--multi-step"),
                                         (["--multi-step", "2", "--overlap"], "--overlap"),
                                         (["--multi-step", "40"], "--max-len")])
def test_multi_step_refuses_bad_values_with_one_line(args, field):
    r = subprocess.run([sys.executable, str(EXAMPLE), *TINY, *args], capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and field in r.stderr, r.stderr
