"""Serving metrics from request markers: time to first token, time per output token, tokens/s.

A serving trace carries request markers (``request:<event>:<id>``, :mod:`fastrack_core.markers`):
zero-duration host ops written when the server admitted a request (``arrive``), had its first
output token in hand (``first_token``), each later token (``token``) and when it finished
(``finish``). Every time here is the **replayed** time of those markers (their start in the
schedule), so a protocol that delays the host's token readback delays the markers with it.

Per request (``rank`` and ``id`` identify it):

* ``ttft_ns``   = first_token - arrive;
* ``tpot_ns``   = (last token - first_token) / (output tokens - 1), None with one token;
* ``e2e_ns``    = finish - arrive (the last token when there is no finish marker);
* ``output_tokens`` = 1 (first_token) + the number of ``token`` markers.

Aggregates: mean, median and p99 of TTFT and TPOT over the requests, and the output-token
throughput ``output_tokens / (last token or finish - first arrive)`` (tokens/s), as SGLang's and
vLLM's benchmark clients report it.

**Arrival is the server's admission.** The ``arrive`` marker is the moment the server loop
takes the request in; in a replay it moves with the host, as it does in a closed-loop benchmark
(a client sends its next request when one finishes: ``--max-concurrency`` in SGLang's and vLLM's
clients). An open-loop client whose requests arrive at fixed wall-clock times is not modelled:
a replay keeps the host's idle time as host time, it does not wait for a clock.

**Breakdown.** For each request the critical path leading to its ``first_token`` marker is walked
back to its ``arrive`` marker (TTFT), and the one leading to its last token back to its first
token (the decode part); every nanosecond goes to one category (as :func:`replay.pipeline.results.critical_path`
attributes the makespan) and to one *mechanism*: the kind of the node whose time it is (trace op
kinds and the protocol's derived kinds: ``cpu_encrypt``, ``cc_submit``, ``sync_wait``, ...),
suffixed with the copy direction (``h2d``/``d2h``) for nodes that belong to a host<->GPU copy, or
the kind of the edge whose lag it is (``launch_lag``, ``sync_lag``, ...). The breakdowns are
means per request (TTFT) and per output token after the first (TPOT), so they add up to the mean
TTFT and the token-weighted mean TPOT. Against ``none`` the difference per mechanism says which
mechanism costs what.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fastrack_core.errors import ConfigError
from fastrack_core.markers import REQUEST_PREFIX, parse_request_marker
from fastrack_core.schema import CopyDir, DepKind, OpKind
from replay.pipeline.engine import Schedule
from replay.graph import Category, OpGraph
from replay.pipeline.results import EDGE_CATEGORY, JSON_DIGITS, path_totals

_EVENT_CODE = {"arrive": 0, "first_token": 1, "token": 2, "finish": 3}
_DIRS = {int(CopyDir.H2D): "h2d", int(CopyDir.D2H): "d2h"}
RELEASE_MECHANISM = "host_idle"  # time before the first node, or a start bound by its release or its lane


@dataclass(frozen=True)
class RequestMarks:
    """The request markers of a graph: node index, event code, rank and request id of each."""

    node: np.ndarray
    event: np.ndarray
    rank: np.ndarray
    rid: np.ndarray

    def __len__(self) -> int:
        return int(self.node.size)


def request_marks(graph: OpGraph) -> RequestMarks:
    """Every request marker node of ``graph`` (host ``cpu`` ops named ``request:<event>:<id>``)."""
    parsed = [parse_request_marker(nm) if nm.startswith(REQUEST_PREFIX) else None for nm in graph.names]
    if not any(p is not None for p in parsed):
        empty = np.zeros(0, np.int64)
        return RequestMarks(empty, empty, empty, empty)
    ev_of = np.array([_EVENT_CODE[p[0]] if p else -1 for p in parsed], np.int64)
    id_of = np.array([p[1] if p else -1 for p in parsed], np.int64)
    node = np.flatnonzero((ev_of[graph.name] >= 0) & (graph.kind == OpKind.CPU) & (graph.dur == 0))
    return RequestMarks(node=node, event=ev_of[graph.name[node]], rank=graph.rank[node].astype(np.int64),
                        rid=id_of[graph.name[node]])


def has_request_markers(graph: OpGraph) -> bool:
    return len(request_marks(graph)) > 0


def require_markers(graph: OpGraph, trace: str) -> None:
    """Raise the one-line error of a serving report asked of a trace without request markers."""
    if not has_request_markers(graph):
        raise ConfigError("no request markers (cpu ops named 'request:<event>:<id>', docs/serving.md): "
                          "serving metrics need a serving trace", path=trace)


class _Mechanisms:
    """Codes of the mechanisms a path's time is attributed to (see the module docstring)."""

    def __init__(self, graph: OpGraph):
        direction = np.where(np.isin(graph.copy_dir, list(_DIRS)), graph.copy_dir, 0).astype(np.int64)
        pair = graph.kind.astype(np.int64) * 256 + direction
        uniq, self.node_code = np.unique(pair, return_inverse=True)
        self.labels = [graph.kind_label(int(p // 256)) + (f" {_DIRS[int(p % 256)]}" if p % 256 in _DIRS else "")
                       for p in uniq]
        base = len(self.labels)
        self.edge_code = np.arange(base, base + len(DepKind), dtype=np.int64)
        self.labels += [f"{DepKind(k).name.lower()}_lag" for k in range(len(DepKind))]
        self.release_code = len(self.labels)
        self.labels.append(RELEASE_MECHANISM)
        self.wait_code = len(self.labels)
        self.labels.append(Category.BOUNCE_WAIT.label)
        self.node_code = self.node_code.astype(np.int64)
        # the category each mechanism code belongs to (for the category view of the same walk)
        cat = np.zeros(len(self.labels), np.int64)
        for code, p in enumerate(uniq):
            first = np.flatnonzero(pair == p)[0]
            cat[code] = int(graph.category[first])
        for k in range(len(DepKind)):
            cat[base + k] = int(EDGE_CATEGORY[DepKind(k)])
        cat[self.release_code] = int(Category.HOST)
        cat[self.wait_code] = int(Category.BOUNCE_WAIT)
        self.category = cat

    def walk(self, graph: OpGraph, sched: Schedule, node: int, t_stop: int) -> np.ndarray:
        return path_totals(graph, sched, node, int(sched.start[node]), t_stop, self.node_code, self.edge_code,
                           len(self.labels), self.release_code, self.wait_code)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _stats(values: list[float]) -> dict[str, float | None]:
    return {"mean": float(np.mean(values)) if values else None, "median": _pct(values, 50), "p99": _pct(values, 99)}


def serving_metrics(graph: OpGraph, sched: Schedule) -> dict[str, Any] | None:
    """Per-request and aggregate serving metrics of one replay, with their breakdowns; None when
    the graph has no request markers."""
    marks = request_marks(graph)
    if not len(marks):
        return None
    t = sched.start[marks.node]
    mech = _Mechanisms(graph)
    requests = []
    ttft_mech = np.zeros(len(mech.labels), np.int64)
    tpot_mech = np.zeros(len(mech.labels), np.int64)
    incomplete = 0
    intervals = 0
    order = np.lexsort((t, marks.rid, marks.rank))
    keys = marks.rank[order] * (1 << 32) + marks.rid[order]
    bounds = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        sl = order[a:b]
        ev, tt, nd = marks.event[sl], t[sl], marks.node[sl]
        arrive, first = np.flatnonzero(ev == 0), np.flatnonzero(ev == 1)
        if not arrive.size or not first.size:
            incomplete += 1
            continue
        ta, tf = int(tt[arrive[0]]), int(tt[first[0]])
        toks = np.flatnonzero((ev == 2) & (tt >= tf))
        n_out = 1 + int(toks.size)
        last = int(tt[toks[-1]]) if toks.size else tf
        fin = np.flatnonzero(ev == 3)
        tend = int(tt[fin[-1]]) if fin.size else last
        ttft_mech += mech.walk(graph, sched, int(nd[first[0]]), ta)
        tpot = None
        if toks.size:
            tpot_mech += mech.walk(graph, sched, int(nd[toks[-1]]), tf)
            intervals += n_out - 1
            tpot = (last - tf) / (n_out - 1)
        requests.append({"rank": int(marks.rank[sl[0]]), "id": int(marks.rid[sl[0]]), "arrive_ns": ta,
                         "ttft_ns": tf - ta, "tpot_ns": tpot, "e2e_ns": tend - ta, "output_tokens": n_out,
                         "last_token_ns": last})
    if not requests:
        return {"requests": [], "complete_requests": 0, "incomplete_requests": incomplete, "output_tokens": 0,
                "output_tokens_per_s": None}
    ttfts = [r["ttft_ns"] for r in requests]
    tpots = [r["tpot_ns"] for r in requests if r["tpot_ns"] is not None]
    tokens = sum(r["output_tokens"] for r in requests)
    span = max(max(r["last_token_ns"], r["arrive_ns"] + r["e2e_ns"]) for r in requests) - min(r["arrive_ns"]
                                                                                               for r in requests)
    return {
        "complete_requests": len(requests),
        "incomplete_requests": incomplete,
        "output_tokens": tokens,
        "span_ns": int(span),
        "output_tokens_per_s": tokens / (span / 1e9) if span > 0 else None,
        "ttft_ns": _stats(ttfts),
        "tpot_ns": _stats(tpots),
        "breakdown": {
            "ttft_per_request_ns": _by(mech, ttft_mech, len(requests)),
            "tpot_per_token_ns": _by(mech, tpot_mech, intervals),
        },
        "requests": [{k: v for k, v in r.items() if k != "last_token_ns"} for r in requests],
    }


def _by(mech: _Mechanisms, totals: np.ndarray, count: int) -> dict[str, dict[str, float]]:
    """Mean ns per request (or token) by mechanism and by category; zero entries left out."""
    if count <= 0:
        return {"mechanism": {}, "category": {}}
    cats = np.bincount(mech.category, weights=totals, minlength=len(Category))
    return {"mechanism": {lab: float(v) / count for lab, v in zip(mech.labels, totals.tolist()) if v},
            "category": {c.label: float(cats[int(c)]) / count for c in Category if cats[int(c)]}}


def overhead(metrics: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """Overhead of ``metrics`` against ``reference`` (the same trace under ``none``): relative
    change of mean TTFT, mean TPOT and output-token throughput, and the per-mechanism and
    per-category differences of the breakdowns (ns per request / per token)."""

    def rel(a, b):
        return None if a is None or not b else round((a - b) / b, JSON_DIGITS)

    out = {
        "ttft_mean": rel(metrics["ttft_ns"]["mean"], reference["ttft_ns"]["mean"]),
        "tpot_mean": rel(metrics["tpot_ns"]["mean"], reference["tpot_ns"]["mean"]),
        "output_tokens_per_s": rel(metrics["output_tokens_per_s"], reference["output_tokens_per_s"]),
        "breakdown_delta": {},
    }
    for part in ("ttft_per_request_ns", "tpot_per_token_ns"):
        mine, ref = metrics["breakdown"][part], reference["breakdown"][part]
        out["breakdown_delta"][part] = {
            view: {k: mine[view].get(k, 0.0) - ref[view].get(k, 0.0)
                   for k in sorted(set(mine[view]) | set(ref[view]))
                   if abs(mine[view].get(k, 0.0) - ref[view].get(k, 0.0)) > 0.5}
            for view in ("mechanism", "category")}
    return out


def summary_row(metrics: dict[str, Any] | None) -> dict[str, Any]:
    """Flat columns for tables (sweeps): mean TTFT, mean TPOT, output tokens/s."""
    if not metrics or not metrics.get("complete_requests"):
        return {"ttft_mean_ns": None, "tpot_mean_ns": None, "output_tokens_per_s": None}
    return {"ttft_mean_ns": metrics["ttft_ns"]["mean"], "tpot_mean_ns": metrics["tpot_ns"]["mean"],
            "output_tokens_per_s": metrics["output_tokens_per_s"]}


def _ms(ns) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:.3f} ms"


def _human(ns: float, sign: bool = False) -> str:
    """A breakdown entry for people: ms from 10 us up (``+8.516 ms``), us below (``+3.2 us``)."""
    head = "+" if sign and ns > 0 else ("-" if ns < 0 else "")
    a = abs(float(ns))
    return f"{head}{a / 1e6:,.3f} ms" if a >= 10_000 else f"{head}{a / 1e3:.1f} us"


def _rel_text(x) -> str:
    return "" if x is None else f" ({100 * x:+.1f}% vs none)"


def format_serving(metrics: dict[str, Any], over: dict[str, Any] | None = None, top: int = 8) -> str:
    """The text report of :func:`serving_metrics` (and of :func:`overhead` when given)."""
    o = over or {}
    lines = [f"serving    {metrics['complete_requests']} request(s), {metrics['output_tokens']} output tokens"
             + (f", {metrics['incomplete_requests']} incomplete (no arrive or first_token marker)"
                if metrics.get("incomplete_requests") else "")]
    if not metrics["complete_requests"]:
        return "\n".join(lines)
    tput = metrics["output_tokens_per_s"]
    lines += [
        f"  TTFT     mean {_ms(metrics['ttft_ns']['mean'])}  median {_ms(metrics['ttft_ns']['median'])}"
        f"  p99 {_ms(metrics['ttft_ns']['p99'])}{_rel_text(o.get('ttft_mean'))}",
        f"  TPOT     mean {_ms(metrics['tpot_ns']['mean'])}  median {_ms(metrics['tpot_ns']['median'])}"
        f"  p99 {_ms(metrics['tpot_ns']['p99'])}{_rel_text(o.get('tpot_mean'))}",
        f"  output   {'n/a' if tput is None else f'{tput:,.1f}'} tokens/s{_rel_text(o.get('output_tokens_per_s'))}",
    ]
    for part, what in (("ttft_per_request_ns", "TTFT per request"), ("tpot_per_token_ns", "TPOT per token")):
        delta = o.get("breakdown_delta", {}).get(part, {}).get("mechanism")
        mine = metrics["breakdown"][part]["mechanism"]
        if delta:
            items = sorted(delta.items(), key=lambda kv: -abs(kv[1]))[:top]
            lines.append(f"  {what}, change vs none by mechanism: "
                         + ", ".join(f"{k} {_human(v, True)}" for k, v in items))
        elif mine:
            items = sorted(mine.items(), key=lambda kv: -kv[1])[:top]
            lines.append(f"  {what} by mechanism: " + ", ".join(f"{k} {_human(v)}" for k, v in items))
    return "\n".join(lines)
