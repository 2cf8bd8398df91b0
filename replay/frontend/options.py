"""Command-line options that several ``replay`` commands share, each declared once with one help text.

Use them as decorators on a click command; the callback receives the parameter names noted on
each. Options that look alike but mean something else in one command (``replay sweep``'s
``--set`` takes lists of values to sweep) are declared here too, under their own names.
"""

from __future__ import annotations

import click

from replay.plugins import DEFAULT_MODEL

# (the defaults of --bucket-mb and --dask-timeout are imported by the decorators that use them, so
# a command without those options does not import replay.whatif.dataparallel or replay.frontend.study)

def complete_protocols(ctx, param, incomplete: str):
    """Shell completion of protocol names (``captured`` and the installed plug-ins); in a
    comma-separated list, of the last name."""
    from click.shell_completion import CompletionItem

    from replay.names import CAPTURED
    from replay.plugins import available_protocols

    head, sep, last = incomplete.rpartition(",")
    return [CompletionItem(head + sep + n) for n in [CAPTURED, *available_protocols()] if n.startswith(last)]


def complete_presets(ctx, param, incomplete: str):
    """Shell completion of the preset names of the chosen ``--model`` (default model otherwise)."""
    from click.shell_completion import CompletionItem

    from replay.plugins import load_model

    try:
        names = load_model(ctx.params.get("model") or DEFAULT_MODEL).available_presets()
    except Exception:  # noqa: BLE001 - completion must never fail the shell
        return []
    head, sep, last = incomplete.rpartition(",")
    return [CompletionItem(head + sep + n) for n in names if n.startswith(last)]


MODEL_HELP = ("Hardware model plug-in name; an unknown name lists the installed ones "
              "(entry-point group fastrack.models).")
PRESET_HELP = "Preset name or TOML file (default: the model's default preset)."


def model_option(func):
    """``--model`` -> ``model``."""
    return click.option("--model", default=DEFAULT_MODEL, show_default=True, metavar="NAME", help=MODEL_HELP)(func)


def preset_option(func):
    """``--preset`` -> ``preset``."""
    return click.option("--preset", default=None, metavar="NAME|FILE", help=PRESET_HELP,
                        shell_complete=complete_presets)(func)


def set_option(func):
    """``--set`` -> ``overrides``: one value per parameter."""
    return click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
                        help="Set one model parameter, overriding the preset (repeatable).")(func)


def model_options(func):
    """``--model``, ``--preset`` and ``--set`` (-> ``model``, ``preset``, ``overrides``)."""
    return model_option(preset_option(set_option(func)))


def scale_option(func):
    """``--scale`` -> ``scale``: a tuple of ``KIND=FACTOR`` strings (parsed by :func:`replay.whatif.scale.parse_scales`)."""
    return click.option("--scale", "scale", multiple=True, metavar="KIND=FACTOR",
                        help="What-if: multiply the durations of KIND (kernel, memcpy, host, collective) by FACTOR "
                             "before the protocol (repeatable).")(func)


def study_model_option(func):
    """``replay sweep``'s ``--model`` -> ``model``: None unless given, so that a study file can name it."""
    return click.option("--model", default=None, metavar="NAME",
                        help=f"{MODEL_HELP} Default: the study file's model, else {DEFAULT_MODEL}.")(func)


def study_presets_option(func):
    """``replay sweep``'s ``--preset`` -> ``presets``: several presets, each one axis value."""
    return click.option("--preset", "presets", multiple=True, metavar="NAME[,NAME...]", shell_complete=complete_presets,
                        help="Presets to run (names or TOML files; a comma separates several; repeatable; "
                             "default: the model's default preset).")(func)


def sweep_set_option(func):
    """``replay sweep``'s ``--set`` -> ``overrides``: values to sweep, one axis per option."""
    return click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=V1[,V2...]",
                        help="Parameter values to sweep; a comma separates values; A+B=... sets A and B together "
                             "(repeatable, one axis each).")(func)


def data_parallel_options(func):
    """``--data-parallel`` and ``--bucket-mb`` (-> ``data_parallel``, ``bucket_mb``)."""
    from replay.whatif.dataparallel import DEFAULT_BUCKET_MB

    func = click.option("--bucket-mb", type=float, default=DEFAULT_BUCKET_MB, show_default=True,
                        help="DDP gradient bucket size for --data-parallel, MB (MiB, as bucket_cap_mb).")(func)
    func = click.option("--data-parallel", type=int, default=None, metavar="N",
                        help="What-if: replay a single-GPU training trace as N DDP ranks (docs/multi-gpu.md).")(func)
    return func


def overwrite_option(func):
    """``--overwrite`` -> ``overwrite`` (for commands that write files)."""
    return click.option("--overwrite", is_flag=True,
                        help="Replace output files that exist (never a link, a directory, a device or an input).")(func)


def check_outputs(outputs, inputs=(), overwrite: bool = False) -> None:
    """Refuse, before any work, every output that would destroy something (fastrack_core.outputs) and
    two outputs on the same path. ``outputs``: paths, None for an output not asked for."""
    import os

    from fastrack_core.errors import ConfigError
    from fastrack_core.outputs import check_output_path

    given = [str(o) for o in outputs if o]
    for o in given:
        check_output_path(o, list(inputs), overwrite)
    real = [os.path.realpath(o) for o in given]
    if len(set(real)) < len(real):
        raise ConfigError("two outputs name the same file; give each its own path")


def json_option(func):
    """``--json`` -> ``as_json``."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print one JSON object instead of the text report.")(func)


def executor_options(func):
    """Where a study's replays run: ``--executor``, ``-j/--jobs`` and ``--progress``
    (-> ``executor``, ``jobs``, ``progress``)."""
    func = click.option("--progress/--no-progress", default=None,
                        help="Progress bar (default: when stderr is a terminal).")(func)
    func = click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
                        help="Local worker processes (default: CPU count; 1 = this process).")(func)
    func = click.option("--executor", default="local", show_default=True, metavar="local|dask://HOST:PORT",
                        help="Local process pool, or an existing Dask distributed scheduler.")(func)
    return func


def range_jobs_option(func):
    """``--range-jobs`` -> ``range_jobs`` (None: the default, every CPU this process may use)."""
    from replay.pipeline.ranges import MAX_JOBS

    return click.option("--range-jobs", type=click.IntRange(1, MAX_JOBS), default=None, metavar="N",
                        help="With --ranges: range points evaluated at once, in threads, within a memory allowance "
                             "(default: the CPUs this process may use; 1 = one at a time). The report is the same "
                             "for any N (docs/model.md).")(func)


def dask_timeout_option(func):
    """``--dask-timeout`` -> ``dask_timeout``."""
    from replay.frontend.study.executors import DASK_TIMEOUT_S

    return click.option("--dask-timeout", type=click.FloatRange(0.1, 3600), default=DASK_TIMEOUT_S,
                        show_default=True, callback=_finite,
                        help="Seconds to wait for the Dask scheduler and for its first worker.")(func)


def _finite(ctx, param, value):
    """FloatRange lets NaN through (every comparison with NaN is false): refuse it here."""
    if value is not None and value != value:
        from fastrack_core.cli_support import OwnBadParameter

        raise OwnBadParameter("expected a number, got nan", ctx=ctx, param=param)
    return value


def serving_option(func):
    """``--serving`` -> ``serving``: demand serving metrics (they are reported anyway when the trace has
    request markers)."""
    return click.option("--serving", is_flag=True,
                         help="Report time to first token, time per output token and output tokens/s from the "
                              "trace's request markers (automatic when present; with this flag a trace without "
                              "them is an error). docs/serving.md.")(func)
