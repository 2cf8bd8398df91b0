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

    def get_command(self, ctx, name):
        if name in self.lazy_commands:
            module_name, attr = self.lazy_commands[name].split(":")
            return getattr(importlib.import_module(module_name), attr)
        return super().get_command(ctx, name)


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

    return wrapper
