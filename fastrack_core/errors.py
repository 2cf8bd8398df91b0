"""One exception hierarchy for the whole project.

Library code raises these; only the command-line front ends turn them into a one-line message
on stderr and exit code 2. Every message names the file (when there is one), the field or op,
what was expected and what was found.
"""

from __future__ import annotations


def shown(text: object) -> str:
    """A value for a message, by type and size only: whatever a person typed or a file held may
    carry a secret (a token pasted as a protocol name, a password in a URL), so a message never
    repeats it (docs/robustness.md, "Nothing from the input in messages")."""
    return f"(a {type(text).__name__} of {len(str(text))} characters)"


def closest(text: object, known) -> str:
    """``"; did you mean 'NAME'?"`` for the registered name closest to ``text`` (names of ours,
    never the input), or ``""`` when none is close."""
    import difflib

    m = difflib.get_close_matches(str(text), sorted(known), n=1, cutoff=0.6)
    return f"; did you mean '{m[0]}'?" if m else ""


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
