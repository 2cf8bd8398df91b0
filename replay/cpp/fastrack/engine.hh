// Fastrack gem5-free core: the replay scheduler, bit-exact with replay/engine.py.
//
//   ready[i]  = max(release[i], max over deps: finish[src] + lag  (start[src] + lag for LAUNCH))
//   start[i]  = max(ready[i], a free server of lane[i], a free server of the pool it holds)
//   finish[i] = start[i] + dur[i]
//
// * Issue order: Kahn's algorithm over super-nodes (a barrier group contracted to its
//   lowest-index member), a binary min-heap keyed by (order key of the representative, index);
//   it also detects cycles. An in-order lane (Graph::lane_shared == 0: streams, host threads)
//   serves its nodes in issue order: a node is queued only once its lane predecessor is placed,
//   and starts no earlier than that node started.
// * One event-driven pass places the nodes: a binary min-heap keyed by (time, order key, index)
//   holds the nodes whose prerequisites are all placed, at the time they may start. A shared lane
//   is work-conserving: the popped node takes its earliest free server (lowest index on ties).
// * Pools (Graph::hold_lane / hold_until): a node takes a server of its pool when popped (the
//   pool doubles up to lane_max_servers when every server is held, else the node waits) and
//   returns it when node hold_until finishes (a heap event that goes before nodes at that time);
//   a returned server goes to the longest-waiting request. If every unplaced node ends up
//   waiting on a pool, the pool grows by one for its first waiter, granted when it asked.
// * An explicit STREAM edge from the node last served on a single-server in-order lane replaces
//   the lane constraint (negative lags reproduce measured overlap).
// * Group members start together at the latest of their individual starts; the lanes they use
//   are updated only after the whole group has been placed.
// Integer nanoseconds throughout; ties broken exactly as the Python engine does, including the
// choice of the binding prerequisite (crit_pred / bound_by) and slot waits (slot_wait).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "graph.hh"

namespace fastrack {

constexpr std::int8_t kBoundRelease = -1;
constexpr std::int8_t kBoundLane = -2;
constexpr std::int8_t kBoundGroup = -3;

struct Schedule {
    std::vector<std::int64_t> start;
    std::vector<std::int64_t> finish;
    std::vector<std::int64_t> crit_pred;
    std::vector<std::int8_t> bound_by;
    std::vector<std::int64_t> order;         // the order in which nodes were placed
    std::vector<std::int64_t> slot_wait;     // ns the start waited for a pool server (0 if that did not bind)
    std::vector<std::int64_t> lane_servers;  // per lane: servers at the end (a pool's size after growing)
};

// Barrier groups: representative (lowest-index member) per node, and members CSR by
// representative (members in index order).
struct Groups {
    std::vector<std::int64_t> rep;
    std::vector<std::int64_t> mem_ptr;
    std::vector<std::int64_t> mem_idx;
};

inline Groups barrierGroups(const Graph &g) {
    const std::size_t n = g.n();
    Groups gr;
    gr.rep.resize(n);
    std::vector<std::int64_t> grouped;
    for (std::size_t i = 0; i < n; ++i) {
        gr.rep[i] = static_cast<std::int64_t>(i);
        if (g.group[i] >= 0) grouped.push_back(static_cast<std::int64_t>(i));
    }
    if (!grouped.empty()) {
        std::stable_sort(grouped.begin(), grouped.end(),
                         [&](std::int64_t a, std::int64_t b) { return g.group[a] < g.group[b]; });
        std::int64_t first = grouped[0];
        for (std::size_t k = 0; k < grouped.size(); ++k) {
            if (k > 0 && g.group[grouped[k]] != g.group[grouped[k - 1]]) first = grouped[k];
            gr.rep[grouped[k]] = first;
        }
    }
    gr.mem_ptr.assign(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i) ++gr.mem_ptr[gr.rep[i] + 1];
    for (std::size_t i = 0; i < n; ++i) gr.mem_ptr[i + 1] += gr.mem_ptr[i];
    gr.mem_idx.resize(n);
    std::vector<std::int64_t> fill(gr.mem_ptr.begin(), gr.mem_ptr.end() - 1);
    for (std::size_t i = 0; i < n; ++i) gr.mem_idx[fill[gr.rep[i]]++] = static_cast<std::int64_t>(i);
    return gr;
}

namespace detail {

// Binary min-heap on (key, index); the same structure as replay/engine.py's.
class KeyHeap {
  public:
    explicit KeyHeap(std::size_t cap) { hk_.reserve(cap); hi_.reserve(cap); }
    bool empty() const { return hk_.empty(); }
    void push(std::int64_t key, std::int64_t idx) {
        std::size_t pos = hk_.size();
        hk_.push_back(key);
        hi_.push_back(idx);
        while (pos > 0) {
            std::size_t parent = (pos - 1) >> 1;
            if (less(parent, pos)) break;
            swap(parent, pos);
            pos = parent;
        }
    }
    std::int64_t pop() {
        std::int64_t idx = hi_[0];
        hk_[0] = hk_.back();
        hi_[0] = hi_.back();
        hk_.pop_back();
        hi_.pop_back();
        std::size_t size = hk_.size(), pos = 0;
        while (true) {
            std::size_t left = 2 * pos + 1;
            if (left >= size) break;
            std::size_t best = left, right = left + 1;
            if (right < size && less(right, left)) best = right;
            if (less(pos, best)) break;
            swap(pos, best);
            pos = best;
        }
        return idx;
    }

  private:
    bool less(std::size_t a, std::size_t b) const {
        return hk_[a] < hk_[b] || (hk_[a] == hk_[b] && hi_[a] < hi_[b]);
    }
    void swap(std::size_t a, std::size_t b) {
        std::swap(hk_[a], hk_[b]);
        std::swap(hi_[a], hi_[b]);
    }
    std::vector<std::int64_t> hk_, hi_;
};

// A message naming the ops of one dependency cycle among the nodes Kahn's algorithm could not
// place (super-node graph: edges between group representatives).
inline std::string describeCycle(const Graph &g, const Groups &gr, const std::vector<char> &placed) {
    const std::size_t n = g.n();
    // successor lists of unplaced representatives
    std::vector<std::int64_t> optr(n + 1, 0), odst;
    for (std::size_t i = 0; i < n; ++i)
        for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) {
            std::int64_t s = gr.rep[g.dep_src[e]];
            if (!placed[s]) ++optr[s + 1];
        }
    for (std::size_t i = 0; i < n; ++i) optr[i + 1] += optr[i];
    odst.resize(optr[n]);
    std::vector<std::int64_t> fill(optr.begin(), optr.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
        for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) {
            std::int64_t s = gr.rep[g.dep_src[e]];
            if (!placed[s]) odst[fill[s]++] = gr.rep[i];
        }
    // iterative DFS for a back edge
    std::vector<std::int8_t> color(n, 0);
    std::vector<std::int64_t> parent(n, -1), it(n, 0);
    std::size_t left = 0;
    std::int64_t firstLeft = -1;
    for (std::size_t r = 0; r < n; ++r) {
        if (placed[r] || gr.rep[r] != static_cast<std::int64_t>(r)) continue;
        ++left;
        if (firstLeft < 0) firstLeft = static_cast<std::int64_t>(r);
        if (color[r]) continue;
        std::vector<std::int64_t> stack{static_cast<std::int64_t>(r)};
        color[r] = 1;
        it[r] = optr[r];
        while (!stack.empty()) {
            std::int64_t u = stack.back();
            if (it[u] < optr[u + 1]) {
                std::int64_t v = odst[it[u]++];
                if (color[v] == 1) {  // cycle v -> ... -> u -> v
                    std::vector<std::int64_t> cyc{u};
                    while (cyc.back() != v) cyc.push_back(parent[cyc.back()]);
                    std::reverse(cyc.begin(), cyc.end());
                    std::string msg = "dependency cycle through " + std::to_string(cyc.size()) + " node(s): ";
                    for (std::size_t k = 0; k < cyc.size() && k < 6; ++k)
                        msg += (k ? " -> " : "") + g.nodeLabel(static_cast<std::size_t>(cyc[k]));
                    if (cyc.size() > 6) msg += " (+" + std::to_string(cyc.size() - 6) + " more)";
                    return msg;
                }
                if (color[v] == 0) {
                    color[v] = 1;
                    parent[v] = u;
                    it[v] = optr[v];
                    stack.push_back(v);
                }
            } else {
                color[u] = 2;
                stack.pop_back();
            }
        }
    }
    return std::to_string(left) + " node(s) can never start, first " +
           (firstLeft >= 0 ? g.nodeLabel(static_cast<std::size_t>(firstLeft)) : std::string("?"));
}

}  // namespace detail

// The engine's visiting order; throws GraphError naming the ops of a cycle.
// optrOut/odstOut (optional) receive the successors of every node by source, as their groups'
// representatives (CSR), which the scheduler reuses.
inline std::vector<std::int64_t> topologicalOrder(const Graph &g, const Groups &gr,
                                                  std::vector<std::int64_t> *optrOut = nullptr,
                                                  std::vector<std::int64_t> *odstOut = nullptr) {
    const std::size_t n = g.n();
    std::vector<std::int64_t> indeg(n, 0);
    for (std::size_t i = 0; i < n; ++i)
        for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) {
            std::int64_t s = g.dep_src[e];
            if (gr.rep[s] == gr.rep[i])
                throw GraphError("cycle: " + g.nodeLabel(static_cast<std::size_t>(s)) + " and " + g.nodeLabel(i) +
                                 " are in the same collective group but one depends on the other");
            ++indeg[gr.rep[i]];
        }
    // successors by source (order irrelevant: the heap order is total)
    std::vector<std::int64_t> optr(n + 1, 0), odst(g.numEdges());
    for (std::size_t k = 0; k < g.numEdges(); ++k) ++optr[g.dep_src[k] + 1];
    for (std::size_t i = 0; i < n; ++i) optr[i + 1] += optr[i];
    {
        std::vector<std::int64_t> fill(optr.begin(), optr.end() - 1);
        for (std::size_t i = 0; i < n; ++i)
            for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) odst[fill[g.dep_src[e]]++] = gr.rep[i];
    }
    detail::KeyHeap heap(n);
    for (std::size_t i = 0; i < n; ++i)
        if (gr.rep[i] == static_cast<std::int64_t>(i) && indeg[i] == 0) heap.push(g.order[i], static_cast<std::int64_t>(i));
    std::vector<std::int64_t> order;
    order.reserve(n);
    while (!heap.empty()) {
        std::int64_t r = heap.pop();
        for (std::int64_t m = gr.mem_ptr[r]; m < gr.mem_ptr[r + 1]; ++m) {
            std::int64_t node = gr.mem_idx[m];
            order.push_back(node);
            for (std::int64_t e = optr[node]; e < optr[node + 1]; ++e) {
                std::int64_t t = odst[e];
                if (--indeg[t] == 0) heap.push(g.order[t], t);
            }
        }
    }
    if (order.size() < n) {
        std::vector<char> placed(n, 0);
        for (std::int64_t i : order) placed[i] = 1;
        throw GraphError(detail::describeCycle(g, gr, placed));
    }
    if (optrOut) *optrOut = std::move(optr);
    if (odstOut) *odstOut = std::move(odst);
    return order;
}

namespace detail {

// Binary min-heap on (time, order key, index), the same structure as replay/engine.py's _ev_*:
// entries are (time, index); an index >= n is a pool-server return (of holder index - n), which
// goes before every node at the same time; nodes tie on their order key, then their index.
class EventHeap {
  public:
    EventHeap(const std::vector<std::int64_t> &okey, std::int64_t n, std::size_t cap) : okey_(&okey), n_(n) {
        hk_.reserve(cap);
        hi_.reserve(cap);
    }
    bool empty() const { return hk_.empty(); }
    void push(std::int64_t key, std::int64_t idx) {
        std::size_t pos = hk_.size();
        hk_.push_back(key);
        hi_.push_back(idx);
        while (pos > 0) {
            std::size_t parent = (pos - 1) >> 1;
            if (less(parent, pos)) break;
            swap(parent, pos);
            pos = parent;
        }
    }
    void pop(std::int64_t &key, std::int64_t &idx) {
        key = hk_[0];
        idx = hi_[0];
        hk_[0] = hk_.back();
        hi_[0] = hi_.back();
        hk_.pop_back();
        hi_.pop_back();
        std::size_t size = hk_.size(), pos = 0;
        while (true) {
            std::size_t left = 2 * pos + 1;
            if (left >= size) break;
            std::size_t best = left, right = left + 1;
            if (right < size && less(right, left)) best = right;
            if (less(pos, best)) break;
            swap(pos, best);
            pos = best;
        }
    }

  private:
    bool less(std::size_t a, std::size_t b) const {
        if (hk_[a] != hk_[b]) return hk_[a] < hk_[b];
        const std::int64_t ia = hi_[a], ib = hi_[b];
        if (ia >= n_ || ib >= n_) return (ia >= n_ && ib >= n_) ? ia < ib : ia >= n_;
        const std::int64_t oa = (*okey_)[ia], ob = (*okey_)[ib];
        if (oa != ob) return oa < ob;
        return ia < ib;
    }
    void swap(std::size_t a, std::size_t b) {
        std::swap(hk_[a], hk_[b]);
        std::swap(hi_[a], hi_[b]);
    }
    const std::vector<std::int64_t> *okey_;
    std::int64_t n_;
    std::vector<std::int64_t> hk_, hi_;
};

// The state of one event-driven pass (replay/engine.py's _schedule and its helpers).
class Pass {
  public:
    // optr/odst: successors by source as group representatives (from topologicalOrder)
    Pass(const Graph &g, const Groups &gr, const std::vector<std::int64_t> &issue, std::vector<std::int64_t> optr,
         std::vector<std::int64_t> odst, Schedule &s)
        : g_(g), gr_(gr), s_(s), n_(g.n()), L_(g.numLanes()), heap_(g.order, static_cast<std::int64_t>(g.n()), 0),
          optr_(std::move(optr)), odst_(std::move(odst)) {
        srv_ptr_.assign(L_ + 1, 0);
        for (std::size_t k = 0; k < L_; ++k) srv_ptr_[k + 1] = srv_ptr_[k] + g.lane_servers[k];
        free_.assign(static_cast<std::size_t>(srv_ptr_[L_]), 0);
        srv_last_.assign(static_cast<std::size_t>(srv_ptr_[L_]), -1);
        lane_last_.assign(L_, -1);
        pool_now_.assign(L_, kLow);
        held_.assign(L_, 0);
        size_.assign(L_, 0);
        for (std::size_t k = 0; k < L_; ++k) size_[k] = g.lane_servers[k];
        wait_head_.assign(L_, -1);
        wait_tail_.assign(L_, -1);
        wait_next_.assign(n_, -1);
        chosen_.assign(n_, 0);
        phase_.assign(n_, 0);
        // issue order of the in-order lanes: lane successor of each node, gates per group
        pending_.assign(n_, 0);
        lane_next_.assign(n_, -1);
        std::vector<std::int64_t> last(L_, -1);
        for (std::int64_t i : issue) {
            const std::int32_t ln = g.lane[i];
            if (ln < 0 || g.lane_shared[ln]) continue;
            const std::int64_t p = last[ln];
            if (p >= 0 && gr.rep[p] != gr.rep[i]) {
                lane_next_[p] = i;
                ++pending_[gr.rep[i]];
            }
            last[ln] = i;
        }
        for (std::size_t i = 0; i < n_; ++i)
            for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) ++pending_[gr.rep[i]];
        // holds, grouped by the node that returns them
        hold_ptr_.assign(n_ + 1, 0);
        std::size_t holds = 0;
        for (std::size_t i = 0; i < n_; ++i)
            if (g.hold_lane[i] >= 0) {
                ++hold_ptr_[g.hold_until[i] + 1];
                ++holds;
            }
        for (std::size_t i = 0; i < n_; ++i) hold_ptr_[i + 1] += hold_ptr_[i];
        hold_idx_.resize(holds);
        {
            std::vector<std::int64_t> fill(hold_ptr_.begin(), hold_ptr_.end() - 1);
            for (std::size_t i = 0; i < n_; ++i)
                if (g.hold_lane[i] >= 0) hold_idx_[fill[g.hold_until[i]]++] = static_cast<std::int64_t>(i);
        }
        heap_ = EventHeap(g.order, static_cast<std::int64_t>(n_), n_ + 2 * holds + 1);
        arm_.reserve(n_);
        now_.reserve(n_);
        s_.start.assign(n_, 0);
        s_.finish.assign(n_, 0);
        s_.crit_pred.assign(n_, -1);
        s_.bound_by.assign(n_, kBoundRelease);
        s_.slot_wait.assign(n_, 0);
        s_.order.clear();
        s_.order.reserve(n_);
    }

    void run() {
        for (std::size_t r = 0; r < n_; ++r)
            if (gr_.rep[r] == static_cast<std::int64_t>(r) && pending_[r] == 0) arm_.push_back(static_cast<std::int64_t>(r));
        while (true) {
            while (!arm_.empty()) {
                const std::int64_t r = arm_.back();
                arm_.pop_back();
                queue(r);
            }
            std::int64_t t, idx;
            if (!now_.empty()) {
                idx = now_.back();
                now_.pop_back();
                t = s_.start[idx];
            } else if (heap_.empty()) {
                if (!breakDeadlock()) break;
                continue;
            } else {
                heap_.pop(t, idx);
            }
            if (idx >= static_cast<std::int64_t>(n_)) {
                serverReturned(t, idx - static_cast<std::int64_t>(n_));
                continue;
            }
            const std::int64_t r = idx;
            const std::int64_t first = gr_.mem_ptr[r];
            const std::int64_t count = gr_.mem_ptr[r + 1] - first;
            if (count == 1) {
                if (!placeOne(r, t)) continue;
            } else {
                placeGroup(first, count);
            }
            for (std::int64_t m = first; m < first + count; ++m) {
                const std::int64_t i = gr_.mem_idx[m];
                phase_[i] = 3;
                s_.order.push_back(i);
            }
            for (std::int64_t m = first; m < first + count; ++m) release(gr_.mem_idx[m]);
        }
        s_.lane_servers = size_;
        if (errNode_ >= 0)
            throw GraphError(g_.nodeLabel(static_cast<std::size_t>(errNode_)) +
                             " returns a pool server (bounce slot) that a node it does not depend on has not taken yet");
        if (s_.order.size() < n_) {
            std::vector<char> placed(n_, 0);
            for (std::int64_t i : s_.order) placed[i] = 1;
            std::size_t firstLeft = 0;
            while (placed[firstLeft]) ++firstLeft;
            throw GraphError(std::to_string(n_ - s_.order.size()) + " node(s) can never start, first " +
                             g_.nodeLabel(firstLeft));
        }
    }

  private:
    static constexpr std::int64_t kLow = INT64_MIN;

    std::int64_t earliestServer(std::int32_t ln) const {
        std::int64_t best = srv_ptr_[ln];
        for (std::int64_t sv = srv_ptr_[ln] + 1; sv < srv_ptr_[ln + 1]; ++sv)
            if (free_[sv] < free_[best]) best = sv;
        return best;
    }

    // when node i may start (replay/engine.py, the queueing loop); kept in start[i] until it is placed
    void ready(std::int64_t i) {
        std::int64_t t = g_.release[i];
        std::int64_t p = -1;
        std::int8_t b = kBoundRelease;
        const std::int32_t ln = g_.lane[i];
        const bool single = ln >= 0 && !g_.lane_shared[ln] && srv_ptr_[ln + 1] - srv_ptr_[ln] == 1;
        bool explicitStream = false;
        const auto launch = static_cast<std::uint8_t>(DepKind::Launch);
        const auto stream = static_cast<std::uint8_t>(DepKind::Stream);
        for (std::int64_t e = g_.dep_ptr[i]; e < g_.dep_ptr[i + 1]; ++e) {
            const std::int64_t src = g_.dep_src[e];
            const std::int64_t c = (g_.dep_kind[e] == launch ? s_.start[src] : s_.finish[src]) + g_.dep_lag[e];
            if (c > t || (p < 0 && c == t)) {
                t = c;
                p = src;
                b = static_cast<std::int8_t>(g_.dep_kind[e]);
            }
            if (single && g_.dep_kind[e] == stream && src == srv_last_[srv_ptr_[ln]]) explicitStream = true;
        }
        if (ln >= 0 && !g_.lane_shared[ln]) {
            const std::int64_t best = earliestServer(ln);
            chosen_[i] = best;
            if (!explicitStream) {
                if (free_[best] > t) {
                    t = free_[best];
                    p = srv_last_[best];
                    b = kBoundLane;
                }
                const std::int64_t prev = lane_last_[ln];
                if (prev >= 0 && s_.start[prev] > t) {
                    t = s_.start[prev];
                    p = prev;
                    b = kBoundLane;
                }
            }
        }
        s_.start[i] = t;
        s_.crit_pred[i] = p;
        s_.bound_by[i] = b;
    }

    // Group r's prerequisites are all placed: when may each member start. A single node on an
    // in-order lane or none, holding nothing, is placed next (nothing else uses its lane
    // meanwhile); anything else goes to the heap.
    void queue(std::int64_t r) {
        std::int64_t key = kLow;
        for (std::int64_t m = gr_.mem_ptr[r]; m < gr_.mem_ptr[r + 1]; ++m) {
            const std::int64_t i = gr_.mem_idx[m];
            ready(i);
            if (s_.start[i] > key) key = s_.start[i];
        }
        const std::int64_t i = gr_.mem_idx[gr_.mem_ptr[r]];
        const std::int32_t ln = g_.lane[i];
        if (gr_.mem_ptr[r + 1] - gr_.mem_ptr[r] == 1 && g_.hold_lane[i] < 0 && (ln < 0 || !g_.lane_shared[ln]))
            now_.push_back(r);
        else
            heap_.push(key, r);
    }

    void arrive(std::int64_t r) {
        if (--pending_[r] == 0) arm_.push_back(r);
    }

    void popWaiter(std::int32_t pl, std::int64_t &w) {
        w = wait_head_[pl];
        wait_head_[pl] = wait_next_[w];
        if (wait_head_[pl] < 0) wait_tail_[pl] = -1;
    }

    bool breakDeadlock() {
        for (std::size_t k = 0; k < L_; ++k) {
            if (wait_head_[k] < 0) continue;
            std::int64_t w;
            popWaiter(static_cast<std::int32_t>(k), w);
            ++size_[k];
            ++held_[k];
            phase_[w] = 2;
            heap_.push(s_.start[w], w);
            return true;
        }
        return false;
    }

    void serverReturned(std::int64_t t, std::int64_t holder) {
        const std::int32_t pl = g_.hold_lane[holder];
        if (t > pool_now_[pl]) pool_now_[pl] = t;
        t = pool_now_[pl];
        --held_[pl];
        if (wait_head_[pl] < 0) return;
        std::int64_t w;
        popWaiter(pl, w);
        ++held_[pl];
        phase_[w] = 2;
        heap_.push(std::max(t, s_.start[w]), w);
    }

    // Returns false when the node now waits for a pool server.
    bool placeOne(std::int64_t i, std::int64_t t) {
        const std::int32_t pl = g_.hold_lane[i];
        if (pl >= 0 && phase_[i] != 2) {
            if (t < pool_now_[pl]) t = pool_now_[pl];
            pool_now_[pl] = t;
            if (held_[pl] < size_[pl]) {
                ++held_[pl];
            } else if (size_[pl] < g_.lane_max_servers[pl]) {
                size_[pl] = std::min<std::int64_t>(2 * size_[pl], g_.lane_max_servers[pl]);
                ++held_[pl];
            } else {
                phase_[i] = 1;
                if (wait_tail_[pl] >= 0)
                    wait_next_[wait_tail_[pl]] = i;
                else
                    wait_head_[pl] = i;
                wait_tail_[pl] = i;
                return false;
            }
            phase_[i] = 2;
        }
        std::int64_t st = t;
        const std::int32_t ln = g_.lane[i];
        if (ln >= 0 && g_.lane_shared[ln]) {
            const std::int64_t best = earliestServer(ln);
            chosen_[i] = best;
            if (free_[best] > st) {
                st = free_[best];
                s_.crit_pred[i] = srv_last_[best];
                s_.bound_by[i] = kBoundLane;
            }
        }
        if (st == t && t > s_.start[i]) s_.slot_wait[i] = t - s_.start[i];
        s_.start[i] = st;
        s_.finish[i] = st + g_.dur[i];
        if (ln >= 0) occupy(i, ln);
        return true;
    }

    void placeGroup(std::int64_t first, std::int64_t count) {
        std::int64_t gstart = kLow, gbind = -1;
        for (std::int64_t m = first; m < first + count; ++m) {
            const std::int64_t i = gr_.mem_idx[m];
            std::int64_t st = s_.start[i];
            const std::int32_t ln = g_.lane[i];
            if (ln >= 0 && g_.lane_shared[ln]) {
                const std::int64_t best = earliestServer(ln);
                chosen_[i] = best;
                if (free_[best] > st) {
                    st = free_[best];
                    s_.crit_pred[i] = srv_last_[best];
                    s_.bound_by[i] = kBoundLane;
                }
            }
            s_.start[i] = st;
            if (st > gstart) {
                gstart = st;
                gbind = i;
            }
        }
        for (std::int64_t m = first; m < first + count; ++m) {
            const std::int64_t i = gr_.mem_idx[m];
            if (s_.start[i] < gstart) {
                s_.start[i] = gstart;
                s_.crit_pred[i] = gbind;
                s_.bound_by[i] = kBoundGroup;
            }
            s_.finish[i] = s_.start[i] + g_.dur[i];
            if (g_.lane[i] >= 0) occupy(i, g_.lane[i]);
        }
    }

    void occupy(std::int64_t i, std::int32_t ln) {
        const std::int64_t sv = chosen_[i];
        if (s_.finish[i] > free_[sv]) free_[sv] = s_.finish[i];
        srv_last_[sv] = i;
        lane_last_[ln] = i;
    }

    // node i is placed: return the pool servers it frees, then queue what it was the last
    // prerequisite of
    void release(std::int64_t i) {
        for (std::int64_t h = hold_ptr_[i]; h < hold_ptr_[i + 1]; ++h) {
            const std::int64_t a = hold_idx_[h];
            if (phase_[a] != 3) {
                if (errNode_ < 0) errNode_ = i;
                continue;
            }
            heap_.push(std::max(s_.finish[i], s_.start[a]), static_cast<std::int64_t>(n_) + a);
        }
        for (std::int64_t e = optr_[i]; e < optr_[i + 1]; ++e) arrive(odst_[e]);
        if (lane_next_[i] >= 0) arrive(gr_.rep[lane_next_[i]]);
    }

    const Graph &g_;
    const Groups &gr_;
    Schedule &s_;
    std::size_t n_, L_;
    EventHeap heap_;
    std::vector<std::int64_t> srv_ptr_, free_, srv_last_, lane_last_, pool_now_, held_, size_;
    std::vector<std::int64_t> wait_head_, wait_tail_, wait_next_, chosen_;
    std::vector<std::int8_t> phase_;  // 0 waiting, 1 asked for a pool server, 2 holds it, 3 placed
    std::vector<std::int64_t> optr_, odst_, pending_, lane_next_, hold_ptr_, hold_idx_;
    std::vector<std::int64_t> arm_;  // groups whose prerequisites are all placed, to be queued
    std::vector<std::int64_t> now_;  // nodes placed before the heap (their start is known)
    std::int64_t errNode_ = -1;
};

}  // namespace detail

// Replay a validated graph. Deterministic; bit-exact with replay.engine.schedule.
inline Schedule schedule(const Graph &g) {
    const Groups gr = barrierGroups(g);
    Schedule s;
    std::vector<std::int64_t> optr, odst;
    const std::vector<std::int64_t> issue = topologicalOrder(g, gr, &optr, &odst);
    detail::Pass pass(g, gr, issue, std::move(optr), std::move(odst), s);
    pass.run();
    return s;
}

}  // namespace fastrack
