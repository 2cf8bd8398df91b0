"""Threads of an emulated capture: every Python thread the script starts while the capture runs
is a host thread of its own in the trace, and the handoffs between threads the emulator can see
are dependencies (docs/emulation.md, "Threads").

* **Per-thread state.** The recorder's host attributes (``now``, ``host_end``, ``last_host``,
  ``thread``, ``script_pending``, ``clock``, ``current_stream``) are the calling thread's
  :class:`~tracegen.emulation.timeline.HostState` (:meth:`Recorder.state`): the main thread's is
  ``rec.main`` (trace thread 1), a started thread gets the next id (2, 3, ... in start order), its
  own virtual clock (starting at its parent's ``now``) and its own :class:`HostClock` (script mode:
  its own thread CPU time, the main thread's calibration). A thread the capture did not start
  (autograd's, one started before the capture) writes on the main thread's state as before.
* **Modes.** PyTorch's function and dispatch mode stacks are thread-local: a started thread
  enters a function mode of its own and a copy of the session's dispatch mode (sharing its
  shadow values and results) before its ``run()``, so its tensors are emulated too.
* **One thread in the emulator at a time.** Once a thread has been started, a thread entering the
  emulator's handlers holds ``rec.lock`` (the timeline is one list and one set of streams; GPU
  ops from every thread go on the shared streams).
* **Edges** (Lamport clocks): the sender writes a zero-duration ``cpu`` marker at its ``now``
  (``queue.put``, ``Event.set``, ``Future.set_result``); the receiver, when it is another thread,
  writes a ``sync`` host op (``queue.get``, ``Event.wait``, ``Future.result``, ``Thread.join``)
  lasting until the sender's time if its own is earlier, with a SYNC dependency on the marker
  (a host call that blocked until something finished). A thread's first host op depends (SYNC)
  on its parent's last host op before ``start()``; ``join()`` on the joined thread's last one.
  ``queue.Queue`` pairs puts and gets first in first out, ``LifoQueue`` last in first out,
  ``PriorityQueue`` by the item's order (equal items: first put first); a queue that already held
  items when first seen is not paired (no edges).
* **Steps.** A started thread's ops belong to the ``ProfilerStep`` its parent was in at
  ``start()``, then to the step of the last handoff it received (the sender's step when it
  sent), not to whatever step the main thread has reached in real time: work handed over in step
  N is step N's, and the step column does not depend on thread timing.
* **Never hang.** A wait without a timeout on one of these (``Queue.get``/``put``, ``Event.wait``,
  ``Future.result``, ``Thread.join``) polls: if a started thread raised, the capture ends with
  one line naming the exception (exit 2); if it has waited :func:`wait_limit_s` real seconds
  (``TRACEGEN_THREAD_WAIT_S``, default :data:`DEFAULT_WAIT_S`), it ends with one line too. At the
  end of the script the started non-daemon threads are joined (as the interpreter would), under
  the same limit, and an exception one of them raised fails the capture.

Not seen (no edge; the threads still run for real): locks, conditions, semaphores, barriers,
``queue.SimpleQueue`` (so ``ThreadPoolExecutor.submit`` to its worker is no edge, the future's
result is), ``asyncio``, raw sockets and pipes, and other processes (``multiprocessing``,
DataLoader workers with ``num_workers > 0``)."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import copy
import heapq
import itertools
import os
import queue
import sys
import threading
from collections import deque
from concurrent.futures import _base as cf_base
from concurrent.futures import thread as cf_thread
from typing import TYPE_CHECKING, Callable, Iterator

from torch.utils._python_dispatch import TorchDispatchMode

from fastrack_core.errors import CaptureError
from fastrack_core.schema import DepKind, OpKind
from tracegen.emulation.clock import REAL_MONOTONIC_NS
from tracegen.emulation.hosttime import HostClock
from tracegen.emulation.timeline import HOST_THREAD, SCRIPT_OP_NAME, HostState

if TYPE_CHECKING:
    from tracegen.emulation.timeline import Recorder

DEFAULT_WAIT_S = 300.0
"""Real seconds a wait without a timeout on another thread may last before the capture ends with
an error (a producer blocked on something the emulator cannot see). Assumption: long enough for
any emulated step of the scripts we run (a decode step emulates in well under a second here);
range 1..3600, set with ``TRACEGEN_THREAD_WAIT_S``."""
WAIT_ENV = "TRACEGEN_THREAD_WAIT_S"
POLL_S = 0.05  # real seconds between checks of a blocked wait (how soon a dead producer is noticed)
_INTERNAL_FILES = frozenset({threading.__file__, cf_base.__file__, cf_thread.__file__})

_INSTALLED: list["Threads"] = []
_END = "the end of the script (joining its threads)"


def wait_limit_s() -> float:
    """The wait limit: ``TRACEGEN_THREAD_WAIT_S`` if set (a positive number), else the default."""
    raw = os.environ.get(WAIT_ENV)
    if raw is None:
        return DEFAULT_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise CaptureError(f"environment variable {WAIT_ENV}: expected a positive number of seconds")
    return value


def _current() -> "Threads | None":
    return _INSTALLED[-1] if _INSTALLED else None


class Threads:
    """The started threads of one capture and the handoffs between them."""

    def __init__(self, rec: "Recorder", fmode, dmode, wait_s: float):
        self.rec = rec
        self.fmode = fmode
        self.dmode = dmode
        self.wait_s = wait_s
        self.next_tid = HOST_THREAD + 1
        self.started: list[threading.Thread] = []
        self.error: tuple[str, str] | None = None  # (exception type, first line) of the first thread that raised
        self.closed = False
        self._seq = itertools.count()

    # -- handoffs -----------------------------------------------------------------------
    def active(self) -> bool:
        return bool(self.started) and not self.closed and self.rec.known_thread()

    def send(self, name: str):
        """The sending side: a zero-duration marker now; (op index, time, thread, step) or None."""
        if not self.active():
            return None
        rec = self.rec
        rec.enter()
        try:
            idx = rec.host(OpKind.CPU, name, 0)
            return idx, rec.now, rec.thread, rec.current_step()
        finally:
            rec.leave()

    def receive(self, name: str, stamp) -> None:
        """The receiving side of ``stamp`` (from :meth:`send`), when another thread sent it."""
        if stamp is None or not self.active():
            return
        rec = self.rec
        idx, t, tid, step = stamp
        rec.enter()
        try:
            if tid != rec.thread:
                state = rec.state()
                if state is not rec.main:  # a started thread works for the step that handed over
                    state.step = step
                rec.handoff_wait(name, idx, t)
        finally:
            rec.leave()

    # -- waiting without hanging -----------------------------------------------------------
    def check(self, what: str, since_ns: int) -> None:
        if self.error is not None:
            kind, msg = self.error
            when = "at the end of the script" if what == _END else f"while another waited in {what}"
            raise CaptureError(f"a thread the script started raised {kind}{': ' + msg if msg else ''} "
                               f"({when}); no trace written")
        if REAL_MONOTONIC_NS() - since_ns > self.wait_s * 1e9:
            raise CaptureError(f"{what} waited more than {self.wait_s:g} s for another thread "
                               f"({WAIT_ENV}); no trace written")

    def until(self, done: Callable[[], bool], what: str) -> None:
        """Call ``done`` (which waits up to POLL_S) until it is true, checking between calls."""
        since = REAL_MONOTONIC_NS()
        while not done():
            self.check(what, since)

    # -- thread lifetime ------------------------------------------------------------------
    def spawn(self, thread: threading.Thread) -> None:
        """``thread.start()`` from a known thread: give it a host state and wrap its ``run``."""
        rec = self.rec
        rec.threaded = True
        parent = rec.state()
        state = HostState(self.next_tid, parent.now)
        state.step = rec.current_step()
        self.next_tid += 1
        state.current_stream = rec.default_stream
        if parent.last_host is not None:
            state.first_deps = [(parent.last_host, DepKind.SYNC)]
        self.started.append(thread)
        thread._tracegen_state = state
        inner = thread.run

        def run():
            modes = None
            try:
                modes = self._enter_thread(state)
                inner()
            except SystemExit:
                pass  # as in any thread: SystemExit ends it quietly
            except BaseException as exc:
                msg = str(exc).splitlines()[0] if str(exc) else ""
                if self.error is None:
                    self.error = (type(exc).__name__, msg)
            finally:
                if modes is not None:
                    self._exit_thread(state, modes)

        thread.run = run

    def _enter_thread(self, state: HostState):
        rec = self.rec
        main = rec.main.clock
        state.clock = HostClock(rec, main.mode, stats=main.stats)
        state.clock.intercept_ns = main.intercept_ns
        rec._local.state = state
        fm = type(self.fmode)(rec)
        dm = copy.copy(self.dmode)  # shares the shadows and results; its own mode-flag stacks
        for attr in ("old_dispatch_mode_flags", "old_non_infra_dispatch_mode_flags",
                     "old_without_ignore_compile_internals_dispatch_mode_flags"):
            if hasattr(dm, attr):
                setattr(dm, attr, [])
        dm._patches = []
        fm.__enter__()
        TorchDispatchMode.__enter__(dm)  # not DispatchMode.__enter__: the storage patch is the session's
        state.clock.restart()  # the thread's own Python starts now (setting it up was the emulator's)
        return fm, dm

    def _exit_thread(self, state: HostState, modes) -> None:
        rec = self.rec
        fm, dm = modes
        try:
            if not self.closed and state.last_host is not None:
                rec.enter()  # the thread's last Python counts up to here
                try:
                    if state.now > state.host_end:  # its time after the last host op: one op, for join()
                        name = SCRIPT_OP_NAME if state.script_pending else rec.cpu_op_name
                        rec._host_raw(OpKind.CPU, name, state.host_end, state.now - state.host_end)
                        state.script_pending = 0
                finally:
                    rec.leave()
        finally:
            TorchDispatchMode.__exit__(dm, None, None, None)
            fm.__exit__(None, None, None)

    def joined(self, thread: threading.Thread) -> None:
        state = getattr(thread, "_tracegen_state", None)
        if state is not None and state.last_host is not None and not thread.is_alive():
            self.receive("Thread.join", (state.last_host, state.now, state.thread, state.step))

    def finish(self) -> None:
        """The script ended: join its non-daemon threads (as the interpreter would), then fail on
        a thread's exception; threads still running after this cannot write (the lock is kept)."""
        for t in list(self.started):
            # a ThreadPoolExecutor's idle workers end at interpreter exit (its atexit hook), not here
            if t.is_alive() and not t.daemon and not _executor_worker(t):
                self.until(lambda t=t: (_ORIG["join"](t, POLL_S), not t.is_alive())[1], _END)
                self.joined(t)
        self.check(_END, REAL_MONOTONIC_NS())

    def close(self) -> None:
        if self.started:  # daemon threads still running block at their next handler
            self.rec.lock.acquire(timeout=self.wait_s)
        self.closed = True


def _executor_worker(t: threading.Thread) -> bool:
    return getattr(getattr(t, "_target", None), "__module__", None) == cf_thread.__name__


# -- the patches ---------------------------------------------------------------------------

_ORIG: dict[str, Callable] = {}


def _from_threading() -> bool:
    """The caller of the patched method is ``threading`` or ``concurrent.futures`` itself
    (``Thread.start`` waits on an Event, ``futures.wait`` on another): their own waits, no edge."""
    return sys._getframe(2).f_code.co_filename in _INTERNAL_FILES


def _start(thread):
    tm = _current()
    if tm is not None and not tm.closed and tm.rec.known_thread():
        tm.spawn(thread)
    return _ORIG["start"](thread)


def _join(thread, timeout=None):
    tm = _current()
    join = _ORIG["join"]
    if tm is None or not tm.rec.known_thread() or thread is threading.current_thread():
        return join(thread, timeout)
    if timeout is None:
        tm.until(lambda: (join(thread, POLL_S), not thread.is_alive())[1], "threading.Thread.join")
    else:
        join(thread, timeout)
    tm.joined(thread)


def _event_set(ev):
    tm = _current()
    if tm is not None and not _from_threading():
        ev._tracegen_stamp = tm.send("Event.set")
    return _ORIG["event_set"](ev)


def _event_clear(ev):
    ev._tracegen_stamp = None
    return _ORIG["event_clear"](ev)


def _event_wait(ev, timeout=None):
    tm = _current()
    wait = _ORIG["event_wait"]
    if tm is None or _from_threading() or not tm.rec.known_thread():
        return wait(ev, timeout)
    if timeout is None:
        tm.until(lambda: wait(ev, POLL_S), "threading.Event.wait")
        ok = True
    else:
        ok = wait(ev, timeout)
    if ok:
        tm.receive("Event.wait", getattr(ev, "_tracegen_stamp", None))
    return ok


def _future_set(name):
    orig = _ORIG[name]

    def set_(fut, value):
        tm = _current()
        if tm is not None:
            fut._tracegen_stamp = tm.send(f"Future.{name[7:]}")
        return orig(fut, value)

    return set_


def _future_result(fut, timeout=None):
    tm = _current()
    result = _ORIG["future_result"]
    if tm is None or not tm.rec.known_thread():
        return result(fut, timeout)
    if timeout is None:
        tm.until(lambda: bool(cf.wait([fut], timeout=POLL_S).done), "concurrent.futures.Future.result")
    elif not cf.wait([fut], timeout=timeout).done:
        return result(fut, 0)  # not done in time: the TimeoutError (or a late result) as the original gives
    tm.receive("Future.result", getattr(fut, "_tracegen_stamp", None))
    return result(fut, 0)


def _blocking(tm: "Threads", call: Callable, empty, what: str):
    """``call(POLL_S)`` (a queue operation with a timeout) until it does not raise ``empty``."""
    out = []

    def attempt():
        try:
            out.append(call(POLL_S))
            return True
        except empty:
            return False

    tm.until(attempt, what)
    return out[0]


def _queue_get_blocking(q, block=True, timeout=None):
    tm = _current()
    get = _ORIG["q_get"]
    if tm is None or not block or timeout is not None or not tm.rec.known_thread():
        return get(q, block, timeout)
    return _blocking(tm, lambda s: get(q, True, s), queue.Empty, "queue.Queue.get")


def _queue_put_blocking(q, item, block=True, timeout=None):
    tm = _current()
    put = _ORIG["q_put"]
    if tm is None or not block or timeout is not None or not tm.rec.known_thread():
        return put(q, item, block, timeout)
    return _blocking(tm, lambda s: put(q, item, True, s), queue.Full, "queue.Queue.put")


_FIFO, _LIFO, _PRIO = 0, 1, 2


def _queue_put(cls, order: int):
    orig = cls._put

    def _put(q, item):
        stamps = q.__dict__.get("_tracegen_stamps")
        if stamps is None:  # first seen: pair only a queue that starts empty
            stamps = q._tracegen_stamps = (deque() if order == _FIFO else []) if q._qsize() == 0 else False
        orig(q, item)
        if stamps is False:
            return
        tm = _current()
        stamp = tm.send("queue.put") if tm is not None else None
        if order == _PRIO:
            heapq.heappush(stamps, (item, next(tm._seq) if tm else 0, stamp))
        else:
            stamps.append(stamp)

    return _put


def _queue_get(cls, order: int):
    orig = cls._get

    def _get(q):
        item = orig(q)
        stamps = q.__dict__.get("_tracegen_stamps")
        if not stamps:
            return item
        if order == _FIFO:
            stamp = stamps.popleft()
        elif order == _LIFO:
            stamp = stamps.pop()
        else:
            stamp = heapq.heappop(stamps)[2]
        tm = _current()
        if tm is not None:
            tm.receive("queue.get", stamp)
        return item

    return _get


def _patches() -> list[tuple[object, str, str, Callable]]:
    """(owner, attribute, key in _ORIG, replacement factory)."""
    T, E, F, Q = threading.Thread, threading.Event, cf.Future, queue.Queue
    return [
        (T, "start", "start", lambda: _start), (T, "join", "join", lambda: _join),
        (E, "set", "event_set", lambda: _event_set), (E, "clear", "event_clear", lambda: _event_clear),
        (E, "wait", "event_wait", lambda: _event_wait),
        (F, "set_result", "future_set_result", lambda: _future_set("future_set_result")),
        (F, "set_exception", "future_set_exception", lambda: _future_set("future_set_exception")),
        (F, "result", "future_result", lambda: _future_result),
        (Q, "get", "q_get", lambda: _queue_get_blocking), (Q, "put", "q_put", lambda: _queue_put_blocking),
        (Q, "_put", "q__put", lambda: _queue_put(Q, _FIFO)), (Q, "_get", "q__get", lambda: _queue_get(Q, _FIFO)),
        (queue.LifoQueue, "_put", "l__put", lambda: _queue_put(queue.LifoQueue, _LIFO)),
        (queue.LifoQueue, "_get", "l__get", lambda: _queue_get(queue.LifoQueue, _LIFO)),
        (queue.PriorityQueue, "_put", "p__put", lambda: _queue_put(queue.PriorityQueue, _PRIO)),
        (queue.PriorityQueue, "_get", "p__get", lambda: _queue_get(queue.PriorityQueue, _PRIO)),
    ]


@contextlib.contextmanager
def threads_emulated(rec: "Recorder", fmode, dmode) -> Iterator[Threads]:
    """Threads started inside the block are emulated host threads (module docstring)."""
    tm = Threads(rec, fmode, dmode, wait_limit_s())
    saved = []
    if not _INSTALLED:
        for owner, attr, key, _make in _patches():
            _ORIG[key] = owner.__dict__[attr]
            saved.append((owner, attr, owner.__dict__[attr]))
        for owner, attr, _key, make in _patches():
            setattr(owner, attr, make())
    _INSTALLED.append(tm)
    rec.threads = tm
    try:
        yield tm
        tm.finish()
    finally:
        tm.close()
        _INSTALLED.remove(tm)
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)
