"""Fastrack as a Python library: the notebook face of ``tracegen`` and ``replay`` (docs/api.md).

The top layer: it may import ``replay`` and ``tracegen``; nothing else of ours imports it
(tests/test_layering.py). ``import fastrack`` stays light: the names below are loaded on first
use by :func:`fastrack.__getattr__`.

* traces: :func:`load`, :func:`convert`, :class:`capture` (a context manager around your own code);
* replays: :func:`replay` (one protocol, a :class:`Result`), :func:`compare` (several, a
  :class:`Comparison`), :func:`sweep` (a study, a :class:`Sweep` with its table),
  :func:`sensitivity` (a DataFrame);
* what is installed: :func:`protocols`, :func:`presets`, :func:`params`.

Every number comes from the same library calls the command lines use (``replay.pipeline.run``,
``replay.frontend.study``, ``tracegen.convert``, ``tracegen.capture``), so a notebook and ``replay compare``
agree to the nanosecond.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from fastrack_core.errors import CaptureError, ConfigError
from fastrack_core.traceio import Trace, read_trace

__all__ = ["Comparison", "Result", "Sweep", "capture", "compare", "convert", "load", "params", "presets",
           "protocols", "replay", "sensitivity", "sweep"]

TraceLike = str | os.PathLike | Trace


# ----------------------------------------------------------------------------- traces

def load(path: str | os.PathLike) -> Trace:
    """Read and validate a Fastrack Parquet trace (``trace.table`` is Arrow, ``trace.metadata`` a dict)."""
    return read_trace(path)


def convert(inputs: str | os.PathLike | Sequence[str | os.PathLike], output: str | os.PathLike,
            fmt: str = "auto", overwrite: bool = False, keep_source_names: bool = False) -> Trace:
    """Import profiler output (Kineto JSON, Nsight SQLite, a directory of rank files) into the
    Parquet trace ``output``, as ``tracegen convert`` does, and return it loaded.
    ``keep_source_names``: as ``--keep-source-names``."""
    from fastrack_core.outputs import check_input_path, check_output_path
    from tracegen.convert import convert as run_convert

    inputs = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    for p in inputs:
        check_input_path(p, allow_dir=True)
    check_output_path(output, inputs, overwrite)
    return read_trace(run_convert(inputs, output, fmt, keep_source_names=keep_source_names).path)


class capture:
    """Record the GPU work of the code inside a ``with`` block, in the spirit of
    ``torch.profiler.profile``::

        with fastrack.capture(name="mlp") as cap:
            model = MLP().cuda()
            ...
        cap.trace           # a fastrack_core.traceio.Trace
        cap.save("mlp.parquet")

    Without a CUDA GPU (or with ``emulate=True``) the block runs on the emulated H100 of
    ``tracegen capture --emulate``: tensors put on ``cuda`` inside the block become shape-only
    ``meta`` tensors and every GPU op is priced by the emulation's cost model; create the model and
    the data inside the block. On a GPU it runs under ``torch.profiler`` and the Kineto output is
    converted. Steps come from ``optimizer.step()`` or ``torch.profiler.profile().step()`` calls
    inside the block; ``skip_steps``/``steps`` keep some of them (as ``tracegen capture``). If the
    block raises, nothing is recorded and the exception propagates.
    """

    def __init__(self, *, name: str = "capture", emulate: bool | None = None, device: str = "h100-sxm",
                 skip_steps: int = 0, steps: int | None = None, host_time: str = "script",
                 gpu_speed: float = 1.0, copy_speed: float = 1.0, host_speed: float = 1.0,
                 real_clock: bool = False):
        self.name = name
        self.real_clock = bool(real_clock)
        self._opts = dict(emulate=emulate, device=device, skip_steps=skip_steps, steps=steps, host_time=host_time,
                          gpu_speed=gpu_speed, copy_speed=copy_speed, host_speed=host_speed)
        self.trace: Trace | None = None
        self._inner = None

    # The two paths reuse tracegen.capture's pieces (the emulated GPU session and the profiler
    # conversion) with the user's block in place of a script.
    def __enter__(self) -> "capture":
        import torch

        from tracegen.capture import HOST_TIME_MODES
        from tracegen.emulation.speed import speed_factors

        o = self._opts
        if self._inner is not None:
            raise CaptureError("this capture is already running; use a new fastrack.capture() per block")
        if o["host_time"] not in HOST_TIME_MODES:
            raise CaptureError(f"unknown host time mode '{o['host_time']}'; expected one of "
                               f"{', '.join(HOST_TIME_MODES)}")
        self._speed = speed_factors(o["gpu_speed"], o["copy_speed"], o["host_speed"])
        self.emulated = (not torch.cuda.is_available()) if o["emulate"] is None else bool(o["emulate"])
        if self.emulated:  # the device is a preset with the compute half, as replay --preset names it
            from tracegen.emulation.costmodel import get_spec

            get_spec(o["device"])
        if not self.emulated:
            if not torch.cuda.is_available():
                raise CaptureError("emulate=False needs a CUDA GPU, and torch.cuda.is_available() is False here")
            if any(v != 1.0 for v in self._speed.as_metadata().values()):
                raise CaptureError("the speed factors only apply to the emulated GPU (emulate=True)")
            self._inner = _ProfiledBlock()
        else:
            self._inner = _EmulatedBlock(o["device"], o["host_time"], self._speed, self.real_clock)
        self._inner.enter()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        inner, self._inner = self._inner, None
        inner.exit(exc_type, exc, tb)
        if exc_type is None:
            table, meta = inner.result(self.name, self._opts["skip_steps"], self._opts["steps"])
            self.trace = Trace(table=table, metadata=meta)
        return False

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the captured trace (Parquet, schema v1; atomic; refuses to replace without ``overwrite``)."""
        from fastrack_core.outputs import check_output_path
        from fastrack_core.traceio import write_trace

        if self.trace is None:
            raise CaptureError("nothing captured yet: save() after the with block has finished")
        out = write_trace(check_output_path(path, (), overwrite), self.trace.table, self.trace.metadata)
        self.trace.path = str(out)
        return out


class _EmulatedBlock:
    def __init__(self, device, host_time, speed, real_clock=False):
        self.device, self.host_time, self.speed, self.real_clock = device, host_time, speed, real_clock

    def enter(self):
        from tracegen.emulation import Recorder, emulated_gpu
        from tracegen.emulation.costmodel import get_spec

        self.spec = get_spec(self.device)
        s = self.speed
        self.rec = Recorder(self.spec, host_time=self.host_time, gpu_speed=s.gpu, copy_speed=s.copy,
                            host_speed=s.host)
        self.session = emulated_gpu(self.rec, real_clock=self.real_clock)
        self.session.__enter__()

    def exit(self, *exc):
        self.session.__exit__(*exc)

    def result(self, name, skip_steps, steps):
        import torch

        from tracegen.capture import capture_metadata, host_time_metadata, recorder_table, select_steps

        if self.rec.gpu_ops == 0:
            raise CaptureError("the block launched no GPU work (no tensor or module was put on 'cuda' inside it)")
        table = select_steps(recorder_table(self.rec), skip_steps, steps,
                             launch_latency_ns=self.spec.launch_latency_ns)
        meta = capture_metadata(Path(name), name, emulated=True, device_model=self.spec.name, gpu_model=self.spec.gpu_name,
                         torch_version=torch.__version__)
        meta["capture_tool"] = (f"fastrack.capture (emulated GPU, {self.host_time} host time"
                                f"{self.speed.describe()}{', real clock' if self.real_clock else ''})")
        meta["host_time"] = host_time_metadata(self.rec)
        return table, meta


class _ProfiledBlock:
    """torch.profiler around the block (a real CUDA GPU); not run on hardware during development:
    its conversion half is :func:`tracegen.capture.kineto_to_trace`, tested on a recorded file."""

    def enter(self):
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.profiler import ProfilerAction, ProfilerActivity, profile

        self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                            schedule=lambda _step: ProfilerAction.RECORD)
        self.hook = register_optimizer_step_post_hook(lambda *_a, **_k: self.prof.step())
        self.prof.__enter__()

    def exit(self, *exc):
        import torch

        try:
            if exc[0] is None:
                torch.cuda.synchronize()
        finally:
            self.prof.__exit__(*exc)
            self.hook.remove()

    def result(self, name, skip_steps, steps):
        import torch

        from tracegen.capture import kineto_to_trace

        with tempfile.TemporaryDirectory(prefix="fastrack-capture-") as tmp:
            out = Path(tmp) / f"{name}.pt.trace.json"
            self.prof.export_chrome_trace(str(out))
            table, meta = kineto_to_trace(out, skip_steps=skip_steps, steps=steps, name=name, script=Path(name),
                                          gpu_model=torch.cuda.get_device_name(), torch_version=torch.__version__)
        meta["capture_tool"] = "PyTorch Profiler (fastrack.capture)"
        return table, meta


# ----------------------------------------------------------------------------- replays

@dataclasses.dataclass(frozen=True)
class Result:
    """One replay of one trace under one protocol.

    ``slowdown`` is the makespan over the ``none`` protocol's (same trace, model, preset and
    parameters; 1.0 = the protocol costs nothing); ``None`` for ``captured`` or with
    ``reference=False``. ``details`` is the full :class:`replay.pipeline.results.ReplayResult` (per rank,
    steps, resources, notes); ``graph`` and ``schedule`` are what :meth:`write_timeline` draws.
    """

    trace: str
    protocol: str
    makespan_ns: int
    slowdown: float | None
    reference_makespan_ns: int | None
    critical_path_ns: dict[str, int]
    model: str | None
    preset: str | None
    params_digest: str | None
    details: Any = dataclasses.field(repr=False, compare=False)
    graph: Any = dataclasses.field(repr=False, compare=False)
    schedule: Any = dataclasses.field(repr=False, compare=False)
    # with ranges=True: the range report of replay --ranges (makespan_range_ns, slowdown_range,
    # range_driver, ranges; replay.pipeline.ranges), else None
    range_report: dict[str, Any] | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def makespan_range_ns(self) -> list[int] | None:
        """[low, high] of the makespan over the preset's assumption ranges (``ranges=True``), else None."""
        return None if self.range_report is None else self.range_report["makespan_range_ns"]

    @property
    def slowdown_range(self) -> list[float] | None:
        """[low, high] of the slowdown over the assumption ranges (``ranges=True`` with a reference)."""
        return None if self.range_report is None else self.range_report["slowdown_range"]

    @property
    def range_driver(self) -> str | None:
        """The parameter (``section.key``) whose range moves the result most, or None."""
        return None if self.range_report is None else self.range_report["range_driver"]

    def to_dict(self) -> dict[str, Any]:
        """The JSON report of ``replay --json`` (plus ``slowdown_vs_none`` when there is a reference, and
        the range keys of ``replay --ranges --json`` with ``ranges=True``)."""
        d = self.details.to_dict()
        d["trace"] = self.trace
        if self.reference_makespan_ns is not None:
            d["reference"] = {"protocol": "none", "makespan_ns": self.reference_makespan_ns}
            d["slowdown_vs_none"] = self.slowdown
        if self.range_report is not None:
            d.update(self.range_report)
        return d

    def to_frame(self):
        """One row: trace, protocol, model, preset, makespan, slowdown and one ``cp_<category>_ns``
        column per critical-path category (the layout of the ``replay sweep`` table)."""
        import pandas as pd

        return pd.DataFrame([_row(self)])

    def breakdown(self):
        """Critical-path time by category: a DataFrame with columns category, ns, share."""
        import pandas as pd

        total = sum(self.critical_path_ns.values()) or 1
        return pd.DataFrame([{"category": c, "ns": int(v), "share": v / total}
                             for c, v in self.critical_path_ns.items()])

    def resources(self):
        """Busy time and utilisation of every resource lane, as a DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.details.resources)

    def write_timeline(self, path: str | os.PathLike) -> None:
        """The Perfetto / chrome://tracing timeline of this replay (as ``replay --timeline``)."""
        from replay.exporters.timeline import write_timeline

        write_timeline(str(path), self.graph, self.schedule, self.protocol)


def _row(r: Result) -> dict[str, Any]:
    from replay.graph import Category

    row = {"trace": r.trace, "protocol": r.protocol, "model": r.model, "preset": r.preset,
           "params_digest": r.params_digest, "makespan_ns": r.makespan_ns, "slowdown": r.slowdown,
           "reference_makespan_ns": r.reference_makespan_ns}
    row.update({f"cp_{c.label}_ns": int(r.critical_path_ns.get(c.label, 0)) for c in Category})
    return row


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One trace under several protocols (one graph, the same model, preset and parameters)."""

    trace: str
    results: dict[str, Result]  # protocol -> result, in the order asked for
    reference: Any = dataclasses.field(default=None, repr=False, compare=False)  # the none replay (ReplayResult)
    data_parallel: dict[str, Any] | None = None  # {world, bucket_mb} of a data-parallel what-if

    def __getitem__(self, protocol: str) -> Result:
        return self.results[protocol]

    def to_frame(self):
        """One row per protocol (see :meth:`Result.to_frame`), indexed by protocol."""
        import pandas as pd

        return pd.DataFrame([_row(r) for r in self.results.values()]).set_index("protocol", drop=False)

    def breakdown(self):
        """Long form: protocol, category, ns (for seaborn or a pivot table)."""
        import pandas as pd

        return pd.DataFrame([{"protocol": p, "category": c, "ns": int(v)}
                             for p, r in self.results.items() for c, v in r.critical_path_ns.items()])

    def to_dict(self) -> dict[str, Any]:
        """The JSON report of ``replay compare --json``."""
        from replay.frontend.compare import compare_report

        d = compare_report(self.trace, {p: r.details for p, r in self.results.items()}, self.reference,
                           self.data_parallel)
        for row in d["rows"]:
            if self.results[row["protocol"]].range_report is not None:
                row.update(self.results[row["protocol"]].range_report)
        return d

    def plot(self, path: str | os.PathLike) -> None:
        """The stacked breakdown chart of ``replay compare --plot`` (PNG, SVG or PDF)."""
        from replay.frontend.compare import plot_breakdown

        plot_breakdown(self.to_dict(), str(path))


def _overrides(params: Mapping[str, Any] | Iterable[str] | None) -> tuple[str, ...]:
    """``{"pcie.latency_ns": 900}`` or ``["pcie.latency_ns=900"]`` -> the model's override strings."""
    from replay.frontend.study.spec import override_text

    if params is None:
        return ()
    if isinstance(params, Mapping):
        return tuple(override_text(k, v) for k, v in params.items())
    if isinstance(params, str):
        raise ConfigError("params: give a mapping {'section.key': value} or a list of 'section.key=value' strings")
    return tuple(params)


def _graph(trace: TraceLike, data_parallel: int | None, bucket_mb: float | None, protocols: Sequence[str]):
    from replay.whatif.dataparallel import DEFAULT_BUCKET_MB, data_parallel_graph
    from replay.pipeline.run import load_graph

    if isinstance(trace, capture):
        trace = trace.trace
    graph, tr = load_graph(trace)
    if data_parallel is not None:
        graph = data_parallel_graph(graph, data_parallel, DEFAULT_BUCKET_MB if bucket_mb is None else bucket_mb,
                                    list(protocols))
    label = str(trace) if not isinstance(trace, Trace) else (tr.path or tr.metadata.get("trace_name") or "trace")
    return graph, tr, label


def _results(trace, protocols, model, preset, params, scales, data_parallel, bucket_mb, reference, ranges=False):
    from replay.names import CAPTURED, NONE
    from replay.plugins import DEFAULT_MODEL
    from replay.pipeline.results import slowdown
    from replay.pipeline.run import replay_graph

    protocols = [p.strip() for p in ([protocols] if isinstance(protocols, str) else protocols) if p.strip()]
    if not protocols:
        raise ConfigError("protocols: name at least one protocol")
    graph, tr, label = _graph(trace, data_parallel, bucket_mb, protocols)
    model = model or DEFAULT_MODEL
    overrides = _overrides(params)
    reps = {}
    wanted = list(dict.fromkeys(protocols))
    run = ([NONE] if reference and any(p != CAPTURED for p in wanted) else []) + wanted
    for p in dict.fromkeys(run):
        reps[p] = replay_graph(graph, p, model, preset, overrides, trace_ops=tr.num_ops, scales=scales)
    ref = reps[NONE].result.makespan_ns if NONE in reps else None
    spans = {}
    if ranges:  # (replay.pipeline.ranges: the same graph re-transformed at each range point)
        from replay.pipeline.ranges import RangeStudy

        study = RangeStudy(graph, model, preset, overrides, scales, reference=ref is not None)
        spans = {p: study.protocol_range(p, reps[p].result.makespan_ns, ref, reps[p].graph, reps[p].schedule)
                 for p in wanted}
    out = {}
    for p in wanted:
        rep = reps[p]
        res = rep.result
        m = res.model or {}
        has_ref = ref is not None and p != CAPTURED
        out[p] = Result(trace=label, protocol=p, makespan_ns=int(res.makespan_ns),
                        slowdown=slowdown(res.makespan_ns, ref) if has_ref else None,
                        reference_makespan_ns=int(ref) if has_ref else None,
                        critical_path_ns=dict(res.critical_path_ns), model=m.get("model"), preset=m.get("preset"),
                        params_digest=m.get("digest"), details=res, graph=rep.graph, schedule=rep.schedule,
                        range_report=spans.get(p))
    return label, out, (reps[NONE].result if NONE in reps else None)


def replay(trace: TraceLike, protocol: str = "fastrack", *, model: str | None = None, preset: str | None = None,
           params: Mapping[str, Any] | Iterable[str] | None = None, scales: Mapping[str, float] | None = None,
           data_parallel: int | None = None, bucket_mb: float | None = None, reference: bool = True,
           ranges: bool = False) -> Result:
    """Replay ``trace`` (a path, a :class:`~fastrack_core.traceio.Trace` or a finished :class:`capture`)
    under ``protocol``. ``params`` overrides model parameters (``{"pcie.h2d_bandwidth_gb_s": 32}``),
    ``scales`` is the what-if ``{kind: factor}`` of ``--scale``, ``data_parallel`` the DDP world
    size of ``--data-parallel``. With ``reference`` (default) the trace is also replayed under
    ``none`` so that :attr:`Result.slowdown` is set. With ``ranges`` the result also carries its range over
    the preset's assumption ranges (:attr:`Result.makespan_range_ns`, :attr:`Result.slowdown_range`,
    :attr:`Result.range_driver`; docs/model.md "Uncertainty ranges"), at about two replays per ranged
    parameter the protocol reads, evaluated on threads over the CPUs this process may use within a
    memory allowance (docs/model.md, "Points at once"; the range does not depend on it)."""
    _, results, _ = _results(trace, [protocol], model, preset, params, scales, data_parallel, bucket_mb, reference,
                             ranges)
    return results[protocol.strip()]


def compare(trace: TraceLike, protocols: Sequence[str] | str = ("none", "baseline", "fastrack"), *,
            model: str | None = None, preset: str | None = None,
            params: Mapping[str, Any] | Iterable[str] | None = None, scales: Mapping[str, float] | None = None,
            data_parallel: int | None = None, bucket_mb: float | None = None, ranges: bool = False) -> Comparison:
    """Replay ``trace`` under each protocol (graph built once; ``none`` replayed as the reference);
    ``ranges``: each result also carries its range (see :func:`replay`)."""
    if isinstance(protocols, str):
        protocols = protocols.split(",")
    from replay.whatif.dataparallel import DEFAULT_BUCKET_MB

    label, results, ref = _results(trace, protocols, model, preset, params, scales, data_parallel, bucket_mb, True,
                                   ranges)
    dp = None if data_parallel is None else {"world": data_parallel,
                                             "bucket_mb": DEFAULT_BUCKET_MB if bucket_mb is None else bucket_mb}
    return Comparison(trace=label, results=results, reference=ref, data_parallel=dp)


# ----------------------------------------------------------------------------- studies

@dataclasses.dataclass(frozen=True)
class Sweep:
    """A finished study: its table (one row per point, the ``replay sweep`` layout, docs/studies.md)
    and how it ran."""

    frame: Any  # pandas.DataFrame
    output: str | None  # the Parquet file, or None when the study was run into a temporary folder
    points: int
    ran: int
    skipped: int
    seconds: float

    def to_frame(self):
        return self.frame


def _trace_path(t: Any) -> str:
    if isinstance(t, capture):
        t = t.trace
    if isinstance(t, Trace):
        if not t.path:
            raise ConfigError("sweep() reads traces from files: save the trace first (cap.save('t.parquet'))")
        return t.path
    return os.fspath(t)


def sweep(traces: TraceLike | Sequence[TraceLike], protocols: Sequence[str] | str, *,
          grid: Mapping[str, Sequence[Any]] | None = None, presets: Sequence[str] | str | None = None,
          model: str | None = None, output: str | os.PathLike | None = None, jobs: int | None = 1,
          executor: str | None = None, overwrite: bool = False, progress: bool = False) -> Sweep:
    """Run a study: traces x protocols x presets x the values of ``grid``
    (``{"pcie.h2d_bandwidth_gb_s": [16, 32, 64]}``; ``"a+b"`` as a key sets two parameters to the
    same value). With ``output`` the table is written there and the study resumes like ``replay
    sweep``; without, it runs in a temporary folder. ``jobs=1`` (default) runs in this process;
    ``jobs=None`` uses every core, ``executor="dask://HOST:PORT"`` a Dask cluster."""
    import pandas as pd

    from replay.plugins import DEFAULT_MODEL
    from replay.frontend.study.spec import StudySpec
    from replay.frontend.study.sweep import run_sweep

    if isinstance(traces, (str, os.PathLike, Trace, capture)):
        traces = [traces]
    spec = StudySpec(traces=[_trace_path(t) for t in traces],
                     protocols=protocols.split(",") if isinstance(protocols, str) else list(protocols),
                     presets=([presets] if isinstance(presets, str) else list(presets or [])) or [None],
                     grid={k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in (grid or {}).items()},
                     model=model or DEFAULT_MODEL)

    def run(out) -> Sweep:
        rep = run_sweep(spec, out, executor=executor, jobs=jobs, overwrite=overwrite, progress=progress)
        frame = pd.read_parquet(out)
        return Sweep(frame=frame, output=str(out) if output is not None else None, points=rep.points, ran=rep.ran,
                     skipped=rep.skipped, seconds=rep.seconds)

    if output is not None:
        return run(output)
    with tempfile.TemporaryDirectory(prefix="fastrack-sweep-") as tmp:
        return run(Path(tmp) / "study.parquet")


def sensitivity(trace: TraceLike, protocol: str = "baseline", *, model: str | None = None,
                preset: str | None = None, params: Mapping[str, Any] | Iterable[str] | None = None,
                factors: Sequence[float] = (0.5, 2.0), jobs: int | None = 1, progress: bool = False):
    """Which parameter matters most: every numeric parameter scaled by each factor, one row per
    (parameter, factor), ranked (the ``replay sensitivity`` table; ``status`` says why a
    parameter was skipped)."""
    from replay.plugins import DEFAULT_MODEL
    from replay.frontend.study.sensitivity import sensitivity as run

    return run(_trace_path(trace), protocol, model or DEFAULT_MODEL, preset, _overrides(params), tuple(factors),
               jobs=jobs, progress=progress)


# ----------------------------------------------------------------------------- what is installed

def protocols() -> list[str]:
    """Installed protocol names (``captured`` is also accepted: measured durations, no model)."""
    from replay.plugins import available_protocols

    return available_protocols()


def presets(model: str | None = None) -> list[str]:
    """Preset names of a hardware model (the default model when not given)."""
    from replay.plugins import DEFAULT_MODEL, load_model

    return load_model(model or DEFAULT_MODEL).available_presets()


def params(model: str | None = None, preset: str | None = None):
    """Every parameter of a model's preset: a DataFrame with name, unit, value, doc and source."""
    import pandas as pd

    from replay.frontend.paraminfo import parameter_table

    return pd.DataFrame(parameter_table(model, preset))
