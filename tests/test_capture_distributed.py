"""tracegen capture --nproc N: emulated ranks of torch.distributed scripts, merged into one trace.

Fast tests run each rank in this process (:func:`tracegen.ranks.capture_rank`, the function the
child processes run) and merge them (:func:`tracegen.ranks.merge_ranks`); the command line with
its child processes is exercised by the tests marked slow."""

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import torch  # noqa: F401  (the capture extra installs torch)

from fastrack_core.errors import CaptureError
from fastrack_core.schema import DepKind, OpKind
from fastrack_core.traceio import Trace, read_trace
from replay.pipeline.build import build_graph
from replay.whatif.dataparallel import data_parallel
from tracegen.cli import main as tracegen_main
from tracegen.ranks import capture_rank, merge_ranks, rank_env

F32 = 4

# A DDP training loop; --single runs the same model on one GPU without torch.distributed.
DDP_SCRIPT = """
import os, sys, torch, torch.nn as nn
single = "--single" in sys.argv
if not single:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                      nn.Linear(1024, 10)).cuda()
if not single:
    model = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(32, 256, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()
"""
# parameter bytes, in registration order: Linear(256,1024), Linear(1024,1024), Linear(1024,10)
L1, L2, L3 = (256 * 1024 + 1024) * F32, (1024 * 1024 + 1024) * F32, (1024 * 10 + 10) * F32

PLAIN_SCRIPT = """
import os, torch, torch.distributed as dist
dist.init_process_group(backend="nccl", init_method="env://")
world = dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(1024, device="cuda")
dist.all_reduce(x)                                                                   # 4096 B
outs = [torch.empty(256, device="cuda", dtype=torch.bfloat16) for _ in range(world)]
dist.all_gather(outs, torch.ones(256, device="cuda", dtype=torch.bfloat16))          # 512 B per rank
dist.broadcast(x, src=0)                                                             # 4096 B
dist.reduce_scatter_tensor(torch.empty(128, device="cuda"), torch.ones(128 * world, device="cuda"))
dist.all_gather_into_tensor(torch.empty(64 * world, device="cuda"), torch.ones(64, device="cuda"))  # 256 B
sub = dist.new_group([0, 1])
work = dist.all_reduce(torch.ones(8, device="cuda"), group=sub, async_op=True)       # 32 B
work.wait()
dist.barrier()                                                                       # 4 B all-reduce
print("rank", dist.get_rank(), "done")
dist.destroy_process_group()
"""


def _script(tmp_path, body: str, name="work.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


@pytest.fixture()
def ranks(monkeypatch):
    """Capture every rank of a script in this process (as the child processes do) and merge."""
    from tracegen import emulation

    emulation.preload()

    def run(script, world=2, args=()):
        tables = []
        for r in range(world):
            for k, v in rank_env(r, world).items():
                monkeypatch.setenv(k, v)
            tables.append(capture_rank(script, list(args), r, world))
        return merge_ranks(tables, world).to_pandas()
    return run


def _collectives(df, rank=None):
    c = df[df.kind == "collective"]
    return c if rank is None else c[c["rank"] == rank]


def _check_collective_structure(df, world):
    """Every collective: launched by a runtime call of its rank's host thread, on a stream that is
    not the compute stream, partnered with the same collective on the other ranks of its group."""
    for _, row in _collectives(df).iterrows():
        kinds = dict(zip(row.deps, row.dep_kinds))
        launch = [d for d, k in kinds.items() if k == DepKind.LAUNCH]
        assert len(launch) == 1
        call = df.loc[launch[0]]
        assert call.kind == "runtime" and call["rank"] == row["rank"] and call.correlation == row.correlation
        assert row.stream != 7 and row.device == row["rank"]
        partners = [d for d, k in kinds.items() if k == DepKind.COLLECTIVE]
        assert len(partners) == len(_group_ranks(row.coll_group)) - 1
        for p in partners:
            other = df.loc[p]
            assert other["rank"] != row["rank"]
            assert (other.coll_group, other.coll_seq, other.coll_type, other.coll_bytes) == (
                row.coll_group, row.coll_seq, row.coll_type, row.coll_bytes)


def _group_ranks(label):
    spec = label.rsplit(":", 1)[1]
    lo, hi = spec.split("-")
    return list(range(int(lo), int(hi) + 1))


# ----------------------------------------------------------------------------- DDP


def test_ddp_two_ranks_buckets_and_cross_check(ranks, tmp_path):
    script = _script(tmp_path, DDP_SCRIPT)
    df = ranks(script)
    assert sorted(df["rank"].unique()) == [0, 1]
    assert list(df.op_id) == list(range(len(df)))
    _check_collective_structure(df, 2)
    per_rank = [_collectives(df, r) for r in (0, 1)]
    keys = [list(zip(c.coll_type, c.coll_bytes, c.coll_seq)) for c in per_rank]
    assert keys[0] == keys[1]  # both ranks issued the same collectives
    c0 = per_rank[0]
    assert list(c0.coll_seq) == list(range(len(c0)))  # one group, numbered in issue order
    assert set(c0.coll_group) == {"0:0-1"}
    # DDP's construction: one broadcast of the module state (all parameters, one 250 MiB bucket)
    assert (c0.coll_type.iloc[0], c0.coll_bytes.iloc[0]) == ("broadcast", L1 + L2 + L3)
    ar = c0[c0.coll_type == "all_reduce"]
    by_step = {int(s): list(g.coll_bytes) for s, g in ar.groupby("step")}
    # first iteration: DDP's initial buckets (one 25 MiB cap, no small first bucket): one bucket
    assert by_step[0] == [L1 + L2 + L3]
    # later iterations: buckets rebuilt in gradient-ready order, first bucket capped at 1 MiB:
    # [last layer + middle layer] (closes once >= 1 MiB), [first layer]
    assert by_step[1] == by_step[2] == [L3 + L2, L1]
    # the rebuild broadcasts the bucket indices from rank 0 (int32 lists) before step 1's forward
    bc = c0[(c0.coll_type == "broadcast") & (c0.step == 1)]
    assert len(bc) == 2 and all(n < 64 for n in bc.coll_bytes)
    # each all-reduce's stream waits for the compute stream (EVENT), and the end of backward
    # makes the compute stream wait for the last bucket
    assert all(DepKind.EVENT in kinds for kinds in ar.dep_kinds)
    waited = {d for deps, kinds in zip(df.deps, df.dep_kinds) for d, k in zip(deps, kinds) if k == DepKind.EVENT}
    assert all(int(ar.index[ar.step == s][-1]) in waited for s in (0, 1, 2))

    # cross-check: replay --data-parallel 2 of the single-GPU capture of the same model
    from tracegen.capture import capture_emulated

    table, meta = capture_emulated(script, ["--single"])
    dp = data_parallel(build_graph(Trace(table, meta)), 2)
    coll = np.flatnonzero((dp.kind == OpKind.COLLECTIVE) & (dp.rank == 0))
    replay_by_step = {}
    for node in coll:
        replay_by_step.setdefault(int(dp.step[node]), []).append(int(dp.bytes[node]))
    assert replay_by_step[1] == by_step[1] and replay_by_step[2] == by_step[2]  # the same messages
    # the first iteration differs: replay buckets every step in gradient-ready order (docs/multi-gpu.md)
    assert replay_by_step[0] == [L3 + L2, L1] != by_step[0]


def test_ddp_steps_selected_per_rank(monkeypatch, tmp_path):
    """--skip-steps/--steps apply to every rank; the kept collectives still pair up."""
    script = _script(tmp_path, DDP_SCRIPT)
    tables = []
    for r in (0, 1):
        for k, v in rank_env(r, 2).items():
            monkeypatch.setenv(k, v)
        tables.append(capture_rank(script, [], r, 2, skip_steps=1, steps=1))
    df = merge_ranks(tables, 2).to_pandas()
    _check_collective_structure(df, 2)
    for r in (0, 1):
        c = _collectives(df, r)
        # step 1 opens with the two broadcasts of DDP's rebuilt bucket indices (int32 lists)
        assert list(c.coll_type) == ["broadcast", "broadcast", "all_reduce", "all_reduce"]
        assert list(c.coll_bytes)[2:] == [L3 + L2, L1] and list(c.coll_seq) == [2, 3, 4, 5]
        assert set(df[df["rank"] == r].step) == {1}


# ----------------------------------------------------------------------------- plain collectives


def test_plain_collectives(ranks, tmp_path, capsys):
    df = ranks(_script(tmp_path, PLAIN_SCRIPT))
    _check_collective_structure(df, 2)
    for r in (0, 1):
        c = _collectives(df, r)
        got = list(zip(c.coll_type, c.coll_bytes, c.coll_group, c.coll_seq))
        world, sub = "0:0-1", [g for g in c.coll_group if g != "0:0-1"][0]
        assert got == [("all_reduce", 4096, world, 0), ("all_gather", 512, world, 1), ("broadcast", 4096, world, 2),
                       ("reduce_scatter", 1024, world, 3), ("all_gather", 256, world, 4), ("all_reduce", 32, sub, 0),
                       ("all_reduce", 4, world, 5)]
        assert sub.endswith(":0-1") and sub != world
        assert list(c.name)[:2] == ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernel_AllGather_bf16_RING_LL"]
        assert (c.bytes == c.coll_bytes).all()
        # one NCCL stream per process group
        assert c[c.coll_group == world].stream.nunique() == 1 and c[c.coll_group == sub].stream.nunique() == 1
        assert set(c[c.coll_group == world].stream) != set(c[c.coll_group == sub].stream)
        # barrier(): the host blocks on it (a sync op with a SYNC dep on the barrier's all-reduce)
        barrier = c.index[-1]
        rank_ops = df[df["rank"] == r]
        assert any(barrier in deps and k == "sync" for deps, k in zip(rank_ops.deps, rank_ops.kind))
    assert "rank 0 done" in capsys.readouterr().out


_NOT_COLLECTIVES = {  # ProcessGroup methods that move no data
    "abort", "bound_device_id", "boxed", "get_group_store", "group_desc", "group_name", "merge_remote_group", "name",
    "rank", "set_timeout", "shutdown", "size", "split_group", "unbox", "use_pg_for_symm_mem_rendezvous",
    "_backend_id", "_device_types", "_enable_collectives_timing", "_end_coalescing", "_get_backend",
    "_get_backend_name", "_get_sequence_number_for_group", "_has_hooks", "_id", "_register_backend",
    "_register_on_completion_hook", "_set_default_backend", "_set_group_desc", "_set_group_name",
    "_set_sequence_number_for_group", "_wait_for_pending_works", "_pybind11_conduit_v1_"}


def test_every_collective_of_process_group_is_recorded_or_refused():
    """No collective may fall through to ProcessGroup's C++ default (which does nothing without a backend)."""
    import torch.distributed as dist

    from tracegen.emulation.distributed import EmulatedGroup

    methods = {m for m in dir(dist.ProcessGroup) if not m.startswith("__") and callable(getattr(dist.ProcessGroup, m))
               and not isinstance(getattr(dist.ProcessGroup, m), type) and not m.isupper()}
    missing = sorted(m for m in methods - _NOT_COLLECTIVES if m not in EmulatedGroup.__dict__)
    assert missing == []


def test_merge_refuses_ranks_that_disagree(ranks, tmp_path):
    script = _script(tmp_path, """
    import os, torch, torch.distributed as dist
    dist.init_process_group("nccl")
    n = 1024 if dist.get_rank() == 0 else 2048
    dist.all_reduce(torch.ones(n, device="cuda"))
    """)
    with pytest.raises(CaptureError, match="ranks issued different collectives: collective 0 of group 0:0-1 is "
                                           "all_reduce of 4096 bytes on rank 0 and all_reduce of 8192 bytes on rank 1"):
        ranks(script)


# ----------------------------------------------------------------------------- unsupported / bad input


def test_fsdp_is_refused_with_one_line(ranks, tmp_path):
    script = _script(tmp_path, """
    import torch, torch.nn as nn, torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    dist.init_process_group("nccl")
    FSDP(nn.Linear(8, 8).cuda())
    """)
    with pytest.raises(CaptureError, match=r"emulation does not support FSDP \(FullyShardedDataParallel\)"):
        ranks(script)
    script2 = _script(tmp_path, """
    import torch, torch.nn as nn, torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("nccl")
    fully_shard(nn.Linear(8, 8).cuda())
    """, name="fsdp2.py")
    with pytest.raises(CaptureError, match=r"emulation does not support FSDP \(fully_shard\)"):
        ranks(script2)


def test_script_without_torch_distributed(ranks, tmp_path):
    script = _script(tmp_path, "import torch\ntorch.ones(3, device='cuda') * 2\n")
    with pytest.raises(CaptureError, match="--nproc 2: the script never calls torch.distributed.init_process_group"):
        ranks(script)


def test_distributed_script_without_gpu_work(ranks, tmp_path):
    script = _script(tmp_path, "import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
                               "t = torch.ones(4)\ndist.all_reduce(t)\n")
    with pytest.raises(CaptureError, match="launched no GPU work"):
        ranks(script)


def test_world_size_the_script_asks_for(ranks, tmp_path):
    script = _script(tmp_path, """
    import os, torch.distributed as dist
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456", world_size=4, rank=int(os.environ["RANK"]))
    """)
    with pytest.raises(CaptureError, match="the script asks for world size 4, but --nproc is 2"):
        ranks(script)


def test_object_collectives_are_refused(ranks, tmp_path):
    script = _script(tmp_path, """
    import torch, torch.distributed as dist
    dist.init_process_group("nccl")
    torch.ones(2, device="cuda")
    objs = [None]
    dist.broadcast_object_list(objs, src=0)
    """)
    with pytest.raises(CaptureError, match="emulation does not support torch.distributed.broadcast_object_list"):
        ranks(script)


def test_patches_are_undone(ranks, tmp_path):
    import torch.distributed as dist

    before = (dist.init_process_group, torch.autograd.backward, dist.Reducer._rebuild_buckets,
              dist.broadcast_object_list)
    ranks(_script(tmp_path, PLAIN_SCRIPT))
    assert (dist.init_process_group, torch.autograd.backward, dist.Reducer._rebuild_buckets,
            dist.broadcast_object_list) == before
    assert not dist.is_initialized()


def test_nproc_options_on_the_command_line(tmp_path):
    script = _script(tmp_path, PLAIN_SCRIPT)
    out = tmp_path / "t.parquet"
    for bad in (["--nproc", "0"], ["--nproc", "65"], ["--nproc", "2", "--no-emulate"]):
        res = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), *bad, str(script)])
        assert res.exit_code == 2 and not out.exists(), res.output


# ----------------------------------------------------------------------------- the command (child processes)


def _cli(*args):
    return CliRunner().invoke(tracegen_main, ["capture", *map(str, args)], catch_exceptions=False)


@pytest.mark.slow
def test_cli_two_ranks_end_to_end(tmp_path):
    script = _script(tmp_path, PLAIN_SCRIPT)
    out = tmp_path / "plain.parquet"
    res = _cli("-o", out, "--nproc", 2, script)
    assert res.exit_code == 0, res.output
    assert "[rank0]: rank 0 done" in res.output and "[rank1]: rank 1 done" in res.output
    assert "2 ranks, 14 collective ops" in res.output
    tr = read_trace(out)
    assert tr.metadata["world_size"] == 2 and tr.metadata["ranks"] == [0, 1]
    df = tr.table.to_pandas()
    _check_collective_structure(df, 2)
    assert len(_collectives(df, 0)) == len(_collectives(df, 1)) == 7


@pytest.mark.slow
def test_cli_failing_rank_fails_the_capture_and_stops_the_others(tmp_path):
    pidfile = tmp_path / "rank0.pid"
    script = _script(tmp_path, f"""
    import os, select, torch, torch.distributed as dist
    dist.init_process_group("nccl")
    torch.ones(2, device="cuda")
    # real waits: select blocks on the machine's clock (time.sleep runs on the emulated clock)
    if dist.get_rank() == 0:
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        select.select([], [], [], 600)   # never finishes on its own
    for _ in range(2400):  # rank 1 fails once rank 0 is asleep (or after 2 min when ranks run one at a time)
        if os.path.exists({str(pidfile)!r}):
            break
        select.select([], [], [], 0.05)
    raise ValueError("rank one is broken")
    """)
    out = tmp_path / "t.parquet"
    res = _cli("-o", out, "--nproc", 2, script)
    assert res.exit_code == 2
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("error: rank 1 of 2: ") and "the script raised ValueError: rank one is broken" in last
    assert "[rank1]: Traceback" in res.output
    assert not out.exists() and not list(tmp_path.glob("*.part"))
    if pidfile.exists():  # rank 0 had started: it was stopped with the capture
        pid = int(pidfile.read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_cli_script_without_gpu_work(tmp_path):
    out = tmp_path / "t.parquet"
    res = _cli("-o", out, "--nproc", 2, _script(tmp_path, "import torch.distributed as dist\n"
                                                          "dist.init_process_group('nccl')\n"))
    assert res.exit_code == 2 and "launched no GPU work" in res.output.strip().splitlines()[-1]
    assert not out.exists()


@pytest.mark.slow
def test_children_die_with_the_parent(tmp_path):
    """SIGKILL the capture while its ranks run: the ranks go too (PR_SET_PDEATHSIG)."""
    import signal
    import subprocess
    import sys
    import time

    script = _script(tmp_path, f"""
    import os, time, torch, torch.distributed as dist
    dist.init_process_group("nccl")
    torch.ones(2, device="cuda")
    open(os.path.join({str(tmp_path)!r}, "pid%d" % dist.get_rank()), "w").write(str(os.getpid()))
    time.sleep(600)
    """)
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / ".shim"), os.environ.get("PYTHONPATH", "")]))
    parent = subprocess.Popen([sys.executable, "-m", "tracegen.cli", "capture", "--nproc", "2", "-o",
                               str(tmp_path / "t.parquet"), str(script)], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pidfiles = [tmp_path / "pid0", tmp_path / "pid1"]
    for _ in range(2400):  # both ranks asleep (at most 2 min)
        if all(p.exists() and p.read_text() for p in pidfiles) or parent.poll() is not None:
            break
        time.sleep(0.05)
    assert parent.poll() is None and all(p.exists() for p in pidfiles)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    pids = [int(p.read_text()) for p in pidfiles]
    for _ in range(600):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                with open(f"/proc/{pid}/stat") as f:  # a zombie is dead too
                    if f.read().split()[2] != "Z":
                        alive.append(pid)
            except (ProcessLookupError, FileNotFoundError):
                pass
        if not alive:
            break
        time.sleep(0.05)
    assert alive == []
    assert not (tmp_path / "t.parquet").exists()


def test_collective_duration_is_the_named_ring_model(ranks, tmp_path):
    from tracegen.emulation.distributed import NCCL_STEP_LATENCY_NS, NVLINK_GB_S, collective_ns

    # all-reduce of 380 000 B on 2 GPUs: each sends 2(N-1)/N S = 380 000 B at 380 GB/s = 1000 ns, 2 steps
    assert NVLINK_GB_S == 380.0 and collective_ns("all_reduce", 380_000, 2) == 1000 + 2 * NCCL_STEP_LATENCY_NS
    # all-gather of 1000 B per rank on 4 GPUs: (N-1) S = 3000 B -> ceil(7.9) = 8 ns, 3 steps
    assert collective_ns("all_gather", 1000, 4) == 8 + 3 * NCCL_STEP_LATENCY_NS
    df = ranks(_script(tmp_path, PLAIN_SCRIPT))
    c = _collectives(df)
    assert all(d == collective_ns(t, b, 2) for d, t, b in zip(c.dur_ns, c.coll_type, c.coll_bytes))
