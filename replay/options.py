"""Command-line options that several ``replay`` commands share, each declared once with one help text.

Use them as decorators on a click command; the callback receives the parameter names noted on
each. Options that look alike but mean something else in one command (``replay sweep``'s
``--set`` takes lists of values to sweep) are declared here too, under their own names.
"""

from __future__ import annotations

import click

from replay.dataparallel import DEFAULT_BUCKET_MB
from replay.plugins import DEFAULT_MODEL
from replay.study.executors import DASK_TIMEOUT_S

MODEL_HELP = ("Hardware model plug-in name; an unknown name lists the installed ones "
              "(entry-point group fastrack.models).")
PRESET_HELP = "Preset name or TOML file (default: the model's default preset)."


def model_option(func):
    """``--model`` -> ``model``."""
    return click.option("--model", default=DEFAULT_MODEL, show_default=True, metavar="NAME", help=MODEL_HELP)(func)


def preset_option(func):
    """``--preset`` -> ``preset``."""
    return click.option("--preset", default=None, metavar="NAME|FILE", help=PRESET_HELP)(func)


def set_option(func):
    """``--set`` -> ``overrides``: one value per parameter."""
    return click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
                        help="Set one model parameter, overriding the preset (repeatable).")(func)


def model_options(func):
    """``--model``, ``--preset`` and ``--set`` (-> ``model``, ``preset``, ``overrides``)."""
    return model_option(preset_option(set_option(func)))


def scale_option(func):
    """``--scale`` -> ``scale``: a tuple of ``KIND=FACTOR`` strings (parsed by :func:`replay.whatif.parse_scales`)."""
    return click.option("--scale", "scale", multiple=True, metavar="KIND=FACTOR",
                        help="What-if: multiply the durations of KIND (kernel, memcpy, host, collective) by FACTOR "
                             "before the protocol (repeatable).")(func)


def study_model_option(func):
    """``replay sweep``'s ``--model`` -> ``model``: None unless given, so that a study file can name it."""
    return click.option("--model", default=None, metavar="NAME",
                        help=f"{MODEL_HELP} Default: the study file's model, else {DEFAULT_MODEL}.")(func)


def study_presets_option(func):
    """``replay sweep``'s ``--preset`` -> ``presets``: several presets, each one axis value."""
    return click.option("--preset", "presets", multiple=True, metavar="NAME[,NAME...]",
                        help="Presets to run (names or TOML files; a comma separates several; repeatable; "
                             "default: the model's default preset).")(func)


def sweep_set_option(func):
    """``replay sweep``'s ``--set`` -> ``overrides``: values to sweep, one axis per option."""
    return click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=V1[,V2...]",
                        help="Parameter values to sweep; a comma separates values; A+B=... sets A and B together "
                             "(repeatable, one axis each).")(func)


def data_parallel_options(func):
    """``--data-parallel`` and ``--bucket-mb`` (-> ``data_parallel``, ``bucket_mb``)."""
    func = click.option("--bucket-mb", type=float, default=DEFAULT_BUCKET_MB, show_default=True,
                        help="DDP gradient bucket size for --data-parallel, MB (MiB, as bucket_cap_mb).")(func)
    func = click.option("--data-parallel", type=int, default=None, metavar="N",
                        help="What-if: replay a single-GPU training trace as N DDP ranks (docs/multi-gpu.md).")(func)
    return func


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


def dask_timeout_option(func):
    """``--dask-timeout`` -> ``dask_timeout``."""
    return click.option("--dask-timeout", type=float, default=DASK_TIMEOUT_S, show_default=True,
                        help="Seconds to wait for the Dask scheduler.")(func)


def serving_option(func):
    """``--serving`` -> ``serving``: demand serving metrics (they are reported anyway when the trace has
    request markers)."""
    return click.option("--serving", is_flag=True,
                         help="Report time to first token, time per output token and output tokens/s from the "
                              "trace's request markers (automatic when present; with this flag a trace without "
                              "them is an error). docs/serving.md.")(func)
