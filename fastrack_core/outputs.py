"""Which paths a command may read and which it may (over)write, checked before any work is done.

Every command that reads input files and writes an output file calls these first:

* :func:`check_input_path`: an input must exist and be a regular file (or, where the command
  takes one, a directory). A FIFO, a socket or a device is refused, because reading one can block
  forever or never end.
* :func:`check_output_path`: an output that already exists is replaced only with ``overwrite``
  (the ``--overwrite`` option); one that exists and is not a regular file (a directory, a device
  such as ``/dev/null``, a FIFO, a symbolic link, even to a regular file) or that is the same file
  as one of the inputs is refused even then.

Both raise :class:`~fastrack_core.errors.FastrackError` subclasses whose one-line message names the
path; the command-line front ends turn them into one line on stderr and exit code 2. The writing
itself is atomic (:mod:`fastrack_core.atomic`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

from fastrack_core.errors import FastrackError, TraceFormatError

OVERWRITE_HINT = "pass --overwrite to replace it"


def _kind(mode: int) -> str:
    """A short name for what a non-regular file is."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def check_input_path(path: str | os.PathLike, *, allow_dir: bool = False) -> Path:
    """``path`` as a :class:`Path` when it names a readable kind of input: an existing regular
    file (symbolic links are followed), or a directory when ``allow_dir``. Raises
    :class:`TraceFormatError` otherwise."""
    p = str(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise TraceFormatError("no such file", path=p) from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read file ({exc.strerror or exc})", path=p) from None
    if stat.S_ISREG(mode) or (allow_dir and stat.S_ISDIR(mode)):
        return Path(p)
    expected = "a regular file or a directory" if allow_dir else "a regular file"
    raise TraceFormatError(f"is {_kind(mode)}, expected {expected}", path=p)


def check_output_path(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (),
                      overwrite: bool = False) -> Path:
    """``path`` as a :class:`Path` when a command may write it. A path that does not exist yet is
    fine. An existing one must be a regular file (not a symbolic link) that is none of ``inputs``,
    and is replaced only when ``overwrite`` is true. Raises :class:`FastrackError` otherwise."""
    p = str(path)
    try:
        mode = os.lstat(p).st_mode
    except FileNotFoundError:
        return Path(p)
    except OSError as exc:
        raise FastrackError(f"cannot check the output path ({exc.strerror or exc})", path=p) from None
    if stat.S_ISLNK(mode):
        raise FastrackError("output is a symbolic link; refusing to replace it, even with --overwrite", path=p)
    if not stat.S_ISREG(mode):
        raise FastrackError(f"output is {_kind(mode)}, not a regular file; refusing to write it", path=p)
    for src in inputs:
        try:
            same = os.path.samefile(p, src)
        except OSError:  # an input that does not exist (yet) cannot be the output
            same = False
        if same:
            raise FastrackError(f"output is the same file as the input {src}; refusing to overwrite it", path=p)
    if not overwrite:
        raise FastrackError(f"output already exists; {OVERWRITE_HINT}", path=p)
    return Path(p)


__all__ = ["check_input_path", "check_output_path", "OVERWRITE_HINT"]
