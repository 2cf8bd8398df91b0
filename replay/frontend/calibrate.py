"""``replay calibrate MEASUREMENTS -o PRESET.toml``: fit the CC parameters no public source fixes to
CC-on / CC-off microbenchmark results, and write a preset that ``extends`` a named one.

The measurement file (docs/model.md "Calibration"; ``benchmarks/cc_microbench.py`` writes it) is one
JSON object::

    {"format": "fastrack-cc-microbench/1",
     "extends": "h100-sxm",                     # preset the result extends (--extends overrides)
     "repeat": 10,                              # copies / launches per timed loop (optional, 10)
     "copies": [{"direction": "h2d", "memory": "pinned", "bytes": 4096,
                 "cc_on_ns": 8426.0, "cc_off_ns": 6082.0}, ...],
     "launch": {"cc_on_ns": ..., "cc_off_ns": ...},                  # optional
     "graph_launch": {"kernels": 100, "cc_on_ns": ..., "cc_off_ns": ...},   # optional
     "d2d": {"bytes": 4096, "cc_on_ns": ..., "cc_off_ns": ...},      # optional
     "non_blocking_blocks_host": true}                               # optional

Every latency is the wall time of one iteration of the microbenchmark loop (the call and
``cudaStreamSynchronize``), averaged over ``repeat``, in ns. The model's figure for a point is the
makespan of the same loop, built here as a trace (``microbench_table``) and replayed under
``baseline`` (CC on) and ``none`` (CC off), divided by ``repeat``. The fit matches the CC cost of
each point, ``cc_on - cc_off``, so a CC-off latency the model gets wrong does not leak into the CC
parameters; ``host.staging_copy_gb_s`` is the exception, fitted to the CC-off pageable copies.

Each fitted parameter is identified by its own points and solved in one dimension (each point's CC
cost grows monotonically with its parameter), in this order, twice round:

==============================  ======================================================
parameter                       points
==============================  ======================================================
``host.staging_copy_gb_s``      CC-off pageable minus pinned copy, the largest size with both
``submit.kernel_ns``            ``launch`` (and ``graph_launch``): the push round trip
``submit.copy_ns``              ``d2d``: a copy's push without a host crossing
``submit.crossing_ns``          the pinned copies of at most 64 KiB: the fixed toll per crossing
``cpu_crypto.threads``          opt-in (the file's ``fit`` list names it): the pinned copies of at least
                                16 MiB, the fewest threads that reach them with the rate at its bound
``cpu_crypto.core_gb_s``        the pinned copies of at least 16 MiB (``--fit-ce``: ``ce.crypto_gb_s``)
``submit.copy_blocks_host``     ``non_blocking_blocks_host`` (a rule, read, not fitted)
==============================  ======================================================

Parameters without their points keep the base preset's value (said in the output). The CPU and CE
AES-GCM rates cannot both be fitted from copy latencies: the chunk pipeline runs at the slower of
the two, so one rate is fitted and the other kept.

The bound: ``cpu_crypto.core_gb_s`` may not exceed ``host.staging_copy_gb_s`` (fitted, else the
base preset's): an AES-GCM pass reads and writes the same bytes as a plain copy, plus the cipher,
so no core encrypts faster than it copies. Points that ask for more leave the rate at the bound and
the fit says so (in the output and in the value's source): the residual is CC cost the model charges
and the measurements do not, and it points to a faster host copy rate, which only CC-off pageable
copies measure, or to a CC-off rate below the base preset's (a file whose CC-off side is the model's
own replay cannot tell). ``cpu_crypto.threads`` (one: the calling thread under the channel's
lock) is kept unless the ``fit`` list names it: a second encrypting thread per copy is a claim
about the driver that copy latencies alone cannot make.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import click

from fastrack_core.cli_support import reports_errors
from fastrack_core.errors import ConfigError

FORMAT = "fastrack-cc-microbench/1"
DEFAULT_REPEAT = 10
SMALL_MAX_BYTES = 64 * 1024  # copies up to this size identify the fixed toll per crossing
LARGE_MIN_BYTES = 16 * 1024 * 1024  # copies from this size identify the bulk (crypto) rate
MAX_BYTES = 1 << 34  # 16 GiB: larger microbenchmark copies are typos
RATE_MIN_GB_S, RATE_MAX_GB_S = 0.01, 10_000.0  # the search range of a fitted AES-GCM rate
RESIDUAL_TOL = 0.01  # a mean residual above this at a bound is reported (the bound holds the value back)
THREADS_MAX = 64  # the most CPU encryption threads a fit tries
OPT_IN = ("cpu_crypto.threads",)  # fitted only when the file's "fit" list names them

# The microbenchmark loop's captured host and GPU times (a stand-in, as tracegen synth's: the replay
# re-prices what CC touches). Names and values follow tracegen/synth.py's memcpy microbenchmark.
CALL_NS = {"cudaMemcpyAsync": 4_500, "cudaLaunchKernel": 3_500, "cudaGraphLaunch": 3_500}
LAUNCH_LATENCY_NS = 4_000
SYNC_CALL_NS = 2_000
SYNC_WAKE_NS = 1_000
KERNEL_NS = 2_000  # one small kernel
D2D_GB_S = 1_000.0  # a device-to-device copy (HBM; untouched by CC)
THREAD_ID, STREAM_ID = 4242, 13
# A microbenchmark copies plaintext buffers, not data that arrived encrypted from a client: the
# preset's direct rule (which copies carry client data, docs/protocols.md) must not add a second
# CPU pass to them, so every replay of a loop says no copy qualifies.
MICROBENCH_SETS = ("direct.h2d=none", "direct.d2h=none")
MODEL = "h100"  # the hardware model whose parameters are fitted (its preset tables: [submit], [cpu_crypto], ...)


# ---------------------------------------------------------------------------------------------
# the measurement file


@dataclass(frozen=True)
class Point:
    """One microbenchmark result: what was run and its latency per iteration, CC on and off."""

    what: str  # copy | launch | graph_launch | d2d
    label: str  # field name in the file, for messages: copies[2], launch, ...
    cc_on_ns: float
    cc_off_ns: float
    direction: str = ""
    memory: str = ""
    nbytes: int = 0
    kernels: int = 1

    @property
    def delta_ns(self) -> float:
        return self.cc_on_ns - self.cc_off_ns


@dataclass(frozen=True)
class Measurements:
    path: str
    extends: str
    repeat: int
    points: tuple[Point, ...]
    blocks_host: bool | None
    fit: tuple[str, ...] | None = None  # the parameters to fit (None: every one the points identify)
    source: str = ""  # where the measurements come from (cited in every fitted value's source)

    def of(self, what: str) -> list[Point]:
        return [p for p in self.points if p.what == what]


def _bad(path: str, where: str, why: str) -> ConfigError:
    return ConfigError(f"{where}: {why}", path=path)


def _latency(path: str, body: dict, where: str, key: str, required: bool = True) -> float | None:
    if key not in body:
        if required:
            raise _bad(path, f"{where}.{key}", "missing")
        return None
    v = body[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(path, f"{where}.{key}", f"expected a number of ns, got {type(v).__name__}")
    if not math.isfinite(v):
        raise _bad(path, f"{where}.{key}", "not a finite number (NaN or infinity)")
    if v <= 0:
        raise _bad(path, f"{where}.{key}", "must be a positive latency in ns")
    return float(v)


def _pair(path: str, body: Any, where: str) -> tuple[float, float]:
    if not isinstance(body, dict):
        raise _bad(path, where, f"expected an object, got {type(body).__name__}")
    on = _latency(path, body, where, "cc_on_ns", required=False)
    off = _latency(path, body, where, "cc_off_ns", required=False)
    if on is None and off is None:
        raise _bad(path, f"{where}.cc_on_ns", "missing")
    if off is None:
        raise _bad(path, f"{where}.cc_off_ns", "missing: a CC-on latency needs its CC-off counterpart")
    if on is None:
        raise _bad(path, f"{where}.cc_on_ns", "missing: a CC-off latency needs its CC-on counterpart")
    return on, off


def _int(path: str, body: dict, where: str, key: str, lo: int, hi: int) -> int:
    if key not in body:
        raise _bad(path, f"{where}.{key}", "missing")
    v = body[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(path, f"{where}.{key}", f"expected an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise _bad(path, f"{where}.{key}", f"must be in {lo}..{hi}")
    return v


def _choice(path: str, body: dict, where: str, key: str, choices: tuple[str, ...]) -> str:
    if key not in body:
        raise _bad(path, f"{where}.{key}", "missing")
    v = body[key]
    if not isinstance(v, str) or v.lower() not in choices:
        raise _bad(path, f"{where}.{key}", f"expected one of {', '.join(choices)}")
    return v.lower()


def load_measurements(path: str | Path) -> Measurements:
    """Read and check a measurement file; a problem raises ConfigError naming the file and the field."""
    p = str(path)
    try:
        text = Path(p).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such file", path=p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the measurement file ({type(exc).__name__})", path=p) from None
    try:
        raw = json.loads(text, parse_constant=lambda c: float("nan"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON (line {exc.lineno}, column {exc.colno})", path=p) from None
    if not isinstance(raw, dict):
        raise _bad(p, "(top level)", "expected a JSON object")
    if raw.get("format") != FORMAT:
        raise _bad(p, "format", f"expected \"{FORMAT}\"")
    extends = raw.get("extends", "h100-sxm")
    if not isinstance(extends, str) or not extends:
        raise _bad(p, "extends", "expected a preset name or path")
    repeat = _int(p, raw, "(top level)", "repeat", 1, 10_000) if "repeat" in raw else DEFAULT_REPEAT
    points: list[Point] = []
    copies = raw.get("copies")
    if copies is None:
        raise _bad(p, "copies", "missing (a list of copy results)")
    if not isinstance(copies, list) or not copies:
        raise _bad(p, "copies", "expected a non-empty list")
    for i, c in enumerate(copies):
        where = f"copies[{i}]"
        if not isinstance(c, dict):
            raise _bad(p, where, f"expected an object, got {type(c).__name__}")
        direction = _choice(p, c, where, "direction", ("h2d", "d2h"))
        memory = _choice(p, c, where, "memory", ("pinned", "pageable"))
        nbytes = _int(p, c, where, "bytes", 1, MAX_BYTES)
        on, off = _pair(p, c, where)
        points.append(Point("copy", where, on, off, direction, memory, nbytes))
    for key in ("launch", "graph_launch", "d2d"):
        if key not in raw:
            continue
        body = raw[key]
        on, off = _pair(p, body, key)
        kernels = _int(p, body, key, "kernels", 1, 100_000) if key == "graph_launch" else 1
        nbytes = _int(p, body, key, "bytes", 1, MAX_BYTES) if key == "d2d" else 0
        points.append(Point(key, key, on, off, nbytes=nbytes, kernels=kernels))
    blocks = raw.get("non_blocking_blocks_host")
    if blocks is not None and not isinstance(blocks, bool):
        raise _bad(p, "non_blocking_blocks_host", "expected true or false")
    fit = raw.get("fit")
    if fit is not None:
        if not isinstance(fit, list) or not fit or not all(isinstance(k, str) for k in fit):
            raise _bad(p, "fit", "expected a non-empty list of parameter names")
        for i, k in enumerate(fit):
            if k not in FITTABLE:
                raise _bad(p, f"fit[{i}]", f"not a fittable parameter (one of {', '.join(FITTABLE)})")
        fit = tuple(dict.fromkeys(fit))
    source = raw.get("source", "")
    if not isinstance(source, str):
        raise _bad(p, "source", "expected a string")
    return Measurements(path=p, extends=extends, repeat=repeat, points=tuple(points), blocks_host=blocks, fit=fit,
                        source=source.strip())


# ---------------------------------------------------------------------------------------------
# the microbenchmark loops as traces (the forward model)


def microbench_table(what: str, repeat: int, direction: str = "h2d", memory: str = "pinned", nbytes: int = 0,
                     kernels: int = 1):
    """``repeat`` iterations of one microbenchmark on one thread and one stream, each: the CUDA call,
    its GPU op(s), ``cudaStreamSynchronize``. ``what``: copy (H2D/D2H ``nbytes`` from ``memory``),
    launch (one kernel), graph_launch (one ``cudaGraphLaunch`` of ``kernels`` kernels), d2d (a
    device-to-device copy). The captured timeline follows tracegen synth's rules: a GPU op starts a
    launch latency after its call starts, the sync returns a wake-up after the GPU work ends."""
    from fastrack_core.traceio import make_table

    cols: dict[str, list] = {k: [] for k in ("op_id", "rank", "device", "thread", "stream", "kind", "name",
                                             "start_ns", "dur_ns", "bytes", "copy_dir", "host_mem",
                                             "correlation", "deps", "dep_kinds")}

    def op(thread, stream, kind, name, start, dur, nb=0, cdir=None, mem=None, corr=-1, deps=(), dkinds=()):
        cols["op_id"].append(len(cols["op_id"]))
        cols["rank"].append(0)
        cols["device"].append(0)
        cols["thread"].append(thread)
        cols["stream"].append(stream)
        cols["kind"].append(kind)
        cols["name"].append(name)
        cols["start_ns"].append(int(start))
        cols["dur_ns"].append(int(dur))
        cols["bytes"].append(int(nb))
        cols["copy_dir"].append(cdir)
        cols["host_mem"].append(mem)
        cols["correlation"].append(corr)
        cols["deps"].append(list(deps))
        cols["dep_kinds"].append(list(dkinds))
        return cols["op_id"][-1]

    call_name = {"copy": "cudaMemcpyAsync", "d2d": "cudaMemcpyAsync", "launch": "cudaLaunchKernel",
                 "graph_launch": "cudaGraphLaunch"}[what]
    t, prev_sync, last_gpu = 0, -1, -1
    for i in range(repeat):
        call = op(THREAD_ID, -1, "runtime", call_name, t, CALL_NS[call_name], corr=i + 1,
                  deps=[prev_sync] if prev_sync >= 0 else [], dkinds=[0] if prev_sync >= 0 else [])
        g_t = t + LAUNCH_LATENCY_NS
        gpu_ops = []
        for _k in range(kernels if what == "graph_launch" else 1):
            if what == "copy":
                dur = max(1, math.ceil(nbytes / 25.0) + 2_000)
                name = {"h2d": "Memcpy HtoD", "d2h": "Memcpy DtoH"}[direction]
                fields = dict(nb=nbytes, cdir=direction.upper(), mem=memory)
            elif what == "d2d":
                dur, name, fields = max(1, math.ceil(nbytes / D2D_GB_S) + 1_000), "Memcpy DtoD", dict(nb=nbytes,
                                                                                                   cdir="D2D")
            else:
                dur, name, fields = KERNEL_NS, "microbench_kernel", {}
            deps, dk = [call], [1]
            if last_gpu >= 0:
                deps.append(last_gpu)
                dk.append(2)
            g = op(-1, STREAM_ID, "memcpy" if what in ("copy", "d2d") else "kernel", name, g_t, dur, corr=i + 1,
                   deps=deps, dkinds=dk, **fields)
            gpu_ops.append(g)
            last_gpu = g
            g_t += dur
        s_start = t + CALL_NS[call_name]
        s_end = max(s_start + SYNC_CALL_NS, g_t + SYNC_WAKE_NS)
        prev_sync = op(THREAD_ID, -1, "sync", "cudaStreamSynchronize", s_start, s_end - s_start,
                       deps=[call, gpu_ops[-1]], dkinds=[0, 4])
        t = s_end
    return make_table(cols)


def point_graph(pt: Point, repeat: int):
    """The graph of a point's microbenchmark loop."""
    from fastrack_core.traceio import trace_in_memory
    from replay.pipeline.build import build_graph

    table = microbench_table(pt.what, repeat, pt.direction, pt.memory, pt.nbytes, pt.kernels)
    return build_graph(trace_in_memory(table, {"source_format": "synthetic", "trace_name": f"calibrate {pt.label}"}))


class Simulator:
    """Per-iteration latency of each point under a preset and overrides, CC on (``baseline``) and off
    (``none``); graphs are built once."""

    def __init__(self, points: tuple[Point, ...], repeat: int, preset: str):
        self.points, self.repeat, self.preset = points, repeat, preset
        self._graphs = [point_graph(p, repeat) for p in points]
        self._cache: dict[tuple, float] = {}

    @property
    def params(self) -> dict[str, dict[str, Any]]:
        """The base preset's parameters (``[table][key]``), as the loops replay them."""
        from replay.plugins import load_model

        return load_model(MODEL).from_preset(self.preset, list(MICROBENCH_SETS)).params

    def latency(self, i: int, protocol: str, overrides: dict[str, Any]) -> float:
        from replay.pipeline.run import replay_graph

        key = (i, protocol, tuple(sorted(overrides.items())))
        if key not in self._cache:
            sets = [*MICROBENCH_SETS, *(f"{k}={v}" for k, v in sorted(overrides.items()))]
            rep = replay_graph(self._graphs[i], protocol, MODEL, self.preset, sets)
            self._cache[key] = rep.result.makespan_ns / self.repeat
        return self._cache[key]

    def delta(self, i: int, overrides: dict[str, Any]) -> float:
        return self.latency(i, "baseline", overrides) - self.latency(i, "none", overrides)


# ---------------------------------------------------------------------------------------------
# the fit


@dataclass
class Fitted:
    key: str
    value: Any
    points: list[str]
    note: str = ""
    residuals: list[float] = field(default_factory=list)
    bound: float | None = None  # an upper bound the value may not pass (cpu_crypto.core_gb_s: the copy rate)


def _solve(f: Callable[[float], float], lo: float, hi: float, log: bool, tol: float = 2e-4,
           steps: int = 40) -> float:
    """A root of the monotone ``f`` in [lo, hi] (on log x when ``log``) by the Illinois variant of
    regula falsi, stopping once ``|f| <= tol`` (a relative residual); the nearer end when ``f`` has
    no sign change there."""
    a, b = (math.log(lo), math.log(hi)) if log else (lo, hi)
    x = (lambda u: math.exp(u)) if log else (lambda u: u)
    fa, fb = f(x(a)), f(x(b))
    if abs(fa) <= tol:
        return x(a)
    if abs(fb) <= tol:
        return x(b)
    if (fa > 0) == (fb > 0):
        return x(a) if abs(fa) < abs(fb) else x(b)
    side = 0
    m = 0.5 * (a + b)
    for _ in range(steps):
        m = (a * fb - b * fa) / (fb - fa)
        if not (min(a, b) < m < max(a, b)):
            m = 0.5 * (a + b)
        fm = f(x(m))
        if abs(fm) <= tol:
            return x(m)
        if (fm > 0) == (fb > 0):
            b, fb = m, fm
            if side == -1:
                fa /= 2
            side = -1
        else:
            a, fa = m, fm
            if side == 1:
                fb /= 2
            side = 1
    return x(m)


def _rel(model: float, measured: float) -> float:
    return (model - measured) / measured if measured else model - measured


def calibrate(meas: Measurements, preset: str, fit_ce: bool = False) -> tuple[list[Fitted], dict[str, Any], Simulator]:
    """Fit the parameters the measurements identify (module docstring); returns the fits, the
    overrides they make, and the simulator (for residuals)."""
    fit_ce = fit_ce or bool(meas.fit and "ce.crypto_gb_s" in meas.fit)
    sim = Simulator(meas.points, meas.repeat, preset)
    idx = {id(p): i for i, p in enumerate(meas.points)}
    ov: dict[str, Any] = {}
    fits: dict[str, Fitted] = {}
    copies = meas.of("copy")
    pinned = [p for p in copies if p.memory == "pinned"]
    small = [p for p in pinned if p.nbytes <= SMALL_MAX_BYTES]
    large = [p for p in pinned if p.nbytes >= LARGE_MIN_BYTES]
    chosen = _check_enough(meas, meas.fit, fit_ce)
    rate_key = "ce.crypto_gb_s" if fit_ce else "cpu_crypto.core_gb_s"
    base_staging = float(sim.params["host"]["staging_copy_gb_s"])

    def mean_residual(key: str, pts: list[Point], v: float, integer: bool) -> float:
        trial = dict(ov)
        trial[key] = int(round(v)) if integer else round(v, 4)
        return sum(_rel(sim.delta(idx[id(p)], trial), max(p.delta_ns, 1.0)) for p in pts) / len(pts)

    def fit_delta(key: str, pts: list[Point], lo: float, hi: float, log: bool, integer: bool) -> None:
        if not pts or key not in chosen:
            return
        v = _solve(lambda x: mean_residual(key, pts, x, integer), lo, hi, log)
        ov[key] = int(round(v)) if integer else round(v, 4)
        at_bound = ov[key] <= lo or ov[key] >= hi
        fits[key] = Fitted(key, ov[key], [p.label for p in pts],
                           note=f"at the end of its search range [{lo}, {hi}]: the points ask for a value beyond it"
                           if at_bound else "")

    def fit_cpu_rate(pts: list[Point]) -> None:
        """cpu_crypto.core_gb_s, at most the host's plain copy rate (module docstring: the bound)."""
        key = "cpu_crypto.core_gb_s"
        if not pts or key not in chosen:
            return
        bound = float(ov.get("host.staging_copy_gb_s", base_staging))
        v = round(_solve(lambda x: mean_residual(key, pts, x, False), RATE_MIN_GB_S, bound, True), 4)
        ov[key] = min(v, bound)
        note = ""
        if ov[key] >= bound and mean_residual(key, pts, bound, False) > RESIDUAL_TOL:
            wanted = round(_solve(lambda x: mean_residual(key, pts, x, False), bound, RATE_MAX_GB_S, True), 4)
            staging = ("host.staging_copy_gb_s, fitted here to the CC-off pageable copies, so rather to"
                       if "host.staging_copy_gb_s" in ov else
                       "host.staging_copy_gb_s (the host's copy rate, kept: this file has no CC-off pageable copy "
                       "with its pinned twin to measure it), or to")
            threads = int(ov.get("cpu_crypto.threads", sim.params["cpu_crypto"]["threads"]))
            note = (f"held at its bound host.staging_copy_gb_s = {bound:g} GB/s (no CPU encrypts faster than it "
                    f"copies the same bytes); the points ask for {wanted:g} GB/s: the residual points to "
                    f"{staging} cpu_crypto.threads (kept at {threads}) or a CC-off rate below the base preset's, "
                    "which no point separates")
        fits[key] = Fitted(key, ov[key], [p.label for p in pts], note=note, bound=bound)

    def fit_threads(pts: list[Point]) -> None:
        """cpu_crypto.threads (only when the file's fit list names it): the fewest encrypting threads
        whose rate, at most the bound, matches the points; then the rate under that count."""
        key = "cpu_crypto.threads"
        if not pts or key not in chosen:
            return
        bound = float(ov.get("host.staging_copy_gb_s", base_staging))
        trial_rate = {**ov, "cpu_crypto.core_gb_s": bound}
        n = 1
        while n < THREADS_MAX:
            trial = {**trial_rate, key: n}
            if sum(_rel(sim.delta(idx[id(p)], trial), max(p.delta_ns, 1.0)) for p in pts) / len(pts) <= RESIDUAL_TOL:
                break
            n += 1
        ov[key] = n
        fits[key] = Fitted(key, n, [p.label for p in pts],
                           note=f"the fewest threads at most {THREADS_MAX} that reach the points with the rate at "
                                f"its bound {bound:g} GB/s" if n == THREADS_MAX else "")

    for _round in range(2):
        if "host.staging_copy_gb_s" in chosen:
            _fit_staging(meas, sim, idx, ov, fits)
        launch = meas.of("launch") + meas.of("graph_launch")
        fit_delta("submit.kernel_ns", launch, 0, 10**7, False, True)
        fit_delta("submit.copy_ns", meas.of("d2d"), 0, 10**7, False, True)
        fit_delta("submit.crossing_ns", small, 0, 10**8, False, True)
        if fit_ce:
            fit_delta(rate_key, large, RATE_MIN_GB_S, RATE_MAX_GB_S, True, False)
        else:
            fit_threads(large)
            fit_cpu_rate(large)
    if meas.blocks_host is not None:
        ov["submit.copy_blocks_host"] = "all" if meas.blocks_host else "d2h"
        fits["submit.copy_blocks_host"] = Fitted("submit.copy_blocks_host", ov["submit.copy_blocks_host"],
                                                 ["non_blocking_blocks_host"], note="read, not fitted")
    for ft in fits.values():
        if ft.key == "host.staging_copy_gb_s" or ft.key == "submit.copy_blocks_host":
            continue
        pts = [p for p in meas.points if p.label in ft.points]
        ft.residuals = [_rel(sim.delta(idx[id(p)], ov), max(p.delta_ns, 1.0)) for p in pts]
    return list(fits.values()), ov, sim


FITTABLE = ("host.staging_copy_gb_s", "submit.kernel_ns", "submit.copy_ns", "submit.crossing_ns",
            "cpu_crypto.core_gb_s", "cpu_crypto.threads", "ce.crypto_gb_s")


def identified(meas: Measurements, fit_ce: bool) -> dict[str, int]:
    """Per fittable parameter: the number of points that identify it (module docstring)."""
    copies = meas.of("copy")
    pinned = [p for p in copies if p.memory == "pinned"]
    pageable = [p for p in copies if p.memory == "pageable" and any(
        q.direction == p.direction and q.nbytes == p.nbytes for q in pinned)]
    rate = len([p for p in pinned if p.nbytes >= LARGE_MIN_BYTES])
    return {"host.staging_copy_gb_s": len(pageable),
            "submit.kernel_ns": len(meas.of("launch")) + len(meas.of("graph_launch")),
            "submit.copy_ns": len(meas.of("d2d")),
            "submit.crossing_ns": len([p for p in pinned if p.nbytes <= SMALL_MAX_BYTES]),
            "cpu_crypto.core_gb_s": 0 if fit_ce else rate, "cpu_crypto.threads": 0 if fit_ce else rate,
            "ce.crypto_gb_s": rate if fit_ce else 0}


def _check_enough(meas: Measurements, wanted: tuple[str, ...] | None, fit_ce: bool) -> set[str]:
    """The parameters to fit: ``wanted`` (the file's ``fit`` list), or every one the points identify.
    Fewer identifying points than parameters is refused, naming the field."""
    ids = identified(meas, fit_ce)
    if wanted is None:
        chosen = {k for k, n in ids.items() if n and k not in OPT_IN}
        if not chosen:
            raise ConfigError(f"copies: {len(meas.points)} point(s) identify no parameter (a pinned copy of at most "
                              f"{SMALL_MAX_BYTES} or at least {LARGE_MIN_BYTES} bytes, a pageable copy with its pinned "
                              "twin, launch, graph_launch or d2d)", path=meas.path)
        return chosen
    for k in wanted:
        if not ids.get(k):
            raise ConfigError(f"fit: {k} has no point that identifies it (fewer points than parameters: "
                              f"{len(meas.points)} point(s) for {len(wanted)} parameter(s))", path=meas.path)
    if len(meas.points) < len(wanted):
        raise ConfigError(f"fit: fewer points than parameters ({len(meas.points)} for {len(wanted)})", path=meas.path)
    return set(wanted)


def _fit_staging(meas: Measurements, sim: Simulator, idx: dict, ov: dict, fits: dict) -> None:
    """host.staging_copy_gb_s from the CC-off pageable copies: the extra time over pinned at one size."""
    copies = meas.of("copy")
    pairs = []
    for pg in (p for p in copies if p.memory == "pageable"):
        pin = [p for p in copies if p.memory == "pinned" and p.direction == pg.direction and p.nbytes == pg.nbytes]
        if pin:
            pairs.append((pg, pin[0]))
    if not pairs:
        return
    pg, pin = max(pairs, key=lambda pp: pp[0].nbytes)
    target = pg.cc_off_ns - pin.cc_off_ns
    if target <= 0:
        fits["host.staging_copy_gb_s"] = Fitted("host.staging_copy_gb_s", None, [pg.label, pin.label],
                                                note="kept: the pageable copy is no slower than the pinned one")
        return

    def f(v: float) -> float:
        trial = dict(ov)
        trial["host.staging_copy_gb_s"] = round(v, 4)
        got = sim.latency(idx[id(pg)], "none", trial) - sim.latency(idx[id(pin)], "none", trial)
        return _rel(got, target)

    v = round(_solve(f, 0.01, 10_000.0, True), 4)
    ov["host.staging_copy_gb_s"] = v
    trial_res = f(v)
    fits["host.staging_copy_gb_s"] = Fitted("host.staging_copy_gb_s", v, [pg.label, pin.label],
                                            residuals=[trial_res])


# ---------------------------------------------------------------------------------------------
# output


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _range(ft: Fitted, worst: float) -> tuple[Any, Any, str]:
    """A fitted value's range: twice its worst residual, at least +-5%, never below 0 (or 1 thread)
    nor above its bound; a value held at its bound ranges from 5% below it up to it."""
    v = ft.value
    if ft.bound is not None and v >= ft.bound:
        return round(v * 0.95, 4), v, ("held at its bound (the points ask for more): the bound at the high end, "
                                       "5% below it at the low end")
    span = max(0.05, 2 * worst)
    lo, hi = v * (1 - span), v * (1 + span)
    if ft.bound is not None:
        hi = min(hi, ft.bound)
    if isinstance(v, int):
        lo, hi = max(int(math.floor(lo)), 1 if ft.key == "cpu_crypto.threads" else 0), int(math.ceil(hi))
        if v == 0:
            hi = max(hi, 1000)
    else:
        lo, hi = round(max(lo, v * 0.01), 4), round(hi, 4)
    why = f"the fit +-{span:.0%} (twice its worst residual, at least 5%)"
    if ft.bound is not None and hi >= ft.bound:
        why += f", at most its bound {ft.bound:g}"
    return lo, hi, why


def preset_text(fits: list[Fitted], meas: Measurements, extends: str, name: str, description: str = "") -> str:
    """The calibrated preset: ``extends`` the base and states every fitted value with its source and,
    for numbers, a range from the fit's worst residual (at least +-5%)."""
    src = Path(meas.path).name
    lines = [f"# Written by `replay calibrate {src}`: CC parameters fitted to CC-on/CC-off microbenchmarks",
             "# (docs/model.md \"Calibration\"); every other value comes from the preset it extends.", "",
             "[preset]", f"name = {json.dumps(name)}", "model = \"h100\"",
             f"description = {json.dumps(description or f'{extends} with CC parameters calibrated to {src}')}",
             f"extends = {json.dumps(extends)}", ""]
    by_table: dict[str, list[Fitted]] = {}
    for ft in fits:
        if ft.value is None:
            continue
        by_table.setdefault(ft.key.split(".")[0], []).append(ft)
    for table, items in by_table.items():
        lines.append(f"[{table}]")
        for ft in items:
            key = ft.key.split(".")[1]
            worst = max((abs(r) for r in ft.residuals), default=0.0)
            lines.append(f"{key} = {_toml_value(ft.value)}")
            how = "read from" if ft.note == "read, not fitted" else "derived: fit by replay calibrate to"
            res = ", ".join(f"{r:+.2%}" for r in ft.residuals)
            pts = ", ".join(ft.points)
            cite = f", measurements of {meas.source}" if meas.source else ""
            tail = f"; residuals {res}" if res else ""
            extra = f"; {ft.note}" if ft.note and ft.note != "read, not fitted" else ""
            lines.append(f"{key}_source = " + json.dumps(f"{how} {src} ({pts}{cite}){tail}{extra}"))
            if isinstance(ft.value, (int, float)) and not isinstance(ft.value, bool):
                lo, hi, why = _range(ft, worst)
                lines.append(f"{key}_range = [{_toml_value(lo)}, {_toml_value(hi)}]")
                lines.append(f"{key}_range_source = " + json.dumps(why))
        lines.append("")
    return "\n".join(lines)


def report_lines(fits: list[Fitted], meas: Measurements, sim: Simulator, ov: dict, rate_key: str) -> list[str]:
    out = ["fitted (value, points, residual of the CC cost per point):"]
    for ft in fits:
        if ft.value is None:
            out.append(f"  {ft.key:28s} kept        {ft.note}")
            continue
        res = ", ".join(f"{p} {r:+.2%}" for p, r in zip(ft.points, ft.residuals)) or ft.note
        note = f"  ({ft.note})" if ft.note and ft.residuals and ft.bound is None else ""
        out.append(f"  {ft.key:28s} {_toml_value(ft.value):>11s}  {res}{note}")
    fitted = {ft.key for ft in fits if ft.value is not None}
    kept = [k for k in ("submit.kernel_ns", "submit.copy_ns", "submit.crossing_ns", rate_key, "host.staging_copy_gb_s",
                        "submit.copy_blocks_host") if k not in fitted]
    if kept:
        out.append("kept from the base preset (no measurement identifies them): " + ", ".join(kept))
    other = "cpu_crypto.core_gb_s" if rate_key == "ce.crypto_gb_s" else "ce.crypto_gb_s"
    if "cpu_crypto.threads" not in fitted:
        out.append(f"kept: {other} and cpu_crypto.threads (not separable from {rate_key} by copy latencies; "
                   "name cpu_crypto.threads in the file's fit list to fit it)")
    else:
        out.append(f"kept: {other} (not separable from {rate_key} by copy latencies)")
    for ft in fits:
        if ft.bound is not None:
            out.append(f"bound: {ft.key} <= host.staging_copy_gb_s = {ft.bound:g} GB/s"
                       + (f": {ft.note}" if ft.note else " (not reached)"))
    out.append("points (measured CC cost -> model, ratio CC on/off measured -> model):")
    for i, p in enumerate(meas.points):
        on, off = sim.latency(i, "baseline", ov), sim.latency(i, "none", ov)
        out.append(f"  {p.label:14s} {p.what:12s} {p.direction:4s} {p.memory:9s} {p.nbytes:>11d} B  "
                   f"{p.delta_ns / 1e3:12.3f} us -> {(on - off) / 1e3:12.3f} us   "
                   f"{p.cc_on_ns / p.cc_off_ns:7.3f}x -> {on / off:7.3f}x")
    return out


@click.command("calibrate")
@click.argument("measurements", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Preset TOML to write.")
@click.option("--extends", "extends", default=None,
              help="Preset the result extends (name or path); default: the file's \"extends\", else h100-sxm.")
@click.option("--name", "name", default=None, help="The written preset's name (default: the output's stem).")
@click.option("--description", "description", default="", help="The written preset's description.")
@click.option("--fit-ce", is_flag=True, help="Fit ce.crypto_gb_s as the bulk rate instead of cpu_crypto.core_gb_s.")
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists.")
@reports_errors
def command(measurements, output, extends, name, description, fit_ce, overwrite):
    """Fit CC parameters to CC-on/CC-off microbenchmark MEASUREMENTS (JSON, docs/model.md
    "Calibration"; benchmarks/cc_microbench.py writes it) and write a preset that extends a named one."""
    from fastrack_core.atomic import write_text_atomic
    from fastrack_core.outputs import check_input_path, check_output_path

    check_input_path(measurements)
    out = check_output_path(output, [measurements], overwrite)
    meas = load_measurements(measurements)
    # a base from the command line is as typed (relative to the working directory); one from the file
    # is relative to the file
    base = extends if extends else _relative_to(meas.extends, Path(measurements).parent)
    fits, ov, sim = calibrate(meas, base, fit_ce)
    rate_key = "ce.crypto_gb_s" if fit_ce or (meas.fit and "ce.crypto_gb_s" in meas.fit) else "cpu_crypto.core_gb_s"
    base_ref = _base_for(base, out)
    text = preset_text(fits, meas, base_ref, name or out.stem, description)
    for line in report_lines(fits, meas, sim, ov, rate_key):
        click.echo(line)
    write_text_atomic(out, text + "\n")
    click.echo(f"wrote {out} (extends {base_ref})")


def _is_path(ref: str) -> bool:
    p = Path(ref)
    return p.suffix == ".toml" or len(p.parts) > 1


def _relative_to(ref: str, folder: Path) -> str:
    """A preset path ``ref`` (not a shipped name) read relative to ``folder``."""
    if not _is_path(ref) or Path(ref).is_absolute():
        return ref
    return str(folder / ref)


def _base_for(base: str, out: Path) -> str:
    """``extends`` as the written preset states it: the base's file relative to the output (the
    loader resolves ``extends`` next to the file that says it, so a shipped name becomes the path of
    the shipped preset)."""
    import os

    from replay.config import resolve_preset_path
    from replay.plugins import load_model

    cls = load_model(MODEL)
    path = Path(base) if _is_path(base) else resolve_preset_path(base, cls.presets_dir, cls.default_preset)
    rel = os.path.relpath(path.resolve(), out.resolve().parent)
    return rel[:-len(".toml")] if rel.endswith(".toml") and os.sep not in rel else rel
