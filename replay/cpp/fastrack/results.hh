// Fastrack gem5-free core: what a replay reports, as replay/results.py computes it.
//
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
