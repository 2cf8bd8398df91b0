"""Compatibility name for :mod:`tracegen.emulation` (the emulated-GPU capture, split into one
module per concept); new code imports from ``tracegen.emulation``."""

from tracegen.emulation.cuda_api import patched_torch  # noqa: F401
from tracegen.emulation.hosttime import HostClock, calibrate  # noqa: F401
from tracegen.emulation.reads import READ_ALL, READ_BOOL, READ_FLOAT, READ_INT  # noqa: F401
from tracegen.emulation.session import emulated_gpu, preload  # noqa: F401
from tracegen.emulation.streams import EmuEvent, EmuStream  # noqa: F401
from tracegen.emulation.timeline import DEFAULT_STREAM, Recorder  # noqa: F401
