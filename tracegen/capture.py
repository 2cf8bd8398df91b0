"""``tracegen capture``: run a PyTorch script and write its GPU trace (Parquet, schema v1).

Two paths (``docs/capture.md``):

* **profiler** (a CUDA GPU is present and ``--no-emulate``/default): the script runs under
  ``torch.profiler`` (CPU + CUDA activities, ``record_shapes``); the Kineto JSON it exports is
  converted by the Kineto importer (:func:`tracegen.importers.kineto.import_kineto`).
* **emulated** (``--emulate``, the default without a GPU): :mod:`tracegen.emulation` runs the
  unchanged CUDA script on ``meta`` tensors and prices every GPU op with
  :mod:`tracegen.emulation.costmodel`.

Steps: an explicit ``ProfilerStep#N`` annotation (``record_function`` or ``prof.step()``) wins;
otherwise every ``optimizer.step()`` call ends a step. Step k holds the ops after the k-th
boundary up to and including the (k+1)-th; ops after the last boundary have step -1.
``--skip-steps``/``--steps`` keep some steps and cut every dependency on the others
(:mod:`tracegen.steps`).

What-if speed factors (emulation only, :mod:`tracegen.emulation.speed`): ``--gpu-speed``,
``--copy-speed``, ``--host-speed``; recorded in the metadata (``capture_tool``).
"""

from __future__ import annotations

import os
import platform
import runpy
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Sequence

import click
import pyarrow as pa

from fastrack_core.version import __version__
from fastrack_core.cli_support import reports_errors
from fastrack_core.errors import CaptureError
from fastrack_core.outputs import check_input_path, check_output_path
from fastrack_core.traceio import write_trace
from tracegen.ranks import MAX_NPROC

DEFAULT_DEVICE = "h100-sxm"  # a preset of the machine description (docs/machine.md), as replay --preset
HOST_TIME_MODES = ("script", "modelled", "measured")  # tracegen.emulation.hosttime.MODES
DEFAULT_HOST_TIME = "script"  # tracegen.emulation.hosttime.DEFAULT_MODE


# ----------------------------------------------------------------------------- running the script

def run_script(script: str | os.PathLike, script_args: Sequence[str] = ()) -> None:
    """Run ``script`` as ``python SCRIPT ARGS`` would: ``__main__``, ``sys.argv``, its folder first
    on ``sys.path``, the working directory unchanged. A failure becomes a :class:`CaptureError`
    (the script's traceback is printed on stderr first)."""
    path = Path(script)
    if not path.is_file():
        raise CaptureError("no such script", path=str(path))
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = [str(path)] + [str(a) for a in script_args]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code not in (None, 0):
            raise CaptureError(f"the script exited with status {code}; no trace written", path=str(path)) from None
    except KeyboardInterrupt:
        raise
    except CaptureError as exc:  # the emulator refused a call (tracegen.emulation.unsupported): one line
        exc.path = exc.path or str(path)
        raise
    except BaseException as exc:  # the script's own error: show it, then fail
        _print_script_traceback(exc, path)
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise CaptureError(f"the script raised {type(exc).__name__}{': ' + msg if msg else ''}; no trace written",
                           path=str(path)) from None
    finally:
        sys.argv[:] = old_argv
        sys.path[:] = old_path


def _print_script_traceback(exc: BaseException, path: Path) -> None:
    """The traceback from the script's first frame on (capture's own frames left out)."""
    target = str(path.resolve())
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != target:
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)
    sys.stderr.write("".join(lines))
    sys.stderr.flush()


# ----------------------------------------------------------------------------- steps

from tracegen.steps import select_steps, select_window  # noqa: E402  (re-exported: capture's step selection)


# ----------------------------------------------------------------------------- emulated path

def recorder_table(rec) -> pa.Table:
    """The schema-v1 table of an emulated recording (:func:`tracegen.emulation.trace.recorder_table`)."""
    from tracegen.emulation.trace import recorder_table as assemble

    return assemble(rec)


def capture_emulated(script, script_args=(), *, device: str = DEFAULT_DEVICE, skip_steps: int = 0,
                     steps: int | None = None, name: str | None = None, host_time: str = DEFAULT_HOST_TIME,
                     gpu_speed: float = 1.0, copy_speed: float = 1.0,
                     host_speed: float = 1.0, real_clock: bool = False, window_from: str | None = None,
                     window_to: str | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """Run ``script`` on the emulated GPU ``device``; return the trace table and its metadata.
    ``window_from``/``window_to``: record only from the first call or range of that name to the
    end of the first call or range of the other (:mod:`tracegen.window`; docs/capture.md).
    ``real_clock``: the script's ``time`` module reads this machine's clock instead of the emulated
    one (:mod:`tracegen.emulation.clock`).
    ``host_time``: ``script`` (the script's own Python measured as thread CPU time and scaled to
    the target host, torch operators modelled), ``modelled`` (named per-op host costs only) or
    ``measured`` (this machine's wall time); :mod:`tracegen.emulation.hosttime`.
    ``gpu_speed``/``copy_speed``/``host_speed``: what-if factors (:mod:`tracegen.emulation.speed`)."""
    import torch

    from tracegen.emulation import Recorder, emulated_gpu

    spec, path, speed = _checked_emulation_inputs(script, device, host_time, gpu_speed, copy_speed, host_speed)
    rec = Recorder(spec, host_time=host_time, gpu_speed=speed.gpu, copy_speed=speed.copy, host_speed=speed.host)
    window = _window(window_from, window_to, rec)
    with emulated_gpu(rec, real_clock=real_clock):
        from tracegen.window import window_hooks

        with window_hooks(window):
            run_script(path, script_args)
    if rec.gpu_ops == 0:
        raise CaptureError("the script launched no GPU work (no tensor or module was put on 'cuda'); "
                           "no trace written", path=str(path))
    table = recorder_table(rec)
    if window is not None:
        window.check()
        table, cut = select_window(table, launch_latency_ns=spec.launch_latency_ns)
    table = select_steps(table, skip_steps, steps, launch_latency_ns=spec.launch_latency_ns)
    meta = capture_metadata(path, name, emulated=True, device_model=spec.name, gpu_model=spec.gpu_name,
                     torch_version=torch.__version__)
    meta["capture_tool"] = (f"fastrack tracegen capture (emulated GPU, {host_time} host time{speed.describe()}"
                            f"{', real clock' if real_clock else ''})")
    meta["host_time"] = host_time_metadata(rec)
    if rec.notes:
        meta["capture_notes"] = list(rec.notes)
    if window is not None:
        meta["window"] = window.metadata(cut)
    return table, meta


def _window(window_from, window_to, rec):
    """The :class:`tracegen.window.Window` of ``--window-from``/``--window-to``, or None."""
    if window_from is None and window_to is None:
        return None
    from tracegen.window import Window

    return Window(window_from, window_to, rec.marker)


def host_time_metadata(rec) -> dict[str, Any]:
    """The trace metadata's ``host_time``: the mode, and in ``script`` mode the calibration and
    the totals (:meth:`tracegen.emulation.scripttime.ScriptTime.as_metadata`; docs/capture.md)."""
    stats = rec.clock.stats
    return stats.as_metadata() if stats is not None else {"mode": rec.clock.mode}


def _checked_emulation_inputs(script, device, host_time, gpu_speed, copy_speed, host_speed):
    """(cost-model spec, script path, speed factors) of an emulated capture, every input checked
    before the script runs."""
    from tracegen.emulation.costmodel import get_spec
    from tracegen.emulation.speed import speed_factors

    spec = get_spec(device)  # an unknown preset, or one without the compute half: ConfigError
    path = Path(script)
    if not path.is_file():
        raise CaptureError("no such script", path=str(path))
    if host_time not in HOST_TIME_MODES:
        raise CaptureError(f"unknown host time mode '{host_time}'; expected one of {', '.join(HOST_TIME_MODES)}")
    return spec, path, speed_factors(gpu_speed, copy_speed, host_speed)


def capture_distributed(script, script_args=(), *, nproc: int, device: str = DEFAULT_DEVICE, skip_steps: int = 0,
                        steps: int | None = None, name: str | None = None, host_time: str = DEFAULT_HOST_TIME,
                        gpu_speed: float = 1.0, copy_speed: float = 1.0,
                        host_speed: float = 1.0) -> tuple[pa.Table, dict[str, Any]]:
    """``--nproc N``: N emulated ranks of a torch.distributed script, one multi-rank trace
    (:mod:`tracegen.ranks`, :mod:`tracegen.emulation.distributed`)."""
    import torch

    from tracegen.ranks import capture_ranks

    spec, path, speed = _checked_emulation_inputs(script, device, host_time, gpu_speed, copy_speed, host_speed)
    table = capture_ranks(path, list(script_args), nproc, device=device, host_time=host_time, gpu_speed=speed.gpu,
                          copy_speed=speed.copy, host_speed=speed.host, skip_steps=skip_steps, steps=steps)
    meta = capture_metadata(path, name, emulated=True, device_model=spec.name, gpu_model=spec.gpu_name,
                     torch_version=torch.__version__)
    meta.update(world_size=nproc, ranks=list(range(nproc)), host_time={"mode": host_time})
    meta["capture_tool"] = (f"fastrack tracegen capture (emulated GPU, {nproc} ranks, in-process "
                            f"torch.distributed backend, {host_time} host time{speed.describe()})")
    return table, meta


# ----------------------------------------------------------------------------- profiler path

def capture_profiler(script, script_args=(), *, skip_steps: int = 0, steps: int | None = None,
                     name: str | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """Run ``script`` under torch.profiler on the real GPU and convert its Kineto JSON.

    Not run on hardware during development (no GPU there); the conversion half,
    :func:`kineto_to_trace`, is tested on a recorded Kineto file."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.profiler import ProfilerAction, ProfilerActivity, profile

    path = Path(script)
    if not path.is_file():
        raise CaptureError("no such script", path=str(path))
    with tempfile.TemporaryDirectory(prefix="tracegen-capture-") as tmp:
        out = Path(tmp) / f"{path.stem}.pt.trace.json"
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                       schedule=lambda _step: ProfilerAction.RECORD)
        hook = register_optimizer_step_post_hook(lambda *_a, **_k: prof.step())
        try:
            with prof:
                run_script(path, script_args)
                torch.cuda.synchronize()
        finally:
            hook.remove()
        prof.export_chrome_trace(str(out))
        return kineto_to_trace(out, skip_steps=skip_steps, steps=steps, name=name, script=path,
                               gpu_model=torch.cuda.get_device_name(), torch_version=torch.__version__)


def kineto_to_trace(json_path, *, skip_steps: int = 0, steps: int | None = None, name: str | None = None,
                    script=None, gpu_model: str | None = None,
                    torch_version: str | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """Convert the profiler's Kineto JSON with the Kineto importer, select steps, set metadata."""
    try:
        from tracegen.importers.kineto import import_kineto
    except ImportError as exc:
        raise CaptureError(f"the Kineto importer is not available ({exc}); cannot convert the profiler trace") from None
    result = import_kineto(str(json_path))
    table, imported_meta = _unpack_import(result)
    table = select_steps(table, skip_steps, steps)
    src = Path(script) if script is not None else Path(json_path)
    meta = dict(imported_meta)
    meta.update(capture_metadata(src, name, emulated=False, device_model=None,
                          gpu_model=gpu_model or imported_meta.get("gpu_model"), torch_version=torch_version))
    versions = dict(imported_meta.get("tool_versions") or {})
    versions.update(meta["tool_versions"])
    meta["tool_versions"] = versions
    meta["source_format"] = "capture-profiler"
    meta["capture_tool"] = "PyTorch Profiler (tracegen capture)"
    return table, meta


def _unpack_import(result) -> tuple[pa.Table, dict[str, Any]]:
    if isinstance(result, pa.Table):
        return result, {}
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], pa.Table):
        return result[0], dict(result[1] or {})
    table = getattr(result, "table", None)
    if isinstance(table, pa.Table):
        return table, dict(getattr(result, "metadata", {}) or {})
    raise CaptureError(f"the Kineto importer returned {type(result).__name__}, expected a table")


def capture_metadata(path: Path, name, *, emulated: bool, device_model, gpu_model, torch_version) -> dict[str, Any]:
    versions = {"fastrack": __version__, "python": platform.python_version()}
    if torch_version:
        versions["pytorch"] = torch_version
    return {
        "source_format": "capture-emulated" if emulated else "capture-profiler",
        "source_files": [path.name],
        "capture_tool": "fastrack tracegen capture (emulated GPU)" if emulated else "PyTorch Profiler (tracegen capture)",
        "tool_versions": versions,
        "gpu_model": gpu_model or "unknown",
        "world_size": 1,
        "ranks": [0],
        "emulated": emulated,
        "device_model": device_model,
        "trace_name": name or path.stem,
    }


def capture(script, script_args=(), *, emulate: bool | None = None, device: str = DEFAULT_DEVICE, skip_steps: int = 0,
            steps: int | None = None, name: str | None = None, host_time: str = DEFAULT_HOST_TIME,
            gpu_speed: float = 1.0, copy_speed: float = 1.0,
            host_speed: float = 1.0, nproc: int | None = None,
            real_clock: bool = False, window_from: str | None = None,
            window_to: str | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """Capture ``script``: the profiler path on a real GPU, else (or with ``emulate=True``) emulation.
    ``window_from``/``window_to``: the recorded window (emulation only, one rank).
    The speed factors apply to emulation only; a real GPU refuses any other than 1. ``nproc``:
    that many emulated ranks of a torch.distributed script (emulation only)."""
    import torch

    from tracegen.emulation.speed import speed_factors

    speed = speed_factors(gpu_speed, copy_speed, host_speed)
    if emulate is None:
        emulate = not torch.cuda.is_available()
    windowed = window_from is not None or window_to is not None
    if windowed and (not emulate or nproc is not None):
        raise CaptureError("--window-from/--window-to are available in emulated one-rank capture only "
                           "(not with --no-emulate or --nproc)")
    if nproc is not None:
        if not emulate:
            raise CaptureError("--nproc runs emulated ranks (--emulate); on real GPUs start the script with "
                               "torchrun under the profiler and convert its per-rank traces (tracegen convert)")
        if real_clock:
            raise CaptureError("--real-clock is not available with --nproc (the ranks read the emulated clock)")
        return capture_distributed(script, script_args, nproc=nproc, device=device, skip_steps=skip_steps,
                                   steps=steps, name=name, host_time=host_time, gpu_speed=speed.gpu,
                                   copy_speed=speed.copy, host_speed=speed.host)
    if not emulate:
        if not torch.cuda.is_available():
            raise CaptureError("--no-emulate needs a CUDA GPU, and torch.cuda.is_available() is False here")
        changed = [f"--{k.replace('_', '-')}" for k, v in speed.as_metadata().items() if v != 1.0]
        if changed:
            raise CaptureError(f"{', '.join(changed)} only apply to the emulated GPU (--emulate); "
                               "a real GPU runs at its own speed")
        return capture_profiler(script, script_args, skip_steps=skip_steps, steps=steps, name=name)
    return capture_emulated(script, script_args, device=device, skip_steps=skip_steps, steps=steps, name=name,
                            host_time=host_time, gpu_speed=speed.gpu, copy_speed=speed.copy,
                            host_speed=speed.host, real_clock=real_clock, window_from=window_from,
                            window_to=window_to)


# ----------------------------------------------------------------------------- CLI

@click.command("capture", context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})
@click.argument("script", type=click.Path())
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("-o", "--output", type=click.Path(),
              help="trace to write [<script-stem>.parquet in the current directory]")
@click.option("--overwrite", is_flag=True, help="replace the output if it exists (never a link, a non-file or the script)")
@click.option("--name", help="trace name stored in the metadata [script stem]")
@click.option("--skip-steps", type=click.IntRange(min=0), default=0, show_default=True,
              help="warm-up steps to drop")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="steps to keep [all]")
@click.option("--device", default=DEFAULT_DEVICE, show_default=True, metavar="PRESET",
              shell_complete=lambda _ctx, _param, text: [n for n in _device_names() if n.startswith(text)],
              help="the machine the emulation prices ops for: a preset name as replay --preset takes "
                   "(h100-sxm, h100-pcie, h100-nvl, h200, ...: `replay list presets`) or a path to a "
                   "preset .toml with the compute half (docs/machine.md)")
@click.option("--emulate/--no-emulate", default=None,
              help="emulate the GPU (default when torch.cuda.is_available() is False) or profile the real one")
@click.option("--host-time", type=click.Choice(HOST_TIME_MODES), default=DEFAULT_HOST_TIME, show_default=True,
              help="emulation: the script's own Python as thread CPU time scaled to the target host, "
                   "torch ops modelled (script); only named per-op costs of a GPU server, deterministic "
                   "(modelled); or wall time on this machine (measured)")
@click.option("--gpu-speed", default="1", show_default=True, metavar="F",
              help="emulation what-if: divide every kernel and memset duration by F (0.01..100)")
@click.option("--copy-speed", default="1", show_default=True, metavar="F",
              help="emulation what-if: divide every memcpy duration by F (0.01..100)")
@click.option("--host-speed", default="1", show_default=True, metavar="F",
              help="emulation what-if: divide every modelled host duration by F (0.01..100)")
@click.option("--nproc", type=click.IntRange(min=1, max=MAX_NPROC), default=None, metavar="N",
              help="run N emulated ranks of a torch.distributed script (as torchrun --nproc-per-node N) "
                   "and write one multi-rank trace")
@click.option("--real-clock", is_flag=True,
              help="emulation: the script's time.time/perf_counter/monotonic/sleep and cuda Event timing "
                   "use this machine's clock [default: the emulated clock]")
@click.option("--window-from", metavar="NAME", default=None,
              help="emulation: record from the first call of the Python function NAME (qualified name, "
                   "optionally module.) or the first record_function/NVTX range NAME on [the start]")
@click.option("--window-to", metavar="NAME", default=None,
              help="emulation: stop recording where the first call or range NAME after the window's start "
                   "ends [the end]")
@click.option("--progress/--no-progress", default=None,
              help="stage progress bar on stderr (default: when stderr is a terminal; never with -q)")
@reports_errors
def command(script, script_args, output, overwrite, name, skip_steps, steps, device, emulate, host_time,
            gpu_speed, copy_speed, host_speed, nproc, real_clock, window_from, window_to, progress):
    """Run SCRIPT (as `python SCRIPT SCRIPT_ARGS` would) and write its GPU trace.

    Everything after SCRIPT goes to the script; a script argument that looks like an option of
    this command (`-o`, `--steps`, ...) gets a one-line warning unless `--` comes before it. An
    existing output is replaced only with --overwrite.
    """
    from tracegen.emulation.speed import speed_factors

    speed = speed_factors(gpu_speed, copy_speed, host_speed)  # bad factors fail before anything runs
    gpu_speed, copy_speed, host_speed = speed.gpu, speed.copy, speed.host
    script_args = list(script_args)
    if script_args and script_args[0] == "--":
        script_args = script_args[1:]
    else:
        _warn_own_options(script_args)
    if os.path.lexists(script):  # a missing script is reported by run_script ("no such script")
        check_input_path(script)
    out = check_output_path(output or f"{Path(script).stem}.parquet", [script], overwrite)
    from fastrack_core.cli_support import stages

    with stages(["run and record", "write"], "capture", progress) as stage:
        stage("run and record")
        table, meta = capture(script, script_args, emulate=emulate, device=device, skip_steps=skip_steps,
                              steps=steps, name=name, host_time=host_time, gpu_speed=gpu_speed,
                              copy_speed=copy_speed, host_speed=host_speed, nproc=nproc, real_clock=real_clock,
                              window_from=window_from, window_to=window_to)
        stage("write")
        write_trace(out, table, meta)
    kinds = table.column("kind").to_pylist()
    gpu = sum(k in ("kernel", "memcpy", "memset", "collective") for k in kinds)
    busy = sum(d for d, k in zip(table.column("dur_ns").to_pylist(), kinds) if k in ("kernel", "memcpy", "memset"))
    how = f"emulated {meta['device_model']}" if meta["emulated"] else f"profiled on {meta['gpu_model']}"
    if nproc is not None:
        coll = sum(k == "collective" for k in kinds)
        how += f", {nproc} ranks, {coll} collective ops"
    click.echo(f"wrote {out}: {table.num_rows} ops ({gpu} on the GPU, busy {busy / 1e6:.3f} ms), {how}")


def _device_names() -> list[str]:
    from tracegen.emulation.costmodel import device_names

    return device_names()


def _own_option_names() -> set[str]:
    names = set()
    for p in command.params:
        if isinstance(p, click.Option):
            names.update(p.opts)
            names.update(p.secondary_opts)
    return names


def _warn_own_options(script_args: Sequence[str]) -> None:
    """One stderr line when script arguments before any ``--`` look like this command's own
    options (``tracegen capture train.py -o t.parquet``: the ``-o`` goes to the script)."""
    names = _own_option_names()
    shorts = {n for n in names if len(n) == 2}
    found = []
    for a in script_args:
        if a == "--":
            break
        head = a.split("=", 1)[0]
        if head in names or (a[:2] in shorts and not a.startswith("--")):
            found.append(head if head in names else a[:2])
    if found:
        click.echo(f"tracegen capture: warning: script argument{'s' if len(found) > 1 else ''} "
                   f"{', '.join(dict.fromkeys(found))} after SCRIPT go{'' if len(found) > 1 else 'es'} to the "
                   "script, not to tracegen capture (put capture's options before SCRIPT; write -- before "
                   "the script's own arguments to silence this)", err=True)
