"""``tracegen capture --window-from NAME [--window-to NAME]``: open and close the recorded window
from the script's own structure, without editing it (docs/capture.md, "Setup out of the window").

A NAME is *reached* when the script's main thread

* calls a Python function whose qualified name is NAME (``generate``, ``Engine.step``,
  ``main.<locals>.decode``), or whose module and qualified name are NAME
  (``transformers.generation.utils.GenerationMixin.generate``, or with ``:`` before the
  qualified name);
* enters a ``torch.profiler.record_function`` / ``torch.autograd.profiler.record_function`` range
  named NAME (``with``, or as a decorator);
* pushes a ``torch.cuda.nvtx`` range named NAME (``range_push``, ``nvtx.range``, ``mark``).

The window opens where the first NAME of ``--window-from`` is reached, and closes where the first
call or range of ``--window-to`` reached after the opening ends (its return, first yield, range
exit or pop); ``--window-from f --window-to f`` is the first call of ``f``. Each boundary is a
marker op on the host timeline (:data:`tracegen.steps.WINDOW_OPEN`, ``WINDOW_CLOSE``), cut by
:func:`tracegen.steps.select_window` after the run, with the machinery of ``--skip-steps``.

Functions are found with ``sys.setprofile`` on the main thread, installed only while a boundary is
still to be found (the previous profile function, if any, is restored): a script pays for it only
until the window closes, and its Python between the emulated calls costs a little more then
(``--host-time script`` measures it).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Callable

from fastrack_core.errors import CaptureError
from tracegen.steps import WINDOW_CLOSE, WINDOW_OPEN


class Window:
    """The state of one capture's window: what opens and closes it, and whether they happened."""

    def __init__(self, start: str | None, stop: str | None, marker: Callable[[str], Any]):
        for opt, name in (("--window-from", start), ("--window-to", stop)):
            if name is not None and not str(name).strip():
                raise CaptureError(f"{opt}: empty name")
        self.start, self.stop, self.marker = start, stop, marker
        self.opened = start is None  # without --window-from the window is open from the start
        self.closed = False
        self.from_kind: str | None = None
        self.to_kind: str | None = None
        self._to_frame = None  # the frame of the --window-to call, once entered
        self._nvtx_depth: int | None = None  # nesting depth of the --window-to NVTX range, once pushed
        self._previous_profile = None

    @property
    def done(self) -> bool:
        return self.closed or (self.opened and self.stop is None)

    # -- boundaries -----------------------------------------------------------------------
    def reached(self, name: str, kind: str) -> bool:
        """``name`` was entered (a call, a range); True when it is the ``--window-to`` one (its
        end closes the window)."""
        if not self.opened and name == self.start:
            self.opened, self.from_kind = True, kind
            self.marker(WINDOW_OPEN)
        if self.opened and not self.closed and self.stop is not None and self.to_kind is None and name == self.stop:
            self.to_kind = kind
            return True
        return False

    def ended(self) -> None:
        """The ``--window-to`` call or range ended."""
        if not self.closed:
            self.closed = True
            self.marker(WINDOW_CLOSE)

    def check(self) -> None:
        """After the run: a boundary that was never reached is an error (nothing is written)."""
        if not self.opened:
            raise CaptureError(f"--window-from {self.start}: the script never called a function or entered a "
                               "record_function or NVTX range of that name; no trace written")
        if self.stop is not None and not self.closed:
            raise CaptureError(f"--window-to {self.stop}: no call or record_function/NVTX range of that name "
                               "ended after the window opened; no trace written")

    def metadata(self, cut: dict[str, int]) -> dict[str, Any]:
        return {"from": self.start, "to": self.stop, "from_kind": self.from_kind, "to_kind": self.to_kind, **cut}

    # -- Python functions (sys.setprofile) ------------------------------------------------
    def _matches(self, code, frame, target: str | None) -> bool:
        if target is None:
            return False
        q = code.co_qualname
        if not target.endswith(q):
            return False
        if target == q:
            return True
        mod = frame.f_globals.get("__name__", "")
        return target == f"{mod}.{q}" or target == f"{mod}:{q}"

    def profile(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            if not self.opened and self._matches(code, frame, self.start):
                if self.reached(self.start, "function"):  # the same name closes it: this call's end
                    self._to_frame = frame
            elif self.opened and self.to_kind is None and self._matches(code, frame, self.stop):
                if self.reached(self.stop, "function"):
                    self._to_frame = frame
        elif event == "return" and frame is self._to_frame:
            self.ended()
        if self.done:
            sys.setprofile(self._previous_profile)

    # -- record_function and NVTX --------------------------------------------------------
    def on_range_enter(self, name: str) -> bool:
        return not self.done and self.reached(str(name), "record_function")

    def on_nvtx_push(self, name: str, depth: int) -> None:
        if not self.done and self.reached(str(name), "nvtx") and self._nvtx_depth is None:
            self._nvtx_depth = depth

    def on_nvtx_pop(self, depth: int) -> None:
        if self._nvtx_depth is not None and depth == self._nvtx_depth:
            self.ended()


@contextmanager
def window_hooks(window: Window | None):
    """Install the hooks that find ``window``'s boundaries for the duration of the run (inside the
    emulation, so that the NVTX functions wrapped are the emulated ones); undo them all after."""
    if window is None:
        yield
        return
    import torch.autograd.profiler as ap
    import torch.cuda.nvtx as nv

    rf = ap.record_function
    orig_enter, orig_exit = rf.__enter__, rf.__exit__
    orig_push, orig_pop, orig_mark = nv.range_push, nv.range_pop, nv.mark

    def enter(self):
        closes = window.on_range_enter(self.name)
        out = orig_enter(self)
        if closes:
            self._tracegen_window_to = True
        return out

    def exit_(self, *exc):
        out = orig_exit(self, *exc)
        if getattr(self, "_tracegen_window_to", False):
            window.ended()
        return out

    def push(msg, *a, **kw):
        depth = orig_push(msg, *a, **kw)
        window.on_nvtx_push(msg, depth)
        return depth

    def pop(*a, **kw):
        depth = orig_pop(*a, **kw)
        window.on_nvtx_pop(depth)
        return depth

    def mark(msg, *a, **kw):
        out = orig_mark(msg, *a, **kw)
        window.on_nvtx_push(msg, -2)
        window.on_nvtx_pop(-2)
        return out

    rf.__enter__, rf.__exit__ = enter, exit_
    nv.range_push, nv.range_pop, nv.mark = push, pop, mark
    window._previous_profile = sys.getprofile()
    if not window.done:
        sys.setprofile(window.profile)
    try:
        yield
    finally:
        if sys.getprofile() is window.profile:
            sys.setprofile(window._previous_profile)
        rf.__enter__, rf.__exit__ = orig_enter, orig_exit
        nv.range_push, nv.range_pop, nv.mark = orig_push, orig_pop, orig_mark
