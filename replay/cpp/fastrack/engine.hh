// Fastrack core: the replay scheduler, bit-exact with replay/pipeline/engine.py's numba fallback.
//
//   ready[i]  = max(release[i], max over deps: finish[src] + lag  (start[src] + lag for LAUNCH))
//   start[i]  = max(ready[i], a free server of lane[i], a free server of the pool it holds)
//   finish[i] = start[i] + dur[i]
//
// * Issue order: Kahn's algorithm over super-nodes (a barrier group contracted to its
//   lowest-index member), a binary min-heap keyed by (order key of the representative, index);
//   it also detects cycles. An in-order lane (lane_shared == 0: streams, host threads) serves its
//   nodes in issue order: a node is queued only once its lane predecessor is placed, and starts
//   no earlier than that node started.
// * One event-driven pass places the nodes: a binary min-heap keyed by (time, order key, index)
//   holds the nodes whose prerequisites are all placed, at the time they may start. A shared lane
//   is work-conserving: the popped node takes its earliest free server (lowest index on ties).
// * Pools (hold_lane / hold_until): a node takes a server of its pool when popped (the pool
//   doubles up to lane_max_servers when every server is held, else the node waits) and returns it
//   when node hold_until finishes (a heap event that goes before nodes at that time); a returned
//   server goes to the longest-waiting request. If every unplaced node ends up waiting on a pool,
//   the pool grows by one for its first waiter, granted when it asked.
// * An explicit STREAM edge from the node last served on a single-server in-order lane replaces
//   the lane constraint (negative lags reproduce measured overlap).
// * Group members start together at the latest of their individual starts; the lanes they use
//   are updated only after the whole group has been placed.
// Integer nanoseconds throughout; ties broken exactly as the Python engine does, including the
// choice of the binding prerequisite (crit_pred / bound_by) and slot waits (slot_wait).
//
// Two layers. The algorithms (scheduleView, topologicalOrderView, acyclicView) read a GraphView
// (view.hh: arrays owned by the caller), write into output spans the caller allocated, and
// report problems as an Outcome (a status code and the node or edge concerned), so that the
// Python extension (replay/cpp/engine_module.cpp) raises the Python engine's own messages. Their
// working arrays hold indices as 32-bit integers when the graph is small enough (the usual case;
// half the memory), else 64-bit. The owning layer (schedule, topologicalOrder on a Graph) is
// what the standalone driver and the gem5 extension call; it throws GraphError with messages.
#pragma once

#include <algorithm>
#include <functional>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "graph.hh"
#include "view.hh"

namespace fastrack {

constexpr std::int8_t kBoundRelease = -1;
constexpr std::int8_t kBoundLane = -2;
constexpr std::int8_t kBoundGroup = -3;

// A schedule owned by the caller of schedule(const Graph &).
struct Schedule {
    std::vector<std::int64_t> start;
    std::vector<std::int64_t> finish;
    std::vector<NodeIndex> crit_pred;
    std::vector<std::int8_t> bound_by;
    std::vector<NodeIndex> order;            // the order in which nodes were placed
    std::vector<std::int64_t> slot_wait;     // ns the start waited for a pool server (0 if that did not bind)
    std::vector<std::int64_t> lane_servers;  // per lane: servers at the end (a pool's size after growing)
};

// Where scheduleView writes: n entries each, lane_servers L. Contents on entry do not matter.
struct ScheduleOut {
    Span<std::int64_t> start, finish;
    Span<NodeIndex> crit_pred;
    Span<std::int8_t> bound_by;
    Span<NodeIndex> order;
    Span<std::int64_t> slot_wait, lane_servers;
};

enum class Status : int {
    Ok = 0,
    GroupEdge = 1,   // edge ``where`` (CSR index) joins two members of one barrier group
    Cycle = 2,       // the issue order stops after ``placed`` nodes (written to the order output)
    PoolReturn = 3,  // node ``where`` returns a pool server its holder has not taken yet
    Stuck = 4,       // the pass placed ``placed`` nodes (the order output) and no more
};

struct Outcome {
    Status status = Status::Ok;
    std::int64_t where = -1;
    std::size_t placed = 0;
};

namespace detail {

// Whether 32-bit working indices hold every index of the pass (nodes, n + holder for pool
// returns, edges, servers).
inline bool fitsInt32(const GraphView &g) {
    constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
    std::uint64_t servers = 0;
    for (std::size_t k = 0; k < g.numLanes(); ++k) servers += static_cast<std::uint64_t>(g.lane_servers[k]);
    return 2 * static_cast<std::uint64_t>(g.n()) + 2 < kMax && g.numEdges() < kMax && servers < kMax;
}

// Barrier groups: representative (lowest-index member) per node, and members CSR by
// representative (members in index order). Without groups nothing is stored: every node is its
// own representative.
template <typename I>
class Groups {
  public:
    explicit Groups(Span<const std::int32_t> group) {
        const std::size_t n = group.size;
        std::vector<I> grouped;
        for (std::size_t i = 0; i < n; ++i)
            if (group[i] >= 0) grouped.push_back(static_cast<I>(i));
        if (grouped.empty()) return;
        any_ = true;
        std::stable_sort(grouped.begin(), grouped.end(), [&](I a, I b) { return group[a] < group[b]; });
        rep_.resize(n);
        for (std::size_t i = 0; i < n; ++i) rep_[i] = static_cast<I>(i);
        I first = grouped[0];
        for (std::size_t k = 0; k < grouped.size(); ++k) {
            if (k > 0 && group[grouped[k]] != group[grouped[k - 1]]) first = grouped[k];
            rep_[static_cast<std::size_t>(grouped[k])] = first;
        }
        std::vector<I>().swap(grouped);
        ptr_.assign(n + 1, 0);
        for (std::size_t i = 0; i < n; ++i) ++ptr_[static_cast<std::size_t>(rep_[i]) + 1];
        for (std::size_t i = 0; i < n; ++i) ptr_[i + 1] = static_cast<I>(ptr_[i + 1] + ptr_[i]);
        idx_.resize(n);
        std::vector<I> fill(ptr_.begin(), ptr_.end() - 1);
        for (std::size_t i = 0; i < n; ++i) idx_[static_cast<std::size_t>(fill[rep_[i]]++)] = static_cast<I>(i);
    }
    std::int64_t rep(std::int64_t i) const { return any_ ? static_cast<std::int64_t>(rep_[i]) : i; }
    std::int64_t begin(std::int64_t r) const { return any_ ? static_cast<std::int64_t>(ptr_[r]) : r; }
    std::int64_t end(std::int64_t r) const { return any_ ? static_cast<std::int64_t>(ptr_[r + 1]) : r + 1; }
    std::int64_t member(std::int64_t m) const { return any_ ? static_cast<std::int64_t>(idx_[m]) : m; }

  private:
    bool any_ = false;
    std::vector<I> rep_, ptr_, idx_;
};

// Binary min-heap of (key, index) entries, ordered by ``Before`` (the same structure as the
// numba engine's heaps): KeyHeap and EventHeap differ only in how entries compare.
template <typename I, typename Before>
class IndexHeap {
  public:
    explicit IndexHeap(Before before = Before()) : before_(before) {}
    bool empty() const { return hk_.empty(); }
    void push(std::int64_t key, std::int64_t idx) {
        std::size_t pos = hk_.size();
        hk_.push_back(key);
        hi_.push_back(static_cast<I>(idx));
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
    std::int64_t pop() {  // the index of the first entry
        std::int64_t key, idx;
        pop(key, idx);
        return idx;
    }

  private:
    bool less(std::size_t a, std::size_t b) const { return before_(hk_[a], hi_[a], hk_[b], hi_[b]); }
    void swap(std::size_t a, std::size_t b) {
        std::swap(hk_[a], hk_[b]);
        std::swap(hi_[a], hi_[b]);
    }
    Before before_;
    std::vector<std::int64_t> hk_;
    std::vector<I> hi_;
};

// (key, index): by key, then index.
struct KeyThenIndex {
    bool operator()(std::int64_t ka, std::int64_t ia, std::int64_t kb, std::int64_t ib) const {
        return ka < kb || (ka == kb && ia < ib);
    }
};

template <typename I>
using KeyHeap = IndexHeap<I, KeyThenIndex>;

// (time, index): an index >= n is a pool-server return (of holder index - n), which goes before
// every node at the same time; nodes tie on their order key, then their index.
struct EventOrder {
    Span<const std::int64_t> okey;
    std::int64_t n;
    bool operator()(std::int64_t ka, std::int64_t ia, std::int64_t kb, std::int64_t ib) const {
        if (ka != kb) return ka < kb;
        if (ia >= n || ib >= n) return (ia >= n && ib >= n) ? ia < ib : ia >= n;
        const std::int64_t oa = okey[ia], ob = okey[ib];
        if (oa != ob) return oa < ob;
        return ia < ib;
    }
};

template <typename I>
using EventHeap = IndexHeap<I, EventOrder>;

// What the issue order leaves to the pass: the successors of every node by source, as their
// groups' representatives (CSR), and, per in-order lane, the node that follows each one
// (lane_next) with the count of lane predecessors per group (pending).
template <typename I>
struct Topology {
    std::vector<I> optr, odst, lane_next, pending;
};

// The nodes in (order key, index) order: ``perm[p]`` is the node of rank p, ``pos`` its inverse.
// That order is the issue heap's (keys tie by index), so a node's rank is a key for the heap on
// its own. A stable LSD radix sort on the keys (as unsigned offsets from the smallest), one pass
// per byte that varies: linear, and a few passes for real traces (keys are nanoseconds).
template <typename I>
void keyRanks(Span<const std::int64_t> order, std::vector<I> &perm, std::vector<I> &pos) {
    const std::size_t n = order.size;
    perm.resize(n);
    pos.resize(n);
    if (n == 0) return;
    std::int64_t lo = order[0];
    for (std::size_t i = 1; i < n; ++i) lo = std::min(lo, order[i]);
    std::vector<std::uint64_t> key(n), key2(n);
    std::uint64_t any = 0;
    for (std::size_t i = 0; i < n; ++i) {
        key[i] = static_cast<std::uint64_t>(order[i]) - static_cast<std::uint64_t>(lo);
        any |= key[i];
        perm[i] = static_cast<I>(i);
    }
    std::vector<I> perm2(n);
    for (int shift = 0; shift < 64 && (any >> shift) != 0; shift += 8) {
        if (((any >> shift) & 0xFF) == 0) continue;  // every key has this byte zero
        std::size_t count[257] = {0};
        for (std::size_t k = 0; k < n; ++k) ++count[((key[k] >> shift) & 0xFF) + 1];
        for (int d = 0; d < 256; ++d) count[d + 1] += count[d];
        for (std::size_t k = 0; k < n; ++k) {
            const std::size_t at = count[(key[k] >> shift) & 0xFF]++;
            key2[at] = key[k];
            perm2[at] = perm[k];
        }
        key.swap(key2);
        perm.swap(perm2);
    }
    for (std::size_t p = 0; p < n; ++p) pos[static_cast<std::size_t>(perm[p])] = static_cast<I>(p);
}

// Whether issueOrder renumbers the nodes for its loop (below): when the graph has many lanes,
// i.e. many ranks, whose nodes the order-key order interleaves. On a few ranks consecutive pops
// are already neighbours in index order and renumbering would cost more than it saves. The
// result is the same either way.
constexpr std::size_t kRenumberMinLanes = 4096;

// Kahn's algorithm over super-nodes; writes the issue order to ``issue`` (n entries). With
// ``topo`` it also fills the successors and the in-order lanes' issue chains for the pass.
//
// Memory layout: the heap pops nodes in order-key order. On a trace of many ranks (nodes
// numbered rank by rank, each rank bringing its own lanes) that order jumps across the whole node
// range at every pop, and each access by node index in the loop is a cache miss on its critical
// path. With kRenumberMinLanes lanes or more the loop therefore runs on the nodes renumbered by
// their rank in the heap's own order (keyRanks: the pops, and so the issue order, are the same),
// where consecutive pops are mostly neighbours; the renumbered arrays are gathered from the ones
// by node index in passes whose loads do not wait on each other. The in-order lanes' chains, a
// function of the issue sequence alone, are built afterwards in one pass over it.
template <typename I>
Outcome issueOrder(const GraphView &g, const Groups<I> &gr, Span<NodeIndex> issue, Topology<I> *topo) {
    const std::size_t n = g.n(), E = g.numEdges();
    Outcome out;
    std::vector<I> indeg(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t ri = gr.rep(static_cast<std::int64_t>(i));
        for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) {
            if (gr.rep(g.dep_src[e]) == ri) {
                out.status = Status::GroupEdge;
                out.where = e;
                return out;
            }
            ++indeg[ri];
        }
    }
    // successors by source, each source's in the order of their dependents: the heap order is
    // total, but the pass queues a node's successors in this order
    std::vector<I> optr(n + 1, 0), odst(E);
    for (std::size_t k = 0; k < E; ++k) ++optr[g.dep_src[k] + 1];
    for (std::size_t i = 0; i < n; ++i) optr[i + 1] = static_cast<I>(optr[i + 1] + optr[i]);
    {
        std::vector<I> fill(optr.begin(), optr.end() - 1);
        for (std::size_t i = 0; i < n; ++i) {
            const I ri = static_cast<I>(gr.rep(static_cast<std::int64_t>(i)));
            for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) odst[fill[g.dep_src[e]]++] = ri;
        }
    }
    std::size_t placed = 0;
    if (g.numLanes() >= kRenumberMinLanes) {
        std::vector<I> perm, pos;
        keyRanks<I>(g.order, perm, pos);
        // by rank p: the in-degree, and the successors as ranks (CSR)
        std::vector<I> rdeg(n), rptr(n + 1), rdst(E);
        rptr[0] = 0;
        for (std::size_t p = 0; p < n; ++p) {
            const std::size_t i = static_cast<std::size_t>(perm[p]);
            rdeg[p] = indeg[i];
            rptr[p + 1] = static_cast<I>(rptr[p] + (optr[i + 1] - optr[i]));
        }
        std::vector<I>().swap(indeg);
        for (std::size_t p = 0; p < n; ++p) {
            const std::size_t i = static_cast<std::size_t>(perm[p]);
            I at = rptr[p];
            for (I e = optr[i]; e < optr[i + 1]; ++e) rdst[static_cast<std::size_t>(at++)] = pos[odst[e]];
        }
        std::vector<I> heap;  // a binary min-heap of ranks (distinct: any min-heap pops them alike)
        const auto after = [](I a, I b) { return a > b; };
        for (std::size_t p = 0; p < n; ++p) {
            const std::int64_t i = perm[p];
            if (gr.rep(i) == i && rdeg[p] == 0) heap.push_back(static_cast<I>(p));
        }
        std::make_heap(heap.begin(), heap.end(), after);
        while (!heap.empty()) {
            std::pop_heap(heap.begin(), heap.end(), after);
            const I p = heap.back();
            heap.pop_back();
            const std::int64_t r = perm[static_cast<std::size_t>(p)];
            for (std::int64_t m = gr.begin(r); m < gr.end(r); ++m) {
                const std::int64_t node = gr.member(m);
                issue[placed++] = static_cast<NodeIndex>(node);
                const std::size_t q = node == r ? static_cast<std::size_t>(p) : static_cast<std::size_t>(pos[node]);
                for (I e = rptr[q]; e < rptr[q + 1]; ++e) {
                    const I t = rdst[static_cast<std::size_t>(e)];
                    if (--rdeg[static_cast<std::size_t>(t)] == 0) {
                        heap.push_back(t);
                        std::push_heap(heap.begin(), heap.end(), after);
                    }
                }
            }
        }
    } else {
        KeyHeap<I> heap;
        for (std::size_t i = 0; i < n; ++i)
            if (gr.rep(static_cast<std::int64_t>(i)) == static_cast<std::int64_t>(i) && indeg[i] == 0)
                heap.push(g.order[i], static_cast<std::int64_t>(i));
        while (!heap.empty()) {
            const std::int64_t r = heap.pop();
            for (std::int64_t m = gr.begin(r); m < gr.end(r); ++m) {
                const std::int64_t node = gr.member(m);
                issue[placed++] = static_cast<NodeIndex>(node);
                for (std::int64_t e = optr[node]; e < optr[node + 1]; ++e) {
                    const I t = odst[e];
                    if (--indeg[t] == 0) heap.push(g.order[t], t);
                }
            }
        }
    }
    out.placed = placed;
    if (placed < n) {
        out.status = Status::Cycle;
        return out;
    }
    if (topo) {  // the in-order lanes serve in the issue order
        std::vector<I> lane_next(n, -1), pending(n, 0), last(g.numLanes(), -1);
        for (std::size_t k = 0; k < n; ++k) {
            const std::int64_t node = issue[k];
            const std::int32_t ln = g.lane[node];
            if (ln >= 0 && !g.lane_shared[ln]) {
                const std::int64_t prev = last[ln];
                if (prev >= 0 && gr.rep(prev) != gr.rep(node)) {
                    lane_next[prev] = static_cast<I>(node);
                    ++pending[gr.rep(node)];
                }
                last[ln] = static_cast<I>(node);
            }
        }
        topo->optr = std::move(optr);
        topo->odst = std::move(odst);
        topo->lane_next = std::move(lane_next);
        topo->pending = std::move(pending);
    }
    return out;
}

// The holders of pool servers, grouped by the node that returns their server (CSR: ptr n + 1,
// idx); both stay empty without holds.
template <typename I>
void holdsByReturner(const GraphView &g, std::vector<I> &ptr, std::vector<I> &idx) {
    const std::size_t n = g.n();
    std::size_t holds = 0;
    for (std::size_t i = 0; i < n; ++i) holds += g.hold_lane[i] >= 0;
    if (!holds) return;
    ptr.assign(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i)
        if (g.hold_lane[i] >= 0) ++ptr[g.hold_until[i] + 1];
    for (std::size_t i = 0; i < n; ++i) ptr[i + 1] = static_cast<I>(ptr[i + 1] + ptr[i]);
    idx.resize(holds);
    std::vector<I> fill(ptr.begin(), ptr.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
        if (g.hold_lane[i] >= 0) idx[fill[g.hold_until[i]]++] = static_cast<I>(i);
}

// The state of one event-driven pass (the numba engine's _schedule and its helpers).
template <typename I>
class Pass {
  public:
    Pass(const GraphView &g, const Groups<I> &gr, Topology<I> &&topo, const ScheduleOut &s)
        : g_(g), gr_(gr), s_(s), n_(g.n()), L_(g.numLanes()), heap_(EventOrder{g.order, static_cast<std::int64_t>(g.n())}),
          optr_(std::move(topo.optr)), odst_(std::move(topo.odst)), pending_(std::move(topo.pending)),
          lane_next_(std::move(topo.lane_next)) {
        srv_ptr_.assign(L_ + 1, 0);
        for (std::size_t k = 0; k < L_; ++k) srv_ptr_[k + 1] = srv_ptr_[k] + g.lane_servers[k];
        free_.assign(static_cast<std::size_t>(srv_ptr_[L_]), 0);
        srv_last_.assign(static_cast<std::size_t>(srv_ptr_[L_]), -1);
        lane_last_.assign(L_, -1);
        pool_now_.assign(L_, kLow);
        held_.assign(L_, 0);
        for (std::size_t k = 0; k < L_; ++k) s_.lane_servers[k] = g.lane_servers[k];
        wait_head_.assign(L_, -1);
        wait_tail_.assign(L_, -1);
        wait_next_.assign(n_, -1);
        chosen_.assign(n_, 0);
        phase_.assign(n_, 0);
        for (std::size_t i = 0; i < n_; ++i)
            pending_[gr.rep(static_cast<std::int64_t>(i))] =
                static_cast<I>(pending_[gr.rep(static_cast<std::int64_t>(i))] + (g.dep_ptr[i + 1] - g.dep_ptr[i]));
        holdsByReturner(g, hold_ptr_, hold_idx_);
        for (std::size_t i = 0; i < n_; ++i) {
            s_.start[i] = 0;
            s_.finish[i] = 0;
            s_.crit_pred[i] = -1;
            s_.bound_by[i] = kBoundRelease;
            s_.slot_wait[i] = 0;
        }
    }

    Outcome run() {
        for (std::size_t r = 0; r < n_; ++r)
            if (gr_.rep(static_cast<std::int64_t>(r)) == static_cast<std::int64_t>(r) && pending_[r] == 0)
                arm_.push_back(static_cast<I>(r));
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
            const std::int64_t first = gr_.begin(r), end = gr_.end(r);
            if (end - first == 1) {
                if (!placeOne(r, t)) continue;
            } else {
                placeGroup(first, end);
            }
            for (std::int64_t m = first; m < end; ++m) {
                const std::int64_t i = gr_.member(m);
                phase_[i] = 3;
                s_.order[placed_++] = static_cast<NodeIndex>(i);
            }
            for (std::int64_t m = first; m < end; ++m) release(gr_.member(m));
        }
        Outcome out;
        out.placed = placed_;
        if (errNode_ >= 0) {
            out.status = Status::PoolReturn;
            out.where = errNode_;
        } else if (placed_ < n_) {
            out.status = Status::Stuck;
        }
        return out;
    }

  private:
    static constexpr std::int64_t kLow = std::numeric_limits<std::int64_t>::min();

    std::int64_t earliestServer(std::int32_t ln) const {
        std::int64_t best = srv_ptr_[ln];
        for (std::int64_t sv = srv_ptr_[ln] + 1; sv < srv_ptr_[ln + 1]; ++sv)
            if (free_[sv] < free_[best]) best = sv;
        return best;
    }

    // when node i may start (the numba engine's queueing loop); kept in start[i] until it is placed
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
            chosen_[i] = static_cast<I>(best);
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
        s_.crit_pred[i] = static_cast<NodeIndex>(p);
        s_.bound_by[i] = b;
    }

    // Group r's prerequisites are all placed: when may each member start. A single node on an
    // in-order lane or none, holding nothing, is placed next (nothing else uses its lane
    // meanwhile); anything else goes to the heap.
    void queue(std::int64_t r) {
        std::int64_t key = kLow;
        const std::int64_t first = gr_.begin(r), end = gr_.end(r);
        for (std::int64_t m = first; m < end; ++m) {
            const std::int64_t i = gr_.member(m);
            ready(i);
            if (s_.start[i] > key) key = s_.start[i];
        }
        const std::int64_t i = gr_.member(first);
        const std::int32_t ln = g_.lane[i];
        if (end - first == 1 && g_.hold_lane[i] < 0 && (ln < 0 || !g_.lane_shared[ln]))
            now_.push_back(static_cast<I>(r));
        else
            heap_.push(key, r);
    }

    void arrive(std::int64_t r) {
        if (--pending_[r] == 0) arm_.push_back(static_cast<I>(r));
    }

    std::int64_t popWaiter(std::size_t pl) {
        const std::int64_t w = wait_head_[pl];
        wait_head_[pl] = wait_next_[w];
        if (wait_head_[pl] < 0) wait_tail_[pl] = -1;
        return w;
    }

    bool breakDeadlock() {
        for (std::size_t k = 0; k < L_; ++k) {
            if (wait_head_[k] < 0) continue;
            const std::int64_t w = popWaiter(k);
            ++s_.lane_servers[k];
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
        const std::int64_t w = popWaiter(static_cast<std::size_t>(pl));
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
            std::int64_t &size = s_.lane_servers[pl];
            if (held_[pl] < size) {
                ++held_[pl];
            } else if (size < g_.lane_max_servers[pl]) {
                size = std::min<std::int64_t>(2 * size, g_.lane_max_servers[pl]);
                ++held_[pl];
            } else {
                phase_[i] = 1;
                wait_next_[i] = -1;
                if (wait_tail_[pl] >= 0)
                    wait_next_[wait_tail_[pl]] = static_cast<I>(i);
                else
                    wait_head_[pl] = static_cast<I>(i);
                wait_tail_[pl] = static_cast<I>(i);
                return false;
            }
            phase_[i] = 2;
        }
        std::int64_t st = t;
        const std::int32_t ln = g_.lane[i];
        if (ln >= 0 && g_.lane_shared[ln]) {
            const std::int64_t best = earliestServer(ln);
            chosen_[i] = static_cast<I>(best);
            if (free_[best] > st) {
                st = free_[best];
                s_.crit_pred[i] = static_cast<NodeIndex>(srv_last_[best]);
                s_.bound_by[i] = kBoundLane;
            }
        }
        if (st == t && t > s_.start[i]) s_.slot_wait[i] = t - s_.start[i];
        s_.start[i] = st;
        s_.finish[i] = st + g_.dur[i];
        if (ln >= 0) occupy(i, ln);
        return true;
    }

    void placeGroup(std::int64_t first, std::int64_t end) {
        std::int64_t gstart = kLow, gbind = -1;
        for (std::int64_t m = first; m < end; ++m) {
            const std::int64_t i = gr_.member(m);
            std::int64_t st = s_.start[i];
            const std::int32_t ln = g_.lane[i];
            if (ln >= 0 && g_.lane_shared[ln]) {
                const std::int64_t best = earliestServer(ln);
                chosen_[i] = static_cast<I>(best);
                if (free_[best] > st) {
                    st = free_[best];
                    s_.crit_pred[i] = static_cast<NodeIndex>(srv_last_[best]);
                    s_.bound_by[i] = kBoundLane;
                }
            }
            s_.start[i] = st;
            if (st > gstart) {
                gstart = st;
                gbind = i;
            }
        }
        for (std::int64_t m = first; m < end; ++m) {
            const std::int64_t i = gr_.member(m);
            if (s_.start[i] < gstart) {
                s_.start[i] = gstart;
                s_.crit_pred[i] = static_cast<NodeIndex>(gbind);
                s_.bound_by[i] = kBoundGroup;
            }
            s_.finish[i] = s_.start[i] + g_.dur[i];
            if (g_.lane[i] >= 0) occupy(i, g_.lane[i]);
        }
    }

    void occupy(std::int64_t i, std::int32_t ln) {
        const std::int64_t sv = chosen_[i];
        if (s_.finish[i] > free_[sv]) free_[sv] = s_.finish[i];
        srv_last_[sv] = static_cast<I>(i);
        lane_last_[ln] = static_cast<I>(i);
    }

    // node i is placed: return the pool servers it frees, then queue what it was the last
    // prerequisite of
    void release(std::int64_t i) {
        if (!hold_ptr_.empty())
            for (std::int64_t h = hold_ptr_[i]; h < hold_ptr_[i + 1]; ++h) {
                const std::int64_t a = hold_idx_[h];
                if (phase_[a] != 3) {
                    if (errNode_ < 0) errNode_ = i;
                    continue;
                }
                heap_.push(std::max(s_.finish[i], s_.start[a]), static_cast<std::int64_t>(n_) + a);
            }
        for (std::int64_t e = optr_[i]; e < optr_[i + 1]; ++e) arrive(odst_[e]);
        if (lane_next_[i] >= 0) arrive(gr_.rep(lane_next_[i]));
    }

    const GraphView &g_;
    const Groups<I> &gr_;
    const ScheduleOut &s_;
    std::size_t n_, L_;
    EventHeap<I> heap_;
    std::vector<I> optr_, odst_, pending_, lane_next_;
    std::vector<std::int64_t> srv_ptr_, free_, pool_now_, held_;
    std::vector<I> srv_last_, lane_last_, wait_head_, wait_tail_, wait_next_, chosen_;
    std::vector<std::int8_t> phase_;  // 0 waiting, 1 asked for a pool server, 2 holds it, 3 placed
    std::vector<I> hold_ptr_, hold_idx_;
    std::vector<I> arm_;  // groups whose prerequisites are all placed, to be queued
    std::vector<I> now_;  // nodes placed before the heap (their start is known)
    std::size_t placed_ = 0;
    std::int64_t errNode_ = -1;
};

template <typename I>
Outcome scheduleWith(const GraphView &g, const ScheduleOut &s) {
    const Groups<I> gr(g.group);
    Topology<I> topo;
    // the issue order goes to the order output, which the pass then overwrites with the placement
    // order; after a cycle it holds the nodes placed before it
    Outcome out = issueOrder<I>(g, gr, s.order, &topo);
    if (out.status != Status::Ok) return out;
    Pass<I> pass(g, gr, std::move(topo), s);
    return pass.run();
}

template <typename I>
bool acyclicWith(const GraphView &g, Span<const std::int64_t> xsrc, Span<const std::int64_t> xdst) {
    const std::size_t n = g.n(), E = g.numEdges(), X = xsrc.size;
    const Groups<I> gr(g.group);
    std::vector<I> indeg(n, 0), optr(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i)
        for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) {
            if (gr.rep(g.dep_src[e]) == gr.rep(static_cast<std::int64_t>(i))) return false;
            ++indeg[gr.rep(static_cast<std::int64_t>(i))];
            ++optr[g.dep_src[e] + 1];
        }
    for (std::size_t k = 0; k < X; ++k) {
        if (gr.rep(xsrc[k]) == gr.rep(xdst[k])) return false;
        ++indeg[gr.rep(xdst[k])];
        ++optr[xsrc[k] + 1];
    }
    for (std::size_t i = 0; i < n; ++i) optr[i + 1] = static_cast<I>(optr[i + 1] + optr[i]);
    std::vector<I> odst(E + X);
    {
        std::vector<I> fill(optr.begin(), optr.end() - 1);
        for (std::size_t i = 0; i < n; ++i)
            for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e)
                odst[fill[g.dep_src[e]]++] = static_cast<I>(gr.rep(static_cast<std::int64_t>(i)));
        for (std::size_t k = 0; k < X; ++k) odst[fill[xsrc[k]]++] = static_cast<I>(gr.rep(xdst[k]));
    }
    std::vector<I> stack;
    for (std::size_t i = 0; i < n; ++i)
        if (gr.rep(static_cast<std::int64_t>(i)) == static_cast<std::int64_t>(i) && indeg[i] == 0)
            stack.push_back(static_cast<I>(i));
    std::size_t placed = 0;
    while (!stack.empty()) {
        const std::int64_t r = stack.back();
        stack.pop_back();
        for (std::int64_t m = gr.begin(r); m < gr.end(r); ++m) {
            const std::int64_t node = gr.member(m);
            ++placed;
            for (std::int64_t e = optr[node]; e < optr[node + 1]; ++e)
                if (--indeg[odst[e]] == 0) stack.push_back(odst[e]);
        }
    }
    return placed == n;
}

// Re-time a graph in a given placement order: ``seq`` is the order in which scheduleView placed
// the nodes of a graph with the same nodes, edges, lanes, groups and holds (only durations, lags
// and releases may differ). Each node, in that order, starts at its ready time (release and
// prerequisites, as in the pass), no earlier than its lane allows (the earliest free server; an
// in-order lane as in the pass) and, for a holder, than a server of its pool frees (the pool has
// ``pool_size[pl]`` servers from the start, each free at first, and a server returns at its
// holder's hold_until finish). A shared lane therefore serves in ``seq`` order, not by ready
// time, and a pool in ``seq`` order, not first come first served: with the durations the order
// came from the result is the pass's own; with others it is an estimate (docs/model.md,
// "Prediction ranges"). Writes start and finish (n each). Returns false, and nothing usable, when
// the order does not fit the graph: not a permutation in dependency order, a barrier group, a
// node on a pool lane, a return before its holder, or a pool with no server left.
template <typename I>
bool retimeWith(const GraphView &g, Span<const NodeIndex> seq, Span<const std::int64_t> pool_size,
                Span<std::int64_t> start, Span<std::int64_t> finish) {
    constexpr std::int64_t kLow = std::numeric_limits<std::int64_t>::min();
    const std::size_t n = g.n(), L = g.numLanes();
    if (seq.size != n || pool_size.size != L) return false;
    std::vector<std::int64_t> srv_ptr(L + 1, 0);
    for (std::size_t k = 0; k < L; ++k) srv_ptr[k + 1] = srv_ptr[k] + g.lane_servers[k];
    std::vector<std::int64_t> free(static_cast<std::size_t>(srv_ptr[L]), 0);  // as the pass: lanes free at 0
    std::vector<I> srv_last(static_cast<std::size_t>(srv_ptr[L]), -1), lane_last(L, -1);
    std::vector<std::int64_t> pool_now(L, kLow);
    std::vector<std::vector<std::int64_t>> pool(L);  // per pool: min-heap of the free servers' times
    std::vector<char> pool_lane(L, 0), placed(n, 0);
    std::vector<I> hold_ptr, hold_idx;
    for (std::size_t i = 0; i < n; ++i) {
        if (g.group[i] >= 0) return false;
        const std::int32_t pl = g.hold_lane[i];
        if (pl >= 0) {
            if (!pool_lane[pl]) {
                if (pool_size[pl] < 1) return false;
                pool_lane[pl] = 1;
                pool[pl].assign(static_cast<std::size_t>(pool_size[pl]), kLow);
            }
        }
    }
    for (std::size_t i = 0; i < n; ++i)
        if (g.lane[i] >= 0 && pool_lane[g.lane[i]]) return false;
    holdsByReturner(g, hold_ptr, hold_idx);
    const auto launch = static_cast<std::uint8_t>(DepKind::Launch);
    const auto stream = static_cast<std::uint8_t>(DepKind::Stream);
    const auto later = std::greater<std::int64_t>();
    for (std::size_t k = 0; k < n; ++k) {
        const std::int64_t i = seq[k];
        if (i < 0 || static_cast<std::size_t>(i) >= n || placed[i]) return false;
        std::int64_t t = g.release[i];
        const std::int32_t ln = g.lane[i];
        const bool shared = ln >= 0 && g.lane_shared[ln];
        const bool single = ln >= 0 && !shared && srv_ptr[ln + 1] - srv_ptr[ln] == 1;
        bool explicitStream = false;
        for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) {
            const std::int64_t src = g.dep_src[e];
            if (!placed[src]) return false;
            const std::int64_t c = (g.dep_kind[e] == launch ? start[src] : finish[src]) + g.dep_lag[e];
            if (c > t) t = c;
            if (single && g.dep_kind[e] == stream && src == srv_last[srv_ptr[ln]]) explicitStream = true;
        }
        std::int64_t best = -1;
        if (ln >= 0) {
            best = srv_ptr[ln];
            for (std::int64_t sv = srv_ptr[ln] + 1; sv < srv_ptr[ln + 1]; ++sv)
                if (free[sv] < free[best]) best = sv;
        }
        if (ln >= 0 && !shared && !explicitStream) {
            if (free[best] > t) t = free[best];
            const std::int64_t prev = lane_last[ln];
            if (prev >= 0 && start[prev] > t) t = start[prev];
        }
        const std::int32_t pl = g.hold_lane[i];
        if (pl >= 0) {
            std::vector<std::int64_t> &h = pool[pl];
            if (h.empty()) return false;
            if (t < pool_now[pl]) t = pool_now[pl];
            pool_now[pl] = t;
            std::pop_heap(h.begin(), h.end(), later);
            if (h.back() > t) t = h.back();
            h.pop_back();
        }
        if (shared && free[best] > t) t = free[best];
        start[i] = t;
        finish[i] = t + g.dur[i];
        placed[i] = 1;
        if (ln >= 0) {
            if (finish[i] > free[best]) free[best] = finish[i];
            srv_last[best] = static_cast<I>(i);
            lane_last[ln] = static_cast<I>(i);
        }
        if (!hold_ptr.empty())
            for (I h = hold_ptr[i]; h < hold_ptr[i + 1]; ++h) {
                const std::int64_t a = hold_idx[h];
                if (!placed[a]) return false;
                std::vector<std::int64_t> &p = pool[g.hold_lane[a]];
                p.push_back(std::max(finish[i], start[a]));
                std::push_heap(p.begin(), p.end(), later);
            }
    }
    return true;
}

}  // namespace detail

// Re-time in a given placement order (detail::retimeWith); false when the order does not fit.
inline bool retimeView(const GraphView &g, Span<const NodeIndex> seq, Span<const std::int64_t> pool_size,
                       Span<std::int64_t> start, Span<std::int64_t> finish) {
    if (start.size != g.n() || finish.size != g.n()) return false;
    return detail::fitsInt32(g) ? detail::retimeWith<std::int32_t>(g, seq, pool_size, start, finish)
                                : detail::retimeWith<std::int64_t>(g, seq, pool_size, start, finish);
}

// ---------------------------------------------------------------------------------------------
// The algorithms over views (checkView(g) must have passed).

// Replay: fills every output of ``s``. Deterministic; bit-exact with the numba engine.
inline Outcome scheduleView(const GraphView &g, const ScheduleOut &s) {
    return detail::fitsInt32(g) ? detail::scheduleWith<std::int32_t>(g, s) : detail::scheduleWith<std::int64_t>(g, s);
}

// The issue order (in-order lanes serve in it), into ``issue`` (n entries).
inline Outcome topologicalOrderView(const GraphView &g, Span<NodeIndex> issue) {
    if (detail::fitsInt32(g)) {
        const detail::Groups<std::int32_t> gr(g.group);
        return detail::issueOrder<std::int32_t>(g, gr, issue, nullptr);
    }
    const detail::Groups<std::int64_t> gr(g.group);
    return detail::issueOrder<std::int64_t>(g, gr, issue, nullptr);
}

// Whether topologicalOrderView would succeed on the graph plus the edges xsrc[k] -> xdst[k]
// (node indices, checked by the caller), in linear time: Kahn's algorithm with a plain stack.
// Only ``group``, ``dep_ptr`` and ``dep_src`` of the view are read.
inline bool acyclicView(const GraphView &g, Span<const std::int64_t> xsrc, Span<const std::int64_t> xdst) {
    constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
    if (2 * static_cast<std::uint64_t>(g.n()) + 2 < kMax && g.numEdges() + xsrc.size < kMax)
        return detail::acyclicWith<std::int32_t>(g, xsrc, xdst);
    return detail::acyclicWith<std::int64_t>(g, xsrc, xdst);
}

// ---------------------------------------------------------------------------------------------
// The owning layer: a Graph (validated), results in vectors, problems as GraphError.

namespace detail {

// A message naming the ops of one dependency cycle among the nodes Kahn's algorithm could not
// place (super-node graph: edges between group representatives).
inline std::string describeCycle(const Graph &g, const Groups<std::int64_t> &gr, const std::vector<char> &placed) {
    const std::size_t n = g.n();
    // successor lists of unplaced representatives
    std::vector<std::int64_t> optr(n + 1, 0), odst;
    for (std::size_t i = 0; i < n; ++i)
        for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) {
            std::int64_t s = gr.rep(g.dep_src[e]);
            if (!placed[s]) ++optr[s + 1];
        }
    for (std::size_t i = 0; i < n; ++i) optr[i + 1] += optr[i];
    odst.resize(optr[n]);
    std::vector<std::int64_t> fill(optr.begin(), optr.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
        for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) {
            std::int64_t s = gr.rep(g.dep_src[e]);
            if (!placed[s]) odst[fill[s]++] = gr.rep(static_cast<std::int64_t>(i));
        }
    // iterative DFS for a back edge
    std::vector<std::int8_t> color(n, 0);
    std::vector<std::int64_t> parent(n, -1), it(n, 0);
    std::size_t left = 0;
    std::int64_t firstLeft = -1;
    for (std::size_t r = 0; r < n; ++r) {
        if (placed[r] || gr.rep(static_cast<std::int64_t>(r)) != static_cast<std::int64_t>(r)) continue;
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
inline std::vector<NodeIndex> topologicalOrder(const Graph &g) {
    const GraphView v = g.view();
    std::vector<NodeIndex> issue(g.n());
    const Outcome out = topologicalOrderView(v, viewOf(issue));
    if (out.status == Status::GroupEdge) {
        std::size_t i = 0;  // the dependent node of edge ``where``
        while (g.dep_ptr[i + 1] <= out.where) ++i;
        throw GraphError("cycle: " + g.nodeLabel(static_cast<std::size_t>(g.dep_src[out.where])) + " and " +
                         g.nodeLabel(i) + " are in the same collective group but one depends on the other");
    }
    if (out.status == Status::Cycle) {
        std::vector<char> placed(g.n(), 0);
        for (std::size_t k = 0; k < out.placed; ++k) placed[issue[k]] = 1;
        throw GraphError(detail::describeCycle(g, detail::Groups<std::int64_t>(v.group), placed));
    }
    return issue;
}

// Replay a validated graph. Deterministic; bit-exact with replay.pipeline.engine.schedule.
inline Schedule schedule(const Graph &g) {
    const GraphView v = g.view();
    const std::size_t n = g.n();
    Schedule s;
    s.start.resize(n);
    s.finish.resize(n);
    s.crit_pred.resize(n);
    s.bound_by.resize(n);
    s.order.resize(n);
    s.slot_wait.resize(n);
    s.lane_servers.resize(g.numLanes());
    const ScheduleOut out{viewOf(s.start), viewOf(s.finish), viewOf(s.crit_pred), viewOf(s.bound_by),
                          viewOf(s.order), viewOf(s.slot_wait), viewOf(s.lane_servers)};
    const Outcome res = scheduleView(v, out);
    switch (res.status) {
    case Status::Ok:
        return s;
    case Status::GroupEdge:
    case Status::Cycle:
        topologicalOrder(g);  // throws the message naming the ops
        throw GraphError("the graph has a cycle");
    case Status::PoolReturn:
        throw GraphError(g.nodeLabel(static_cast<std::size_t>(res.where)) +
                         " returns a pool server (bounce slot) that a node it does not depend on has not taken yet");
    case Status::Stuck: {
        std::vector<char> placed(n, 0);
        for (std::size_t k = 0; k < res.placed; ++k) placed[s.order[k]] = 1;
        std::size_t firstLeft = 0;
        while (placed[firstLeft]) ++firstLeft;
        throw GraphError(std::to_string(n - res.placed) + " node(s) can never start, first " + g.nodeLabel(firstLeft));
    }
    }
    return s;
}

}  // namespace fastrack
