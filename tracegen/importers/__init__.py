"""Trace importers: the importer interface, the registry of input formats, and detection.

An input format is one :class:`Importer` registered in the entry-point group
``fastrack.importers`` (:data:`GROUP`); the entry's name is the format's name. ``tracegen
convert`` (detection and ``--format``, whose choices, help and "unknown input format" error are
built from the registry), :func:`fastrack.convert` and ``replay`` (which reads a non-Parquet
input through the same entries, without importing tracegen: ``replay/plugins.py``) all use this
one group, so an importer of another package installs exactly like one of ours::

    [project.entry-points."fastrack.importers"]
    kineto = "tracegen.importers:KINETO"

The shipped formats are Chakra ET, PyTorch ET (with its Kineto trace), Kineto JSON and Nsight
Systems SQLite (:data:`CHAKRA`, :data:`PYTORCH_ET`, :data:`KINETO`, :data:`NSYS`; their readers
are the modules of this package). :func:`refuse_unconvertible` turns away, with a hint, the
inputs that are known not to be profiler traces (an Nsight Systems report before its SQLite
export, a Parquet trace that is already converted), whatever the format asked for.
"""

from __future__ import annotations

import abc
import functools
import os
from importlib.metadata import EntryPoint, entry_points
from typing import Callable, Sequence

from fastrack_core.errors import FastrackError, PluginError, TraceFormatError, closest, shown
from fastrack_core.outputs import check_input_path
from fastrack_core.sniff import (PARQUET_NOT_PROFILER_HINT, PARQUET_TRACE_HINT, SQLITE_MAGIC, looks_like_json,
                                 not_a_profiler_trace_hint, plain_head)
from tracegen.importers import chakra, kineto, pytorch_et
from tracegen.importers.common import RawImport, read_head

GROUP = "fastrack.importers"
AUTO = "auto"  # the --format value that detects the format of each input


class Importer(abc.ABC):
    """Base class of importers: one input format of ``tracegen convert`` and ``replay``.

    Class attributes (a subclass sets the first three):

    ``name``
        the format's name: the entry-point name it is registered under (the registry refuses a
        mismatch) and the value of ``--format``.
    ``description``
        one line naming the format, for ``--format``'s help and the "unknown input format" error
        (a noun phrase: ``"Nsight Systems SQLite export"``).
    ``sniff_bytes``
        how many leading bytes of a file :meth:`recognises` is given, a positive int: the caller
        reads the first ``max(sniff_bytes)`` bytes of the file once and hands each importer
        exactly its first ``sniff_bytes`` (fewer only when the file is shorter). A magic number
        of N bytes needs ``sniff_bytes >= N``; nothing is ever cut silently to a default.
    ``order``
        detection order: importers are asked in ascending ``(order, name)`` and the first that
        recognises an input names its format. A broad test (any JSON, any directory) takes a
        high number so that the specific ones are asked first; the default, 50, puts a new
        importer before the shipped Kineto (80) and Nsight (90) ones and after Chakra (10) and
        PyTorch ET (20).
    ``reads_with``
        names of other formats whose files this one reads together with its own (PyTorch ET:
        ``("kineto",)``): detected inputs of this format plus any of those are read by this one
        instead of being refused as a mix.
    ``replay_reads``
        whether ``replay`` reads one file of this format directly (:meth:`load`: imported in
        memory, exactly as ``tracegen convert`` would write it). When false, :meth:`load`
        refuses with one line saying to convert the file first.

    Methods: :meth:`recognises` and :meth:`read` are the importer's own; :meth:`sniff` and
    :meth:`load` are the callers' (``tracegen convert`` and ``replay``) and are not overridden.
    Errors about an input are :class:`~fastrack_core.errors.TraceFormatError` raised with the
    file (``path=``) and a message that names the field or record, never data read from it.
    """

    name: str = ""
    description: str = ""
    sniff_bytes: int = 0
    order: int = 50
    reads_with: tuple[str, ...] = ()
    replay_reads: bool = True

    @abc.abstractmethod
    def recognises(self, head: bytes, path: str) -> bool:
        """Whether ``path`` holds this format. ``head``: the file's first :attr:`sniff_bytes` bytes
        as stored (gzip not decompressed: :func:`fastrack_core.sniff.plain_head` does that). For a
        directory ``head`` is ``b""``; a format that takes directories may look inside (reading at
        most ``sniff_bytes`` of any file), others return False. An input of another format is a
        plain False, never an error."""

    @abc.abstractmethod
    def read(self, paths: list[str]) -> RawImport:
        """Import ``paths`` (files, or directories where the format takes them; more than one
        for a multi-rank trace) into a :class:`~tracegen.importers.common.RawImport`: the raw
        ops (the frame contract of :mod:`tracegen.deps`, which derives the dependencies) or a
        finished schema-v1 ``table``, the metadata to keep, the records read and the files read."""

    def sniff(self, path: str | os.PathLike, head: bytes | None = None) -> bool:
        """Whether ``path`` holds this format: :meth:`recognises` with the first
        :attr:`sniff_bytes` bytes of ``head`` (read here when ``head`` is None; a longer head is
        cut to :attr:`sniff_bytes`). Raises :class:`TraceFormatError` when a file cannot be read."""
        p = os.fspath(path)
        if os.path.isdir(p):
            head = b""
        elif head is None:
            head = read_head(p, self.sniff_bytes)
        return bool(self.recognises(head[: self.sniff_bytes], p))

    def load(self, path: str | os.PathLike):
        """``replay``'s direct read: the :class:`fastrack_core.traceio.Trace` that ``tracegen convert
        path -o t.parquet`` then reading ``t.parquet`` would give (the same validation, metadata
        encoding and cleaning), built in memory. Refused (one line) when :attr:`replay_reads` is false."""
        from fastrack_core.traceio import trace_in_memory

        p = os.fspath(path)
        if not self.replay_reads:
            raise TraceFormatError(
                f"is a '{self.name}' input ({self.description}), not a Fastrack Parquet trace; replay reads this "
                "format only once converted: tracegen convert FILE -o TRACE.parquet", path=p)
        check_input_path(p, allow_dir=True)
        refuse_unconvertible(p)
        table, metadata, _ = import_inputs(self, [p])
        return trace_in_memory(table, metadata, p)

    def __repr__(self) -> str:
        return f"<importer {self.name}>"


# ----------------------------------------------------------------------------- the shipped formats


class ChakraImporter(Importer):
    name = "chakra"
    description = "Chakra ET (.et protobuf, plain or gzip, or a directory of them)"
    sniff_bytes = chakra.SNIFF_BYTES  # a length prefix, the GlobalMetadata and the first Node
    order = 10
    replay_reads = False  # convert first (replay's Chakra input is a converted trace)

    def recognises(self, head: bytes, path: str) -> bool:
        if os.path.isdir(path):
            return chakra.sniff(path)  # the first *.et file inside
        from fastrack_core.chakra import looks_like_et

        return looks_like_et(plain_head(head))

    def read(self, paths: list[str]) -> RawImport:
        return chakra.read(paths)


class PytorchEtImporter(Importer):
    name = "pytorch-et"
    description = "PyTorch ET JSON, with the Kineto trace of the same run"
    sniff_bytes = pytorch_et.SNIFF_BYTES  # the opening of the JSON object, up to its "schema" key
    order = 20  # before Kineto: an ET is JSON too
    reads_with = ("kineto",)
    replay_reads = False  # two inputs (the ET and its Kineto trace): convert them together

    def recognises(self, head: bytes, path: str) -> bool:
        if os.path.isdir(path):
            return pytorch_et.sniff(path)  # the first JSON file inside
        return bool(pytorch_et._HEAD_RE.match(plain_head(head)))

    def read(self, paths: list[str]) -> RawImport:
        return pytorch_et.read(paths)


class KinetoImporter(Importer):
    name = "kineto"
    description = "Kineto JSON of the PyTorch profiler (plain or gzip, or a directory of rank files)"
    sniff_bytes = 16  # the gzip magic, or "{" / "[" opening JSON after at most 15 blanks
    order = 80  # broad: any JSON, any directory

    def recognises(self, head: bytes, path: str) -> bool:
        return os.path.isdir(path) or looks_like_json(head)

    def read(self, paths: list[str]) -> RawImport:
        return kineto.read(paths)


class NsysImporter(Importer):
    """Its reader (:mod:`tracegen.importers.nsys`) needs pandas, which a Kineto convert never
    loads: it is imported on first read, and sniffing needs only the SQLite magic."""

    name = "nsys"
    description = "Nsight Systems SQLite export"
    sniff_bytes = len(SQLITE_MAGIC)
    order = 90
    replay_reads = False  # convert first

    def recognises(self, head: bytes, path: str) -> bool:
        return not os.path.isdir(path) and head.startswith(SQLITE_MAGIC)

    def read(self, paths: list[str]) -> RawImport:
        from tracegen.importers import nsys

        return nsys.read(paths)


CHAKRA = ChakraImporter()
PYTORCH_ET = PytorchEtImporter()
KINETO = KinetoImporter()
NSYS = NsysImporter()


# ----------------------------------------------------------------------------- the registry


@functools.lru_cache(maxsize=None)
def _entry_points() -> dict[str, EntryPoint]:
    """Installed entries of :data:`GROUP` (scanned once per process)."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def installed() -> dict[str, str]:
    """Format name -> ``module:object`` of every installed importer, without loading any."""
    return {n: ep.value for n, ep in sorted(_entry_points().items())}


def load_importer(name: str) -> Importer:
    """The importer registered as ``name``; :class:`PluginError` for an unknown name or a plug-in
    that does not load or is not an :class:`Importer`."""
    eps = _entry_points()
    if name not in eps:
        raise PluginError(f"unknown input format {shown(name)}{closest(name, eps)}; installed formats: {', '.join(sorted(eps)) or '(none)'}")
    try:
        obj = eps[name].load()
    except Exception as exc:  # a broken third-party plug-in: say which one
        raise PluginError(f"importer '{name}' ({eps[name].value}) failed to load: {type(exc).__name__}: {exc}") from exc
    if isinstance(obj, type) and issubclass(obj, Importer):
        obj = obj()
    if not isinstance(obj, Importer):
        raise PluginError(f"importer '{name}' ({eps[name].value}) is {obj!r}, not a tracegen.importers.Importer")
    problem = _problem(obj, name)
    if problem:
        raise PluginError(f"importer '{name}' ({eps[name].value}): {problem}")
    return obj


def _problem(obj: Importer, name: str) -> str | None:
    if obj.name != name:
        return f"its name is {shown(obj.name)}, not the entry-point name '{name}'"
    if not (isinstance(obj.sniff_bytes, int) and obj.sniff_bytes > 0):
        return "sniff_bytes must be a positive int (how many leading bytes its sniffer is given)"
    if not isinstance(obj.order, int):
        return "order must be an int"
    if not (isinstance(obj.description, str) and obj.description and "\n" not in obj.description):
        return "description must be one non-empty line"
    if not (isinstance(obj.reads_with, tuple) and all(isinstance(n, str) for n in obj.reads_with)):
        return "reads_with must be a tuple of format names"
    return None


def formats() -> dict[str, Importer]:
    """Every installed importer by format name, in detection order (ascending ``(order, name)``)."""
    found = [load_importer(n) for n in sorted(_entry_points())]
    return {imp.name: imp for imp in sorted(found, key=lambda i: (i.order, i.name))}


def format_names() -> tuple[str, ...]:
    """The installed formats' names, in detection order."""
    return tuple(formats())


def catalogue() -> list[tuple[str, str]]:
    """(name, description) of every installed format in detection order, for help texts: never
    raises, so that ``tracegen convert --help`` works with a broken plug-in installed (listed
    last; using it gives its one-line error)."""
    good, bad = [], []
    for name in sorted(_entry_points()):
        try:
            good.append(load_importer(name))
        except PluginError:
            bad.append((name, "does not load"))
    return [(i.name, i.description) for i in sorted(good, key=lambda i: (i.order, i.name))] + bad


def formats_help() -> str:
    """The ``--format`` help: what ``auto`` tries, in order."""
    listed = "; ".join(f"{n}: {d}" for n, d in catalogue())
    return f"Input format; {AUTO} asks each installed format in turn ({listed})."


def unknown_format_message() -> str:
    """The one-line error for an input no installed importer recognises."""
    listed = "; ".join(f"{n}: {d}" for n, d in catalogue()) or "none installed"
    return f"unknown input format: not one of the installed formats ({listed})"


def head_of(path: str, importers: Sequence[Importer]) -> bytes:
    """The first bytes every importer of ``importers`` is to be given (``max(sniff_bytes)``; ``b""``
    for a directory). Raises :class:`TraceFormatError` when the file cannot be read."""
    if os.path.isdir(path):
        return b""
    return read_head(path, max((i.sniff_bytes for i in importers), default=1))


def detect(path: str | os.PathLike) -> str:
    """The format name of one input (file or directory): the first installed importer, in
    detection order, that recognises it. One-line :class:`TraceFormatError` otherwise."""
    p = os.fspath(path)
    check_input_path(p, allow_dir=True)
    refuse_unconvertible(p)
    found = formats()
    head = head_of(p, list(found.values()))
    if not os.path.isdir(p) and not head:
        raise TraceFormatError("empty file", path=p)
    for name, importer in found.items():
        if importer.sniff(p, head):
            return name
    raise TraceFormatError(unknown_format_message(), path=p)


def choose(inputs: Sequence[str | os.PathLike], fmt: str = AUTO) -> Importer:
    """The importer that reads ``inputs`` together: ``fmt`` when it names a format, else the one
    format every input is detected as (an input of a format in that one's ``reads_with`` joins
    it). Every input is checked first: a FIFO or a device would block a reader, and a ``.nsys-rep``
    report or a Parquet trace is refused with a hint whatever ``fmt`` says."""
    inputs = [os.fspath(p) for p in inputs]
    if not inputs:
        raise TraceFormatError("no input files")
    if fmt != AUTO and fmt not in _entry_points():
        raise TraceFormatError(f"unknown format {shown(fmt)}{closest(fmt, _entry_points())}, expected one of {', '.join((AUTO, *format_names()))}")
    for p in inputs:
        check_input_path(p, allow_dir=True)
        refuse_unconvertible(p)
    if fmt != AUTO:
        return load_importer(fmt)
    kinds = {p: detect(p) for p in inputs}
    found = formats()
    seen = [n for n in found if n in set(kinds.values())]  # in detection order
    for name in seen:
        if set(seen) - {name} <= set(found[name].reads_with):
            return found[name]
    desc = ", ".join(f"{os.path.basename(p)} ({k})" for p, k in kinds.items())
    raise TraceFormatError(f"inputs mix formats: {desc}")


def import_inputs(importer: Importer, inputs: Sequence[str], stage: Callable[[str], None] | None = None):
    """Read ``inputs`` with ``importer`` and derive their dependencies: (schema-v1 table,
    metadata, records read). ``stage("dependencies")`` is called between the two."""
    from tracegen.deps import derive_dependencies

    inputs = [os.fspath(p) for p in inputs]
    label = inputs[0] if len(inputs) == 1 else None
    try:
        imp = importer.read(inputs)
        if not isinstance(imp, RawImport):
            raise PluginError(f"importer '{importer.name}': read() returned {type(imp).__name__}, not a RawImport")
        label = imp.files[0] if len(imp.files) == 1 else label
        (stage or (lambda _name: None))("dependencies")
        table = imp.table if imp.table is not None else derive_dependencies(imp.raw, path=label)
    except MemoryError:  # (numpy's _ArrayMemoryError too): one line, naming the input, never a traceback
        raise TraceFormatError(f"out of memory while importing {len(inputs)} input file(s) of format "
                               f"'{importer.name}' (docs/robustness.md \"Reader limits\")", path=label) from None
    return table, imp.metadata, imp.num_events


def refuse_unconvertible(path: str | os.PathLike) -> None:
    """Raise :class:`TraceFormatError` with what to do instead when ``path`` (a file) is known
    not to be importable whatever the format asked for: an Nsight Systems report (``.nsys-rep``:
    export it to SQLite first) or a Parquet file (already a trace: no conversion needed)."""
    if os.path.isdir(path):
        return
    hint = not_a_profiler_trace_hint(path)
    if hint == PARQUET_NOT_PROFILER_HINT:
        from fastrack_core.traceio import read_metadata

        try:
            read_metadata(path)
            hint = PARQUET_TRACE_HINT
        except FastrackError:
            pass
    if hint:
        raise TraceFormatError(hint, path=str(path))


__all__ = ["GROUP", "AUTO", "Importer", "RawImport", "CHAKRA", "PYTORCH_ET", "KINETO", "NSYS", "installed",
           "load_importer", "formats", "format_names", "catalogue", "formats_help", "unknown_format_message",
           "detect", "choose", "import_inputs", "refuse_unconvertible"]
