"""Atomic output: write to a temporary name in the target folder, rename when complete (a file,
or a whole directory of files: :func:`atomic_dir`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


_RANDOM_AND_SUFFIX = 8 + len(".part") + 2  # mkstemp's random part, the suffix, the dots around the name


def _temp_prefix(path: Path, extra: int = 0) -> str:
    """``.NAME.`` for the temporary sibling of ``path``, with ``NAME`` cut (at a character
    boundary) so that the whole temporary name fits the folder's name limit: any legal output name
    gets a legal temporary one (``extra``: more characters the caller appends)."""
    try:
        limit = os.pathconf(path.parent if str(path.parent) else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    room = max(1, limit - _RANDOM_AND_SUFFIX - extra)
    name = path.name.encode()
    if len(name) > room:
        name = name[:room].decode("utf-8", "ignore").encode()
    return f".{name.decode()}."


def _user_error(exc: OSError, path: Path) -> OSError:
    """``exc`` re-made to name ``path`` (the file the user gave) rather than the temporary sibling
    or nothing: ``OSError(errno, strerror, path)``. Arrow's I/O errors carry the errno only in
    their text (``... Detail: [errno 28] ...``): it is read from there."""
    import errno as _errno
    import re

    code = exc.errno
    if code is None:
        m = re.search(r"\[errno (\d+)\]", str(exc))
        code = int(m.group(1)) if m else None
    if code is None:
        code = _errno.EIO
    return OSError(code, os.strerror(code), str(path))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block
    succeeds. On any exception the temporary file is removed and ``path`` is untouched. An
    ``OSError`` (no space, read-only folder, ...) is raised again naming ``path``, the file the
    user gave, never the temporary one."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".part", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise _user_error(exc, path) from None
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; outputs get the usual permissions
        yield tmp
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and (exc.filename in (None, tmp) or exc.errno is None):
            raise _user_error(exc, path) from None
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new empty directory next to ``path``; when the block succeeds it takes the place of
    ``path`` (an existing directory there is renamed away, the new one renamed in, the old one
    removed), so readers see the old content or the new, never a mix. On any exception the new
    directory (and any parent folder created for it) is removed and ``path`` is left as it was.
    ``path`` must not exist or be a directory: anything else raises :class:`NotADirectoryError`.
    Whether an existing directory may be replaced is the caller's decision."""
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a directory")
    missing = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        folder.mkdir()
    umask = os.umask(0)
    os.umask(umask)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(path), suffix=".part", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp creates 0700; outputs get the usual permissions
        yield tmp
        old = None
        if path.is_dir():
            old = Path(tempfile.mkdtemp(prefix=_temp_prefix(path), suffix=".old", dir=path.parent))
            os.replace(path, old)  # onto the empty placeholder
        try:
            os.replace(tmp, path)
        except BaseException:
            if old is not None:
                os.replace(old, path)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in missing:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
