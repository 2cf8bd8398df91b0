"""Generated sections of documentation files.

A script that writes figures into a doc (benchmarks/validation/validate_model.py, whatif.py, ...) owns the
text between one begin marker and one end marker of that file, markers included, and nothing
else. The file is rewritten atomically; a file without exactly one begin marker followed by one
end marker is refused and left as it is.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fastrack_core.atomic import write_text_atomic
from fastrack_core.errors import FastrackError


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise FastrackError(f"{path}: cannot read ({exc.strerror}); nothing written") from None


def section_span(text: str, begin: str, end: str, path: str | os.PathLike) -> tuple[int, int]:
    """(first, last + 1) character of the marked block of ``text``, both markers included."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise FastrackError(f"{path}: needs exactly one '{begin}' followed by one '{end}'; nothing written")
    return text.index(begin), text.index(end) + len(end)


def read_section(path: str | os.PathLike, begin: str, end: str) -> str:
    """The marked block of ``path``, markers included."""
    text = _read(Path(path))
    a, b = section_span(text, begin, end, path)
    return text[a:b]


def check_section(path: str | os.PathLike, begin: str, end: str) -> None:
    """Refuse (FastrackError) a file that is missing, unreadable or without its markers, before any work."""
    path = Path(path)
    if not path.is_file():
        raise FastrackError(f"{path}: no such file; nothing written")
    read_section(path, begin, end)


def replace_section(path: str | os.PathLike, begin: str, end: str, block: str) -> None:
    """Replace the marked block of ``path`` by ``block`` (which carries both markers itself)."""
    if not (block.startswith(begin) and block.endswith(end)):
        raise ValueError("a generated block starts with its begin marker and ends with its end marker")
    path = Path(path)
    text = _read(path)
    a, b = section_span(text, begin, end, path)
    write_text_atomic(path, text[:a] + block + text[b:])


def between(begin: str, body: str, end: str) -> str:
    """The block of a section whose generated ``body`` sits on the lines between the markers."""
    return f"{begin}\n{body}{end}"


def emit_section(write: str | os.PathLike | None, begin: str, end: str, make) -> None:
    """A doc generator's output: ``make()`` (the generated body) printed on stdout, or, with
    ``write``, put between the markers of that file. The file and its markers are checked before
    ``make`` runs, so a bad ``--write`` is refused before any work and nothing is written."""
    if write is not None:
        check_section(write, begin, end)
    text = make()
    if write is None:
        sys.stdout.write(text)
    else:
        replace_section(write, begin, end, between(begin, text, end))
