"""``tracegen capture --nproc N``: N emulated ranks of a ``torch.distributed`` script, one trace.

Each rank runs in its own child process (``python -m tracegen.ranks``), as ``torchrun
--nproc-per-node N`` would start it: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` set, the same working
directory and arguments. The emulation is per process (it patches ``torch`` globally), so a child
per rank keeps ranks apart; the in-process backend (:mod:`tracegen.emulation.distributed`) lets
every rank run without waiting for the others. Each child writes its rank's table to a private
temporary folder; the parent merges them (:func:`merge_ranks`) and writes one trace.

* **Bounded**: at most :func:`max_parallel` children run at once (the CPU count, at most N);
  memory is that many emulations plus the merged trace.
* **All or nothing**: the first rank that fails stops the others; its traceback (if the script
  raised) is printed, then one line ``rank R of N: ...``; nothing is written.
* **No orphans**: each child asks first thing to get ``SIGKILL`` when the parent dies
  (``PR_SET_PDEATHSIG`` on Linux) and exits if the parent is already gone; the parent kills and
  reaps them in a ``finally`` on any error or interrupt.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fastrack_core.errors import CaptureError, FastrackError
from fastrack_core.schema import DepKind, OpKind
from fastrack_core.traceio import make_table

MAX_NPROC = 64  # ranks of one capture (one node of emulated GPUs; each rank is a child process)
MASTER_PORT = 29500  # torchrun's default; nothing listens on it (the backend is in-process)
_EXIT_BAD_INPUT = 2
_POLL_S = 0.05
_PARENT_ENV = "FASTRACK_CAPTURE_PARENT_PID"


def max_parallel(nproc: int) -> int:
    """Children run at once: the CPU count, at most ``nproc``."""
    return max(1, min(nproc, os.cpu_count() or 1))


def rank_env(rank: int, world: int) -> dict[str, str]:
    """The variables torchrun sets for a rank of a single-node job."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(MASTER_PORT),
            "TORCHELASTIC_RUN_ID": "fastrack-capture"}


# ----------------------------------------------------------------------------- one rank (child side)

def capture_rank(script, script_args: Sequence[str], rank: int, world: int, *, device: str = "h100-sxm",
                 host_time: str = "modelled", gpu_speed: float = 1.0, copy_speed: float = 1.0,
                 host_speed: float = 1.0, skip_steps: int = 0, steps: int | None = None) -> pa.Table:
    """Run rank ``rank`` of ``world`` in this process; return its table (``rank`` and ``coll_*``
    columns set, steps selected)."""
    from tracegen.capture import run_script
    from tracegen.emulation import Recorder, emulated_gpu
    from tracegen.emulation.costmodel import get_spec
    from tracegen.emulation.distributed import emulated_rank
    from tracegen.emulation.trace import recorder_table
    from tracegen.steps import select_steps

    spec = get_spec(device)
    path = Path(script)
    rec = Recorder(spec, host_time=host_time, gpu_speed=gpu_speed, copy_speed=copy_speed, host_speed=host_speed)
    with emulated_gpu(rec), emulated_rank(rec, rank, world) as st:
        run_script(path, script_args)
    if not st.initialized:
        raise CaptureError(f"--nproc {world}: the script never calls torch.distributed.init_process_group, so it "
                           "does not run as several ranks; capture it without --nproc", path=str(path))
    if rec.gpu_ops == 0:
        raise CaptureError("the script launched no GPU work (no tensor or module was put on 'cuda'); "
                           "no trace written", path=str(path))
    table = _with_collectives(recorder_table(rec), st.coll, rank)
    return select_steps(table, skip_steps, steps, launch_latency_ns=spec.launch_latency_ns)


def _with_collectives(table: pa.Table, coll: dict[int, list[tuple[str, int, str, int]]], rank: int) -> pa.Table:
    """``table`` with the rank, its GPU's ordinal, and the coll_* fields of its collectives
    (matched by the launch's correlation id; the collectives of one CUDA-graph launch share it and
    take its list's entries in row order, which is their launch order: one stream, by start)."""
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    n = table.num_rows
    kinds = cols["kind"]
    cols["rank"] = [rank] * n
    cols["device"] = [-1 if d < 0 else rank for d in cols["device"]]  # LOCAL_RANK's GPU
    ctype, cbytes, cgroup, cseq = [None] * n, [0] * n, [None] * n, [-1] * n
    taken: dict[int, int] = {}
    for i, (k, corr) in enumerate(zip(kinds, cols["correlation"])):
        if k == OpKind.COLLECTIVE.label:
            j = taken.get(corr, 0)
            taken[corr] = j + 1
            ctype[i], cbytes[i], cgroup[i], cseq[i] = coll[corr][j]
    cols.update(coll_type=ctype, coll_bytes=cbytes, coll_group=cgroup, coll_seq=cseq)
    return make_table(cols)


def _child_main(argv: Sequence[str]) -> int:
    """``python -m tracegen.ranks CONFIG.json RANK OUT.parquet``: one rank; exit 2 with one
    ``error:`` line on stderr on a capture error."""
    config_path, rank, out = argv[0], int(argv[1]), argv[2]
    _die_with_parent()
    cfg = json.loads(Path(config_path).read_text())
    try:
        table = capture_rank(cfg["script"], cfg["script_args"], rank, cfg["world"], **cfg["options"])
    except FastrackError as exc:
        sys.stdout.flush()
        sys.stderr.write(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}\n")
        sys.stderr.flush()
        return _EXIT_BAD_INPUT
    pq.write_table(table, out + ".part")
    os.replace(out + ".part", out)
    return 0


# ----------------------------------------------------------------------------- all ranks (parent side)

def capture_ranks(script, script_args: Sequence[str], world: int, **options: Any) -> pa.Table:
    """Run ``world`` ranks as child processes and merge their tables (see the module doc)."""
    if not 1 <= world <= MAX_NPROC:
        raise CaptureError(f"--nproc must be between 1 and {MAX_NPROC}, got {world}")
    with tempfile.TemporaryDirectory(prefix="tracegen-ranks-") as tmp:
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps({"script": str(script), "script_args": [str(a) for a in script_args],
                                   "world": world, "options": options}))
        outs = [Path(tmp) / f"rank{r}.parquet" for r in range(world)]
        logs = [(Path(tmp) / f"rank{r}.out", Path(tmp) / f"rank{r}.err") for r in range(world)]
        _run_children(cfg, outs, logs, world)
        for r, (out_log, _) in enumerate(logs):
            _relay(out_log, sys.stdout, f"[rank{r}]: ")
        return merge_ranks([pq.read_table(p) for p in outs], world)


def _child_env(rank: int, world: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(rank_env(rank, world))
    here = str(Path(__file__).resolve().parent.parent)  # the folder holding tracegen/ and fastrack/
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p and p != here])
    env[_PARENT_ENV] = str(os.getpid())
    return env


def _die_with_parent() -> None:
    """In the child, first thing: be killed when the parent dies (Linux ``PR_SET_PDEATHSIG``), and
    exit at once if it is already gone (it died before the request took effect)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    parent = os.environ.get(_PARENT_ENV)
    if parent and os.getppid() != int(parent):
        os._exit(1)


def _run_children(cfg: Path, outs: list[Path], logs: list[tuple[Path, Path]], world: int) -> None:
    pending = list(range(world))
    running: dict[int, tuple[subprocess.Popen, Any, Any]] = {}
    limit = max_parallel(world)
    try:
        while pending or running:
            while pending and len(running) < limit:
                r = pending.pop(0)
                out_f, err_f = open(logs[r][0], "wb"), open(logs[r][1], "wb")
                proc = subprocess.Popen([sys.executable, "-m", "tracegen.ranks", str(cfg), str(r), str(outs[r])],
                                        env=_child_env(r, world), stdin=subprocess.DEVNULL, stdout=out_f,
                                        stderr=err_f)
                running[r] = (proc, out_f, err_f)
            for r, (proc, out_f, err_f) in list(running.items()):
                code = proc.poll()
                if code is None:
                    continue
                out_f.close()
                err_f.close()
                del running[r]
                if code != 0:
                    _report_failure(r, world, code, logs[r])
            if running:
                time.sleep(_POLL_S)
    finally:
        for proc, out_f, err_f in running.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            out_f.close()
            err_f.close()


def _report_failure(rank: int, world: int, code: int, logs: tuple[Path, Path]) -> None:
    """Relay the failed rank's output, then raise its one-line error."""
    _relay(logs[0], sys.stdout, f"[rank{rank}]: ")
    lines = logs[1].read_text(errors="replace").splitlines()
    last = lines[-1] if lines else ""
    if code == _EXIT_BAD_INPUT and last.startswith("error: "):
        for line in lines[:-1]:  # the script's traceback, as a single-GPU capture prints it
            sys.stderr.write(f"[rank{rank}]: {line}\n")
        raise CaptureError(f"rank {rank} of {world}: {last[len('error: '):]}")
    for line in lines[-20:]:
        sys.stderr.write(f"[rank{rank}]: {line}\n")
    how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
    raise CaptureError(f"rank {rank} of {world}: the emulated rank {how}; no trace written")


def _relay(path: Path, stream, prefix: str) -> None:
    if path.exists() and path.stat().st_size:
        for line in path.read_text(errors="replace").splitlines():
            stream.write(f"{prefix}{line}\n")
        stream.flush()


# ----------------------------------------------------------------------------- merging

def merge_ranks(tables: list[pa.Table], world: int) -> pa.Table:
    """One table of all ranks (rank-major, each rank's rows in its own order): op ids renumbered,
    deps remapped, and every collective given a ``collective`` dependency on its partners on the
    other ranks of its group (same ``coll_group``, ``coll_seq``). Ranks that issued different
    collectives (a real job would hang or fail) raise :class:`CaptureError`."""
    parts, offset = [], 0
    for t in tables:
        ids = t.column("op_id").to_numpy()
        pos = np.full(int(ids.max()) + 1 if len(ids) else 0, -1, np.int64)
        pos[ids] = np.arange(len(ids)) + offset
        cols = {name: t.column(name).to_pylist() for name in t.column_names}
        cols["op_id"] = list(range(offset, offset + t.num_rows))
        cols["deps"] = [[int(pos[d]) for d in deps] for deps in cols["deps"]]
        parts.append(cols)
        offset += t.num_rows
    merged = {name: [v for p in parts for v in p[name]] for name in parts[0]}
    _link_collectives(merged, world)
    return make_table(merged)


def _group_ranks(group: str, world: int) -> list[int]:
    """Ranks of a group label ``'<name>:<ranks>'`` (``0-3`` or ``0,2``)."""
    spec = group.rsplit(":", 1)[-1]
    if "-" in spec:
        lo, hi = spec.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(r) for r in spec.split(",")] if spec else list(range(world))


def _link_collectives(cols: dict[str, list], world: int) -> None:
    members: dict[tuple[str, int], dict[int, int]] = {}
    for i, k in enumerate(cols["kind"]):
        if k == OpKind.COLLECTIVE.label:
            key = (cols["coll_group"][i], cols["coll_seq"][i])
            members.setdefault(key, {})[cols["rank"][i]] = i
    for (group, seq), by_rank in sorted(members.items()):
        want = _group_ranks(group, world)
        if sorted(by_rank) != want:
            missing = sorted(set(want) - set(by_rank))
            raise CaptureError(f"the ranks issued different collectives: collective {seq} of group {group} was "
                               f"issued by rank(s) {_ranks(sorted(by_rank))} but not by {_ranks(missing)} "
                               "(a real job would hang); no trace written")
        first = by_rank[want[0]]
        for r, i in by_rank.items():
            if cols["coll_type"][i] != cols["coll_type"][first] or (
                    cols["coll_bytes"][i] != cols["coll_bytes"][first] and cols["coll_type"][i] != "all_to_all"):
                raise CaptureError(f"the ranks issued different collectives: collective {seq} of group {group} is "
                                   f"{cols['coll_type'][first]} of {cols['coll_bytes'][first]} bytes on rank {want[0]} "
                                   f"and {cols['coll_type'][i]} of {cols['coll_bytes'][i]} bytes on rank {r}; "
                                   "no trace written")
            for other, j in by_rank.items():
                if other != r:
                    cols["deps"][i].append(j)
                    cols["dep_kinds"][i].append(int(DepKind.COLLECTIVE))


def _ranks(rs: list[int]) -> str:
    return ", ".join(map(str, rs)) or "none"


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
