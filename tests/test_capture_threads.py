"""Multi-threaded scripts under emulated capture (tracegen/emulation/threads.py; docs/emulation.md,
"Threads"): every thread the script starts is a host thread of its own, GPU work from any thread
goes on the shared streams, and the handoffs the emulator can see (queue.Queue, threading.Event,
concurrent.futures.Future, Thread.join) are SYNC dependencies from the sender's marker to the
receiver's sync op. A thread that raises ends the capture with one line."""

import queue
import threading
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from fastrack_core.schema import DepKind  # noqa: E402
from fastrack_core.traceio import read_trace  # noqa: E402
from tracegen.cli import main as tracegen_main  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent / "scripts"
PRODUCER = SCRIPTS / "thread_producer.py"
HANDOFFS = SCRIPTS / "thread_handoffs.py"
SYNC = int(DepKind.SYNC)


def _capture(script, out, *args, env=None):
    return CliRunner().invoke(tracegen_main, ["capture", "--overwrite", "--host-time", "modelled", "-o", str(out),
                                              str(script), "--", *map(str, args)], env=env, catch_exceptions=False)


def _trace(script, tmp_path, *args):
    out = tmp_path / "t.parquet"
    res = _capture(script, out, *args)
    assert res.exit_code == 0, res.output
    return read_trace(out).table.to_pandas()


def _edges(df, dst_name, src_name):
    """(src op_id, dst op_id) of every SYNC dep from an op named src_name to one named dst_name."""
    names = dict(zip(df.op_id, df.name))
    out = []
    for dst, deps, kinds in zip(df.op_id[df.name == dst_name], df.deps[df.name == dst_name],
                                df.dep_kinds[df.name == dst_name]):
        out += [(int(s), int(dst)) for s, k in zip(deps, kinds) if k == SYNC and names[s] == src_name]
    return out


def test_producer_thread_decode_loop(tmp_path):
    """The producer's pinned copies go on the side stream from thread 2; each queue.put is the
    source of exactly one queue.get on thread 1, in FIFO order (the 4 batches and the sentinel)."""
    df = _trace(PRODUCER, tmp_path, "--steps", 4)
    host = df[df.thread >= 0]
    assert sorted(host.thread.unique()) == [1, 2]
    by_id = df.set_index("op_id")
    copies = df[(df.kind == "memcpy") & (df.copy_dir == "H2D")]
    assert len(copies) == 4 and copies.stream.nunique() == 1 and copies.stream.iloc[0] != 7
    launchers = [by_id.loc[d[0]] for d in copies.deps]  # the LAUNCH dep comes first
    assert all(op["thread"] == 2 and op["name"] == "cudaMemcpyAsync" for op in launchers)
    puts = host[host.name == "queue.put"]
    gets = host[host.name == "queue.get"]
    assert set(puts.thread) == {2} and set(gets.thread) == {1} and len(puts) == len(gets) == 5
    edges = _edges(df, "queue.get", "queue.put")
    assert [s for s, _ in sorted(edges, key=lambda e: e[1])] == sorted(puts.op_id)  # FIFO, one each
    for src, dst in edges:  # Lamport: a get ends no earlier than its put
        assert by_id.loc[dst, "start_ns"] + by_id.loc[dst, "dur_ns"] >= by_id.loc[src, "start_ns"]
    first = host[host.thread == 2].iloc[0]
    assert SYNC in list(first.dep_kinds) and by_id.loc[first.deps[0], "thread"] == 1  # the spawn
    assert len(_edges(df, "Thread.join", "queue.put")) == 1  # join: the producer's last host op
    # the main thread's matmul waits for the copy made on the side stream (the event)
    mm = df[(df.kind == "kernel") & df.name.str.startswith("aten::mm")].iloc[0]
    assert int(DepKind.EVENT) in list(mm.dep_kinds)


def test_event_and_future_handoffs(tmp_path):
    df = _trace(HANDOFFS, tmp_path)
    assert sorted(df[df.thread >= 0].thread.unique()) == [1, 2, 3]
    (ev_src, ev_dst), = _edges(df, "Event.wait", "Event.set")
    by_id = df.set_index("op_id")
    assert by_id.loc[ev_src, "thread"] == 1 and by_id.loc[ev_dst, "thread"] == 2
    # the worker's matmul starts after the wait, which lasts until the set
    wait_end = by_id.loc[ev_dst, "start_ns"] + by_id.loc[ev_dst, "dur_ns"]
    assert wait_end >= by_id.loc[ev_src, "start_ns"]
    mm = df[(df.thread == 2) & (df.name == "aten::mm")]
    assert (mm.start_ns >= wait_end).all() and len(mm) == 1
    (f_src, f_dst), = _edges(df, "Future.result", "Future.set_result")
    assert by_id.loc[f_src, "thread"] == 3 and by_id.loc[f_dst, "thread"] == 1
    assert len(df[(df.name == "Thread.join")]) >= 2  # the worker's join and the pool's shutdown


def test_thread_that_raises_ends_capture_with_one_line(tmp_path):
    out = tmp_path / "t.parquet"
    res = _capture(PRODUCER, out, "--fail", 2, env={"TRACEGEN_THREAD_WAIT_S": "60"})
    assert res.exit_code == 2
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "raised RuntimeError: producer failed" in errors[0]
    assert "Traceback" not in res.output and not out.exists()


def test_thread_that_raises_unwaited_fails_at_the_end(tmp_path):
    """Nothing waits on the failing thread: the capture still ends with one line (its work is
    missing from the trace), not with a trace and a traceback."""
    script = tmp_path / "late.py"
    script.write_text(textwrap.dedent("""
        import threading, torch
        x = torch.ones(4, device="cuda")
        def bad():
            raise ValueError("worker failed")
        threading.Thread(target=bad).start()
        y = x * 2
    """))
    out = tmp_path / "t.parquet"
    res = _capture(script, out)
    assert res.exit_code == 2 and not out.exists()
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "raised ValueError: worker failed" in errors[0]
    assert "Traceback" not in res.output


def test_wait_on_a_thread_that_never_hands_over_times_out(tmp_path):
    """A producer blocked on something the emulator cannot see (a lock): the main thread's
    queue.get ends the capture after TRACEGEN_THREAD_WAIT_S instead of hanging."""
    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent("""
        import queue, threading, torch
        lock = threading.Lock(); lock.acquire()
        q = queue.Queue()
        x = torch.ones(4, device="cuda")
        threading.Thread(target=lambda: (lock.acquire(), q.put(1)), daemon=True).start()
        q.get()
    """))
    out = tmp_path / "t.parquet"
    res = _capture(script, out, env={"TRACEGEN_THREAD_WAIT_S": "0.3"})
    assert res.exit_code == 2
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "queue.Queue.get waited more than 0.3 s" in errors[0] and not out.exists()


def test_single_thread_script_has_one_host_thread_and_no_handoff_ops(tmp_path):
    """Queues and events used by the main thread alone write nothing extra."""
    script = tmp_path / "one.py"
    script.write_text(textwrap.dedent("""
        import queue, threading, torch
        q = queue.Queue(); e = threading.Event()
        x = torch.ones(4, device="cuda")
        q.put(x); e.set(); e.wait()
        y = q.get() * 2
    """))
    df = _trace(script, tmp_path)
    assert set(df[df.thread >= 0].thread) == {1}
    assert not df.name.isin(["queue.put", "queue.get", "Event.set", "Event.wait"]).any()


def test_patches_are_undone_after_the_capture(tmp_path):
    before = (threading.Thread.start, threading.Event.wait, queue.Queue.get, queue.Queue._put)
    _trace(HANDOFFS, tmp_path)
    assert (threading.Thread.start, threading.Event.wait, queue.Queue.get, queue.Queue._put) == before


def test_lifo_and_priority_queues_pair_in_their_order():
    """LifoQueue pairs the last put with the next get, PriorityQueue the smallest item."""
    from tracegen.emulation import Recorder, emulated_gpu
    from tracegen.emulation.costmodel import get_spec

    rec = Recorder(get_spec("h100-sxm"), host_time="modelled")
    got = {}
    with emulated_gpu(rec):
        lq, pq = queue.LifoQueue(), queue.PriorityQueue()
        ready = threading.Event()

        def producer():
            torch.ones(2, device="cuda")
            for i in (1, 2):
                lq.put(i)
            for i in (5, 3, 4):
                pq.put(i)
            ready.set()

        t = threading.Thread(target=producer)
        t.start()
        ready.wait()
        got["lifo"] = [lq.get(), lq.get()]
        got["prio"] = [pq.get() for _ in range(3)]
        t.join()
    ops = rec.ops
    puts = [i for i, op in enumerate(ops) if op.name == "queue.put"]
    gets = [op for op in ops if op.name == "queue.get"]
    srcs = [next(d for d, k in op.deps if k == DepKind.SYNC) for op in gets]
    assert got == {"lifo": [2, 1], "prio": [3, 4, 5]}
    # lifo: puts[1] then puts[0]; prio: items 5, 3, 4 were puts 2, 3, 4 -> 3, 4, 5 = puts[3], [4], [2]
    assert srcs == [puts[1], puts[0], puts[3], puts[4], puts[2]]


def test_a_threaded_modelled_capture_is_the_same_every_run(tmp_path):
    """With modelled host time every op's time is deterministic; rows that tie are ordered by
    host thread, and correlation ids are numbered by row (the order in which threads reach the
    emulator varies): three captures of the producer/consumer loop give the same table."""
    tables = []
    for i in range(3):
        out = tmp_path / f"t{i}.parquet"
        res = _capture(PRODUCER, out)
        assert res.exit_code == 0, res.output
        tables.append(read_trace(out).table)
    assert tables[0].equals(tables[1]) and tables[0].equals(tables[2])


def test_a_started_threads_ops_belong_to_the_step_that_handed_the_work_over(tmp_path):
    """Work handed to a thread in ProfilerStep#0 is step 0's even when the thread runs it while the
    main thread is (in real time) already in step 1; the step column does not follow thread timing."""
    script = tmp_path / "steps.py"
    script.write_text(textwrap.dedent("""
        import queue, threading, time, torch
        from torch.profiler import record_function
        jobs, done, ready = queue.Queue(), queue.Queue(), []
        w = torch.ones(64, 64, device="cuda")
        def worker():
            while (n := jobs.get()) is not None:
                while not ready:                 # main has entered the next step (real time; no edge)
                    time.sleep(0.01)
                y = w * n                        # launched after that: still the step of the job
                done.put(y)
        t = threading.Thread(target=worker)
        t.start()
        for step in range(2):
            with record_function(f"ProfilerStep#{step}"):
                if step == 0:
                    jobs.put(2)
                else:
                    ready.append(True)
                    done.get()
                    z = w + 1
        jobs.put(None)
        t.join()
    """))
    df = _trace(script, tmp_path)
    launches = df[(df.kind == "runtime") & (df.name == "cudaLaunchKernel")]
    assert set(launches[launches.thread == 2].step) == {0}
    assert 1 in set(launches[launches.thread == 1].step)
