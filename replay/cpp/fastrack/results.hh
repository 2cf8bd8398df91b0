// Fastrack core: what a replay reports, as replay/pipeline/results.py computes it.
//
// * the critical path (walkPath): replay/pipeline/results.py's walk, over views, for the Python extension;
// * makespan: finish.max() - start.min() over all nodes (ReplayResult.makespan_ns); the
//   simulated time of a gem5 run, whose tick 0 is the earliest start (``origin_ns``);
// * per rank: finish.max() - start.min() over the rank's nodes;
// * busy time per lane: the sum of (finish - start) of the nodes on it; for a pool, the sum of
//   (finish of the returning node - start of the holder) over its holds, which are its ops;
//   peak_servers: the size the pool grew to.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "engine.hh"
#include "graph.hh"
#include "view.hh"

namespace fastrack {

struct LaneUsage {
    std::int64_t ops = 0;
    std::int64_t busy_ns = 0;
    bool pool = false;             // some node holds a server of this lane
    std::int64_t peak_servers = 0; // servers at the end (a pool's size after growing)
};

struct Summary {
    std::int64_t makespan_ns = 0;  // finish.max() - start.min() (ReplayResult.makespan_ns)
    std::int64_t origin_ns = 0;    // the earliest start: simulated time 0 is this instant
    std::map<std::int32_t, std::int64_t> per_rank;
    std::vector<LaneUsage> lanes;
};

// Walk the critical path backwards from node ``i`` at time ``t`` down to ``t_stop``, adding each
// stretch of time to one code of ``totals`` (replay/pipeline/results.py, path_totals): a node's own time
// to node_code[node], the lag of the edge that bound a start to edge_code[edge kind], a
// pool-server wait to wait_code, a start bound by its release, by its lane or before the first
// node to release_code. Every nanosecond of (t_stop, t] goes to exactly one code. group_code and
// lane_code are the engine's kBoundGroup and kBoundLane. ``totals`` must be zero on entry.
// Returns false (totals then partial) when an index or code on the way is out of range.
template <typename C>
bool walkPath(Span<const std::int64_t> start, Span<const std::int64_t> finish, Span<const NodeIndex> pred,
              Span<const std::int8_t> bound, Span<const std::int64_t> slot_wait, std::int64_t i, std::int64_t t,
              std::int64_t t_stop, Span<const C> node_code, Span<const std::int64_t> edge_code,
              std::int64_t launch_code, std::int64_t release_code, std::int64_t group_code, std::int64_t lane_code,
              std::int64_t wait_code, Span<std::int64_t> totals) {
    const std::int64_t n = static_cast<std::int64_t>(start.size);
    const std::int64_t ncode = static_cast<std::int64_t>(totals.size);
    auto codeOk = [&](std::int64_t c) { return c >= 0 && c < ncode; };
    if (!codeOk(release_code) || !codeOk(wait_code)) return false;
    std::int64_t steps = 0;
    while (i >= 0 && steps <= n && t > t_stop) {
        if (i >= n || !codeOk(static_cast<std::int64_t>(node_code[i]))) return false;
        ++steps;
        const std::int64_t s = start[i];
        const std::int64_t own = std::min(finish[i], t) - std::max(s, t_stop);
        if (own > 0) totals[node_code[i]] += own;
        if (s < t) t = s;
        const std::int64_t w = slot_wait[i];  // the start waited this long for a pool server
        if (w > 0) {
            const std::int64_t seg = t - std::max(t - w, t_stop);
            if (seg > 0) totals[wait_code] += seg;
            t -= w;
        }
        const std::int64_t p = pred[i];
        const std::int64_t b = bound[i];
        if (p < 0) break;
        if (p >= n) return false;
        std::int64_t anchor;
        if (b == launch_code)
            anchor = start[p];
        else if (b == group_code)
            anchor = s;
        else
            anchor = finish[p];
        if (anchor < t) {
            std::int64_t code = release_code;
            if (!(b == lane_code || b < 0)) {
                if (b >= static_cast<std::int64_t>(edge_code.size) || !codeOk(edge_code[b])) return false;
                code = edge_code[b];
            }
            const std::int64_t seg = t - std::max(anchor, t_stop);
            if (seg > 0) totals[code] += seg;
            t = anchor;
        }
        i = p;
    }
    if (t > t_stop) totals[release_code] += t - t_stop;
    return true;
}

inline Summary summarize(const Graph &g, const Schedule &s) {
    Summary out;
    out.lanes.assign(g.numLanes(), LaneUsage{});
    const std::size_t n = g.n();
    if (n == 0) return out;
    struct Span { std::int64_t lo, hi; };
    std::map<std::int32_t, Span> spans;
    std::int64_t lo = s.start[0], hi = s.finish[0];
    for (std::size_t i = 0; i < n; ++i) {
        lo = std::min(lo, s.start[i]);
        hi = std::max(hi, s.finish[i]);
        auto it = spans.find(g.rank[i]);
        if (it == spans.end())
            spans.emplace(g.rank[i], Span{s.start[i], s.finish[i]});
        else {
            it->second.lo = std::min(it->second.lo, s.start[i]);
            it->second.hi = std::max(it->second.hi, s.finish[i]);
        }
        if (g.lane[i] >= 0) {
            LaneUsage &u = out.lanes[static_cast<std::size_t>(g.lane[i])];
            ++u.ops;
            u.busy_ns += s.finish[i] - s.start[i];
        }
        if (g.hold_lane[i] >= 0) {
            LaneUsage &u = out.lanes[static_cast<std::size_t>(g.hold_lane[i])];
            ++u.ops;
            u.pool = true;
            u.busy_ns += std::max<std::int64_t>(0, s.finish[g.hold_until[i]] - s.start[i]);
        }
    }
    for (std::size_t k = 0; k < g.numLanes(); ++k)
        out.lanes[k].peak_servers = k < s.lane_servers.size() ? s.lane_servers[k] : g.lane_servers[k];
    for (const auto &kv : spans) out.per_rank[kv.first] = kv.second.hi - kv.second.lo;
    out.origin_ns = lo;
    out.makespan_ns = hi - lo;
    return out;
}

}  // namespace fastrack
