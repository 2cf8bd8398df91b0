"""One exception hierarchy for the whole project.

Library code raises these; only the command-line front ends turn them into a one-line message
on stderr and exit code 2. Every message names the file (when there is one), the field or op,
what was expected and what was found.
"""

from __future__ import annotations


def shown(text: object) -> str:
    """A name for a message: quoted when it looks like a name a person typed (a protocol, a model,
    a preset); otherwise, since it may come from a file and files carry tokens, only its length."""
    import re

    s = str(text)
    if len(s) <= 24 and re.fullmatch(r"[A-Za-z0-9_.:+-]*", s):
        return f"'{s}'"
    return f"(a name of {len(s)} characters)"


class FastrackError(Exception):
    """Base class of every error the project raises on purpose."""

    def __init__(self, message: str, *, path: str | None = None):
        self.path = str(path) if path is not None else None
        super().__init__(message)

    def __str__(self) -> str:  # "FILE: message" when a file is involved
        msg = super().__str__()
        return f"{self.path}: {msg}" if self.path else msg


class TraceFormatError(FastrackError):
    """An input trace (JSON, SQLite, Parquet) is unreadable or not what it claims to be."""


class SchemaError(TraceFormatError):
    """A Parquet trace does not follow the Fastrack trace schema (or is a newer version)."""


class GraphError(FastrackError):
    """The dependency graph is not schedulable: cycles, dangling deps, impossible values."""


class ConfigError(FastrackError):
    """A preset, a --set override or a study file is wrong."""


class PluginError(FastrackError):
    """An unknown hardware model or protocol name, or a plug-in that fails to load."""


class CaptureError(FastrackError):
    """A workload script could not be captured."""
