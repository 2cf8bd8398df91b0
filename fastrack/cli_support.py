"""Shared command-line plumbing: lazy sub-commands and one-line errors with exit code 2."""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Callable

import click

from fastrack.errors import FastrackError

EXIT_BAD_INPUT = 2


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
            click.echo(f"error: {one_line(exc.format_message())}{where}", err=True)
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
            fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        except OSError as exc:  # the file system refused (no space, read-only, permission, name too long)
            what = f"{exc.filename}: " if exc.filename else ""
            fail(f"{what}{exc.strerror or type(exc).__name__}")

    return wrapper
