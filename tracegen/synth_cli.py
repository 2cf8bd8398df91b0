"""``tracegen synth`` as the command line runs it: the commands of :mod:`tracegen.synth` plus the
output checks every tracegen writer applies (:func:`fastrack.outputs.check_output_path`): an
existing ``-o`` file is replaced only with ``--overwrite``; a link, a directory, a device or a
FIFO never. :mod:`tracegen.synth` itself stays free of command-line policy.
"""

from __future__ import annotations

import copy
import functools

import click

from fastrack.cli_support import reports_errors
from fastrack.outputs import check_output_path
from tracegen import synth


def _overwrite_option() -> click.Option:
    return click.Option(["--overwrite"], is_flag=True,
                        help="Replace OUTPUT if it exists (never a link, a directory or a device).")


def _any_path(param: click.Parameter) -> click.Parameter:
    """The ``output`` parameter with click's own file/directory test removed, so that every
    refusal comes from :func:`check_output_path` as one line."""
    if param.name != "output" or not isinstance(param.type, click.Path):
        return param
    relaxed = copy.copy(param)
    relaxed.type = click.Path()
    return relaxed


def with_output_check(cmd: click.Command) -> click.Command:
    """A copy of ``cmd`` (a command with an ``output`` parameter) that also takes ``--overwrite``
    and checks the output path before doing anything. A command that already has an
    ``overwrite`` parameter is returned unchanged."""
    if any(p.name == "overwrite" for p in cmd.params):
        return cmd
    inner = cmd.callback

    @functools.wraps(inner)
    @reports_errors
    def callback(*, overwrite: bool, **kwargs):
        check_output_path(kwargs["output"], (), overwrite)
        return inner(**kwargs)

    guarded = copy.copy(cmd)
    guarded.params = [_any_path(p) for p in cmd.params] + [_overwrite_option()]
    guarded.callback = callback
    return guarded


command = copy.copy(synth.command)
command.commands = {name: with_output_check(cmd) for name, cmd in synth.command.commands.items()}

__all__ = ["command", "with_output_check"]
