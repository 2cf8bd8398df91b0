// Fastrack core: non-owning views of a dependency graph's arrays, the input of the scheduler.
//
// Every algorithm of the core (engine.hh, results.hh) reads a GraphView: pointers to the arrays
// and their lengths, owned by someone else. The standalone driver and the gem5 extension own
// their arrays in a Graph (graph.hh, Graph::view()); the Python extension module
// (replay/cpp/engine_module.cpp) points a view at numpy buffers, so nothing is copied.
// Element types are those of replay.graph.OpGraph (a numpy bool array is read as int8 0/1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fastrack {

// A node's index as the graph's arrays store it (edge sources, pool returners, a schedule's
// binding predecessors and placement order; barrier group ids are 32 bits too): 32 bits, since a
// graph has at most 2^26 nodes (replay.graph.MAX_NODES; replay.graph.INDEX is the same type).
using NodeIndex = std::int32_t;

// A pointer and a length, for arrays owned elsewhere (a std::vector, a numpy buffer).
template <typename T>
struct Span {
    T *data = nullptr;
    std::size_t size = 0;
    T &operator[](std::size_t i) const { return data[i]; }
    template <typename I>
    T &operator[](I i) const { return data[static_cast<std::size_t>(i)]; }
};

template <typename T>
Span<const T> viewOf(const std::vector<T> &v) { return Span<const T>{v.data(), v.size()}; }

template <typename T>
Span<T> viewOf(std::vector<T> &v) { return Span<T>{v.data(), v.size()}; }

// What the scheduler reads of a graph (replay.graph.OpGraph's arrays of the same names).
struct GraphView {
    // lanes (L)
    Span<const std::int32_t> lane_servers;
    Span<const std::int8_t> lane_shared;  // 1: work-conserving; 0: serves in issue order
    Span<const std::int32_t> lane_max_servers;
    // nodes (n)
    Span<const std::int32_t> lane;  // or -1
    Span<const std::int64_t> dur;
    Span<const std::int64_t> order;
    Span<const std::int64_t> release;
    Span<const std::int32_t> group;      // barrier group id (below 2^31), or -1
    Span<const std::int32_t> hold_lane;  // pool lane whose server the node holds, or -1
    Span<const NodeIndex> hold_until;    // node at whose finish it is returned, or -1
    // edges, CSR by dependent node
    Span<const std::int64_t> dep_ptr;  // n + 1
    Span<const NodeIndex> dep_src;
    Span<const std::uint8_t> dep_kind;
    Span<const std::int64_t> dep_lag;

    std::size_t n() const { return dur.size; }
    std::size_t numEdges() const { return dep_src.size; }
    std::size_t numLanes() const { return lane_servers.size; }
};

// What the algorithms rely on to stay inside the arrays (lengths, references, the CSR index).
// Returns nullptr when the view is sound, else a description of the first problem. (Graph::
// validate checks much more, with messages naming the entry; a Python graph has passed
// OpGraph.validate; this is the guard that keeps a wrong array from being read out of bounds.)
inline const char *checkView(const GraphView &v) {
    const std::size_t n = v.n(), E = v.numEdges(), L = v.numLanes();
    if (v.lane_shared.size != L || v.lane_max_servers.size != L) return "lane arrays differ in length";
    if (v.lane.size != n || v.order.size != n || v.release.size != n || v.group.size != n ||
        v.hold_lane.size != n || v.hold_until.size != n)
        return "node arrays differ in length";
    if (v.dep_ptr.size != n + 1 || v.dep_kind.size != E || v.dep_lag.size != E) return "edge arrays differ in length";
    if (v.dep_ptr[0] != 0 || static_cast<std::uint64_t>(v.dep_ptr[n]) != E) return "dep_ptr does not span the edges";
    for (std::size_t i = 0; i < n; ++i) {
        if (v.dep_ptr[i + 1] < v.dep_ptr[i]) return "dep_ptr decreases";
        const std::int32_t ln = v.lane[i];
        if (ln < -1 || (ln >= 0 && (static_cast<std::size_t>(ln) >= L || v.lane_servers[ln] < 1)))
            return "a node is on a lane that does not exist or has no server";
        const std::int32_t hl = v.hold_lane[i];
        if (hl < -1 || (hl >= 0 && static_cast<std::size_t>(hl) >= L)) return "a node holds a lane that does not exist";
        if (hl >= 0 && (v.hold_until[i] < 0 || static_cast<std::uint64_t>(v.hold_until[i]) >= n))
            return "a node returns its pool server at a node that does not exist";
    }
    for (std::size_t k = 0; k < L; ++k)
        if (v.lane_servers[k] < 0) return "a lane has a negative number of servers";
    for (std::size_t k = 0; k < E; ++k)
        if (v.dep_src[k] < 0 || static_cast<std::uint64_t>(v.dep_src[k]) >= n) return "an edge comes from a node that does not exist";
    return nullptr;
}

}  // namespace fastrack
