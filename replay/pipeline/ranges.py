"""Prediction ranges: a replay's result over the uncertainty ranges of the preset's assumptions.

Every parameter that is an assumption or a fit carries ``key_range = [low, high]`` in its preset
(:mod:`replay.config`, docs/model.md "Uncertainty ranges"). A range study replays the graph with
each such parameter alone at its low and at its high end (one at a time), then at the two corners
where every parameter that moved the result sits at the end that raised it, and at the end that
lowered it; the range is the smallest and the largest result over all those points and the
preset's own. The *driver* is the parameter whose one-at-a-time ends span the widest interval of
the headline figure (the slowdown against ``none`` when there is a reference, else the makespan).
It is a range over the points evaluated, not a bound: with work-conserving lanes a result need not
be monotone in a parameter (docs/architecture.md), so a value inside a range may, rarely, fall
outside the result's range.

Cost (docs/model.md "Prediction ranges"): the trace's graph is built once and what-if scaling
applied once. A point that moves only parameters the model lists as price-only, under a protocol
the re-pricer knows, re-prices the preset's transformed graph (:mod:`replay.pipeline.reprice`)
and re-times it in the placement order of the preset's schedule
(:func:`replay.pipeline.engine.retime`: an estimate, since a shared lane keeps its order); any
other point is a new protocol transform and a schedule (the ``none`` reference's points likewise,
shared by every protocol of a study). The preset points themselves are the caller's replays
where it hands them over (:meth:`RangeStudy.adopt`). Every point that decides an end of a range and is still an
estimate is then scheduled, so the ends are always schedules. Points are skipped, exactly,
where they cannot change the result:

* a parameter the transform never read at the preset's values (recorded while the preset's own
  transform ran: a transform is a deterministic function of the graph and of what it reads, so a
  parameter it did not read cannot change its output), e.g. the multi-GPU tables of a one-GPU
  trace;
* an end equal to the preset's value;
* a point's graph (re-priced or transformed) whose schedule inputs equal the preset's (say, a
  memset price on a trace without memsets): same inputs, same schedule, so it is not scheduled;
* a point's graph (re-priced or transformed) with the preset's nodes, edges and prices whose
  lanes are resized only where no node of the preset's schedule waited for a server (:func:`replay.pipeline.engine.resize_keeps_schedule`:
  a second secure channel on a trace whose one channel never delayed a copy, a pool maximum above
  the size the pool grew to): the engine's rule gives it the preset's schedule;
* a point that moves only parameters the preset's transform read inside the model's rule
  methods (``rule_methods``, e.g. ``direct_eligible``), where those methods answer every call the
  preset's transform made as they did then (:class:`Reads`): the transform reads nothing else
  that changed, so it would build the preset's graph; it is not transformed.

The points of each phase (the one-at-a-time ends, the corners, the ends scheduled exactly) are
evaluated on up to ``jobs`` threads within :data:`PARALLEL_MEMORY_BYTES`, and recorded in the
order a one-at-a-time study evaluates them, so the report does not depend on ``jobs``.

``captured`` and ``none`` have no range: nothing CC-related is assumed there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from fastrack_core.errors import ConfigError
from fastrack_core.memory import reusing_freed_memory
from replay.graph import OpGraph
from replay.names import CAPTURED, NONE
from replay.plugins import DEFAULT_MODEL

# The decision (docs/model.md "Prediction ranges"): ranges cost one evaluation per point, about
# 2 x (ranged parameters the protocol reads) + 4 (most re-priced and re-timed, the structure ones
# re-transformed and scheduled), some 6x a single replay at 1M ops, so they are asked for
# (``--ranges``), not on by default.
RANGES_DEFAULT = False

# How much memory a range study may add to evaluate points at once (docs/model.md "Prediction
# ranges", "Points at once"): an assumption of ours, chosen so that a 1M-op study (2.6M nodes under
# `baseline`) runs two re-transformed points or four re-priced ones together, and a 10M-op one
# runs one point at a time, as without threads; 1 GiB, in bytes.
PARALLEL_MEMORY_BYTES = 1 << 30
MAX_JOBS = 256  # the most threads a study is given (``--range-jobs``' range)


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity mask where the system has one), at most
    :data:`MAX_JOBS`: a range study's threads when not told."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(MAX_JOBS, n))


def graph_bytes(g: OpGraph) -> int:
    """The bytes of a graph's arrays (its nodes, edges and lanes), as :meth:`RangeStudy._slots`
    counts them."""
    total = 0
    for obj in (g, g.lanes):
        for f in dataclasses.fields(obj):
            a = getattr(obj, f.name)
            if isinstance(a, np.ndarray):
                total += a.nbytes
    return total


NO_RANGE_NOTE = "{protocol}: no range (the protocol assumes nothing CC-related; its parameters are not varied)"


@dataclass(frozen=True)
class Ranged:
    """One parameter with an uncertainty range: ``name`` is ``section.key``."""

    name: str
    value: Any
    low: Any
    high: Any
    reason: str


def ranged_parameters(hw) -> list[Ranged]:
    """The parameters of a loaded model that carry a range (``--set`` ones do not), in name order."""
    preset = hw._preset
    out = []
    for table, body in sorted(preset.ranges.items()):
        section = getattr(preset.values, table)
        for key, (low, high, reason) in sorted(body.items()):
            out.append(Ranged(f"{table}.{key}", getattr(section, key), low, high, reason))
    return out


# ---------------------------------------------------------------------------------------------
# which parameters a transform reads


class Reads(frozenset):
    """The parameters (``section.key``) a transform read. ``by_rule``: those it read only inside the
    model's rule methods (:attr:`replay.model.HardwareModel.rule_methods`), and ``calls``: every
    call of those it made, ``(method, args, kwargs, answer)``, so that a point moving only
    ``by_rule`` parameters can be told apart from the preset by the rules' answers alone."""

    by_rule: frozenset
    calls: tuple

    def __new__(cls, names=(), by_rule=(), calls=()):
        out = super().__new__(cls, names)
        out.by_rule, out.calls = frozenset(by_rule), tuple(calls)
        return out


class _TrackedSection:
    """A parameter section that records the keys read from it (``section.key``) into the set its
    sink holds at the time (a one-element list: the set changes inside a rule method)."""

    __slots__ = ("_obj", "_table", "_sink")

    def __init__(self, obj: Any, table: str, sink: list):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_table", table)
        object.__setattr__(self, "_sink", sink)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._obj, name)
        if not name.startswith("_"):
            self._sink[0].add(f"{self._table}.{name}")
        return value


class _TrackedRoot:
    """The model's ``p``: each section comes back tracked (an absent optional section stays None)."""

    __slots__ = ("_obj", "_sink")

    def __init__(self, obj: Any, sink: list):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_sink", sink)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._obj, name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return _TrackedSection(value, name, self._sink)
        return value


def _frozen(x: Any) -> Any:
    """A copy of a rule call's argument or answer that later edits of the original cannot change."""
    return np.array(x, copy=True) if isinstance(x, np.ndarray) else x


def transform_tracked(graph: OpGraph, protocol: str, hw) -> tuple[OpGraph, Reads | None]:
    """``protocol(graph, hw)`` and the parameters (``section.key``) it read, or None when they could
    not be recorded (a model that reads its parameters other than by attribute: then every parameter
    counts as read, and the transform is run again untracked). The reads made inside the model's
    rule methods are recorded apart, with the calls (:class:`Reads`)."""
    from replay.plugins import load_protocol

    transform = load_protocol(protocol)
    outside: set[str] = set()
    inside: set[str] = set()
    calls: list = []
    sink = [outside]

    def tracked(method: str):
        bound = getattr(hw, method)

        def call(*args, **kwargs):
            held, mine = sink[0], set()
            sink[0] = mine
            try:
                answer = bound(*args, **kwargs)
            finally:
                sink[0] = held
            inside.update(mine)
            calls.append((method, tuple(_frozen(a) for a in args), {k: _frozen(v) for k, v in kwargs.items()},
                          _frozen(answer)))
            return answer
        return call

    rules = tuple(getattr(hw, "rule_methods", ()))
    plain = hw.p
    hw.p = _TrackedRoot(plain, sink)
    for method in rules:
        setattr(hw, method, tracked(method))  # (an instance attribute: the class's method is untouched)
    try:
        out = transform(graph, hw)
    except Exception:  # the proxy is not the dataclass (asdict, replace, isinstance): run it plainly
        hw.p = plain
        for method in rules:
            del hw.__dict__[method]
        return transform(graph, hw), None
    finally:
        hw.p = plain
        for method in rules:
            hw.__dict__.pop(method, None)
    return out, Reads(outside | inside, inside - outside, calls)


def same_rule_answers(reads: Reads, hw) -> bool:
    """Whether model ``hw`` answers every rule call ``reads`` recorded as the recorded model did."""
    for method, args, kwargs, answer in reads.calls:
        got = getattr(hw, method)(*args, **kwargs)
        if isinstance(answer, np.ndarray):
            got = np.asarray(got)
            if got.shape != answer.shape or not np.array_equal(got, answer):
                return False
        elif got != answer:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# one point


def schedule_inputs(graph: OpGraph) -> tuple[np.ndarray, ...]:
    """Everything the engine reads from a graph: two graphs equal here have the same schedule."""
    from replay.pipeline.engine import _arrays

    return _arrays(graph)


def same_schedule_inputs(a: OpGraph, b: OpGraph, sizes: bool = True) -> bool:
    """Whether ``a`` and ``b`` have the same schedule because the engine reads the same from both:
    every array, except that a lane no node runs on or holds may differ in size. ``sizes=False``:
    the lanes' sizes are not compared at all (the same nodes, edges, prices and lanes otherwise)."""
    if a.n != b.n or a.dep_src.size != b.dep_src.size or len(a.lanes) != len(b.lanes):
        return False
    xa, xb = schedule_inputs(a), schedule_inputs(b)
    skip = (0, 2)  # (lane servers and maximum servers: compared where a node uses the lane)
    if not all(x.shape == y.shape and np.array_equal(x, y) for k, (x, y) in enumerate(zip(xa, xb)) if k not in skip):
        return False
    return not sizes or a.same_used_sizes(b)


def makespan_of(graph: OpGraph, sched=None) -> int:
    """The makespan a replay reports (:func:`replay.pipeline.results.summarize`): from the first
    node reached to the last finish, without the rest of the summary. ``sched``: the graph's
    schedule (anything with ``start`` and ``finish``), scheduled here when not given."""
    from replay.pipeline.engine import schedule
    from replay.pipeline.results import first_entry

    if not graph.n:
        return 0
    if sched is None:
        sched = schedule(graph)
    return int(sched.finish.max()) - first_entry(graph, sched)


@dataclass(frozen=True)
class _Outcome:
    """One evaluated point of a side: its makespan and how it was found (:meth:`RangeStudy._record`)."""

    makespan: int
    repriced: bool = False  # re-priced (from the preset's graph, or a point's of the same structure), not re-transformed
    unchanged: bool = False  # the same schedule inputs as the preset's graph: not scheduled
    estimated: bool = False  # re-timed in the preset's placement order, not scheduled


@dataclass(frozen=True)
class _Times:
    """Start and finish of every node, as :func:`makespan_of` reads a schedule."""

    start: np.ndarray
    finish: np.ndarray


def _keep_placement(side: "_Side", sched) -> None:
    """Keep what the study reads of the side's preset schedule: its placement order and final lane
    sizes (for re-timing) and its lanes' slack (for resizes that change nothing)."""
    from replay.pipeline.engine import lane_slack

    side.placement = (sched.order, sched.lane_servers)
    side.slack = lane_slack(side.base_graph, sched)


def _key(values: Mapping[str, Any]) -> tuple:
    return tuple(sorted(values.items()))


def _override(name: str, value: Any) -> str:
    return f"{name}={value!r}" if isinstance(value, float) else f"{name}={value}"


@dataclass
class _Side:
    """One protocol (or the ``none`` reference) of a study: its preset graph, what its transform
    read, and its makespan at each point evaluated (by the point's parameter values)."""

    protocol: str
    base_graph: OpGraph
    reads: Reads | None  # None: unknown (every parameter counts as read)
    makespan: dict[tuple, int] = field(default_factory=dict)
    replayed: int = 0  # points scheduled (re-priced or re-transformed)
    transformed_only: int = 0  # points whose graph equalled the preset's (not scheduled)
    repriced: int = 0  # points whose graph was re-priced (from base_graph or a sibling's: _evaluate_like)
    repricer: Any = None  # replay.pipeline.reprice.Repricer of base_graph, made on first use (False: none)
    hw: Any = None  # the model at the preset's values
    placement: Any = None  # (order, lane_servers) of base_graph's schedule, made on first use
    slack: Any = None  # replay.pipeline.engine.LaneSlack of that schedule, made with it
    estimated: set = field(default_factory=set)  # keys of points re-timed in that order, not scheduled
    retimed: int = 0  # points re-timed (estimates), before any was scheduled exactly

    def reads_any(self, names) -> bool:
        return self.reads is None or any(n in self.reads for n in names)


class RangeStudy:
    """Prediction ranges of one graph under one model and preset, for any number of protocols (the
    ``none`` reference's points are computed once and shared).

    ``graph`` is the trace's graph before what-if scaling (``scales`` is applied here, once, as
    :func:`replay.pipeline.run.prepare` does); ``overrides`` are the ``--set`` values, fixed at
    every point (their ranges are dropped)."""

    def __init__(self, graph: OpGraph, model: str = DEFAULT_MODEL, preset: str | None = None,
                 overrides: Sequence[str] = (), scales: Mapping[str, float] | None = None, reference: bool = True,
                 exact: bool = False, jobs: int | None = None):
        from replay.plugins import load_model
        from replay.whatif.scale import check_scales, scale_durations

        self.model, self.preset, self.overrides = model, preset, tuple(overrides)
        self.reference = reference
        self.exact = exact  # schedule every re-priced point instead of re-timing it
        # points evaluated at once, in threads (None: default_jobs()); the report does not depend on it
        self.jobs = default_jobs() if jobs is None else int(jobs)
        if not 1 <= self.jobs <= MAX_JOBS:
            raise ConfigError(f"range jobs: not an integer in 1..{MAX_JOBS}")
        self._lock = threading.Lock()  # (a side's re-pricer and placement are made once, by one thread)
        self._cls = load_model(model)
        hw = self._cls.from_preset(preset, self.overrides)
        self.ranged = ranged_parameters(hw)
        self._value = {r.name: r.value for r in self.ranged}
        from replay.pipeline.reprice import repriced_parameters

        self._repriced = repriced_parameters(hw)
        self.fixed_by_set = list(hw._preset.fixed_by_set)
        self._graph = scale_durations(graph, check_scales(scales))
        self._none: _Side | None = None
        self._adopted: dict[str, _Side] = {}  # a protocol's preset point, from the caller's replay (adopt)

    def adopt(self, protocol: str, rep) -> None:
        """Take the caller's own replay of ``protocol`` at the preset (a
        :class:`replay.pipeline.run.Replay` of this study's graph, model, preset, overrides and
        scales, whose transform recorded its reads: ``replay_graph(..., track_reads=True)``) as that
        protocol's preset point, so the study neither transforms nor schedules it again. ``none``'s
        is kept as the reference of every protocol; another protocol's is used by its next
        :meth:`protocol_range` and then released. A replay without recorded reads is ignored."""
        if protocol == CAPTURED or getattr(rep, "reads", None) is None:
            return
        side = _Side(protocol, rep.graph, rep.reads, hw=self._cls.from_preset(self.preset, self.overrides))
        _keep_placement(side, rep.schedule)
        side.makespan[()] = makespan_of(rep.graph, rep.schedule)
        if protocol == NONE:
            self._none = side
        else:
            self._adopted[protocol] = side

    # ---- points
    def _model_at(self, values: Mapping[str, Any]):
        return self._cls.from_preset(self.preset, self.overrides + tuple(_override(k, v) for k, v in sorted(values.items())))

    def _side(self, protocol: str, base_graph: OpGraph | None = None, base_makespan: int | None = None,
              base_schedule=None) -> _Side:
        from replay.pipeline.engine import schedule

        hw = self._cls.from_preset(self.preset, self.overrides)
        g0, reads = transform_tracked(self._graph, protocol, hw)
        side = _Side(protocol, g0, reads, hw=hw)
        if base_graph is not None and same_schedule_inputs(base_graph, g0) and base_makespan is not None:
            m0 = int(base_makespan)  # the caller's replay of the same graph: no schedule needed
            if base_schedule is not None:
                _keep_placement(side, base_schedule)
        else:
            s0 = schedule(g0) if g0.n else None
            m0 = makespan_of(g0, s0)
            if s0 is not None:
                _keep_placement(side, s0)
        side.makespan[()] = m0
        return side

    def _repricer(self, side: _Side):
        """The side's re-pricer, or None when its graph is not re-priced (replay.pipeline.reprice)."""
        with self._lock:
            if side.repricer is None:
                from replay.pipeline.reprice import Repricer
                from replay.plugins import load_protocol

                rp = Repricer(self._graph, side.base_graph, side.protocol, load_protocol(side.protocol), side.hw)
                side.repricer = rp if rp.ok else False
        return side.repricer or None

    def _moved(self, side: _Side, values: Mapping[str, Any]) -> dict[str, Any]:
        """The values of ``values`` that ``side``'s transform read and that differ from the preset."""
        return {k: v for k, v in values.items() if (side.reads is None or k in side.reads) and v != self._value[k]}

    def _at(self, side: _Side, values: Mapping[str, Any]) -> int:
        """The side's makespan with ``values`` (``{name: value}``, the others at the preset)."""
        moved = self._moved(side, values)
        key = _key(moved)
        if key not in side.makespan:
            self._record(side, key, self._evaluate(side, moved))
        return side.makespan[key]

    def _structural(self, side: _Side, moved: Mapping[str, Any], hw) -> set:
        """The moved parameters that may change the side's structure, less those the rules'
        answers rule out (:meth:`_same_rules`)."""
        structural = set(moved) - self._repriced
        if structural and self._same_rules(side, structural, hw):
            return set()
        return structural

    def _evaluate(self, side: _Side, moved: Mapping[str, Any], heavy=None, keep: list | None = None) -> _Outcome:
        """The side's makespan at the moved values, and how it was found. Changes nothing shared
        (the side's lazily made re-pricer and placement are made under the study's lock), so points
        may be evaluated in threads (:meth:`_fill`); ``heavy``: a semaphore held while a point is
        re-transformed and scheduled, which bounds how many such graphs exist at once; ``keep``: a
        list that gains a re-transformed point's graph, model and makespan (for
        :meth:`_evaluate_like`)."""
        from replay.plugins import load_protocol

        hw = self._model_at(moved)
        structural = self._structural(side, moved, hw)
        if moved and not structural and not set(moved) & self._repriced:
            return _Outcome(side.makespan[()], unchanged=True)  # (the rules rule out every moved one)
        g = None
        if moved and not structural:  # prices only: re-price the preset's graph
            rp = self._repricer(side)
            g = rp.at(hw) if rp is not None else None
        if g is not None:
            # (same nodes, edges and prices; lane sizes differ, if at all, where they change nothing)
            if rp.same_prices(g) and (rp.same_used_lanes(g) or self._resize_keeps(side, g)):
                return _Outcome(side.makespan[()], repriced=True, unchanged=True)
            times = self._retimed(side, g) if not self.exact else None
            return _Outcome(makespan_of(g, times), repriced=True, estimated=times is not None)
        with heavy if heavy is not None else contextlib.nullcontext():
            g = load_protocol(side.protocol)(self._graph, hw)
            if same_schedule_inputs(g, side.base_graph, sizes=False) and (
                    side.base_graph.same_used_sizes(g) or self._resize_keeps(side, g)):
                return _Outcome(side.makespan[()], unchanged=True)
            m = makespan_of(g)
            if keep is not None:
                keep += [g, hw, m]
            return _Outcome(m)

    def _sibling_repricer(self, side: _Side, kept: list):
        """A :class:`~replay.pipeline.reprice.Repricer` of a re-transformed point's graph (``kept``:
        ``[graph, model, makespan]`` from :meth:`_evaluate`), or None where it refuses that graph
        (a graph whose prices it does not reproduce element by element)."""
        from replay.pipeline.reprice import Repricer
        from replay.plugins import load_protocol

        g1, hw1, _ = kept
        rp = Repricer(self._graph, g1, side.protocol, load_protocol(side.protocol), hw1)
        return rp if rp.ok else None

    def _evaluate_like(self, side: _Side, moved: Mapping[str, Any], rp, m1: int) -> _Outcome:
        """A point whose structure parameters sit where those of a re-transformed point sit (its
        graph's re-pricer ``rp`` and makespan ``m1``): the transform would build that point's nodes
        and edges, so its graph is re-priced from that one and scheduled, exactly; evaluated as any
        point where it cannot be re-priced."""
        g = rp.at(self._model_at(moved))
        if g is None:
            return self._evaluate(side, moved)
        if rp.same_prices(g) and rp.same_used_lanes(g):
            return _Outcome(m1, repriced=True)
        return _Outcome(makespan_of(g), repriced=True)

    @staticmethod
    def _record(side: _Side, key: tuple, out: _Outcome) -> None:
        """Keep an evaluated point's makespan and count how it was found (in the calling thread)."""
        side.makespan[key] = out.makespan
        side.repriced += out.repriced
        if out.unchanged:
            side.transformed_only += 1
            return
        side.replayed += 1
        if out.estimated:
            side.estimated.add(key)
            side.retimed += 1

    # ---- evaluating many points at once
    def _fill(self, wanted: Sequence[tuple[_Side, Mapping[str, Any]]]) -> None:
        """Evaluate every point of ``wanted`` (``(side, values)``) not evaluated yet, up to
        ``jobs`` at a time in threads (the engine and the large array operations release the GIL),
        and record them in the order given, so the study's report does not depend on ``jobs``.
        Concurrency is bounded by :data:`PARALLEL_MEMORY_BYTES` (see :func:`_slots`)."""
        todo, seen = [], set()
        for side, values in wanted:
            moved = self._moved(side, values)
            key = _key(moved)
            if key not in side.makespan and (id(side), key) not in seen:
                seen.add((id(side), key))
                todo.append((side, key, moved))
        if not todo:
            return
        light, heavy = self._slots([side for side, _, _ in todo])
        gate = threading.BoundedSemaphore(heavy)
        # points whose structure parameters sit at the same values (the corners, which all move
        # direct.min_bytes one way) are one task: the first is re-transformed, the others
        # re-priced from its graph (_evaluate_like)
        tasks, slots = [], {}
        for i, (sd, _, mv) in enumerate(todo):
            structural = self._structural(sd, mv, self._model_at(mv))
            group = (id(sd), _key({k: mv[k] for k in structural})) if structural else None
            if group is not None and group in slots:
                tasks[slots[group]].append(i)
            else:
                slots[group if group is not None else ("single", i)] = len(tasks)
                tasks.append([i])

        def run(members: list[int]) -> list[_Outcome]:
            if len(members) == 1:
                sd, _, mv = todo[members[0]]
                return [self._evaluate(sd, mv, gate)]
            with gate:  # (the first point's graph is kept while the others are re-priced from it)
                kept: list = []
                sd, _, mv = todo[members[0]]
                outs = [self._evaluate(sd, mv, keep=kept)]
                rp = self._sibling_repricer(sd, kept) if kept else None  # (one per group)
                for i in members[1:]:
                    sd, _, mv = todo[i]
                    outs.append(self._evaluate_like(sd, mv, rp, kept[2]) if rp is not None else self._evaluate(sd, mv))
                return outs

        results: dict[int, _Outcome] = {}
        for members, outs in zip(tasks, self._threads(light, [(lambda m=m: run(m)) for m in tasks])):
            results.update(zip(members, outs))
        for i, (side, key, _) in enumerate(todo):
            self._record(side, key, results[i])

    def _slots(self, sides: Sequence[_Side]) -> tuple[int, int]:
        """How many points may be evaluated at once, and how many of them re-transformed at once:
        each at most ``jobs``, and such that the extra graphs fit :data:`PARALLEL_MEMORY_BYTES`
        (a re-priced point about 94 bytes per node and 8 per edge: new durations and lags, a
        re-timing or a schedule with its working arrays; a re-transformed one about twice its
        graph plus a schedule)."""
        g = max((sd.base_graph for sd in sides), key=lambda graph: graph.n)
        light_bytes = 94 * g.n + 8 * int(g.dep_src.size)
        heavy_bytes = 2 * graph_bytes(g) + 70 * g.n
        return (max(1, min(self.jobs, 1 + PARALLEL_MEMORY_BYTES // max(1, light_bytes))),
                max(1, min(self.jobs, 1 + PARALLEL_MEMORY_BYTES // max(1, heavy_bytes))))

    @staticmethod
    def _threads(workers: int, tasks: Sequence) -> list:
        """Each task's result, in order, run on ``workers`` threads; the first failure (in task
        order) is raised once every started task has ended, and tasks not started are cancelled."""
        if workers <= 1 or len(tasks) <= 1:
            return [t() for t in tasks]
        from concurrent.futures import ThreadPoolExecutor

        ex = ThreadPoolExecutor(max_workers=min(workers, len(tasks)), thread_name_prefix="fastrack-range")
        try:
            futures = [ex.submit(t) for t in tasks]
            return [f.result() for f in futures]
        finally:
            ex.shutdown(wait=True, cancel_futures=True)

    def _retimed(self, side: _Side, g: OpGraph) -> _Times | None:
        """A re-priced graph's start and finish in the placement order of the preset's schedule
        (:func:`replay.pipeline.engine.retime`): an estimate, which :meth:`_exact` replaces by a
        schedule where it decides a range's end. None where the order does not fit (the point
        is then scheduled)."""
        from replay.pipeline.engine import retime

        order, servers = self._placement(side)
        if getattr(g, "_servers_changed", False):
            return None  # (more or fewer servers on a lane: the preset's placement order does not carry over)
        g.validate()
        out = retime(g, order, servers)
        return None if out is None else _Times(*out)

    @staticmethod
    def _same_rules(side: _Side, names, hw) -> bool:
        """Whether parameters ``names`` leave the transform's structure as at the preset: each was
        read only inside the model's rule methods, and at ``hw`` those answer every call of the
        preset's transform as they did (a copy-size threshold no copy crosses). A transform is a
        deterministic function of the graph and of what it reads, so with only these moved it
        builds the preset's graph, and with price-only parameters moved too the re-priced one."""
        reads = side.reads
        by_rule = getattr(reads, "by_rule", frozenset())
        return bool(by_rule) and set(names) <= by_rule and same_rule_answers(reads, hw)

    def _placement(self, side: _Side) -> tuple[np.ndarray, np.ndarray]:
        """The placement order and final lane sizes of the side's preset schedule, scheduled here
        (once, under the study's lock) where the caller handed over no schedule."""
        from replay.pipeline.engine import schedule

        with self._lock:
            if side.placement is None:
                _keep_placement(side, schedule(side.base_graph))
        return side.placement

    def _resize_keeps(self, side: _Side, g: OpGraph) -> bool:
        """Whether ``g`` (re-priced or re-transformed), with the preset graph's nodes, edges and
        prices but other lane sizes (a channel count, a pool's maximum), has the preset's schedule
        because no lane it resizes ever delayed a node there
        (:func:`replay.pipeline.engine.resize_keeps_schedule`): exact, so the point is not evaluated."""
        from replay.pipeline.engine import resize_keeps_schedule

        self._placement(side)
        return resize_keeps_schedule(side.base_graph.lanes, side.slack, g.lanes.servers, g.lanes.max_servers)

    def _exact(self, wanted: Sequence[tuple[_Side, tuple]]) -> bool:
        """Schedule exactly the estimated points of ``wanted`` (``(side, key)``), up to ``jobs`` at a
        time; False when every one was exact already."""
        todo, seen = [], set()
        for sd, key in wanted:
            if key in sd.estimated and (id(sd), key) not in seen:
                seen.add((id(sd), key))
                todo.append((sd, key))
        if not todo:
            return False

        def exact(sd: _Side, key: tuple) -> int:
            return makespan_of(self._repricer(sd).at(self._model_at(dict(key))))

        light, _ = self._slots([sd for sd, _ in todo])
        for (sd, key), m in zip(todo, self._threads(light, [(lambda sd=sd, key=key: exact(sd, key)) for sd, key in todo])):
            sd.makespan[key] = m
            sd.estimated.discard(key)
        return True

    # ---- the study
    def protocol_range(self, protocol: str, makespan_ns: int | None = None, reference_ns: int | None = None,
                       base_graph: OpGraph | None = None, base_schedule=None) -> dict[str, Any]:
        """The range report of one protocol: the keys a JSON output gains (``makespan_range_ns``,
        ``slowdown_range``, ``range_driver`` and the details under ``ranges``).
        ``makespan_ns``/``reference_ns``/``base_graph``: the caller's own replay at the preset (its
        makespan, the ``none`` makespan, its transformed graph); each is recomputed when not given."""
        if protocol in (CAPTURED, NONE):
            return {"makespan_range_ns": None, "slowdown_range": None, "range_driver": None,
                    "ranges": {"note": NO_RANGE_NOTE.format(protocol=protocol)}}
        # one point at a time, each point's graphs reuse the pages the last one freed
        # (fastrack_core.memory); in threads they would not: glibc gives each thread its own arena,
        # and pages kept in one are not reused by another, so keeping them raises the peak
        # (docs/model.md, "Prediction ranges")
        with reusing_freed_memory() if self.jobs <= 1 else contextlib.nullcontext():
            return self._protocol_range(protocol, makespan_ns, reference_ns, base_graph, base_schedule)

    def _protocol_range(self, protocol: str, makespan_ns: int | None, reference_ns: int | None,
                        base_graph: OpGraph | None, base_schedule) -> dict[str, Any]:
        from replay.pipeline.results import JSON_DIGITS, slowdown

        side = self._adopted.pop(protocol, None) or self._side(protocol, base_graph, makespan_ns, base_schedule)
        ref = None
        if self.reference:
            if self._none is None:
                self._none = self._side(NONE, None, None)
            ref = self._none
        m0 = side.makespan[()]
        r0 = ref.makespan[()] if ref is not None else None
        notes = []
        if makespan_ns is not None and int(makespan_ns) != m0:
            notes.append(f"the range study's preset replay ({m0} ns) differs from the replay reported; "
                         "a step outside the protocol transform changed the graph")
        if ref is not None and reference_ns is not None and int(reference_ns) != r0:
            notes.append(f"the range study's none replay ({r0} ns) differs from the reference reported")
        used = [r for r in self.ranged if side.reads_any([r.name]) or (ref is not None and ref.reads_any([r.name]))]
        unused = [r.name for r in self.ranged if r not in used]

        def point(values: Mapping[str, Any]) -> tuple[int, float | None]:
            m = self._at(side, values)
            if ref is None:
                return m, None
            r = self._at(ref, values)
            return m, (m / r if r else None)

        def headline(pt: tuple[int, float | None]) -> float:
            return pt[1] if ref is not None and pt[1] is not None else float(pt[0])

        def estimate(values: Mapping[str, Any]) -> bool:
            """Whether the point's makespan on either side is still a re-timed estimate."""
            return any(sd is not None and _key(self._moved(sd, values)) in sd.estimated for sd in (side, ref))

        def study() -> tuple[list, dict, list, list]:
            """Every point (cached after the first call), the rows and the corners."""
            base = (m0, (m0 / r0) if r0 else None)
            sides = [sd for sd in (side, ref) if sd is not None]
            self._fill([(sd, {r.name: v}) for r in used for v in (r.low, r.high) if v != r.value for sd in sides])
            rows, evaluated, at = [], [base], [{}]
            for r in used:
                at_low = point({r.name: r.low}) if r.low != r.value else base
                at_high = point({r.name: r.high}) if r.high != r.value else base
                evaluated += [at_low, at_high]
                at += [{r.name: r.low}, {r.name: r.high}]
                h = [headline(at_low), headline(base), headline(at_high)]
                ms = [at_low[0], m0, at_high[0]]
                rows.append({"parameter": r.name, "value": r.value, "low": r.low, "high": r.high, "reason": r.reason,
                             "makespan_ns": [at_low[0], at_high[0]],
                             "slowdown": None if ref is None else [
                                 slowdown(at_low[0], self._at(ref, {r.name: r.low}), JSON_DIGITS),
                                 slowdown(at_high[0], self._at(ref, {r.name: r.high}), JSON_DIGITS)],
                             "spread": max(h) - min(h), "makespan_spread_ns": max(ms) - min(ms),
                             "estimated": [estimate({r.name: r.low}), estimate({r.name: r.high})],
                             "_ends": (at_low, at_high)})
            corners, wanted = {}, []
            for metric, pick in (("headline", headline), ("makespan", lambda pt: float(pt[0]))):
                up, down = {}, {}
                for row in rows:  # each parameter at the end that raised (lowered) the result most, if one did
                    lo_pt, hi_pt = row["_ends"]
                    a, b, c = pick(lo_pt), pick(hi_pt), pick(base)
                    if max(a, b) > c:
                        up[row["parameter"]] = row["high"] if b >= a else row["low"]
                    if min(a, b) < c:
                        down[row["parameter"]] = row["low"] if a <= b else row["high"]
                wanted += [(metric, name, values) for name, values in (("high", up), ("low", down))
                           if len(values) > 1]  # (one parameter: its own end, already evaluated)
            self._fill([(sd, values) for _, _, values in wanted for sd in sides])
            for metric, name, values in wanted:
                pt = point(values)
                evaluated.append(pt)
                at.append(values)
                corners.setdefault(f"{metric}_{name}", {"parameters": dict(sorted(values.items())),
                                                        "makespan_ns": pt[0],
                                                        "slowdown": None if ref is None else slowdown(
                                                            pt[0], self._at(ref, values), JSON_DIGITS)})
            return rows, corners, evaluated, at

        def exact_ends(evaluated: list, at: list) -> bool:
            """Schedule, exactly, the estimated points that decide an end of a range; True when one was."""
            ends = set()
            for f in ((lambda k: evaluated[k][0]), (lambda k: evaluated[k][1])):
                ks = [k for k in range(len(evaluated)) if f(k) is not None]
                if ks:
                    ends |= {min(ks, key=f), max(ks, key=f)}
            return self._exact([(sd, _key(self._moved(sd, at[k]))) for k in sorted(ends)
                                for sd in (side, ref) if sd is not None])

        rows, corners, evaluated, at = study()
        for _ in range(8):  # (each round makes at least one estimate exact; the ends settle within a few)
            if not exact_ends(evaluated, at):
                break
            rows, corners, evaluated, at = study()
        ms = [pt[0] for pt in evaluated]
        driver = _driver(rows, "spread")
        out = {
            "makespan_range_ns": [min(ms), max(ms)] if rows else None,
            "slowdown_range": None,
            "range_driver": driver,
        }
        if ref is not None and rows:
            sds = [pt[1] for pt in evaluated if pt[1] is not None]
            out["slowdown_range"] = [slowdown(min(sds), 1, JSON_DIGITS), slowdown(max(sds), 1, JSON_DIGITS)]
        for row in rows:
            del row["_ends"]
        replayed = side.replayed + (ref.replayed if ref is not None else 0)
        skipped = side.transformed_only + (ref.transformed_only if ref is not None else 0)
        out["ranges"] = {
            "makespan_ns": m0,
            "reference_ns": r0,
            "parameters": rows,
            "corners": corners,
            "makespan_driver": _driver(rows, "makespan_spread_ns"),
            "not_read": unused,
            "fixed_by_set": list(self.fixed_by_set),
            "points_replayed": replayed,
            "points_unchanged": skipped,
            "points_repriced": side.repriced + (ref.repriced if ref is not None else 0),
            "points_retimed": side.retimed + (ref.retimed if ref is not None else 0),
            "points_estimated": sum(estimate(v) for v in at),
            "note": ("one-at-a-time ends of every ranged parameter the protocol or the none reference reads, "
                     "and the corners where all sit at the end that raised / lowered the result; a range over "
                     "those points, not a bound; a re-priced point is re-timed in the preset's placement order "
                     "(an estimate, flagged in 'estimated') unless it decides an end of the range, which is "
                     "scheduled exactly"
                     if rows else "no parameter with a range is used by this replay: the prediction has no range"),
            "notes": notes,
        }
        return out


def _driver(rows: list[dict], key: str) -> str | None:
    best = None
    for row in rows:  # (rows are in name order: ties go to the first name)
        if row[key] > 0 and (best is None or row[key] > best[key]):
            best = row
    return None if best is None else best["parameter"]


# ---------------------------------------------------------------------------------------------
# words


def _pct(slowdown: float) -> str:
    return f"{(slowdown - 1) * 100:+.1f}%"


def range_line(protocol: str, d: Mapping[str, Any], makespan_ns: int | None = None,
               slowdown: float | None = None) -> str:
    """The one line a text output says: ``baseline +9.4% (+3.0% to +25.8%; driven by submit.kernel_ns)``
    with a reference (the slowdown against ``none``), the makespan without one, or why there is no range."""
    info = d.get("ranges") or {}
    if d.get("makespan_range_ns") is None:
        return f"range: {info.get('note', 'none')}"
    driver = d.get("range_driver")
    why = f"driven by {driver}" if driver else "no ranged parameter moves it"
    if d.get("slowdown_range") is not None and slowdown is not None:
        lo, hi = d["slowdown_range"]
        return f"range: {protocol} {_pct(slowdown)} ({_pct(lo)} to {_pct(hi)}; {why})"
    lo, hi = d["makespan_range_ns"]
    m = "?" if makespan_ns is None else f"{makespan_ns / 1e6:.3f} ms"
    return f"range: {protocol} makespan {m} ({lo / 1e6:.3f} to {hi / 1e6:.3f} ms; {why})"


__all__ = ["RANGES_DEFAULT", "Ranged", "RangeStudy", "ranged_parameters", "range_line", "transform_tracked",
           "makespan_of", "same_schedule_inputs", "Reads", "same_rule_answers"]
