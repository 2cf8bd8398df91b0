"""The scheduler's loops as numba kernels: the fallback of the compiled core (replay.pipeline._engine).

replay/pipeline/engine.py imports this module only when the C++ extension is missing, or when
``FASTRACK_ENGINE=numba`` (or ``FASTRACK_NO_JIT=1``) asks for it: importing numba costs about
0.4 s per process, which a replay with the extension never pays. ``FASTRACK_NO_JIT=1`` runs the
same functions as plain Python (fastrack_core.jit), with the same results. Every function here gives
exactly what the C++ core (replay/cpp/fastrack/engine.hh, results.hh) gives;
tests/test_native_engine.py checks it field by field.

The rules are documented once, in replay/pipeline/engine.py.
"""

from __future__ import annotations

import numpy as np

from fastrack_core.jit import njit
from fastrack_core.schema import DepKind
from replay.graph import OpGraph, stable_argsort

# status codes, as the C++ core's fastrack::Status (replay/pipeline/engine.py turns them into messages)
OK, GROUP_EDGE, CYCLE, POOL_RETURN, STUCK = 0, 1, 2, 3, 4
_LAUNCH = int(DepKind.LAUNCH)
_STREAM = int(DepKind.STREAM)


@njit(cache=True)
def _topo_order(n, rep, mem_ptr, mem_idx, out_ptr, out_dst, key):
    """Kahn's algorithm over super-nodes (barrier groups contracted to their representative).
    Returns (order of nodes, number of nodes placed). The heap is the pass's event heap with the
    keys as their own order keys: entries tie on the key, then the index (indices < n: no server
    returns)."""
    indeg = np.zeros(n, np.int64)
    for e in range(out_dst.shape[0]):
        indeg[rep[out_dst[e]]] += 1
    hk = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    size = 0
    for i in range(n):
        if rep[i] == i and indeg[i] == 0:
            size = _ev_push(hk, hi, key, n, size, key[i], i)
    order = np.empty(n, np.int32)  # (node indices: replay.graph.INDEX)
    placed = 0
    while size > 0:
        _, r, size = _ev_pop(hk, hi, key, n, size)
        for m in range(mem_ptr[r], mem_ptr[r + 1]):
            node = mem_idx[m]
            order[placed] = node
            placed += 1
            for e in range(out_ptr[node], out_ptr[node + 1]):
                t = rep[out_dst[e]]
                indeg[t] -= 1
                if indeg[t] == 0:
                    size = _ev_push(hk, hi, key, n, size, key[t], t)
    return order, placed


@njit(cache=True)
def _lane_successors(order, lane, shared, rep, pending):
    """Issue order of every in-order lane: ``nxt[i]`` is the node that follows ``i`` on its lane
    (it is queued only once ``i`` is placed); adds one to ``pending`` of its group for each.
    Consecutive members of one barrier group on one lane gate nothing (they are placed together)."""
    n = order.shape[0]
    last = np.full(shared.shape[0], -1, np.int64)
    nxt = np.full(n, -1, np.int32)
    for k in range(n):
        i = order[k]
        ln = lane[i]
        if ln < 0 or shared[ln]:
            continue
        p = last[ln]
        if p >= 0 and rep[p] != rep[i]:
            nxt[p] = i
            pending[rep[i]] += 1
        last[ln] = i
    return nxt


@njit(cache=True)
def _ev_less(hk, hi, okey, n, a, b):
    """Heap order: (time, order key, index); pool-server returns (index >= n) go first at a time."""
    if hk[a] != hk[b]:
        return hk[a] < hk[b]
    ia = hi[a]
    ib = hi[b]
    if ia >= n or ib >= n:
        if ia >= n and ib >= n:
            return ia < ib
        return ia >= n
    if okey[ia] != okey[ib]:
        return okey[ia] < okey[ib]
    return ia < ib


@njit(cache=True)
def _ev_push(hk, hi, okey, n, size, k, idx):
    pos = size
    hk[pos] = k
    hi[pos] = idx
    while pos > 0:
        parent = (pos - 1) >> 1
        if _ev_less(hk, hi, okey, n, parent, pos):
            break
        hk[parent], hk[pos] = hk[pos], hk[parent]
        hi[parent], hi[pos] = hi[pos], hi[parent]
        pos = parent
    return size + 1


@njit(cache=True)
def _ev_pop(hk, hi, okey, n, size):
    k, idx = hk[0], hi[0]
    size -= 1
    hk[0] = hk[size]
    hi[0] = hi[size]
    pos = 0
    while True:
        left = 2 * pos + 1
        if left >= size:
            break
        best = left
        right = left + 1
        if right < size and _ev_less(hk, hi, okey, n, right, left):
            best = right
        if _ev_less(hk, hi, okey, n, pos, best):
            break
        hk[pos], hk[best] = hk[best], hk[pos]
        hi[pos], hi[best] = hi[best], hi[pos]
        pos = best
    return k, idx, size


@njit(cache=True)
def _earliest_server(free, srv_ptr, ln):
    best = srv_ptr[ln]
    for sv in range(srv_ptr[ln] + 1, srv_ptr[ln + 1]):
        if free[sv] < free[best]:
            best = sv
    return best


@njit(cache=True)
def _schedule(n, rep, mem_ptr, mem_idx, okey, lane, shared, srv_ptr, dur, release, dep_ptr, dep_src, dep_kind,
              dep_lag, out_ptr, out_dst, lane_next, pending, hold_lane, hold_ptr, hold_idx, pool_size, pool_max,
              launch_code, stream_code):
    """One event-driven pass (see the module docstring). Returns the schedule arrays, the lanes'
    final sizes, the number of nodes placed and an error code (0 ok; 1: ``err_node`` returns a
    pool server its holder has not taken yet). Until a node is placed, ``start`` holds the time
    it may start (its ready time; on an in-order lane, also when the lane is free for it)."""
    start = np.zeros(n, np.int64)
    finish = np.zeros(n, np.int64)
    pred = np.full(n, -1, np.int32)  # (node indices: replay.graph.INDEX)
    bound = np.full(n, -1, np.int8)
    slot_wait = np.zeros(n, np.int64)
    chosen = np.zeros(n, np.int32)  # server of a node on an in-order lane (picked when it is queued)
    phase = np.zeros(n, np.int8)  # 0 waiting, 1 asked for a pool server, 2 holds it, 3 placed
    free = np.zeros(srv_ptr[-1], np.int64)  # per server: time it frees
    srv_last = np.full(srv_ptr[-1], -1, np.int64)  # per server: last node it served
    nl = shared.shape[0]
    lane_last = np.full(nl, -1, np.int64)  # per lane: last node placed on it
    pool_now = np.full(nl, np.iinfo(np.int64).min, np.int64)  # per pool: time of its latest event
    held = np.zeros(nl, np.int64)
    size = pool_size.copy()
    wait_head = np.full(nl, -1, np.int64)
    wait_tail = np.full(nl, -1, np.int64)
    wait_next = np.empty(n, np.int32)  # next waiter of the same pool (set when a node starts waiting)
    for e in range(out_dst.shape[0]):
        pending[rep[out_dst[e]]] += 1
    cap = n + 2 * hold_idx.shape[0] + 1
    hk = np.empty(cap, np.int64)
    hi = np.empty(cap, np.int64)
    hsize = 0
    low = np.iinfo(np.int64).min
    arm = np.empty(n, np.int32)  # groups whose prerequisites are all placed, to be queued
    narm = 0
    now = np.empty(n, np.int32)  # nodes whose start is known when queued: placed before the heap
    nnow = 0
    for r in range(n):
        if rep[r] == r and pending[r] == 0:
            arm[narm] = r
            narm += 1
    seq = np.empty(n, np.int32)
    placed = 0
    err = 0
    err_node = -1
    while True:
        # queue the groups armed by the last placement: when each member may start
        while narm > 0:
            narm -= 1
            r = arm[narm]
            key = low
            for m in range(mem_ptr[r], mem_ptr[r + 1]):
                i = mem_idx[m]
                t = release[i]
                p = -1
                b = -1
                ln = lane[i]
                single = ln >= 0 and not shared[ln] and srv_ptr[ln + 1] - srv_ptr[ln] == 1
                explicit = False
                for e in range(dep_ptr[i], dep_ptr[i + 1]):
                    src = dep_src[e]
                    if dep_kind[e] == launch_code:
                        c = start[src] + dep_lag[e]
                    else:
                        c = finish[src] + dep_lag[e]
                    if c > t or p < 0 and c == t:
                        t = c
                        p = src
                        b = dep_kind[e]
                    if single and dep_kind[e] == stream_code and src == srv_last[srv_ptr[ln]]:
                        explicit = True
                if ln >= 0 and not shared[ln]:
                    best = _earliest_server(free, srv_ptr, ln)
                    chosen[i] = best
                    if not explicit:
                        if free[best] > t:
                            t = free[best]
                            p = srv_last[best]
                            b = -2
                        prev = lane_last[ln]
                        if prev >= 0 and start[prev] > t:
                            t = start[prev]
                            p = prev
                            b = -2
                start[i] = t
                pred[i] = p
                bound[i] = b
                if t > key:
                    key = t
            # a single node on an in-order lane or none, holding nothing, starts when it may: its
            # lane serves nothing else meanwhile, so place it now (the heap would only delay it)
            i = mem_idx[mem_ptr[r]]
            if mem_ptr[r + 1] - mem_ptr[r] == 1 and hold_lane[i] < 0 and (lane[i] < 0 or not shared[lane[i]]):
                now[nnow] = r
                nnow += 1
            else:
                hsize = _ev_push(hk, hi, okey, n, hsize, key, r)
        if nnow > 0:
            nnow -= 1
            idx = now[nnow]
            t = start[idx]
        elif hsize == 0:
            # every unplaced node waits, directly or not, for a pool server that only an unplaced
            # node would return: the pool grows past its maximum for the first waiter, granted
            # when it asked (the driver would allocate another buffer rather than deadlock)
            pl = -1
            for k in range(nl):
                if wait_head[k] >= 0:
                    pl = k
                    break
            if pl < 0:
                break
            w = wait_head[pl]
            wait_head[pl] = wait_next[w]
            if wait_head[pl] < 0:
                wait_tail[pl] = -1
            size[pl] += 1
            held[pl] += 1
            phase[w] = 2
            hsize = _ev_push(hk, hi, okey, n, hsize, start[w], w)
            continue
        else:
            t, idx, hsize = _ev_pop(hk, hi, okey, n, hsize)
        if idx >= n:  # a pool server returned
            pl = hold_lane[idx - n]
            if t > pool_now[pl]:
                pool_now[pl] = t
            t = pool_now[pl]
            held[pl] -= 1
            w = wait_head[pl]
            if w >= 0:
                wait_head[pl] = wait_next[w]
                if wait_head[pl] < 0:
                    wait_tail[pl] = -1
                held[pl] += 1
                phase[w] = 2
                hsize = _ev_push(hk, hi, okey, n, hsize, max(t, start[w]), w)
            continue
        r = idx
        first = mem_ptr[r]
        count = mem_ptr[r + 1] - first
        if count == 1:
            i = r
            pl = hold_lane[i]
            if pl >= 0 and phase[i] != 2:
                # the pool's state is that of its latest event: a request from earlier (a node
                # whose time runs behind, after a negative lag) is served at that event's time
                if t < pool_now[pl]:
                    t = pool_now[pl]
                pool_now[pl] = t
                if held[pl] < size[pl]:
                    held[pl] += 1
                elif size[pl] < pool_max[pl]:
                    size[pl] = min(2 * size[pl], pool_max[pl])
                    held[pl] += 1
                else:
                    phase[i] = 1
                    wait_next[i] = -1
                    if wait_tail[pl] >= 0:
                        wait_next[wait_tail[pl]] = i
                    else:
                        wait_head[pl] = i
                    wait_tail[pl] = i
                    continue
                phase[i] = 2
            s = t
            ln = lane[i]
            if ln >= 0 and shared[ln]:
                best = _earliest_server(free, srv_ptr, ln)
                chosen[i] = best
                if free[best] > s:
                    s = free[best]
                    pred[i] = srv_last[best]
                    bound[i] = -2
            if s == t and t > start[i]:
                slot_wait[i] = t - start[i]
            start[i] = s
            finish[i] = s + dur[i]
            if ln >= 0:
                sv = chosen[i]
                if finish[i] > free[sv]:
                    free[sv] = finish[i]
                srv_last[sv] = i
                lane_last[ln] = i
        else:
            gstart = low
            gbind = -1
            for m in range(first, first + count):
                i = mem_idx[m]
                s = start[i]
                ln = lane[i]
                if ln >= 0 and shared[ln]:
                    best = _earliest_server(free, srv_ptr, ln)
                    chosen[i] = best
                    if free[best] > s:
                        s = free[best]
                        pred[i] = srv_last[best]
                        bound[i] = -2
                start[i] = s
                if s > gstart:
                    gstart = s
                    gbind = i
            for m in range(first, first + count):
                i = mem_idx[m]
                if start[i] < gstart:
                    start[i] = gstart
                    pred[i] = gbind
                    bound[i] = -3
                finish[i] = start[i] + dur[i]
                ln = lane[i]
                if ln >= 0:
                    sv = chosen[i]
                    if finish[i] > free[sv]:
                        free[sv] = finish[i]
                    srv_last[sv] = i
                    lane_last[ln] = i
        # placed: record, return the pool servers it frees, arm what it was the last prerequisite of
        for m in range(first, first + count):
            i = mem_idx[m]
            phase[i] = 3
            seq[placed] = i
            placed += 1
        for m in range(first, first + count):
            i = mem_idx[m]
            for h in range(hold_ptr[i], hold_ptr[i + 1]):
                a = hold_idx[h]
                if phase[a] != 3:
                    if err == 0:
                        err = 1
                        err_node = i
                    continue
                hsize = _ev_push(hk, hi, okey, n, hsize, max(finish[i], start[a]), n + a)
            for e in range(out_ptr[i], out_ptr[i + 1]):
                d = rep[out_dst[e]]
                pending[d] -= 1
                if pending[d] == 0:
                    arm[narm] = d
                    narm += 1
            nx = lane_next[i]
            if nx >= 0:
                d = rep[nx]
                pending[d] -= 1
                if pending[d] == 0:
                    arm[narm] = d
                    narm += 1
    return start, finish, pred, bound, slot_wait, seq, size, placed, err, err_node


def groups(graph: OpGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rep[i] (representative node of i's group), members CSR (mem_ptr by rep, mem_idx)."""
    n = graph.n
    rep = np.arange(n, dtype=np.int64)
    grouped = np.flatnonzero(graph.group >= 0)
    if grouped.size:
        gids = graph.group[grouped]
        order = np.lexsort((grouped, gids))
        g_sorted = gids[order]
        nodes_sorted = grouped[order]
        first_of = np.r_[True, g_sorted[1:] != g_sorted[:-1]]
        first_idx = np.maximum.accumulate(np.where(first_of, np.arange(g_sorted.size), 0))
        rep[nodes_sorted] = nodes_sorted[first_idx]
    counts = np.bincount(rep, minlength=n)
    mem_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=mem_ptr[1:])
    mem_idx = stable_argsort(rep).astype(np.int64)
    return rep, mem_ptr, mem_idx


def topology(graph: OpGraph):
    """Issue order and what the pass needs: (status, where, placed, order, (rep, mem_ptr, mem_idx,
    out_ptr, out_dst)). status GROUP_EDGE: edge ``where`` joins two members of one group; CYCLE:
    ``order[:placed]`` is what could be placed."""
    n = graph.n
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.dep_ptr))
    src = graph.dep_src.astype(np.int64)
    rep, mem_ptr, mem_idx = groups(graph)
    same = rep[src] == rep[dst]
    if np.any(same):
        return GROUP_EDGE, int(np.flatnonzero(same)[0]), 0, None, None
    by_src = stable_argsort(src)
    out_dst = dst[by_src]
    out_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=out_ptr[1:])
    order, placed = _topo_order(n, rep, mem_ptr, mem_idx, out_ptr, out_dst, graph.order.astype(np.int64))
    if placed < n:
        return CYCLE, -1, int(placed), order, None
    return OK, -1, n, order, (rep, mem_ptr, mem_idx, out_ptr, out_dst)


def schedule(graph: OpGraph):
    """(status, where, placed, arrays): arrays = (start, finish, crit_pred, bound_by, order,
    slot_wait, lane_servers) after a pass, or (order of the nodes placed before a cycle,) after
    a cycle, or None after an edge inside a group."""
    status, where, placed, issue, topo = topology(graph)
    if status != OK:
        return status, where, placed, (issue,)
    rep, mem_ptr, mem_idx, out_ptr, out_dst = topo
    lanes = graph.lanes
    n = graph.n
    shared = np.asarray(lanes.shared, np.bool_)
    lane_servers = lanes.servers.astype(np.int64)
    srv_ptr = np.zeros(len(lanes) + 1, np.int64)
    np.cumsum(lane_servers, out=srv_ptr[1:])
    pending = np.zeros(n, np.int32)  # per group: prerequisites not yet placed (edges, lane predecessors)
    lane_next = _lane_successors(issue, graph.lane, shared, rep, pending)
    del issue
    holders = np.flatnonzero(graph.hold_lane >= 0)
    freer = np.asarray(graph.hold_until[holders], np.int64)
    hold_idx = holders[np.argsort(freer, kind="stable")].astype(np.int64)
    hold_ptr = np.zeros(n + 1, np.int64)  # (left untouched, hence unallocated, without holds)
    if holders.size:
        np.cumsum(np.bincount(freer, minlength=n), out=hold_ptr[1:])
    i64 = np.int64
    start, finish, pred, bound, slot_wait, seq, size, placed, err, err_node = _schedule(
        n, rep, mem_ptr, mem_idx, np.asarray(graph.order, i64), graph.lane, shared, srv_ptr,
        np.asarray(graph.dur, i64), np.asarray(graph.release, i64), np.asarray(graph.dep_ptr, i64),
        np.asarray(graph.dep_src, i64), graph.dep_kind, np.asarray(graph.dep_lag, i64), out_ptr, out_dst,
        lane_next, pending, graph.hold_lane, hold_ptr, hold_idx, lane_servers,
        lanes.max_servers.astype(np.int64), _LAUNCH, _STREAM)
    status = POOL_RETURN if err == 1 else (STUCK if placed < n else OK)
    return status, int(err_node), int(placed), (start, finish, pred, bound, seq, slot_wait, size)


@njit(cache=True)
def _minheap_push(h, base, size, v):
    """Push ``v`` on the min-heap of values ``h[base:base + size]``; returns the new size."""
    pos = size
    h[base + pos] = v
    while pos > 0:
        parent = (pos - 1) >> 1
        if h[base + parent] <= h[base + pos]:
            break
        h[base + parent], h[base + pos] = h[base + pos], h[base + parent]
        pos = parent
    return size + 1


@njit(cache=True)
def _minheap_pop(h, base, size):
    """Pop the smallest value of the min-heap ``h[base:base + size]``; returns (value, new size)."""
    top = h[base]
    size -= 1
    h[base] = h[base + size]
    pos = 0
    while True:
        a = 2 * pos + 1
        if a >= size:
            break
        b = a + 1
        c = b if b < size and h[base + b] < h[base + a] else a
        if h[base + pos] <= h[base + c]:
            break
        h[base + pos], h[base + c] = h[base + c], h[base + pos]
        pos = c
    return top, size


@njit(cache=True)
def _retime(seq, lane, shared, srv_ptr, dur, release, group, hold_lane, hold_until, dep_ptr, dep_src, dep_kind,
            dep_lag, pool_size, launch_code, stream_code):
    """The C++ core's retimeWith (replay/cpp/fastrack/engine.hh), step for step. Returns
    (ok, start, finish)."""
    n = dur.shape[0]
    nl = shared.shape[0]
    low = np.iinfo(np.int64).min
    start = np.zeros(n, np.int64)
    finish = np.zeros(n, np.int64)
    free = np.zeros(srv_ptr[-1], np.int64)
    srv_last = np.full(srv_ptr[-1], -1, np.int64)
    lane_last = np.full(nl, -1, np.int64)
    pool_now = np.full(nl, low, np.int64)
    is_pool = np.zeros(nl, np.bool_)
    placed = np.zeros(n, np.bool_)
    holds = 0
    for i in range(n):
        if group[i] >= 0:
            return False, start, finish
        if hold_lane[i] >= 0:
            holds += 1
            if pool_size[hold_lane[i]] < 1:
                return False, start, finish
            is_pool[hold_lane[i]] = True
    for i in range(n):
        if lane[i] >= 0 and is_pool[lane[i]]:
            return False, start, finish
    pool_base = np.zeros(nl + 1, np.int64)  # per pool: its heap's segment (pool_size[pl] entries)
    for k in range(nl):
        pool_base[k + 1] = pool_base[k] + (pool_size[k] if is_pool[k] else 0)
    heap = np.full(pool_base[-1], low, np.int64)
    pool_len = np.where(is_pool, pool_size, 0).astype(np.int64)
    hold_ptr = np.zeros(n + 1, np.int64)
    hold_idx = np.empty(holds, np.int64)
    if holds:
        for i in range(n):
            if hold_lane[i] >= 0:
                hold_ptr[hold_until[i] + 1] += 1
        for i in range(n):
            hold_ptr[i + 1] += hold_ptr[i]
        fill = hold_ptr[:-1].copy()
        for i in range(n):
            if hold_lane[i] >= 0:
                hold_idx[fill[hold_until[i]]] = i
                fill[hold_until[i]] += 1
    for k in range(n):
        i = seq[k]
        if i < 0 or i >= n or placed[i]:
            return False, start, finish
        t = release[i]
        ln = lane[i]
        sh = ln >= 0 and shared[ln]
        single = ln >= 0 and not sh and srv_ptr[ln + 1] - srv_ptr[ln] == 1
        explicit = False
        for e in range(dep_ptr[i], dep_ptr[i + 1]):
            src = dep_src[e]
            if not placed[src]:
                return False, start, finish
            c = (start[src] if dep_kind[e] == launch_code else finish[src]) + dep_lag[e]
            if c > t:
                t = c
            if single and dep_kind[e] == stream_code and src == srv_last[srv_ptr[ln]]:
                explicit = True
        best = -1
        if ln >= 0:
            best = srv_ptr[ln]
            for sv in range(srv_ptr[ln] + 1, srv_ptr[ln + 1]):
                if free[sv] < free[best]:
                    best = sv
        if ln >= 0 and not sh and not explicit:
            if free[best] > t:
                t = free[best]
            prev = lane_last[ln]
            if prev >= 0 and start[prev] > t:
                t = start[prev]
        pl = hold_lane[i]
        if pl >= 0:
            if pool_len[pl] == 0:
                return False, start, finish
            if t < pool_now[pl]:
                t = pool_now[pl]
            pool_now[pl] = t
            v, pool_len[pl] = _minheap_pop(heap, pool_base[pl], pool_len[pl])
            if v > t:
                t = v
        if sh and free[best] > t:
            t = free[best]
        start[i] = t
        finish[i] = t + dur[i]
        placed[i] = True
        if ln >= 0:
            if finish[i] > free[best]:
                free[best] = finish[i]
            srv_last[best] = i
            lane_last[ln] = i
        for h in range(hold_ptr[i], hold_ptr[i + 1]):
            a = hold_idx[h]
            if not placed[a]:
                return False, start, finish
            q = hold_lane[a]
            pool_len[q] = _minheap_push(heap, pool_base[q], pool_len[q], max(finish[i], start[a]))
    return True, start, finish


def retime(graph: OpGraph, seq: np.ndarray, pool_size: np.ndarray):
    """(start, finish) of replay.pipeline.engine.retime, or None when ``seq`` does not fit."""
    lanes = graph.lanes
    srv_ptr = np.zeros(len(lanes) + 1, np.int64)
    np.cumsum(lanes.servers.astype(np.int64), out=srv_ptr[1:])
    i64 = np.int64
    ok, start, finish = _retime(np.asarray(seq, i64), np.asarray(graph.lane, np.int64), np.asarray(lanes.shared, np.bool_),
                                srv_ptr, np.asarray(graph.dur, i64), np.asarray(graph.release, i64),
                                np.asarray(graph.group, i64), np.asarray(graph.hold_lane, np.int64),
                                np.asarray(graph.hold_until, i64), np.asarray(graph.dep_ptr, i64),
                                np.asarray(graph.dep_src, i64), graph.dep_kind, np.asarray(graph.dep_lag, i64),
                                np.asarray(pool_size, i64), _LAUNCH, _STREAM)
    return (start, finish) if ok else None


def is_acyclic(graph: OpGraph, extra_src, extra_dst) -> bool:
    n = graph.n
    src = graph.dep_src.astype(np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.dep_ptr))
    if extra_src is not None:
        src = np.concatenate([src, np.asarray(extra_src, np.int64)])
        dst = np.concatenate([dst, np.asarray(extra_dst, np.int64)])
    return bool(_acyclic(n, groups(graph)[0], src, dst))


def walk_path(start, finish, pred, bound, slot_wait, i, t, t_stop, node_code, edge_code, ncode, launch_code,
              release_code, group_code, lane_code, wait_code) -> np.ndarray:
    return _walk_path(start, finish, pred, bound.astype(np.int64), slot_wait, i, t, t_stop,
                      np.asarray(node_code, np.int64), edge_code, ncode, launch_code, release_code, group_code,
                      lane_code, wait_code)


@njit(cache=True)
def _acyclic(n, rep, src, dst):
    """Whether the graph (edges src -> dst, barrier groups contracted to ``rep``) has a
    topological order: Kahn's algorithm with a plain stack, no priority (linear time)."""
    indeg = np.zeros(n, np.int64)
    cnt = np.zeros(n + 1, np.int64)
    for e in range(src.shape[0]):
        if rep[src[e]] == rep[dst[e]]:
            return False
        indeg[rep[dst[e]]] += 1
        cnt[src[e] + 1] += 1
    for i in range(n):
        cnt[i + 1] += cnt[i]
    out = np.empty(src.shape[0], np.int64)
    fill = cnt[:-1].copy()
    for e in range(src.shape[0]):
        out[fill[src[e]]] = dst[e]
        fill[src[e]] += 1
    nmem = np.zeros(n, np.int64)
    for i in range(n):
        nmem[rep[i]] += 1
    mem_ptr = np.zeros(n + 1, np.int64)
    for i in range(n):
        mem_ptr[i + 1] = mem_ptr[i] + nmem[i]
    mem = np.empty(n, np.int64)
    fill2 = mem_ptr[:-1].copy()
    for i in range(n):
        mem[fill2[rep[i]]] = i
        fill2[rep[i]] += 1
    stack = np.empty(n, np.int64)
    top = 0
    for i in range(n):
        if rep[i] == i and indeg[i] == 0:
            stack[top] = i
            top += 1
    placed = 0
    while top > 0:
        top -= 1
        r = stack[top]
        for m in range(mem_ptr[r], mem_ptr[r + 1]):
            node = mem[m]
            placed += 1
            for e in range(cnt[node], cnt[node + 1]):
                t = rep[out[e]]
                indeg[t] -= 1
                if indeg[t] == 0:
                    stack[top] = t
                    top += 1
    return placed == n


@njit(cache=True)
def _walk_path(start, finish, pred, bound, slot_wait, i, t, t_stop, node_code, edge_code, ncode, launch_code,
               release_code, group_code, lane_code, wait_code):
    """Walk the critical path backwards from node ``i`` at time ``t`` down to ``t_stop``, adding
    each stretch of time to one code: a node's own time to ``node_code[node]``, the lag of the
    edge that bound a start to ``edge_code[edge kind]``, a pool-server wait to ``wait_code``, a
    start bound by its release, by its lane or before the first node to ``release_code``.
    Every nanosecond of (t_stop, t] goes to exactly one code. ``group_code`` and ``lane_code``
    are the engine's BOUND_GROUP and BOUND_LANE."""
    totals = np.zeros(ncode, np.int64)
    n = start.shape[0]
    steps = 0
    while i >= 0 and steps <= n and t > t_stop:
        steps += 1
        s = start[i]
        own = min(finish[i], t) - max(s, t_stop)
        if own > 0:
            totals[node_code[i]] += own
        if s < t:
            t = s
        w = slot_wait[i]  # the start waited this long for a pool server (bounce slot)
        if w > 0:
            seg = t - max(t - w, t_stop)
            if seg > 0:
                totals[wait_code] += seg
            t -= w
        p = pred[i]
        b = bound[i]
        if p < 0:
            break
        if b == launch_code:
            anchor = start[p]
        elif b == group_code:
            anchor = s
        else:
            anchor = finish[p]
        if anchor < t:
            if b == lane_code or b < 0:
                code = release_code
            else:
                code = edge_code[b]
            seg = t - max(anchor, t_stop)
            if seg > 0:
                totals[code] += seg
            t = anchor
        i = p
    if t > t_stop:
        totals[release_code] += t - t_stop
    return totals
