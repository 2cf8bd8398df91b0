"""Re-pricing a transformed graph at other parameter values, without re-running the transform.

A range study (:mod:`replay.pipeline.ranges`) replays one graph at many parameter points. Most
ranged parameters change only *prices* (the durations of the nodes a protocol derived and the lags
of the edges between them), not which nodes and edges exist. For those, the graph transformed at
the preset's values is re-priced: the same node and edge arrays, with the durations and lags the
model gives at the point. The result is the graph the transform would have built there, field for
field in what the engine reads (tests/test_ranges.py checks it against the full transform for
every such parameter at both ends of its range).

What is re-priced, from each node's kind label, bytes and direction (``OpGraph.kind_names``; the
labels of replay/protocols/kinds.py) and the model's pricing methods:

* ``none``: PCIe transfers (``pcie_ns``), pageable staging copies (``staging_copy_ns``), the
  latency on the edges that leave them (``pcie_latency_ns``);
* the host-copy path of the CC systems without page-grained pipelining (``baseline``,
  ``fastrack:direct``, ``fastrack:auth`` on a graph without collectives): the push stages of every
  pushing call (segment and work-launch encryption ``crypto_call_ns``, the doorbell's exits
  ``doorbell_exit_ns``, the round trip ``push_round_trip_ns`` of its most expensive kind) and
  the launch lags they add (``submit_ns``); per chunk the CPU stages (``cpu_encrypt_ns``,
  ``cpu_decrypt_ns``, ``staging_copy_ns``), PCIe (``pcie_ns``) and the CE operation
  (``ce_crypto_ns``); the crossing and completion waits (``crossing_ns``, ``completion_ns``);
  the completion lags of the chunks (latency, one page of CE time, one page at PCIe rate); traced
  host work times ``host_work_ratio``; the bounce pools' maximum size (``bounce_max_slots``);
* both families: the servers of the lanes the model's ``lane_specs`` sizes (the secure-channel
  lanes of both directions: ``ce.secure_channels_per_direction``) and of the channel locks, which
  have as many as their direction's channel lane.

A parameter is re-priced only when the model lists it (``model.repriced_parameters``, an optional
hook: a model without it is always re-transformed) and the point keeps the structure: the same
calls push, and no stage whose price is 0 at one end (and so has no node) costs something at the
other. Anything else, and any graph whose preset prices this module does not reproduce exactly
(checked once per graph, element by element), is re-transformed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fastrack_core.schema import GPU_KINDS, HOST_KINDS, CopyDir, DepKind, OpKind
from replay.graph import LOCK_KEYS, LaneType, OpGraph

_IS_HOST = np.zeros(256, bool)
_IS_HOST[[int(k) for k in HOST_KINDS]] = True
_IS_GPU = np.zeros(256, bool)
_IS_GPU[[int(k) for k in GPU_KINDS]] = True

# node kinds (labels) each family re-prices; a graph with any other derived kind is re-transformed
_NONE_KINDS = frozenset({"pcie", "host_staging", "sync_wait"})
_CC_KINDS = frozenset({"cc_submit", "cpu_encrypt", "cpu_decrypt", "cpu_recrypt", "host_staging", "pcie", "ce_decrypt",
                       "ce_encrypt", "sync_wait", "p2p_submit", "p2p_sync"})


def repriced_parameters(model) -> frozenset[str]:
    """The parameters (``section.key``) the model says change only prices (empty without the hook)."""
    names = getattr(model, "repriced_parameters", None)
    return frozenset(names) if names else frozenset()


def _family(protocol_name: str, transform) -> tuple[str, Any] | None:
    """``("none", None)``, ``("cc", options)`` for a CC system without page-grained pipelining, or
    None (not re-priced). Read from the protocol object without importing the protocols."""
    if protocol_name == "none" and type(transform).__name__ == "NoTEE":
        return "none", None
    host = getattr(transform, "host", None)
    opts = getattr(host, "options", None)
    if type(transform).__name__ == "System" and type(host).__name__ == "CCProtocol" and opts is not None \
            and not opts.overlap and not getattr(transform, "chosen", ()):
        return "cc", opts
    return None


class RepricedGraph(OpGraph):
    """A graph re-priced from one whose structure was validated (the preset's, which its own replay
    scheduled): :meth:`validate` checks only what a price can break, the durations' sign and the
    time range a replay can represent, and the whole graph where a lane changed too."""

    _lanes_changed: bool = False
    _servers_changed: bool = False  # a lane's initial servers changed (a channel count): not re-timed

    def validate(self) -> None:
        if self._lanes_changed or np.any(self.dur < 0):
            OpGraph.validate(self)  # (the error names the node)
            return
        self._validate_time_range()


class Repricer:
    """The preset's transformed graph ``g0`` of ``pre`` (the graph the protocol transformed) under
    model ``hw0``, ready to be re-priced at other models (:meth:`at`). ``ok`` is False when this
    graph is not one this module re-prices; :meth:`at` then returns None. Which nodes and edges
    carry which price is worked out once, here; a point only computes prices."""

    def __init__(self, pre: OpGraph, g0: OpGraph, protocol_name: str, transform, hw0):
        self.g0, self.hw0 = g0, hw0
        self.ok = False
        fam = _family(protocol_name, transform)
        if fam is None or not repriced_parameters(hw0):
            return
        self.family, self.opts = fam
        n0 = self.n0 = pre.n
        if g0.n < n0 or not np.array_equal(g0.kind[:n0], pre.kind[:n0]) or np.any(pre.kind == OpKind.COLLECTIVE):
            return
        labels = dict(g0.kind_names)
        present = {labels.get(int(k), "") for k in np.unique(g0.kind[n0:])}
        if not present <= (_NONE_KINDS if self.family == "none" else _CC_KINDS):
            return  # a node this module does not price
        self._code = {name: code for code, name in labels.items()}
        if self.family == "cc" and not self._submission_layout(hw0):
            return
        self._index(pre)
        self._size_lanes(hw0)
        dur, lag, top = self._prices(hw0)
        if not (np.array_equal(dur, g0.dur) and np.array_equal(lag, g0.dep_lag)
                and np.array_equal(top, self._top0)):
            return  # this module does not reproduce the transform's prices: re-transform instead
        self.ok = True

    # ---- which node and edge carries which price (once per graph)
    def _nodes(self, label: str, lo: int) -> np.ndarray:
        code = self._code.get(label)
        if code is None:
            return np.zeros(0, np.int64)
        return (np.flatnonzero(self.g0.kind[lo:] == code) + lo).astype(np.int64)

    def _index(self, pre: OpGraph) -> None:
        g, n0 = self.g0, self.n0
        nb, up = g.bytes, g.copy_dir == CopyDir.H2D
        kind = g.kind
        first = self._sub_end if self.family == "cc" else n0
        lanes = g.lanes
        self._top0 = lanes.servers if lanes.max_servers is None else lanes.max_servers
        pools = (lanes.type == LaneType.BOUNCE_POOL) & (lanes.key == 0)  # (the bounce pools; other keys: channel locks)
        self._pools = np.flatnonzero(pools) if self.family == "cc" else np.zeros(0, np.int64)
        self._pcie = self._nodes("pcie", first)
        self._stg = self._nodes("host_staging", first)
        dst = np.repeat(np.arange(g.n, dtype=np.int64), np.diff(g.dep_ptr))
        src = g.dep_src
        data = np.flatnonzero((g.dep_kind == DepKind.DATA) & (src >= n0))  # DATA edges leaving derived nodes
        sl, dl = kind[src[data]], kind[dst[data]]
        pcie, stg = self._code.get("pcie", -1), self._code.get("host_staging", -1)
        if self.family == "none":  # the latency after a transfer, or after an H2D staging copy
            self._lat = data[(sl == pcie) | (sl == stg)]
            self._lat_up = up[src[self._lat]]
            return
        self._enc = self._nodes("cpu_encrypt", first)
        self._dec = self._nodes("cpu_decrypt", first)
        self._rec = self._nodes("cpu_recrypt", first)
        self._ce = np.concatenate([self._nodes("ce_decrypt", first), self._nodes("ce_encrypt", first)])
        self._sync = self._nodes("p2p_sync", first)
        self._on_channel = g.lanes.type[g.lane[self._sync]] == LaneType.GPU_CRYPTO
        self._host = np.flatnonzero(_IS_HOST[pre.kind.astype(np.uint8)])
        self._host_dur = pre.dur[self._host]
        # launch lags (replay/protocols/submit.py): every LAUNCH edge from a traced host call (to the
        # op it launches, or to a stage that inherited that edge) carries the call's push time
        launch = np.flatnonzero((g.dep_kind == DepKind.LAUNCH) & (src < n0))
        ldst = dst[launch]
        keep = _IS_HOST[kind[src[launch]].astype(np.uint8)] & (
            (ldst >= n0) | _IS_GPU[kind[np.minimum(ldst, n0 - 1)].astype(np.uint8)])
        self._launch = launch[keep]
        self._launch_src = src[self._launch]
        total0, _ = self._per_call(self.hw0)
        self._launch_lag = g.dep_lag[self._launch] - total0[self._launch_src]  # the traced lag
        # the chunks' completion lags (replay/protocols/cc.py, chunk-grained pipeline): H2D after a
        # transfer, latency + one page of CE time; D2H after a transfer, the latency; after a CE
        # encryption, its last page through PCIe + the latency; every other DATA edge of a stage: 0
        page = np.minimum(nb[src[data]], np.int64(self.hw0.crypto_page_bytes))
        from_pcie = (sl == pcie) & (dl != pcie)
        ce_enc = self._code.get("ce_encrypt", -1)
        from_ce = (sl == ce_enc) & (dl != ce_enc) & (dl != pcie)
        h2d = up[src[data]]
        self._done, self._done_page = data[from_pcie & h2d], page[from_pcie & h2d]
        self._landed = data[from_pcie & ~h2d]
        self._ce_out, self._ce_out_page = data[from_ce], page[from_ce]
        self._zero = data[~(from_pcie | from_ce)]

    # ---- lane sizes (the lanes a parameter sizes: the model's resource lanes and the channel locks)
    def _size_lanes(self, hw0) -> None:
        """Find the lanes whose servers a parameter sets: every lane of a type
        the model's ``lane_specs`` sizes (``ce.secure_channels_per_direction`` for both directions'
        secure-channel lanes, ...) and each channel lock (a BOUNCE_POOL of a lock key: as many
        servers as its rank's channel lane of that direction, replay/protocols/cc.py). Checked at
        the preset: where this rule does not give the graph's own sizes, a point that changes a
        size is re-transformed. Which lanes a node uses or holds is kept too (:meth:`unchanged`)."""
        lanes = self.g0.lanes
        self._used = self.g0.used_lanes()
        per = self._spec_servers(hw0)
        self._sized = np.flatnonzero(np.isin(lanes.type, list(per or ()))).astype(np.int64)
        locks = np.flatnonzero((lanes.type == LaneType.BOUNCE_POOL) & np.isin(lanes.key, list(LOCK_KEYS.values())))
        self._lock_channel = np.full(locks.size, -1, np.int32)
        for h2d, key in LOCK_KEYS.items():  # (a lock's channel lane: GPU_CRYPTO key 0 for H2D, 1 for D2H)
            sel = np.flatnonzero(lanes.key[locks] == key)
            if sel.size:
                self._lock_channel[sel] = lanes.find_many(lanes.rank[locks[sel]].astype(np.int64), LaneType.GPU_CRYPTO,
                                                          0 if h2d else 1)
        self._locks = locks
        self._sizes0 = self._sizes(hw0)
        want = np.concatenate([lanes.servers[self._sized], lanes.servers[locks], lanes.max_servers[locks]])
        have = None if self._sizes0 is None else np.concatenate([self._sizes0[0], self._sizes0[1], self._sizes0[1]])
        self._sizes_ok = (have is not None and bool(np.all(self._lock_channel >= 0))
                          and np.array_equal(want, have)
                          and np.array_equal(lanes.max_servers[self._sized], lanes.servers[self._sized]))

    def _spec_servers(self, hw) -> dict[int, int] | None:
        specs = getattr(hw, "lane_specs", None)
        return None if specs is None else {int(t): int(n) for t, _, n in specs()}

    def _sizes(self, hw) -> tuple[np.ndarray, np.ndarray] | None:
        """Servers under ``hw`` of the sized lanes and of the channel locks (None: no lane specs)."""
        per = self._spec_servers(hw)
        if per is None:
            return None
        lanes = self.g0.lanes
        size = np.zeros(len(lanes), np.int32)
        for t, n in per.items():
            size[lanes.type == t] = n
        lock = size[np.maximum(self._lock_channel, 0)] if self._locks.size else np.zeros(0, np.int32)
        return size[self._sized], lock

    # ---- the push stages (CC): which derived nodes are which
    def _per_call(self, hw) -> tuple[np.ndarray, np.ndarray]:
        """Per traced node: the push time its call adds to its launches (``submit_ns`` of the most
        expensive kind it launches) and its round trip (``push_round_trip_ns``)."""
        total = np.zeros(self.n0, np.int64)
        trip = np.zeros(self.n0, np.int64)
        if self._le_src.size:
            np.maximum.at(total, self._le_src, np.asarray(hw.submit_ns(self._le_kind), np.int64))
            np.maximum.at(trip, self._le_src, np.asarray(hw.push_round_trip_ns(self._le_kind), np.int64))
        return total, trip

    @staticmethod
    def _stage_bytes(hw) -> list[int]:
        return [b for b in (int(hw.push_segment_bytes), int(hw.wlc_push_bytes)) if b > 0]

    def _submission_layout(self, hw0) -> bool:
        """Locate the push stages: per pushing call (node order) one node per stage, stage-major,
        right after the trace's nodes (replay/protocols/submit.py)."""
        if not hasattr(hw0, "push_round_trip_ns"):
            return False
        g, n0 = self.g0, self.n0
        dst = np.repeat(np.arange(n0, dtype=np.int64), np.diff(g.dep_ptr[:n0 + 1]))
        e = np.flatnonzero(g.dep_kind[:dst.size] == DepKind.LAUNCH)
        e = e[(g.dep_src[e] < n0)]
        e = e[_IS_HOST[g.kind[g.dep_src[e]].astype(np.uint8)] & _IS_GPU[g.kind[dst[e]].astype(np.uint8)]]
        self._le_src, self._le_kind = g.dep_src[e], g.kind[dst[e]]
        total, _ = self._per_call(hw0)
        self._calls = np.flatnonzero(total > 0)
        c = self._calls.size
        stages = len(self._stage_bytes(hw0)) + (1 if int(hw0.doorbell_exit_ns()) > 0 else 0) + (1 if c else 0)
        self._sub_end = n0 + c * stages
        if self._sub_end > g.n:
            return False
        late = np.isin(g.kind[self._sub_end:], [self._code.get(k, -1) for k in ("cc_submit", "p2p_submit")])
        return not late.any()  # push stages only where submit.py puts them

    def _same_structure(self, hw) -> bool:
        """Does the transform at ``hw`` build the nodes and edges it built at the preset?"""
        if self.family == "none":
            return True
        hw0 = self.hw0
        for name in ("push_segment_bytes", "wlc_push_bytes"):
            if (int(getattr(hw, name)) > 0) != (int(getattr(hw0, name)) > 0):
                return False
        for name in ("doorbell_exit_ns", "crossing_ns", "completion_ns"):
            if (int(getattr(hw, name)()) > 0) != (int(getattr(hw0, name)()) > 0):
                return False
        total, _ = self._per_call(hw)
        return np.array_equal(np.flatnonzero(total > 0), self._calls)

    # ---- prices
    def _prices(self, hw) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Durations, lags and the lanes' maximum servers under ``hw``."""
        g = self.g0
        dur, lag = g.dur.copy(), g.dep_lag.copy()
        nb, up = g.bytes, g.copy_dir == CopyDir.H2D
        lat_up, lat_down = int(hw.pcie_latency_ns(CopyDir.H2D)), int(hw.pcie_latency_ns(CopyDir.D2H))

        def by_dir(idx: np.ndarray, f) -> np.ndarray:
            u = up[idx]
            return np.where(u, f(nb[idx], CopyDir.H2D), f(nb[idx], CopyDir.D2H)).astype(np.int64)

        staging = getattr(hw, "staging_copy_ns", None)
        dur[self._pcie] = by_dir(self._pcie, hw.pcie_ns)
        dur[self._stg] = 0 if staging is None else np.asarray(staging(nb[self._stg]), np.int64)
        if self.family == "none":
            lag[self._lat] = np.where(self._lat_up, lat_up, lat_down)
            return dur, lag, self._top0
        # the push stages, per pushing call: segment and work-launch encryption, doorbell, round trip
        n0, c = self.n0, self._calls.size
        total, trip = self._per_call(hw)
        if c:
            at = n0
            for b in self._stage_bytes(hw):
                dur[at:at + c] = int(hw.crypto_call_ns(b))
                at += c
            door = int(hw.doorbell_exit_ns())
            if door > 0:
                dur[at:at + c] = door
                at += c
            dur[at:at + c] = trip[self._calls]
        lag[self._launch] = self._launch_lag + total[self._launch_src]
        ratio = float(getattr(hw, "host_work_ratio", 1.0))  # traced host work in the CPU TEE
        dur[self._host] = self._host_dur if ratio == 1.0 else np.ceil(self._host_dur * ratio).astype(np.int64)
        # the chunks' stages
        dur[self._enc] = np.asarray(hw.cpu_encrypt_ns(nb[self._enc]), np.int64)
        dur[self._dec] = np.asarray(hw.cpu_decrypt_ns(nb[self._dec]), np.int64)
        rec = self._rec
        dur[rec] = np.where(up[rec], hw.cpu_decrypt_ns(nb[rec]), hw.cpu_encrypt_ns(nb[rec])).astype(np.int64)
        parts = int(getattr(hw, "ce_split_parts", 1)) if self.opts.parallel_auth else 1

        def ce(b) -> np.ndarray:
            return np.asarray(hw.ce_crypto_ns(b, parts) if parts > 1 else hw.ce_crypto_ns(b), np.int64)

        dur[self._ce] = ce(nb[self._ce])
        dur[self._sync] = np.where(self._on_channel, int(getattr(hw, "crossing_ns", lambda: 0)()),
                                   int(getattr(hw, "completion_ns", lambda: 0)()))
        lag[self._done] = lat_up + ce(self._done_page)
        lag[self._landed] = lat_down
        lag[self._ce_out] = np.asarray(hw.pcie_ns(self._ce_out_page, CopyDir.D2H), np.int64) + lat_down
        lag[self._zero] = 0
        top = self._top0
        if self._pools.size:  # every rank's bounce pool may double up to the model's maximum (replay/protocols/bounce.py)
            top = top.copy()
            top[self._pools] = max(1, int(hw.bounce_max_slots), int(hw.bounce_slots))
        return dur, lag, top

    def same_prices(self, g: OpGraph) -> bool:
        """Whether re-priced graph ``g`` has the preset graph's durations and lags."""
        return np.array_equal(g.dur, self.g0.dur) and np.array_equal(g.dep_lag, self.g0.dep_lag)

    def same_used_lanes(self, g: OpGraph) -> bool:
        """Whether re-priced graph ``g``'s lanes differ from the preset graph's only where no node
        runs or holds."""
        return self.g0.same_used_sizes(g, self._used)

    def at(self, hw) -> OpGraph | None:
        """The graph the transform would build under ``hw``, or None when this graph or this
        point is not re-priced (the caller re-transforms)."""
        if not self.ok or not self._same_structure(hw):
            return None
        sizes = self._sizes(hw)
        resized = sizes is not None and not all(np.array_equal(a, b) for a, b in zip(sizes, self._sizes0))
        if resized and not self._sizes_ok:
            return None  # (a lane size this module cannot set: re-transform)
        dur, lag, top = self._prices(hw)
        lanes = self.g0.lanes
        changed = not np.array_equal(top, self._top0)
        if changed or resized:
            servers = lanes.servers
            if resized:
                servers, top = servers.copy(), top.copy()
                for idx, size in zip((self._sized, self._locks), sizes):
                    servers[idx] = size
                    top[idx] = size
            lanes = dataclasses.replace(lanes, servers=servers, max_servers=top)
        g0 = self.g0
        out = RepricedGraph(**{f.name: getattr(g0, f.name) for f in dataclasses.fields(g0)
                               if f.name not in ("dur", "dep_lag", "lanes")}, dur=dur, dep_lag=lag, lanes=lanes)
        if changed or resized:
            object.__setattr__(out, "_lanes_changed", True)
        if resized:
            object.__setattr__(out, "_servers_changed", True)
        return out


__all__ = ["Repricer", "RepricedGraph", "repriced_parameters"]
