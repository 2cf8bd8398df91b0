"""Step prices: what one engine step of a given shape costs under a protocol, from the captured
step graphs (docs/serving.md, "The request-level simulator").

A serving trace marks every engine step (``ProfilerStep#N``) with an engine-step marker, an NVTX
instant ``engine_step:<prefill tokens>:<decode requests>:<context tokens>`` on the host thread
(:data:`STEP_MARKER`; ``examples/serving.py`` writes it). The *step graph* of step N is the
captured graph cut to the nodes of that step (edges from other steps dropped, so nothing waits
for another step's work). Pricing a step is one replay of its step graph under the protocol and
preset, never a replay of the whole trace. From that replay:

* ``host_ns``: when the host thread that carries the marker is free for the next step (its last
  node's finish, from the step's first node): input preparation, launches, the host side of CC
  (encryption, encrypted submission, host-synchronous copies) and, in a synchronous loop, the wait
  for the token readback;
* ``gpu_ns``: the span of the step's work on the GPU and copy lanes (first start to last finish);
* ``gpu_busy_ns``: the time those lanes are busy in it (the union of their nodes' intervals): what
  the step needs of the GPU once its work is queued. The span also holds the gaps in which the GPU
  waits for the host to issue the step's copies and launches; an overlapped loop issues them while
  the previous step still runs, so there they queue and the gaps close;
* ``period_ns`` = max(host_ns, gpu_ns): the step's length in a steady loop. In a synchronous loop
  the host waits for the readback, so host_ns >= gpu_ns and the period is the step graph's
  makespan; in an overlapped loop (the next step prepared while this one runs on the GPU) the
  longer of the two sides sets the pace. A CC cost that blocks the host (a host-synchronous
  readback) makes host_ns cover the GPU work and so stalls the next step;
* ``admit_ns`` and ``token_ns``: where in the step the host admits requests and hands out tokens
  (the step's first ``arrive`` and first ``first_token``/``token`` request markers, from the step's
  first node; a step without token markers hands them out at its end), and ``gpu_end_ns``, when its
  last GPU or copy node finishes (an overlap loop reads a step's tokens no earlier);
* ``sync_ns`` and ``sync_gpu_end_ns``: where the marker's host thread first blocks on the GPU (its
  first stream, event or device synchronisation, e.g. a pageable input copy), and when the GPU work
  issued after it (its descendants) finishes. The cut drops what it waits for; in a loop that runs
  ahead of the GPU that is the earlier steps' work, so the simulator's overlap pipeline holds the
  host there until the GPU has finished them, and the work issued after it waits with it;
* ``mechanism_ns``: the step graph's critical path by mechanism (the attribution of
  :mod:`replay.pipeline.serving`), for "what CC added, by mechanism".

Shapes are (prefill tokens, decode requests). A shape captured more than once is priced by the
mean over its captured steps; a shape never captured is **interpolated**: a decode-only shape
piecewise-linearly in the decode count between the captured decode-only shapes (linear
extrapolation from the two nearest beyond them, clamped at zero below); a shape with prefill as
the decode-only price of its decode count plus a prefill increment, piecewise-linear in the
prefill tokens between the captured steps with prefill (their increment over the decode-only price
of their own decode count). The context tokens are recorded but not an interpolation axis (say
so: attention over a longer context is priced as the captured steps of the same shape had it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from fastrack_core.errors import ConfigError
from fastrack_core.markers import RANGE_PUSH
from fastrack_core.schema import OpKind
from replay.graph import NODE_FIELDS, LaneType, OpGraph
from replay.pipeline.engine import schedule
from replay.pipeline.run import prepare
from replay.pipeline.serving import _Mechanisms, request_marks

STEP_MARKER = "engine_step"
_STEP_RE = re.compile(r"^engine_step:(\d{1,9}):(\d{1,9}):(\d{1,12})$")


@dataclass(frozen=True)
class CapturedStep:
    """One captured engine step: its ProfilerStep index and shape."""

    step: int
    prefill: int
    decode: int
    context: int


def captured_steps(graph: OpGraph, trace: str) -> list[CapturedStep]:
    """The engine steps of ``graph`` by their markers; ConfigError when there are none."""
    marker_names = {}
    for i, nm in enumerate(graph.names):
        if nm.startswith(RANGE_PUSH + STEP_MARKER + ":"):
            m = _STEP_RE.match(nm[len(RANGE_PUSH):])
            if m:
                marker_names[i] = tuple(int(x) for x in m.groups())
    if not marker_names:
        raise ConfigError(f"no engine-step markers (NVTX instants named '{STEP_MARKER}:<prefill>:<decode>:"
                          "<context>', docs/serving.md): the serving simulator prices steps by them",
                          path=trace)
    nodes = np.flatnonzero(np.isin(graph.name, list(marker_names)))
    out, seen = [], set()
    for nd in nodes[np.argsort(graph.captured_start[nodes], kind="stable")]:
        k = int(graph.step[nd])
        if k < 0 or k in seen:
            continue
        seen.add(k)
        out.append(CapturedStep(k, *marker_names[int(graph.name[nd])][:3]))
    if not out:
        raise ConfigError("engine-step markers outside any profiler step (field 'step'): the serving simulator "
                          "needs each marker inside its ProfilerStep", path=trace)
    return out


def step_graph(graph: OpGraph, step: int) -> OpGraph:
    """The captured graph cut to the nodes of profiler step ``step``; edges from nodes outside it
    are dropped, so the step's first nodes start at once."""
    keep = np.flatnonzero(graph.step == step)
    remap = np.full(graph.n, -1, np.int64)
    remap[keep] = np.arange(keep.size)
    counts = np.diff(graph.dep_ptr)[keep]
    edge_idx = np.repeat(graph.dep_ptr[keep], counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts,
                                                                                            counts))
    owner = np.repeat(np.arange(keep.size), counts)
    src = remap[graph.dep_src[edge_idx]]
    ok = src >= 0
    owner = owner[ok]
    ptr = np.zeros(keep.size + 1, np.int64)
    np.add.at(ptr, owner + 1, 1)
    changes = {f: getattr(graph, f)[keep] for f in NODE_FIELDS}
    changes["release"] = np.zeros(keep.size, np.int64)
    hold_until = graph.hold_until[keep]
    changes["hold_lane"] = graph.hold_lane[keep]
    changes["hold_until"] = np.where(hold_until >= 0, remap[np.maximum(hold_until, 0)], -1)
    return graph.replace(dep_ptr=np.cumsum(ptr), dep_src=src[ok], dep_kind=graph.dep_kind[edge_idx][ok],
                         dep_lag=graph.dep_lag[edge_idx][ok], **changes)


@dataclass
class StepPrice:
    host_ns: int
    gpu_ns: int
    mechanism_ns: dict[str, float] = field(default_factory=dict)
    admit_ns: int = 0  # offset of the step's first request admission (its first ``arrive`` marker)
    token_ns: int | None = None  # offset of the step's first token delivery (``first_token``/``token``)
    gpu_end_ns: int = 0  # offset of the finish of the step's last GPU or copy node (its tokens are on the host)
    gpu_busy_ns: int | None = None  # GPU and copy lanes busy (union of their intervals); None: gpu_ns
    sync_ns: int | None = None  # offset of the host's first wait on the GPU (None: it never waits)
    sync_gpu_end_ns: int = 0  # offset of the finish of the GPU work issued after that wait (0: none)

    @property
    def busy_ns(self) -> int:
        return self.gpu_ns if self.gpu_busy_ns is None else min(self.gpu_busy_ns, self.gpu_ns)

    @property
    def period_ns(self) -> int:
        return max(self.host_ns, self.gpu_ns)


def price_step(graph: OpGraph, marker_step: CapturedStep, protocol: str, model: str, preset: str | None,
               overrides: tuple[str, ...] = ()) -> StepPrice:
    """One replay of one step graph under ``protocol``."""
    sub = step_graph(graph, marker_step.step)
    prep = prepare(sub, protocol, model, preset, overrides)
    g = prep.graph
    sched = schedule(g)
    t0 = int(sched.start.min()) if g.n else 0
    ltype = g.lanes.type
    marker_lane = _marker_lane(g)
    on_host = g.lane == marker_lane
    host_end = int(sched.finish[on_host].max()) if on_host.any() else t0
    has_lane = g.lane >= 0
    dev = np.zeros(g.n, bool)
    dev[has_lane] = ltype[g.lane[has_lane]] != LaneType.HOST_THREAD
    gpu = int(sched.finish[dev].max() - sched.start[dev].min()) if dev.any() else 0
    busy = _union_ns(sched.start[dev], sched.finish[dev])
    syncs = np.flatnonzero(on_host & (g.kind == OpKind.SYNC))
    sync_ns, sync_end = None, 0
    if syncs.size:
        first = int(syncs[np.argmin(sched.start[syncs])])
        sync_ns = int(sched.start[first] - t0)
        after = _descendants(g, first) & dev
        sync_end = int(sched.finish[after].max() - t0) if after.any() else 0
    mech = _Mechanisms(g)
    last = int(np.argmax(sched.finish))
    totals = mech.walk(g, sched, last, t0)
    marks = request_marks(g)
    arrive = marks.node[marks.event == 0]
    tokens = marks.node[(marks.event == 1) | (marks.event == 2)]
    return StepPrice(host_ns=host_end - t0, gpu_ns=gpu,
                     mechanism_ns={lab: float(v) for lab, v in zip(mech.labels, totals.tolist()) if v},
                     admit_ns=int(sched.start[arrive].min() - t0) if arrive.size else 0,
                     token_ns=int(sched.start[tokens].min() - t0) if tokens.size else None,
                     gpu_end_ns=int(sched.finish[dev].max() - t0) if dev.any() else 0, gpu_busy_ns=busy,
                     sync_ns=sync_ns, sync_gpu_end_ns=sync_end)


def _descendants(g: OpGraph, node: int) -> np.ndarray:
    """Mask of the nodes that depend on ``node``, directly or through others."""
    owner = np.repeat(np.arange(g.n), np.diff(g.dep_ptr))
    order = np.argsort(g.dep_src, kind="stable")
    src, dst = g.dep_src[order], owner[order]
    ptr = np.searchsorted(src, np.arange(g.n + 1))
    seen = np.zeros(g.n, bool)
    stack = [node]
    while stack:
        v = stack.pop()
        for c in dst[ptr[v]:ptr[v + 1]].tolist():
            if not seen[c]:
                seen[c] = True
                stack.append(c)
    return seen


def _union_ns(start: np.ndarray, finish: np.ndarray) -> int:
    """Length of the union of the intervals [start, finish)."""
    if not start.size:
        return 0
    order = np.argsort(start, kind="stable")
    s, f = start[order].astype(np.int64), np.maximum.accumulate(finish[order].astype(np.int64))
    # an interval opens a new busy stretch where it starts after every earlier one has finished
    new = np.concatenate(([True], s[1:] > f[:-1]))
    ends = np.concatenate((f[:-1][new[1:]], f[-1:]))
    return int((ends - s[new]).sum())


def _marker_lane(g: OpGraph) -> int:
    for i, nm in enumerate(g.names):
        if nm.startswith(RANGE_PUSH + STEP_MARKER + ":"):
            hit = np.flatnonzero(g.name == i)
            if hit.size:
                return int(g.lane[hit[0]])
    return -1


_PRICED = ("host_ns", "gpu_ns", "busy_ns")  # the interpolated parts of a price


class PriceTable:
    """Step prices of one protocol by shape (prefill tokens, decode requests), with the
    interpolation of the module docstring; every shape asked for is cached."""

    def __init__(self, protocol: str, captured: dict[tuple[int, int], list[StepPrice]]):
        self.protocol = protocol
        self.captured = {s: _mean(ps) for s, ps in captured.items()}
        self.captured_steps = sum(len(v) for v in captured.values())
        dec = sorted((d, p) for (pre, d), p in self.captured.items() if pre == 0)
        self._dec_x = np.array([d for d, _ in dec], float)
        self._dec = {k: np.array([getattr(p, k) for _, p in dec], float) for k in _PRICED}
        self._cache: dict[tuple[int, int], StepPrice] = {}
        self.interpolated: set[tuple[int, int]] = set()
        self.extrapolated: set[tuple[int, int]] = set()
        pre = sorted((s, p) for s, p in self.captured.items() if s[0] > 0)
        if pre and not dec:
            self._pre_x = np.array([s[0] for s, _ in pre], float)
            self._pre = {k: np.array([getattr(p, k) for _, p in pre], float) for k in _PRICED}
        else:
            by_p: dict[int, list[tuple[float, ...]]] = {}
            for (pp, d), p in pre:
                base = self._decode_only(d)
                by_p.setdefault(pp, []).append(tuple(getattr(p, k) - b for k, b in zip(_PRICED, base)))
            xs = sorted(by_p)
            self._pre_x = np.array(xs, float)
            self._pre = {k: np.array([np.mean([v[i] for v in by_p[x]]) for x in xs]) for i, k in enumerate(_PRICED)}
        self._pre_absolute = bool(pre and not dec)

    def _decode_only(self, d: int) -> tuple[float, ...]:
        if not self._dec_x.size:
            return (0.0,) * len(_PRICED)
        return tuple(_lin(self._dec_x, self._dec[k], d) for k in _PRICED)

    def price(self, prefill: int, decode: int) -> StepPrice:
        key = (prefill, decode)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if key in self.captured:
            out = self.captured[key]
        else:
            self.interpolated.add(key)
            if self._outside(prefill, decode):
                self.extrapolated.add(key)
            h, g, b = self._decode_only(decode) if not self._pre_absolute else (0.0,) * len(_PRICED)
            if prefill > 0 and self._pre_x.size:
                h += _lin(self._pre_x, self._pre["host_ns"], prefill)
                g += _lin(self._pre_x, self._pre["gpu_ns"], prefill)
                b += _lin(self._pre_x, self._pre["busy_ns"], prefill)
            nearest = min(self.captured, key=lambda s: (abs(s[0] - prefill), abs(s[1] - decode)))
            near = self.captured[nearest]
            out = StepPrice(host_ns=max(int(round(h)), 0), gpu_ns=max(int(round(g)), 0),
                            mechanism_ns=_scaled(near, max(h, g)), admit_ns=near.admit_ns, token_ns=near.token_ns,
                            gpu_end_ns=int(round(near.gpu_end_ns + max(g, 0) - near.gpu_ns)),
                            gpu_busy_ns=min(max(int(round(b)), 0), max(int(round(g)), 0)), sync_ns=near.sync_ns,
                            sync_gpu_end_ns=(int(round(near.sync_gpu_end_ns + max(g, 0) - near.gpu_ns))
                                             if near.sync_gpu_end_ns else 0))
        self._cache[key] = out
        return out

    def _outside(self, prefill: int, decode: int) -> bool:
        if prefill > 0 and (not self._pre_x.size or not self._pre_x[0] <= prefill <= self._pre_x[-1]):
            return True
        if not self._pre_absolute and (not self._dec_x.size or not self._dec_x[0] <= decode <= self._dec_x[-1]):
            return True
        return False

    def period(self, prefill: int, decode: int) -> int:
        return self.price(prefill, decode).period_ns


def _lin(x: np.ndarray, y: np.ndarray, v: float) -> float:
    """Piecewise-linear in ``x``; linear extrapolation from the two nearest points beyond the ends
    (a single point: that value)."""
    if x.size == 1:
        return float(y[0])
    if v < x[0]:
        i = 0
    elif v > x[-1]:
        i = x.size - 2
    else:
        return float(np.interp(v, x, y))
    return float(y[i] + (y[i + 1] - y[i]) * (v - x[i]) / (x[i + 1] - x[i]))


def _mean(ps: list[StepPrice]) -> StepPrice:
    mech: dict[str, float] = {}
    for p in ps:
        for k, v in p.mechanism_ns.items():
            mech[k] = mech.get(k, 0.0) + v / len(ps)
    toks = [p.token_ns for p in ps if p.token_ns is not None]
    syncs = [p.sync_ns for p in ps if p.sync_ns is not None]
    return StepPrice(host_ns=int(round(np.mean([p.host_ns for p in ps]))),
                     gpu_ns=int(round(np.mean([p.gpu_ns for p in ps]))), mechanism_ns=mech,
                     admit_ns=int(round(np.mean([p.admit_ns for p in ps]))),
                     token_ns=int(round(np.mean(toks))) if toks else None,
                     gpu_end_ns=int(round(np.mean([p.gpu_end_ns for p in ps]))),
                     gpu_busy_ns=int(round(np.mean([p.busy_ns for p in ps]))),
                     sync_ns=int(round(np.mean(syncs))) if syncs else None,
                     sync_gpu_end_ns=int(round(np.mean([p.sync_gpu_end_ns for p in ps]))))


def _scaled(p: StepPrice, period: float) -> dict[str, float]:
    total = sum(p.mechanism_ns.values())
    f = period / total if total > 0 else 0.0
    return {k: v * f for k, v in p.mechanism_ns.items()}


def price_tables(graph: OpGraph, trace: str, protocols: list[str], model: str, preset: str | None,
                 overrides: tuple[str, ...] = ()) -> tuple[dict[str, PriceTable], list[CapturedStep]]:
    """A price table per protocol: every captured step priced by one replay of its step graph."""
    steps = captured_steps(graph, trace)
    tables = {}
    for proto in protocols:
        by_shape: dict[tuple[int, int], list[StepPrice]] = {}
        for st in steps:
            by_shape.setdefault((st.prefill, st.decode), []).append(
                price_step(graph, st, proto, model, preset, overrides))
        tables[proto] = PriceTable(proto, by_shape)
    return tables, steps
