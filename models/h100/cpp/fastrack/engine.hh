// Fastrack gem5-free core: the replay scheduler, bit-exact with replay/engine.py.
//
//   ready[i]  = max(release[i], max over deps: finish[src] + lag  (start[src] + lag for LAUNCH))
//   start[i]  = max(ready[i], earliest free server of lane[i])
//   finish[i] = start[i] + dur[i]
//
// * Visiting order: Kahn's algorithm over super-nodes (a barrier group contracted to its
//   lowest-index member), a binary min-heap keyed by (order key of the representative, index).
//   The members of a group are visited together, in index order.
// * A lane serves its nodes in visiting order (issue-order FIFO); a multi-server lane gives each
//   node the server that frees first, lowest index on ties.
// * An explicit STREAM edge from the node last served on a single-server lane replaces the lane
//   constraint (negative lags reproduce measured overlap).
// * Group members start together at the latest of their individual starts; the lanes they use
//   are updated only after the whole group has been placed.
// Integer nanoseconds throughout; ties broken exactly as the Python engine does, including the
// choice of the binding prerequisite (crit_pred / bound_by).
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
    std::vector<std::int64_t> order;  // visiting order
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
inline std::vector<std::int64_t> topologicalOrder(const Graph &g, const Groups &gr) {
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
    return order;
}

// Replay a validated graph. Deterministic; bit-exact with replay.engine.schedule.
inline Schedule schedule(const Graph &g) {
    const std::size_t n = g.n();
    const Groups gr = barrierGroups(g);
    Schedule s;
    s.order = topologicalOrder(g, gr);
    s.start.assign(n, 0);
    s.finish.assign(n, 0);
    s.crit_pred.assign(n, -1);
    s.bound_by.assign(n, kBoundRelease);
    const std::size_t L = g.numLanes();
    std::vector<std::int64_t> srv_ptr(L + 1, 0);
    for (std::size_t k = 0; k < L; ++k) srv_ptr[k + 1] = srv_ptr[k] + g.lane_servers[k];
    std::vector<std::int64_t> freeAt(static_cast<std::size_t>(srv_ptr[L]), 0);
    std::vector<std::int64_t> last(L, -1);
    std::vector<std::int64_t> chosen(n, 0);
    const auto launch = static_cast<std::uint8_t>(DepKind::Launch);
    const auto stream = static_cast<std::uint8_t>(DepKind::Stream);
    std::size_t pos = 0;
    while (pos < n) {
        const std::int64_t r = gr.rep[s.order[pos]];
        const std::int64_t count = gr.mem_ptr[r + 1] - gr.mem_ptr[r];
        std::int64_t gstart = -(std::int64_t(1) << 62);
        std::int64_t gbind = -1;
        for (std::int64_t k = 0; k < count; ++k) {
            const std::int64_t i = s.order[pos + k];
            std::int64_t t = g.release[i];
            std::int64_t p = -1;
            std::int8_t b = kBoundRelease;
            const std::int32_t ln = g.lane[i];
            bool explicitStream = false;
            for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e) {
                const std::int64_t src = g.dep_src[e];
                const std::int64_t c = (g.dep_kind[e] == launch ? s.start[src] : s.finish[src]) + g.dep_lag[e];
                if (c > t || (p < 0 && c == t)) {
                    t = c;
                    p = src;
                    b = static_cast<std::int8_t>(g.dep_kind[e]);
                }
                if (g.dep_kind[e] == stream && ln >= 0 && src == last[ln] && srv_ptr[ln + 1] - srv_ptr[ln] == 1)
                    explicitStream = true;
            }
            if (ln >= 0) {
                std::int64_t best = srv_ptr[ln];
                for (std::int64_t sv = srv_ptr[ln] + 1; sv < srv_ptr[ln + 1]; ++sv)
                    if (freeAt[sv] < freeAt[best]) best = sv;
                chosen[i] = best;
                if (!explicitStream && freeAt[best] > t) {
                    t = freeAt[best];
                    p = last[ln];
                    b = kBoundLane;
                }
            }
            s.start[i] = t;
            s.crit_pred[i] = p;
            s.bound_by[i] = b;
            if (t > gstart) {
                gstart = t;
                gbind = i;
            }
        }
        for (std::int64_t k = 0; k < count; ++k) {
            const std::int64_t i = s.order[pos + k];
            if (count > 1 && s.start[i] < gstart) {
                s.start[i] = gstart;
                s.crit_pred[i] = gbind;
                s.bound_by[i] = kBoundGroup;
            }
            s.finish[i] = s.start[i] + g.dur[i];
            const std::int32_t ln = g.lane[i];
            if (ln >= 0) {
                const std::int64_t sv = chosen[i];
                if (s.finish[i] > freeAt[sv]) freeAt[sv] = s.finish[i];
                last[ln] = i;
            }
        }
        pos += static_cast<std::size_t>(count);
    }
    return s;
}

}  // namespace fastrack
