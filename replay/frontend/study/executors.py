"""Where a study's points run: this process, a local process pool or a Dask cluster.

Points are grouped into small batches of one trace (:func:`batches`) and run by
:func:`replay.frontend.study.worker.run_batch` on an executor from :func:`open_executor`: a local process
pool (``local``, ``jobs`` workers, ``os.cpu_count()`` by default; one worker runs in this
process) or a Dask distributed cluster (``dask://HOST:PORT``). :func:`execute` keeps a bounded
number of batches in flight and hands results over as they come, so memory does not grow with
the number of points.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ProcessPoolExecutor, wait
from typing import Any, Callable, Sequence

from fastrack_core.errors import ConfigError
from replay.frontend.study.points import Point
from replay.frontend.study.worker import run_batch

DASK_TIMEOUT_S = 5.0  # seconds to reach the scheduler and to see a first worker
DASK_PROGRESS_TIMEOUT_S = 1800.0  # a Dask sweep fails when no point finishes for this long


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


PARENT_POLL_S = 1.0  # how often a worker checks that the sweep that started it is still alive


def die_with_parent(parent: int) -> None:
    """Pool-worker initializer: the worker ends when the sweep process dies, even by ``kill -9``
    (which runs no clean-up in the parent). Linux: the kernel's parent-death signal; elsewhere,
    and as a second line on Linux, a daemon thread that polls the parent's pid."""
    import signal
    import threading
    import time

    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="fastrack-parent-watch", daemon=True).start()


_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
                   r"|\[[0-9A-Fa-f:.]{2,45}\])")


def dask_address(spec: str) -> str:
    """The scheduler address of ``--executor dask://HOST:PORT`` (or ``tcp://``/``tls://``
    ``HOST:PORT``; ``inproc://`` and ``ucx://`` as given). HOST is a host name, an IPv4 address or
    a bracketed IPv6 address, PORT 1-65535. Refused with a message that never repeats the value
    (it may carry a password: docs/robustness.md): a user or password part, a path, a bad port."""
    def refuse(why: str) -> ConfigError:
        return ConfigError(f"--executor (a str of {len(spec)} characters): {why}; expected 'local' or dask://HOST:PORT")

    for prefix in ("dask://", "tcp://", "tls://", "inproc://", "ucx://"):
        if spec.startswith(prefix):
            rest = spec[len(prefix):]
            if not rest:
                break
            if prefix in ("inproc://", "ucx://"):
                return spec
            if "@" in rest:
                raise refuse("a Dask address takes no user or password (Dask would not use them)")
            host, sep, port = rest.rpartition(":")
            if not sep or not _HOST.fullmatch(host):
                raise refuse("not HOST:PORT (a host name, an IPv4 address, or an IPv6 address in brackets)")
            if not port.isdigit() or not 1 <= int(port) <= 65535:
                raise refuse("the port must be a number 1-65535")
            return ("tcp://" + rest) if prefix == "dask://" else spec
    raise refuse("unknown executor")


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
        ex = ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=die_with_parent, initargs=(os.getpid(),))
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
    unreachable = ConfigError(f"cannot reach the Dask scheduler of --executor within {timeout:g} s; is `dask "
                              "scheduler` running there and the port open?")
    if address.startswith(("tcp://", "tls://")):
        # probe the port first: a Client whose constructor fails leaves an object whose __del__
        # prints a traceback seconds later
        import socket

        host, _, port = address.split("://", 1)[1].rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except (OSError, ValueError):
            raise unreachable from None
    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError):
        raise unreachable from None
    try:
        try:
            client.wait_for_workers(1, timeout=timeout)
        except (OSError, TimeoutError):
            raise ConfigError(f"the Dask scheduler of --executor has no worker (none joined within {timeout:g} s); "
                              "start one with `dask worker ADDRESS`") from None
        info = client.scheduler_info()
        threads = sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()) or 1
        ex = client.get_executor(pure=False)
        ex.progress_timeout = DASK_PROGRESS_TIMEOUT_S
        yield ex, threads, f"Dask cluster {address} ({threads} worker threads)"
    finally:
        client.close()


def execute(tasks: Sequence[Sequence[tuple]], executor, workers: int,
            on_result: Callable[[list[dict[str, Any]]], None], in_flight: int | None = None,
            run: Callable[[list[tuple]], list[dict[str, Any]]] = run_batch) -> None:
    """Run batches with ``run`` on ``executor`` with at most ``in_flight`` outstanding; stream results."""
    limit = in_flight or max(2, 2 * workers)
    timeout = getattr(executor, "progress_timeout", None)  # a cluster may lose its workers; a local pool cannot
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
            done, pending = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
            if not done:
                raise ConfigError(f"no point finished in {timeout:g} s on the cluster (workers gone or stuck); the "
                                  "finished points are kept: rerun the same command to resume")
            for f in done:
                try:
                    res = f.result()
                except CancelledError:
                    raise ConfigError("the cluster cancelled a batch of points (scheduler or workers lost); the "
                                      "finished points are kept: rerun the same command to resume") from None
                on_result(res)
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


def makespans(points: Sequence, executor: str | None, jobs: int | None, progress: bool | None,
              desc: str) -> dict[str, int]:
    """Replay every distinct point (by ``key``) on ``executor`` with a progress bar on stderr
    (``progress``: None = when stderr is a terminal); ``{key: makespan_ns}``. The one loop
    ``sensitivity`` and ``explain`` share."""
    from tqdm import tqdm

    out: dict[str, int] = {}
    unique = list({p.key: p for p in points}.values())
    if not unique:
        return out
    with open_executor(executor, jobs) as (ex, workers, _desc):
        bar = tqdm(total=len(unique), unit="pt", desc=desc, disable=(None if progress is None else not progress))

        def on_result(results):
            for r in results:
                out[r["key"]] = r["makespan_ns"]
            bar.update(len(results))

        try:
            execute(batches(unique, workers), ex, workers, on_result)
        finally:
            bar.close()
    return out
