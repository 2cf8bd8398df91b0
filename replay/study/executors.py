"""Where a study's points run: this process, a local process pool or a Dask cluster.

Points are grouped into small batches of one trace (:func:`batches`) and run by
:func:`replay.study.worker.run_batch` on an executor from :func:`open_executor`: a local process
pool (``local``, ``jobs`` workers, ``os.cpu_count()`` by default; one worker runs in this
process) or a Dask distributed cluster (``dask://HOST:PORT``). :func:`execute` keeps a bounded
number of batches in flight and hands results over as they come, so memory does not grow with
the number of points.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable, Sequence

from fastrack.errors import ConfigError
from replay.study.points import Point
from replay.study.worker import run_batch

DASK_TIMEOUT_S = 5.0


class InlineExecutor:
    """Runs in this process; the same interface as concurrent.futures executors."""

    def submit(self, fn, *args):
        f: Future = Future()
        try:
            f.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - delivered through the future (Ctrl-C is not)
            f.set_exception(exc)
        return f

    def shutdown(self, wait=True, cancel_futures=False):
        pass


def dask_address(spec: str) -> str:
    for prefix in ("dask://", "tcp://", "tls://", "inproc://", "ucx://"):
        if spec.startswith(prefix):
            rest = spec[len(prefix):]
            if not rest:
                break
            return ("tcp://" + rest) if prefix == "dask://" else spec
    raise ConfigError(f"--executor {spec!r}: expected 'local' or dask://HOST:PORT")


@contextlib.contextmanager
def open_executor(spec: str | None, jobs: int | None, timeout: float = DASK_TIMEOUT_S):
    """Yield (executor, workers, description)."""
    spec = spec or "local"
    if spec in ("local", "process", "processes"):
        n = jobs or os.cpu_count() or 1
        if n <= 1:
            yield InlineExecutor(), 1, "this process"
            return
        import multiprocessing

        # fork: workers start at once and inherit the loaded modules and compiled engine.
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        ex = ProcessPoolExecutor(max_workers=n, mp_context=ctx)
        try:
            yield ex, n, f"local process pool ({n} workers)"
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
        return
    with _dask_executor(dask_address(spec), timeout) as opened:
        yield opened


@contextlib.contextmanager
def _dask_executor(address: str, timeout: float):
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError("--executor dask:// needs the 'distributed' package: pip install 'distributed>=2024.1' "
                          "(or, in a Fastrack checkout, pip install -e '.[dask]')") from None
    import logging

    for name in ("distributed.client", "distributed.comm.core", "distributed.core"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({msg}); "
                          "is `dask scheduler` running there and the port open?") from None
    try:
        info = client.scheduler_info()
        threads = sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()) or 1
        yield client.get_executor(pure=False), threads, f"Dask cluster {address} ({threads} worker threads)"
    finally:
        client.close()


def execute(tasks: Sequence[Sequence[tuple]], executor, workers: int,
            on_result: Callable[[list[dict[str, Any]]], None], in_flight: int | None = None,
            run: Callable[[list[tuple]], list[dict[str, Any]]] = run_batch) -> None:
    """Run batches with ``run`` on ``executor`` with at most ``in_flight`` outstanding; stream results."""
    limit = in_flight or max(2, 2 * workers)
    it = iter(tasks)
    pending: set = set()
    try:
        while True:
            while len(pending) < limit:
                batch = next(it, None)
                if batch is None:
                    break
                pending.add(executor.submit(run, list(batch)))
            if not pending:
                return
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                on_result(f.result())
    finally:
        for f in pending:
            f.cancel()


def batches(points: Sequence[Point], workers: int) -> list[list[tuple]]:
    """Small batches of one trace each: few enough tasks to amortise submission, enough to balance."""
    size = max(1, min(8, len(points) // max(1, 8 * workers)))
    out = []
    for _sha, group in itertools.groupby(points, key=lambda p: p.trace_sha):
        group = list(group)
        for i in range(0, len(group), size):
            out.append([p.task() for p in group[i:i + size]])
    return out
