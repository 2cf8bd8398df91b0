"""An emulated GPU session: the ``torch.cuda`` patches, the function mode, the dispatch mode, the
host-time hooks, the gradient-ready markers and the script's threads (:mod:`.threads`), all at
once around the script."""

from __future__ import annotations

import contextlib
import warnings

from tracegen.emulation.clock import script_clock
from tracegen.emulation.cuda_api import patched_torch
from tracegen.emulation.dispatch import DispatchMode
from tracegen.emulation.function_mode import FunctionMode
from tracegen.emulation.gradmarks import install_grad_markers
from tracegen.emulation.hosttime import calibrate
from tracegen.emulation.threads import threads_emulated
from tracegen.emulation.timeline import Recorder


def preload():
    """Import what torch imports lazily, before the patches and the clock start."""
    import torch._dynamo  # noqa: F401  (imported by nn.Module construction otherwise)


@contextlib.contextmanager
def emulated_gpu(rec: Recorder, real_clock: bool = False):
    """Everything at once: patches, the function mode, the dispatch mode, host-time hooks, and the
    script's ``time`` module on the emulated clock (:mod:`.clock`; ``real_clock``: left real)."""
    preload()
    with patched_torch(rec) as fmode_ref, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*meta.*")
        fmode = FunctionMode(rec)
        fmode_ref.append(fmode)
        dmode = DispatchMode(rec)
        if rec.clock.timed:  # measured / script host time: the cost of one interception
            rec.clock.intercept_ns = calibrate(rec, fmode, dmode)
        remove_hooks = rec.clock.install_hooks()
        remove_marks = install_grad_markers(rec)
        rec.clock.restart()
        try:
            with script_clock(rec, real_clock), fmode, dmode, threads_emulated(rec, fmode, dmode):
                yield rec
        finally:
            remove_marks()
            remove_hooks()
