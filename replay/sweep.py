"""``replay sweep``: architecture studies over traces x protocols x presets x parameter values.

A *study* is a set of *points*. A point is (trace, protocol, preset, parameter overrides); its
**key** is a SHA-256 over (trace content digest, protocol, model, preset name and digest, every
resolved model parameter value), so it names what was computed, not how it was spelled. The
points come from the cartesian product of the traces, protocols, presets and the values of each
swept parameter (``--set pcie.bandwidth_gb_s=16,32,64``: a comma separates values to sweep), or
from an explicit list of points in a study file (``--study study.toml``; format in
``docs/studies.md`` and :func:`load_study_file`). For every (trace, preset, parameters) the
``none`` protocol is added when missing, so that every row has its slowdown.

Results: one Parquet table, one row per point (see :data:`FIXED_COLUMNS` and ``docs/studies.md``),
with every resolved model parameter as a ``section.key`` column. Rows are sorted by (trace,
preset, swept parameter values, protocol, key): the same table, row for row, whatever the
executor, the worker count, the completion order or how often the study was resumed.

Storage and resume: finished points are appended, in small chunks (every ``CHUNK_ROWS`` points
or ``CHUNK_SECONDS`` seconds), as Parquet files to ``<output>.parts/``, each written to a
temporary name and renamed. When the last point is done the parts and any earlier output are
compacted into ``<output>`` (atomically: temporary name, then rename) and the part directory
is removed. An interrupted study therefore loses at most the points of one unwritten chunk
(on Ctrl-C or an error, not even those: the buffer is flushed first); re-running the same
command skips every point whose key is already in ``<output>`` or its parts. The output's Parquet
metadata (key ``fastrack.study``) holds the study *fingerprint* (a digest of the model, the tool
version and the sorted set of point keys); an output or part directory with another fingerprint
is refused unless ``--overwrite`` is given.

Execution: points are grouped into small batches of one trace and run by
:func:`run_batch` on an executor: a local process pool (``--executor local``, the default,
``--jobs`` workers, ``os.cpu_count()`` by default; ``--jobs 1`` runs in this process) or a Dask
distributed cluster (``--executor dask://HOST:PORT``). Each worker process builds a trace's graph
once and keeps the last few in a small cache (:data:`GRAPH_CACHE_SIZE`). At most a bounded
number of batches is in flight and results are written out as they come, so memory does not
grow with the number of points (the parent keeps one small record per point to plan).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import itertools
import json
import os
import shutil
import threading
import time
import tomllib
import uuid
from collections import OrderedDict
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import click

from fastrack import __version__
from fastrack.atomic import atomic_path, write_text_atomic
from fastrack.cli_support import reports_errors
from fastrack.errors import ConfigError, PluginError

CAPTURED = "captured"
NONE = "none"
META_KEY = b"fastrack.study"
CHUNK_ROWS = 200  # points per part file (at most)
CHUNK_SECONDS = 10.0  # ... or this long since the last part was written
GRAPH_CACHE_SIZE = 2  # graphs kept per worker process
DASK_TIMEOUT_S = 5.0
FIXED_COLUMNS = (
    "key", "trace", "trace_sha256", "protocol", "model", "preset", "preset_digest", "params_digest",
    "fastrack_version", "none_key", "makespan_ns", "slowdown", "captured_span_ns", "ops", "nodes",
)


def _category_labels() -> list[str]:
    from replay.graph import Category

    return [c.label for c in Category]


# ---------------------------------------------------------------------------------------------
# Study definition
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class StudySpec:
    """What to run. ``grid`` maps ``section.key`` to the values swept (cartesian product);
    ``points``, when given, replaces the grid by an explicit list of parameter assignments,
    each optionally pinning ``trace``, ``protocol`` or ``preset`` (a value or a list)."""

    traces: list[str]
    protocols: list[str]
    presets: list[str | None] = dataclasses.field(default_factory=lambda: [None])
    grid: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    points: list[dict[str, Any]] | None = None
    model: str = "h100"
    add_none: bool = True


def split_values(text: str, what: str) -> list[str]:
    """'a,b,c' -> ['a', 'b', 'c']; an empty list or an empty item is an error."""
    items = [v.strip() for v in text.split(",")]
    if not text.strip() or any(not v for v in items):
        raise ConfigError(f"{what}: empty value in list {text!r} (give values separated by commas, e.g. 16,32,64)")
    return items


def parse_set_options(options: Sequence[str]) -> dict[str, list[str]]:
    """``['pcie.bandwidth_gb_s=16,32', 'cpu.cores=8']`` -> {'pcie.bandwidth_gb_s': ['16', '32'], ...}."""
    grid: dict[str, list[str]] = {}
    for opt in options:
        name, sep, values = opt.partition("=")
        name = name.strip()
        if not sep or any("." not in part or not all(part.strip().split(".")) for part in name.split("+")):
            raise ConfigError(f"--set {opt!r}: expected SECTION.KEY=VALUE[,VALUE...]")
        if not values.strip():
            raise ConfigError(f"--set {name}: empty value list (give one or more values, e.g. {name}=16,32,64)")
        grid[name] = split_values(values, f"--set {name}")
    return grid


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, name + "."))
        else:
            out[name] = v
    return out


def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def load_study_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a study TOML file (format in docs/studies.md). Trace paths are relative to the file.

    Returns a dict with the keys it sets among: traces, protocols, presets, model, grid, points,
    output, add_none.
    """
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("no such study file", path=path) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not valid TOML ({exc})", path=path) from None
    unknown = sorted(set(raw) - {"study", "grid", "points"})
    if unknown:
        raise ConfigError(f"unknown table(s) {', '.join(unknown)} (expected [study], [grid], [[points]])", path=path)
    study = raw.get("study", {})
    allowed = {"traces", "protocols", "presets", "model", "output", "add_none"}
    bad = sorted(set(study) - allowed)
    if bad:
        raise ConfigError(f"[study]: unknown key(s) {', '.join(bad)} (expected {', '.join(sorted(allowed))})", path=path)
    out: dict[str, Any] = {}
    base = path.parent
    if "traces" in study:
        out["traces"] = [str(base / t) if not os.path.isabs(t) else t for t in _as_list(study["traces"])]
    for k in ("protocols", "presets"):
        if k in study:
            out[k] = [str(v) for v in _as_list(study[k])]
            if not out[k]:
                raise ConfigError(f"[study] {k}: empty list", path=path)
    if "model" in study:
        out["model"] = str(study["model"])
    if "output" in study:
        out["output"] = str(base / study["output"])
    if "add_none" in study:
        out["add_none"] = bool(study["add_none"])
    if "grid" in raw:
        grid = {}
        for name, values in _flatten(raw["grid"]).items():
            vals = _as_list(values)
            if not vals:
                raise ConfigError(f"[grid] {name}: empty value list", path=path)
            grid[name] = vals
        out["grid"] = grid
    if "points" in raw:
        pts = []
        for i, p in enumerate(raw["points"]):
            flat = _flatten({k: v for k, v in p.items() if k not in ("trace", "protocol", "preset")})
            pinned = {k: _as_list(p[k]) for k in ("trace", "protocol", "preset") if k in p}
            if "trace" in pinned:
                pinned["trace"] = [str(base / t) if not os.path.isabs(t) else t for t in pinned["trace"]]
            for k, v in flat.items():
                if isinstance(v, list):
                    raise ConfigError(f"[[points]] #{i + 1}: {k} is a list; a point takes one value per parameter "
                                      "(sweep lists in [grid])", path=path)
            pts.append(flat | {f"@{k}": v for k, v in pinned.items()})
        if not pts:
            raise ConfigError("[[points]] is empty", path=path)
        out["points"] = pts
    return out


def _override_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        v = "true" if value else "false"
    elif isinstance(value, float):
        v = repr(value)
    else:
        v = str(value)
    return f"{name}={v}"


# ---------------------------------------------------------------------------------------------
# Planning: resolve every point against the model, compute keys
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Resolved:
    preset: str
    digest: str  # the model's digest of every parameter
    flat: dict[str, Any]  # section.key -> value
    params_key: str  # our canonical digest of ``flat``


@dataclasses.dataclass
class Point:
    key: str
    trace: str  # as given
    trace_abs: str
    trace_sha: str
    protocol: str
    model: str
    preset_arg: str | None
    overrides: tuple[str, ...]
    resolved: Resolved
    preset_digest: str
    none_key: str | None = None

    def task(self) -> tuple:
        """What a worker needs (small, picklable)."""
        return (self.key, self.trace_abs, self.trace_sha, self.protocol, self.model, self.preset_arg, self.overrides,
                self.resolved.digest)


@dataclasses.dataclass
class Plan:
    points: list[Point]
    fingerprint: str
    swept: list[str]  # parameter columns varied by the study
    model: str


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except FileNotFoundError:
        raise ConfigError("no such trace file", path=str(path)) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a trace file", path=str(path)) from None
    return h.hexdigest()


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _sha(obj: Any) -> str:
    return hashlib.sha256(_canon(obj).encode()).hexdigest()


class ModelResolver:
    """Resolves (preset, overrides) through the model plug-in, once per distinct combination."""

    def __init__(self, model: str):
        from replay.plugins import load_model

        self.model = model
        self.cls = load_model(model)
        self._cache: dict[tuple, Resolved] = {}

    def __call__(self, preset: str | None, overrides: tuple[str, ...] = ()) -> Resolved:
        k = (preset, overrides)
        r = self._cache.get(k)
        if r is None:
            hw = self.cls.from_preset(preset, list(overrides))
            flat = _flatten(hw.params)
            r = Resolved(preset=str(hw.preset_name), digest=str(hw.digest), flat=flat, params_key=_sha(flat))
            self._cache[k] = r
        return r

    def check_names(self, names: Iterable[str], preset: str | None) -> None:
        known = self(preset).flat
        for name in names:
            if name not in known:
                near = difflib.get_close_matches(name, list(known), n=1)
                hint = f"; did you mean {near[0]}?" if near else f"; known: {', '.join(sorted(known)[:12])}..."
                raise ConfigError(f"unknown parameter '{name}' for model {self.model} "
                                  f"(preset {self(preset).preset}){hint}")


def check_protocols(protocols: Iterable[str]) -> set[str]:
    """Raise PluginError for an unknown protocol; return the available ones."""
    from replay import plugins

    available = set(plugins.available_protocols())
    for p in protocols:
        if p != CAPTURED and p not in available:
            raise PluginError(f"unknown protocol '{p}' (available: {', '.join(sorted(available | {CAPTURED}))})")
    return available


def _expand(assignment: Mapping[str, Any]) -> dict[str, Any]:
    """Linked parameters: 'a.x+b.y' = v sets both a.x and b.y to v."""
    out: dict[str, Any] = {}
    for name, v in assignment.items():
        for part in (name.split("+") if not name.startswith("@") else [name]):
            out[part.strip()] = v
    return out


def _assignments(spec: StudySpec) -> Iterator[dict[str, Any]]:
    if spec.points is not None:
        for p in spec.points:
            yield _expand(p)
        return
    names = list(spec.grid)
    for combo in itertools.product(*(spec.grid[n] for n in names)):
        yield _expand(dict(zip(names, combo)))


def make_point(resolver: ModelResolver, trace: str, sha: str, protocol: str, preset: str | None,
               overrides: tuple[str, ...], none_available: bool = True) -> Point:
    """One keyed point; ``overrides`` in canonical (sorted) order."""
    base = resolver(preset)
    res = resolver(preset, overrides)
    common = dict(trace_sha=sha, model=resolver.model, preset=res.preset, preset_digest=base.digest,
                  params=res.params_key)
    none_key = _sha(common | {"protocol": NONE}) if none_available and protocol != CAPTURED else None
    return Point(key=_sha(common | {"protocol": protocol}), trace=trace, trace_abs=os.path.abspath(trace),
                 trace_sha=sha, protocol=protocol, model=resolver.model, preset_arg=preset, overrides=overrides,
                 resolved=res, preset_digest=base.digest, none_key=none_key)


def plan_study(spec: StudySpec, trace_digests: dict[str, str] | None = None) -> Plan:
    """Enumerate, validate and key every point of the study (including added ``none`` points)."""
    if not spec.traces and not (spec.points and any("@trace" in p for p in spec.points)):
        raise ConfigError("no trace given: name one or more trace files (or [study] traces in the study file)")
    if not spec.protocols:
        raise ConfigError("no protocol given: use --protocols none,baseline,fastrack")
    for name, values in spec.grid.items():
        if not values:
            raise ConfigError(f"--set {name}: empty value list")
    resolver = ModelResolver(spec.model)
    pinned_protocols = {p for a in spec.points or [] for p in a.get("@protocol", [])}
    available = check_protocols([*spec.protocols, *pinned_protocols])
    add_none = spec.add_none and NONE in available
    digests = dict(trace_digests or {})

    def digest_of(t: str) -> str:
        if t not in digests:
            digests[t] = file_sha256(t)
        return digests[t]

    points: dict[str, Point] = {}
    param_names: set[str] = set()
    for a in _assignments(spec):
        params = {k: v for k, v in a.items() if not k.startswith("@")}
        param_names.update(params)
        overrides = tuple(sorted(_override_text(k, v) for k, v in params.items()))
        for trace in a.get("@trace", spec.traces):
            sha = digest_of(trace)
            for preset in a.get("@preset", spec.presets):
                resolver.check_names(params, preset)
                protocols = list(a.get("@protocol", spec.protocols))
                if add_none and NONE not in protocols:
                    protocols.append(NONE)
                for protocol in protocols:
                    pt = make_point(resolver, trace, sha, protocol, preset, overrides, NONE in available)
                    points.setdefault(pt.key, pt)
    if not points:
        raise ConfigError("the study has no points")
    plist = list(points.values())
    # Run points of one trace together (worker graph caches), trace order as given.
    order = {t: i for i, t in enumerate(dict.fromkeys(p.trace_sha for p in plist))}
    plist.sort(key=lambda p: order[p.trace_sha])
    fingerprint = _sha({"model": spec.model, "version": __version__, "keys": sorted(points)})
    swept = sorted(n for n in param_names)
    return Plan(points=plist, fingerprint=fingerprint, swept=swept, model=spec.model)


# ---------------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------------
_GRAPHS: "OrderedDict[tuple[str, str], tuple[Any, int]]" = OrderedDict()
_GRAPHS_LOCK = threading.Lock()


def _graph(path: str, sha: str):
    """The graph of a trace, built once per worker process (small LRU cache)."""
    with _GRAPHS_LOCK:
        hit = _GRAPHS.get((path, sha))
        if hit is not None:
            _GRAPHS.move_to_end((path, sha))
            return hit
        from replay.run import load_graph

        got = file_sha256(path)
        if got != sha:
            raise ConfigError(f"trace changed since the study was planned (sha256 {got[:12]}, expected {sha[:12]}); "
                              "on a cluster, every worker must see the same file at this path", path=path)
        graph, tr = load_graph(path)
        _GRAPHS[(path, sha)] = (graph, tr.num_ops)
        while len(_GRAPHS) > GRAPH_CACHE_SIZE:
            _GRAPHS.popitem(last=False)
        return graph, tr.num_ops


def run_batch(batch: Sequence[tuple]) -> list[dict[str, Any]]:
    """Replay each point of ``batch`` (tuples from :meth:`Point.task`); runs in a worker."""
    from replay.run import replay_graph

    out = []
    for key, path, sha, protocol, model, preset, overrides, digest in batch:
        t0 = time.perf_counter()
        graph, ops = _graph(path, sha)
        res = replay_graph(graph, protocol, model, preset, overrides, trace_ops=ops).result
        got_digest = (res.model or {}).get("digest")
        if got_digest is not None and str(got_digest) != digest:
            raise ConfigError(f"worker resolved parameters to digest {str(got_digest)[:12]}, the planner to "
                              f"{digest[:12]}: the worker runs a different model or preset files "
                              f"(fastrack {__version__} there)")
        out.append({"key": key, "makespan_ns": int(res.makespan_ns), "captured_span_ns": int(res.captured_span_ns),
                    "ops": int(res.ops), "nodes": int(res.nodes),
                    "cp": {k: int(v) for k, v in res.critical_path_ns.items()}, "version": __version__,
                    "wall_s": time.perf_counter() - t0})  # for occupancy figures only; not in the table
    return out


# ---------------------------------------------------------------------------------------------
# Executors
# ---------------------------------------------------------------------------------------------
class InlineExecutor:
    """Runs in this process; the same interface as concurrent.futures executors."""

    def submit(self, fn, *args):
        f: Future = Future()
        try:
            f.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - delivered through the future (Ctrl-C is not)
            f.set_exception(exc)
        return f

    def shutdown(self, wait=True, cancel_futures=False):
        pass


def dask_address(spec: str) -> str:
    for prefix in ("dask://", "tcp://", "tls://", "inproc://", "ucx://"):
        if spec.startswith(prefix):
            rest = spec[len(prefix):]
            if not rest:
                break
            return ("tcp://" + rest) if prefix == "dask://" else spec
    raise ConfigError(f"--executor {spec!r}: expected 'local' or dask://HOST:PORT")


@contextlib.contextmanager
def open_executor(spec: str | None, jobs: int | None, timeout: float = DASK_TIMEOUT_S):
    """Yield (executor, workers, description)."""
    spec = spec or "local"
    if spec in ("local", "process", "processes"):
        n = jobs or os.cpu_count() or 1
        if n <= 1:
            yield InlineExecutor(), 1, "this process"
            return
        import multiprocessing

        # fork: workers start at once and inherit the loaded modules and compiled engine.
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        ex = ProcessPoolExecutor(max_workers=n, mp_context=ctx)
        try:
            yield ex, n, f"local process pool ({n} workers)"
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
        return
    address = dask_address(spec)
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError("--executor dask:// needs the 'distributed' package: pip install 'fastrack[dask]'") from None
    import logging

    for name in ("distributed.client", "distributed.comm.core", "distributed.core"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({msg}); "
                          "is `dask scheduler` running there and the port open?") from None
    try:
        info = client.scheduler_info()
        threads = sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()) or 1
        yield client.get_executor(pure=False), threads, f"Dask cluster {address} ({threads} worker threads)"
    finally:
        client.close()


def execute(tasks: Sequence[Sequence[tuple]], executor, workers: int,
            on_result: Callable[[list[dict[str, Any]]], None], in_flight: int | None = None) -> None:
    """Run batches on ``executor`` with at most ``in_flight`` outstanding; stream results."""
    limit = in_flight or max(2, 2 * workers)
    it = iter(tasks)
    pending: set = set()
    try:
        while True:
            while len(pending) < limit:
                batch = next(it, None)
                if batch is None:
                    break
                pending.add(executor.submit(run_batch, list(batch)))
            if not pending:
                return
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                on_result(f.result())
    finally:
        for f in pending:
            f.cancel()


def batches(points: Sequence[Point], workers: int) -> list[list[tuple]]:
    """Small batches of one trace each: few enough tasks to amortise submission, enough to balance."""
    size = max(1, min(8, len(points) // max(1, 8 * workers)))
    out = []
    for _sha_, group in itertools.groupby(points, key=lambda p: p.trace_sha):
        group = list(group)
        for i in range(0, len(group), size):
            out.append([p.task() for p in group[i:i + size]])
    return out


# ---------------------------------------------------------------------------------------------
# Storage: parts directory + atomic compaction
# ---------------------------------------------------------------------------------------------
def _param_value(v: Any) -> Any:
    return v if isinstance(v, (bool, int, float, str)) or v is None else json.dumps(v, sort_keys=True)


def make_row(p: Point, r: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "key": p.key, "trace": p.trace, "trace_sha256": p.trace_sha, "protocol": p.protocol, "model": p.model,
        "preset": p.resolved.preset, "preset_digest": p.preset_digest, "params_digest": p.resolved.digest,
        "fastrack_version": r.get("version", __version__), "none_key": p.none_key,
    }
    row.update({k: _param_value(v) for k, v in p.resolved.flat.items()})
    row.update({"makespan_ns": r["makespan_ns"], "captured_span_ns": r["captured_span_ns"], "ops": r["ops"],
                "nodes": r["nodes"]})
    for c in _category_labels():
        row[f"cp_{c}_ns"] = int(r["cp"].get(c, 0))
    return row


def _read_meta(path: Path) -> dict[str, Any] | None:
    import pyarrow.parquet as pq

    try:
        md = pq.read_schema(path).metadata or {}
    except Exception:  # noqa: BLE001 - any unreadable file is "not a study"
        return None
    raw = md.get(META_KEY)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


class ResultStore:
    """Finished points in ``<out>.parts/part-*.parquet`` until compaction into ``<out>``."""

    def __init__(self, out: str | os.PathLike, fingerprint: str, meta: dict[str, Any], overwrite: bool = False,
                 chunk_rows: int = CHUNK_ROWS, chunk_seconds: float = CHUNK_SECONDS):
        self.out = Path(out)
        self.parts = self.out.with_name(self.out.name + ".parts")
        self.fingerprint = fingerprint
        self.meta = dict(meta, fingerprint=fingerprint)
        self.chunk_rows = chunk_rows
        self.chunk_seconds = chunk_seconds
        self.buffer: list[dict[str, Any]] = []
        self.last_flush = time.monotonic()
        self.keep_out = not overwrite  # with --overwrite, the old output is replaced at compaction
        if self.out.suffix.lower() != ".parquet":
            raise ConfigError(f"-o {self.out}: the results file must end in .parquet")
        if overwrite:
            if self.parts.exists():
                shutil.rmtree(self.parts)
        else:
            self._check_existing()

    def _refuse(self, what: str) -> None:
        raise ConfigError(f"{what}; use a new -o or --overwrite", path=str(self.out))

    def _check_existing(self) -> None:
        if self.out.exists():
            meta = _read_meta(self.out)
            if meta is None:
                self._refuse("exists and was not written by replay sweep")
            if meta.get("fingerprint") != self.fingerprint:
                self._refuse(f"written by a different study (fingerprint {str(meta.get('fingerprint'))[:12]}, "
                             f"this study {self.fingerprint[:12]})")
        marker = self.parts / "study.json"
        if self.parts.exists() and not self._part_files():  # nothing finished there: not worth keeping
            shutil.rmtree(self.parts, ignore_errors=True)
        if self.parts.exists():
            try:
                meta = json.loads(marker.read_text())
            except (OSError, ValueError):
                meta = {}
            if meta.get("fingerprint") != self.fingerprint:
                self._refuse(f"unfinished parts of a different study in {self.parts}")

    def _part_files(self) -> list[Path]:
        return sorted(self.parts.glob("part-*.parquet")) if self.parts.exists() else []

    def _inputs(self) -> list[Path]:
        return ([self.out] if self.keep_out and self.out.exists() else []) + self._part_files()

    def done_keys(self) -> set[str]:
        import pyarrow.parquet as pq

        keys: set[str] = set()
        for f in self._inputs():
            keys.update(pq.read_table(f, columns=["key"]).column("key").to_pylist())
        return keys

    def add(self, rows: Iterable[dict[str, Any]]) -> None:
        self.buffer.extend(rows)
        if len(self.buffer) >= self.chunk_rows or time.monotonic() - self.last_flush >= self.chunk_seconds:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        import pandas as pd

        df = pd.DataFrame.from_records(self.buffer)
        if not self.parts.exists():
            self.parts.mkdir(parents=True)
            write_text_atomic(self.parts / "study.json", _canon(self.meta))
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        _write_parquet(df, self.parts / name, self.meta)
        self.buffer = []
        self.last_flush = time.monotonic()

    def compact(self, complete: bool, swept: Sequence[str]) -> int:
        """Merge the output and the parts into the output (atomically); returns its row count."""
        import pandas as pd

        self.flush()
        frames = [pd.read_parquet(f) for f in self._inputs()]
        frames = [f for f in frames if len(f)]
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(FIXED_COLUMNS))
        df = finish_table(df, swept)
        _write_parquet(df, self.out, dict(self.meta, complete=complete, rows=len(df)))
        shutil.rmtree(self.parts, ignore_errors=True)
        return len(df)


def finish_table(df, swept: Sequence[str]):
    """Deduplicate, add slowdown vs none, order the columns and sort the rows canonically."""
    import numpy as np
    import pandas as pd

    df = df.drop_duplicates("key", keep="first")
    ref = df.set_index("key")["makespan_ns"]
    none = df["none_key"].map(ref) if "none_key" in df else pd.Series(np.nan, index=df.index)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = df.assign(slowdown=(df["makespan_ns"].astype("float64") / none.astype("float64")).round(9))
    param_cols = sorted(c for c in df.columns if "." in c)
    cp_cols = [c for c in df.columns if c.startswith("cp_")]
    first = [c for c in FIXED_COLUMNS if c in df.columns]
    df = df[first + param_cols + cp_cols + [c for c in df.columns if c not in set(first + param_cols + cp_cols)]]
    sort_cols = ["trace", "preset", *[c for c in swept if c in df.columns], "protocol", "key"]
    df = df.sort_values(sort_cols, kind="mergesort", na_position="last").reset_index(drop=True)
    return df


def _write_parquet(df, path: Path, meta: Mapping[str, Any]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    md = dict(table.schema.metadata or {})
    md[META_KEY] = _canon(meta).encode()
    table = table.replace_schema_metadata(md)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


# ---------------------------------------------------------------------------------------------
# The study as a library call
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SweepReport:
    output: str
    points: int
    skipped: int
    ran: int
    rows: int
    seconds: float
    executor: str
    workers: int = 1
    busy_s: float = 0.0  # wall time workers spent inside points (occupancy = busy / (seconds x workers))

    @property
    def points_per_s(self) -> float:
        return self.ran / self.seconds if self.seconds > 0 else 0.0


def run_sweep(spec: StudySpec, output: str | os.PathLike, executor: str | None = None, jobs: int | None = None,
              overwrite: bool = False, progress: bool | None = None, dask_timeout: float = DASK_TIMEOUT_S,
              chunk_rows: int = CHUNK_ROWS, log: Callable[[str], None] | None = None) -> SweepReport:
    plan = plan_study(spec)
    meta = {"tool": "replay sweep", "fastrack_version": __version__, "model": plan.model, "points": len(plan.points),
            "swept": plan.swept}
    store = ResultStore(output, plan.fingerprint, meta, overwrite=overwrite, chunk_rows=chunk_rows)
    done = store.done_keys()
    todo = [p for p in plan.points if p.key not in done]
    by_key = {p.key: p for p in todo}
    t0 = time.perf_counter()
    desc = "this process"
    busy = [0.0]
    n_workers = 1
    if todo:
        from tqdm import tqdm

        with open_executor(executor, jobs, dask_timeout) as (ex, workers, desc):
            if log:
                log(f"{len(plan.points)} points, {len(plan.points) - len(todo)} already done, "
                    f"{len(todo)} to run on {desc}")
            tqdm.monitor_interval = 0
            bar = tqdm(total=len(todo), unit="pt", desc="sweep", disable=(None if progress is None else not progress),
                       dynamic_ncols=True, smoothing=0.1)

            n_workers = workers

            def on_result(results: list[dict[str, Any]]) -> None:
                busy[0] += sum(r.get("wall_s", 0.0) for r in results)
                store.add(make_row(by_key[r["key"]], r) for r in results)
                bar.update(len(results))

            try:
                execute(batches(todo, workers), ex, workers, on_result)
            finally:
                bar.close()
                store.flush()  # whatever happened, no finished point is lost
    elapsed = time.perf_counter() - t0
    if not todo and store.keep_out and store.out.exists() and not store._part_files():
        shutil.rmtree(store.parts, ignore_errors=True)
        rows = len(done)  # nothing new: leave the output as it is
    else:
        rows = store.compact(complete=True, swept=plan.swept)
    return SweepReport(output=str(output), points=len(plan.points), skipped=len(plan.points) - len(todo),
                       ran=len(todo), rows=rows, seconds=elapsed, executor=desc, workers=n_workers, busy_s=busy[0])


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------
def _comma_list(values: Sequence[str], what: str) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(split_values(v, what))
    return out


def build_spec(traces: Sequence[str], study: str | None, protocols: Sequence[str], presets: Sequence[str],
               model: str | None, overrides: Sequence[str], add_none: bool | None) -> tuple[StudySpec, str | None]:
    """Merge a study file with command-line options (the command line wins; --set adds axes)."""
    base: dict[str, Any] = load_study_file(study) if study else {}
    grid = dict(base.get("grid", {}))
    cli_grid = parse_set_options(overrides)
    if base.get("points") is not None and cli_grid:
        # explicit points: --set values are crossed with every point
        pts = [dict(p, **dict(zip(cli_grid, combo))) for p in base["points"]
               for combo in itertools.product(*cli_grid.values())]
        base["points"] = pts
    else:
        grid.update(cli_grid)
    spec = StudySpec(
        traces=list(traces) or base.get("traces", []),
        protocols=_comma_list(protocols, "--protocols") if protocols else base.get("protocols", []),
        presets=(_comma_list(presets, "--preset") if presets else base.get("presets")) or [None],
        grid=grid,
        points=base.get("points"),
        model=model or base.get("model", "h100"),
        add_none=base.get("add_none", True) if add_none is None else add_none,
    )
    return spec, base.get("output")


@click.command("sweep")
@click.argument("traces", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--study", type=click.Path(dir_okay=False), help="Study file (TOML; see docs/studies.md).")
@click.option("--protocols", multiple=True, metavar="P1,P2,...", help="Protocols to run (comma-separated).")
@click.option("--preset", "presets", multiple=True, metavar="NAME[,NAME...]", help="Presets (comma = several).")
@click.option("--model", default=None, help="Hardware model plug-in (default h100).")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=V1[,V2...]",
              help="Parameter values to sweep; a comma separates values; A+B=... sets A and B together "
                   "(repeatable, one axis each).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Results table (.parquet).")
@click.option("--executor", default="local", show_default=True, metavar="local|dask://HOST:PORT",
              help="Local process pool, or an existing Dask distributed scheduler.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Local worker processes (default: CPU count; 1 = this process).")
@click.option("--overwrite", is_flag=True, help="Replace an output written by a different study.")
@click.option("--add-none/--no-add-none", default=None,
              help="Add the 'none' point each slowdown needs when missing (default on).")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal).")
@click.option("--dask-timeout", type=float, default=DASK_TIMEOUT_S, show_default=True,
              help="Seconds to wait for the Dask scheduler.")
@reports_errors
def command(traces, study, protocols, presets, model, overrides, output, executor, jobs, overwrite, add_none,
            progress, dask_timeout):
    """Run a study: TRACES x protocols x presets x parameter values, one Parquet row per point.

    'none' is added where a slowdown needs it. Format of study files and of the table:
    docs/studies.md.

    \b
    replay sweep t.parquet --protocols baseline,fastrack \\
        --set pcie.h2d_bandwidth_gb_s+pcie.d2h_bandwidth_gb_s=16,32,64 \\
        --set cpu_crypto.core_gb_s=2,4,8 -o results.parquet
    replay sweep --study study.toml -o results.parquet --executor dask://host:8786

    Re-running the same command resumes: finished points are skipped.
    """
    spec, study_output = build_spec(traces, study, protocols, presets, model, overrides, add_none)
    output = output or study_output
    if not output:
        raise ConfigError("no output file: give -o results.parquet (or [study] output in the study file)")
    rep = run_sweep(spec, output, executor=executor, jobs=jobs, overwrite=overwrite, progress=progress,
                    dask_timeout=dask_timeout, log=lambda m: click.echo(m, err=True))
    rate = f", {rep.points_per_s:.1f} points/s" if rep.ran else ""
    click.echo(f"wrote {rep.output}: {rep.rows} rows ({rep.ran} run, {rep.skipped} already done) "
               f"in {rep.seconds:.1f} s{rate}")
