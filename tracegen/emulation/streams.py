"""Stand-ins for ``torch.cuda.Stream`` and ``torch.cuda.Event``: they act on the active
:class:`~tracegen.emulation.timeline.Recorder` (stream ids, ``cudaEventRecord`` /
``cudaStreamWaitEvent`` runtime ops, synchronisations, elapsed time on the emulated GPU)."""

from __future__ import annotations

import torch

from tracegen.emulation.clock import REAL_PERF_COUNTER_NS
from tracegen.emulation.timeline import active_recorder


class EmuEvent:
    """Stand-in for ``torch.cuda.Event``."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, **_kw):
        self.op: int | None = None  # index of the last GPU op before the record
        self.time: int | None = None  # GPU time (ns) at which the event completes
        self.real_ns: int | None = None  # this machine's perf_counter_ns at the record (--real-clock)
        self.enable_timing = enable_timing
        self.device = torch.device("cuda", 0)

    def record(self, stream=None):
        rec = active_recorder()
        rec.event_record(self, stream)
        self.real_ns = REAL_PERF_COUNTER_NS()

    def wait(self, stream=None):
        active_recorder().stream_wait_event(stream, self)

    def synchronize(self):
        active_recorder().event_sync(self)

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "EmuEvent") -> float:
        """Milliseconds between two recorded events on the emulated GPU timeline; with
        ``--real-clock``, between the two ``record()`` calls on this machine's clock."""
        if self.time is None or end.time is None:
            raise RuntimeError("elapsed_time: both events must have been recorded")
        if getattr(active_recorder(), "real_clock", False):
            return (end.real_ns - self.real_ns) / 1e6
        return (end.time - self.time) / 1e6


class EmuStream:
    """Stand-in for ``torch.cuda.Stream``."""

    def __init__(self, device=None, priority: int = 0, *, _stream_id: int | None = None, **_kw):
        self.stream_id = _stream_id if _stream_id is not None else active_recorder().new_stream_id()
        self.priority = priority
        self.device = torch.device("cuda", 0)
        self.device_index = 0
        self.device_type = 1

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    def wait_stream(self, other: "EmuStream"):
        ev = EmuEvent()
        ev.record(other)
        ev.wait(self)

    def wait_event(self, event: EmuEvent):
        event.wait(self)

    def record_event(self, event: EmuEvent | None = None) -> EmuEvent:
        event = event or EmuEvent()
        event.record(self)
        return event

    def synchronize(self):
        active_recorder().stream_sync(self.stream_id)

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:
        rec = active_recorder()
        return rec.graph_nodes is not None and rec.stream_id() == self.stream_id

    @property
    def native_handle(self) -> int:
        return self.stream_id

    def __eq__(self, other):
        return isinstance(other, EmuStream) and other.stream_id == self.stream_id

    def __hash__(self):
        return hash(("emu-stream", self.stream_id))

    def __repr__(self):
        return f"<torch.cuda.Stream device=cuda:0 cuda_stream={self.stream_id} (emulated)>"

    def __enter__(self):
        rec = active_recorder()
        self._prev = rec.current_stream
        rec.current_stream = self
        return self

    def __exit__(self, *exc):
        active_recorder().current_stream = self._prev
        return False

