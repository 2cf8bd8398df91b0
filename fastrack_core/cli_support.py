"""Shared command-line plumbing: lazy sub-commands, one-line errors with exit code 2, ``-q``/``-v``
(the ``logging`` level of our packages), and stage progress bars.

Messages about the work (what a sweep will run, a warning about the steps kept) go through
``logging`` (loggers under ``fastrack``, ``tracegen`` and ``replay``) to stderr: shown by
default (INFO), hidden by ``-q`` (warnings and errors only), with debug detail under ``-v``. What a
command reports (its table, its JSON, ``wrote FILE``) is its output, on stdout, whatever the level.
Progress bars (tqdm) go to stderr, only when stderr is a terminal, and never under ``-q``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import importlib
import logging
import re
import sys
import threading
from typing import Callable, Iterator, Sequence

import click

from fastrack_core.errors import FastrackError, GraphError

EXIT_BAD_INPUT = 2
OUR_LOGGERS = ("fastrack", "fastrack_core", "tracegen", "replay")
VERBOSITY_FLAGS = ("-q", "--quiet", "-v", "--verbose", "-vv")
_QUIET_KEY = "fastrack.quiet"


class _ClickHandler(logging.Handler):
    """Writes records to the current stderr (resolved per record, so test runners that swap
    ``sys.stderr`` see them); warnings and errors are prefixed with their level."""

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if record.levelno >= logging.WARNING:
            msg = f"{record.levelname.lower()}: {msg}"
        click.echo(msg, err=True)


_HANDLER = _ClickHandler()


def setup_logging(verbose: int = 0, quiet: bool = False) -> int:
    """Route our loggers to stderr at INFO (default), WARNING (``quiet``) or DEBUG (``verbose``)."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    for name in OUR_LOGGERS:
        log = logging.getLogger(name)
        log.setLevel(level)
        if _HANDLER not in log.handlers:
            log.addHandler(_HANDLER)
        log.propagate = False
    return level


def _verbosity_callback(ctx: click.Context, param: click.Parameter, value):
    ctx.meta[f"fastrack.{param.name}"] = value  # meta is shared with the sub-command's context
    setup_logging(ctx.meta.get("fastrack.verbose") or 0, bool(ctx.meta.get(_QUIET_KEY)))
    return value


def verbosity_options(func: Callable) -> Callable:
    """``-q/--quiet`` and ``-v/--verbose`` on a command group (applied before any sub-command runs)."""
    func = click.option("-v", "--verbose", count=True, expose_value=False, is_eager=True,
                        callback=_verbosity_callback, help="More messages on stderr (debug detail).")(func)
    func = click.option("-q", "--quiet", is_flag=True, expose_value=False, is_eager=True,
                        callback=_verbosity_callback,
                        help="Only warnings and errors on stderr; no progress bars. Results still go to stdout.")(func)
    return func


def is_quiet() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.meta.get(_QUIET_KEY))


def progress_default(progress: bool | None) -> bool | None:
    """A ``--progress/--no-progress`` value: as given; else off under ``-q``; else None (tqdm
    decides: on when stderr is a terminal)."""
    if progress is not None:
        return progress
    return False if is_quiet() else None


def _is_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal (what tqdm's ``disable=None`` asks)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


@contextlib.contextmanager
def stages(names: Sequence[str], desc: str, progress: bool | None = None) -> Iterator[Callable[[str], None]]:
    """A progress bar over the named stages of one long command (``convert``, ``capture``); yields
    ``stage(name)``, called as each stage starts. Off when stderr is not a terminal (or ``-q``):
    then tqdm is not even imported (~0.04 s of a short command)."""
    enabled = progress_default(progress)
    if enabled is False or (enabled is None and not _is_terminal(sys.stderr)):
        yield lambda _name: None
        return
    from tqdm import tqdm

    bar = tqdm(total=len(names), desc=desc, unit="stage", disable=None if enabled is None else not enabled,
               bar_format="{desc}: {n_fmt}/{total_fmt} stages, {postfix} [{elapsed}]", leave=False)
    seen = {"n": -1}

    def stage(name: str) -> None:
        if seen["n"] >= 0:
            bar.update(1)
        seen["n"] += 1
        bar.set_postfix_str(name)

    stop = threading.Event()
    if not bar.disable:  # redraw while a long stage runs, so the elapsed time moves
        threading.Thread(target=lambda: [bar.refresh() for _ in iter(lambda: stop.wait(0.5), True)],
                         daemon=True).start()
    try:
        yield stage
        if seen["n"] >= 0:
            bar.update(1)
    finally:
        stop.set()
        bar.close()


class LazyGroup(click.Group):
    """A click group whose sub-commands live in their own modules, imported only when used
    (so ``tracegen info`` never pays for importing torch)."""

    def __init__(self, *args, lazy_commands: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_commands))

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Click's own usage errors (unknown option, bad value, missing argument) as one line on
        stderr with exit code 2, like every other error, instead of click's three-line usage block."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError" and exc.ctx is not None:  # bare command: its help
                click.echo(exc.ctx.get_help())
                sys.exit(0)
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"error: {one_line(usage_message(exc))}{where}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def get_command(self, ctx, name):
        if name in self.lazy_commands:
            module_name, attr = self.lazy_commands[name].split(":")
            return getattr(importlib.import_module(module_name), attr)
        return super().get_command(ctx, name)


class OwnBadParameter(click.BadParameter):
    """A bad option value reported in a message of ours, which names the value by type and size
    only (:func:`fastrack_core.errors.shown`): shown as it is by :func:`usage_message`."""


_EXTRA_ARGS = re.compile(r"^Got unexpected extra arguments? \((.*)\)$", re.S)
_NO_COMMAND = re.compile(r"^No such command '(.*)'\.$", re.S)


def _expected(param: click.Parameter | None) -> str:
    """What an option takes, in words (from its declared type: ours, not the input)."""
    typ = getattr(param, "type", None)
    if isinstance(typ, (click.IntRange, click.FloatRange)):
        what = "an integer" if isinstance(typ, click.IntRange) else "a number"
        describe = getattr(typ, "_describe_range", None)
        return f"{what} in {describe()}" if callable(describe) else what
    if isinstance(typ, click.Choice):
        return "one of " + ", ".join(map(str, typ.choices))
    return {click.INT: "an integer", click.FLOAT: "a number", click.BOOL: "a boolean"}.get(
        typ, f"a value of type {typ.name}" if typ is not None else "another value")


def usage_message(exc: click.UsageError) -> str:
    """Click's usage error without what was typed (docs/robustness.md, "Nothing from the input in
    messages"): a bad value says what the option takes, an unknown option or extra arguments are
    named by type and size; a file an option or argument names stays, as for every error about a
    file the user gave."""
    from fastrack_core.errors import shown

    if isinstance(exc, click.NoSuchOption):
        near = [p for p in (exc.possibilities or ()) if p]
        hint = f"; did you mean {', '.join(sorted(near))}?" if near else ""
        return f"no such option {shown(exc.option_name)}{hint}"
    if isinstance(exc, click.BadParameter) and not isinstance(exc, (click.MissingParameter, OwnBadParameter)) \
            and not isinstance(getattr(exc.param, "type", None), (click.Path, click.File)):
        if exc.param is not None and exc.ctx is not None:
            name = exc.param.get_error_hint(exc.ctx)
        else:
            name = exc.param_hint if isinstance(exc.param_hint, str) else "an option"
        return f"Invalid value for {name}: expected {_expected(exc.param)}"
    message = exc.format_message()
    m = _EXTRA_ARGS.match(message)
    if m:
        n = len(m.group(1).split())
        return f"got {n} unexpected extra argument{'s' if n != 1 else ''}"
    m = _NO_COMMAND.match(message)
    if m:
        return f"no such command {shown(m.group(1))}"
    return message


def one_line(text: str) -> str:
    """A message on one line (whitespace runs, newlines included, become one space)."""
    return " ".join(str(text).split())


def fail(message: str) -> None:
    """Print one line on stderr and exit 2."""
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def reports_errors(func: Callable) -> Callable:
    """Decorator for command callbacks: FastrackError -> one line on stderr, exit code 2."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except FastrackError as exc:
            if isinstance(exc, GraphError) and exc.path is None and isinstance(kwargs.get("trace"), (str, os.PathLike)):
                exc.path = os.fspath(kwargs["trace"])  # a graph the command built from its TRACE argument
            fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        except OSError as exc:  # the file system refused (no space, read-only, permission, name too long)
            what = f"{exc.filename}: " if exc.filename else ""
            fail(f"{what}{exc.strerror or type(exc).__name__}")

    return wrapper
