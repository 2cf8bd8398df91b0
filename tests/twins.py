"""The one differential harness of the twins (docs/architecture.md, "Twins").

An algorithm that exists twice (a C++ extension module and its Python/numba/numpy twin) is held
equal by running the same callable under each implementation, in one process, and comparing
every output exactly (:func:`assert_same`: types and dtypes, values, dict order, -0.0 and NaN,
error types and messages), with a message naming where the first difference is::

    import twins

    s = twins.agree("engine", lambda: engine.schedule(g))  # native == numba, field by field
    twins.agree("jsonscan", lambda: DepthGuard(64).feed(doc), expect=(-1, ""))  # and == the expectation

:data:`PAIRS` names each pair, its reference implementation (run first) and the other, and how
to switch between them: the switches the package has (``engine.use_engine``, the
``FASTRACK_NO_NATIVE_JSON`` variable, the module attributes that hold the compiled modules),
set for the duration of one call and restored after it. Where the compiled module is not built
(a machine without a C++ compiler: setup.py builds the extensions with ``optional=True``), only
the Python twin runs; a test that only compares then has nothing to compare and is skipped by
:func:`needs_native`, while a test with an ``expect`` still checks the twin that is there.

The H100 prices are not here: their C++ side is a separate program (models/h100/cpp
``fastrack_price``), compared with the Python model by tests/test_gem5_export.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import shutil
import sysconfig
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pytest

from fastrack_core.errors import GraphError, TraceFormatError

_NOTHING = object()


@dataclasses.dataclass(frozen=True)
class Raised:
    """An error an implementation raised, as a comparable value: its type's name and message."""

    type: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> Raised:
        return cls(type(exc).__name__, str(exc))


# ---------------------------------------------------------------------------------------------
# the pairs and their switches


def _compiled(module: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


@contextmanager
def _engine(module: str, impl: str) -> Iterator[None]:
    from replay.pipeline import engine

    before = engine.use_engine(impl)
    try:
        yield
    finally:
        engine.use_engine(before)


def _attributes(*targets: str):
    """A switch that sets each ``module.attribute`` to the compiled module (``native``) or None."""

    @contextmanager
    def switch(module: str, impl: str) -> Iterator[None]:
        value = _compiled(module) if impl == "native" else None
        slots = [(importlib.import_module(t.rpartition(".")[0]), t.rpartition(".")[2]) for t in targets]
        saved = [getattr(m, a) for m, a in slots]
        for m, a in slots:
            setattr(m, a, value)
        try:
            yield
        finally:
            for (m, a), v in zip(slots, saved):
                setattr(m, a, v)

    return switch


def _environment(var: str):
    """A switch that leaves ``var`` unset (``native``) or sets it to 1 (the twin)."""

    @contextmanager
    def switch(module: str, impl: str) -> Iterator[None]:
        saved = os.environ.pop(var, None)
        if impl != "native":
            os.environ[var] = "1"
        try:
            yield
        finally:
            os.environ.pop(var, None)
            if saved is not None:
                os.environ[var] = saved

    return switch


@dataclasses.dataclass(frozen=True)
class Pair:
    reference: str  # the implementation that defines the behaviour (docs/architecture.md, "Twins")
    other: str
    module: str  # the compiled extension module (setup.py ACCELERATORS)
    switch: Callable[[str, str], Any]  # (module, implementation) -> context manager running it
    errors: tuple[type[BaseException], ...] = ()  # raised errors that are outputs (compared as Raised)


PAIRS: dict[str, Pair] = {
    # the scheduler and the critical-path walk: replay/cpp/fastrack/{engine,results}.hh against
    # replay/pipeline/engine_numba.py (FASTRACK_ENGINE)
    "engine": Pair("native", "numba", "replay.pipeline._engine", _engine, (GraphError,)),
    # the graph builder's edge passes and lane-row hashing: replay/cpp/build_module.cpp against
    # replay/pipeline/build.py's numpy passes and replay/pipeline/keys.py's Arrow encoding
    "build": Pair("numpy", "native", "replay.pipeline._build",
                  _attributes("replay.pipeline.build._native", "replay.pipeline.keys._native"), (GraphError,)),
    # GraphEditor.build's edge merge: replay/cpp/edit_module.cpp against the numpy merge of editor.py
    "edit": Pair("numpy", "native", "replay.protocols._edit", _attributes("replay.protocols.editor._edit")),
    # the JSON guard scan: tracegen/importers/src/jsonscan.cpp against jsondepth._scan_py (numba)
    "jsonscan": Pair("numba", "native", "tracegen.importers._jsonscan",
                     _attributes("tracegen.importers.jsondepth._compiled")),
    # the Kineto scan: tracegen/importers/src/kinetoscan.cpp against json/ijson + kineto._collect
    "kineto": Pair("python", "native", "tracegen.importers._kineto", _environment("FASTRACK_NO_NATIVE_JSON"),
                   (TraceFormatError,)),
}


def built(pair: str) -> bool:
    """Whether the compiled side of ``pair`` imports here."""
    return _compiled(PAIRS[pair].module) is not None


def needs_native(pair: str):
    """Skip mark for a test that needs the compiled side of ``pair`` (a comparison, or its guards)."""
    return pytest.mark.skipif(not built(pair), reason=f"{PAIRS[pair].module} is not built here "
                                                      "(pip install -e ., or python setup.py build_ext --inplace)")


def why_not_buildable() -> str | None:
    """Why setup.py could not build the extensions on this machine, or None when it could."""
    if not any(shutil.which(c) for c in (os.environ.get("CXX") or "g++", "g++", "c++", "clang++")):
        return "no C++ compiler (g++, c++, clang++ or $CXX)"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python development headers (Python.h)"
    return None


def implementations(pair: str) -> tuple[str, ...]:
    """The implementations of ``pair`` that can run here, the reference first."""
    p = PAIRS[pair]
    return tuple(name for name in (p.reference, p.other) if name != "native" or built(pair))


@contextmanager
def using(pair: str, impl: str) -> Iterator[None]:
    """Run the body under implementation ``impl`` of ``pair``."""
    with PAIRS[pair].switch(PAIRS[pair].module, impl):
        yield


# ---------------------------------------------------------------------------------------------
# running and comparing


def outcome(fn: Callable[[], Any], errors: tuple[type[BaseException], ...] = ()) -> Any:
    """``fn()``, or the :class:`Raised` of an error of the kinds ``errors``."""
    try:
        return fn()
    except errors as exc:
        return Raised.of(exc)


def run(pair: str, fn: Callable[[], Any], errors: tuple[type[BaseException], ...] | None = None) -> dict[str, Any]:
    """``fn()`` under each implementation of ``pair`` that can run here (reference first); an
    error of the pair's kinds (or ``errors``) is the outcome, as :class:`Raised`."""
    errs = PAIRS[pair].errors if errors is None else errors
    out = {}
    for impl in implementations(pair):
        with using(pair, impl):
            out[impl] = outcome(fn, errs)
    return out


def compare(outputs: dict[str, Any], expect: Any = _NOTHING, view: Callable[[Any], Any] | None = None) -> None:
    """Every output (``view`` of it) equals the first's exactly, and ``expect`` when given."""
    seen = {name: (view(v) if view else v) for name, v in outputs.items()}
    names = list(seen)
    for name in names[1:]:
        assert_same(seen[names[0]], seen[name], names=(names[0], name))
    if expect is not _NOTHING:
        assert_same(seen[names[0]], expect, names=(names[0], "expected"))


def agree(pair: str, fn: Callable[[], Any], *, expect: Any = _NOTHING, view: Callable[[Any], Any] | None = None,
          errors: tuple[type[BaseException], ...] | None = None) -> Any:
    """Run ``fn`` under each implementation of ``pair``, assert that they give the same (and
    ``expect``), and return that output (the reference's)."""
    outputs = run(pair, fn, errors)
    compare(outputs, expect, view)
    return next(iter(outputs.values()))


def assert_same(a: Any, b: Any, names: tuple[str, str] = ("got", "expected")) -> None:
    """``a`` and ``b`` are the same value exactly: the same types all the way down (1, 1.0, True,
    np.int64(1) differ; a list is no tuple), arrays of one dtype and shape with equal elements,
    dicts with the same keys in the same order, floats bit-for-bit up to NaN == NaN, dataclasses
    field by field, Arrow tables with their metadata."""
    diff = _diff(a, b, "")
    if diff is not None:
        where, what = diff
        raise AssertionError(f"{names[0]} and {names[1]} differ at {where or 'the top'}: {what}")


def _short(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 120 else r[:117] + "..."


def _diff(a: Any, b: Any, where: str) -> tuple[str, str] | None:
    if type(a) is not type(b):
        return where, f"{type(a).__name__} {_short(a)} vs {type(b).__name__} {_short(b)}"
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return where, f"array {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        if a.dtype == object:
            for i, (x, y) in enumerate(zip(a.ravel().tolist(), b.ravel().tolist())):
                if (d := _diff(x, y, f"{where}[{i}]")) is not None:
                    return d
            return None
        nan = a.dtype.kind in "fc"
        if np.array_equal(a, b, equal_nan=nan):
            if nan and not np.array_equal(np.signbit(a), np.signbit(b)):
                i = int(np.flatnonzero((np.signbit(a) != np.signbit(b)).ravel())[0])
                return f"{where}[{i}]", f"{a.ravel()[i]!r} vs {b.ravel()[i]!r} (sign of zero)"
            return None
        ne = (a != b) & ~(np.isnan(a) & np.isnan(b)) if nan else a != b
        flat = np.flatnonzero(ne.ravel())
        i = int(flat[0])
        return f"{where}[{i}]", f"{a.ravel()[i]!r} vs {b.ravel()[i]!r} ({flat.size} of {a.size} elements differ)"
    if isinstance(a, (float, np.floating)):
        if math.isnan(a) and math.isnan(b):
            return None
        return None if a == b and math.copysign(1, a) == math.copysign(1, b) else (where, f"{a!r} vs {b!r}")
    if isinstance(a, dict):
        ka, kb = list(a), list(b)
        if (d := _diff(ka, kb, f"{where}.keys()")) is not None:
            return d
        for k in ka:
            if (d := _diff(a[k], b[k], f"{where}[{k!r}]")) is not None:
                return d
        return None
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return where, f"length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if (d := _diff(x, y, f"{where}[{i}]")) is not None:
                return d
        return None
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            if (d := _diff(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")) is not None:
                return d
        return None
    if isinstance(a, pa.Table):
        if a.equals(b, check_metadata=True):
            return None
        if a.schema.names != b.schema.names:
            return where, f"columns {a.schema.names} vs {b.schema.names}"
        for name in a.schema.names:
            if not a.column(name).equals(b.column(name)):
                return f"{where}.column({name!r})", "values or type differ"
        return where, "schema metadata differs"
    if isinstance(a, (bytes, bytearray)):
        if a == b:
            return None
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return f"{where}[{i}]", f"{len(a)} vs {len(b)} bytes, from offset {i}: {a[i:i + 24]!r} vs {b[i:i + 24]!r}"
    same = a == b
    if not isinstance(same, (bool, np.bool_)):
        raise TypeError(f"twins.assert_same cannot compare {type(a).__name__} at {where or 'the top'}")
    return None if same else (where, f"{_short(a)} vs {_short(b)}")


__all__ = ["PAIRS", "Pair", "Raised", "agree", "assert_same", "built", "compare", "implementations", "needs_native",
           "outcome", "run", "using", "why_not_buildable"]
