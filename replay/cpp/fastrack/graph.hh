// Fastrack core: the dependency graph and its on-disk export format (version 2).
//
// The graph is the *transformed* graph of a replay (replay.graph.OpGraph after the protocol
// transform): per lane its servers, type, rank, discipline (in order or shared) and the size a
// pool may grow to; per node its lane, duration, order key, release time, barrier group and the
// pool server it holds (and until which node); the dependencies in CSR form grouped by the
// dependent node, each with a kind and a lag (ns).
// docs/gem5.md documents the binary layout; replay/exporters/graphfile.py writes it.
//
// Reading validates everything a scheduler relies on (magic, version, counts against the file
// size, references, value ranges) and throws fastrack::FormatError with a message naming the
// file and the offending entry; it never reads past the end of the file or allocates more than
// the file's size implies.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "view.hh"

namespace fastrack {

// Dependency kinds (fastrack_core.schema.DepKind).
enum class DepKind : std::uint8_t {
    Program = 0, Launch = 1, Stream = 2, Event = 3, Sync = 4, Collective = 5, Data = 6, Resource = 7,
};
constexpr int kNumDepKinds = 8;

// Lane types (replay.graph.LaneType).
enum class LaneType : std::int8_t {
    HostThread = 0, Stream = 1, CopyEngine = 2, PcieH2D = 3, PcieD2H = 4,
    CpuCrypto = 5, GpuCrypto = 6, GpuAuth = 7, Submit = 8, Link = 9, BouncePool = 10,
};
constexpr int kNumLaneTypes = 11;

inline const char *laneTypeLabel(int t) {
    static const char *const labels[kNumLaneTypes] = {
        "host_thread", "stream", "copy_engine", "pcie_h2d", "pcie_d2h",
        "cpu_crypto", "gpu_crypto", "gpu_auth", "submit", "link", "bounce_pool"};
    return (t >= 0 && t < kNumLaneTypes) ? labels[t] : "unknown";
}

constexpr std::int32_t kNoLane = -1;

class FormatError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// An input graph that cannot be scheduled (cycle, edge inside a barrier group).
class GraphError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct Graph {
    // lanes
    std::vector<std::int32_t> lane_servers;
    std::vector<std::int8_t> lane_type;
    std::vector<std::int32_t> lane_rank;
    std::vector<std::int8_t> lane_shared;        // 1: work-conserving (serves whatever is ready); 0: in issue order
    std::vector<std::int32_t> lane_max_servers;  // what a pool may grow to (>= lane_servers)
    std::vector<std::string> lane_names;  // optional (lanes.csv); empty strings when absent
    // nodes
    std::vector<std::int64_t> op_id;
    std::vector<std::int32_t> rank;
    std::vector<std::int32_t> lane;
    std::vector<std::int8_t> kind;
    std::vector<std::int8_t> category;
    std::vector<std::int64_t> dur;
    std::vector<std::int64_t> bytes;
    std::vector<std::int64_t> order;
    std::vector<std::int64_t> release;
    std::vector<std::int32_t> group;  // (i64 in the file)
    std::vector<std::int32_t> hold_lane;   // pool lane whose server the node holds, or kNoLane
    std::vector<NodeIndex> hold_until;  // node at whose finish that server is returned, or -1 (i64 in the file)
    // edges, CSR by dependent node
    std::vector<std::int64_t> dep_ptr;  // n + 1
    std::vector<NodeIndex> dep_src;  // (i64 in the file)
    std::vector<std::uint8_t> dep_kind;
    std::vector<std::int64_t> dep_lag;

    std::size_t n() const { return dur.size(); }
    std::size_t numEdges() const { return dep_src.size(); }
    std::size_t numLanes() const { return lane_servers.size(); }

    std::string nodeLabel(std::size_t i) const {
        return "op " + std::to_string(op_id[i]) + " (node " + std::to_string(i) + ", rank " +
               std::to_string(rank[i]) + ")";
    }

    // Structural checks; throws FormatError naming the first offending entry.
    void validate(const std::string &where = "graph") const;

    // What the scheduler reads (engine.hh), pointing into this graph's arrays.
    GraphView view() const {
        GraphView v;
        v.lane_servers = viewOf(lane_servers);
        v.lane_shared = viewOf(lane_shared);
        v.lane_max_servers = viewOf(lane_max_servers);
        v.lane = viewOf(lane);
        v.dur = viewOf(dur);
        v.order = viewOf(order);
        v.release = viewOf(release);
        v.group = viewOf(group);
        v.hold_lane = viewOf(hold_lane);
        v.hold_until = viewOf(hold_until);
        v.dep_ptr = viewOf(dep_ptr);
        v.dep_src = viewOf(dep_src);
        v.dep_kind = viewOf(dep_kind);
        v.dep_lag = viewOf(dep_lag);
        return v;
    }
};

// ---------------------------------------------------------------------------------------------
// Format version 2 (little-endian, packed, no padding):
//   header (64 bytes): char magic[8] = "FTRKGRPH"; u32 version = 2; u32 header_bytes = 64;
//                      u64 n_nodes; u64 n_edges; u64 n_lanes; u64 flags = 0; u64 reserved[2] = 0
//   lanes:  i32 servers[L]; i8 type[L]; i32 rank[L]; i8 shared[L]; i32 max_servers[L]
//   nodes:  i64 op_id[N]; i32 rank[N]; i32 lane[N]; i8 kind[N]; i8 category[N]; i64 dur_ns[N];
//           i64 bytes[N]; i64 order[N]; i64 release_ns[N]; i64 group[N]; i32 hold_lane[N];
//           i64 hold_until[N]
//   edges:  i64 dep_ptr[N+1]; i64 dep_src[E]; u8 dep_kind[E]; i64 dep_lag_ns[E]
//   trailer: char end[8] = "FTRKEND\0"
// The file size must be exactly what the counts imply.
// ---------------------------------------------------------------------------------------------
constexpr char kMagic[8] = {'F', 'T', 'R', 'K', 'G', 'R', 'P', 'H'};
constexpr char kEndMagic[8] = {'F', 'T', 'R', 'K', 'E', 'N', 'D', '\0'};
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::uint32_t kHeaderBytes = 64;
constexpr std::uint64_t kLaneBytes = 4 + 1 + 4 + 1 + 4;
constexpr std::uint64_t kNodeBytes = 8 + 4 + 4 + 1 + 1 + 8 + 8 + 8 + 8 + 8 + 4 + 8;  // + 8 per node for dep_ptr
constexpr std::uint64_t kEdgeBytes = 8 + 1 + 8;

namespace detail {

inline bool mulAdd(std::uint64_t a, std::uint64_t b, std::uint64_t &acc) {
    if (b != 0 && a > (UINT64_MAX - acc) / b) return false;
    acc += a * b;
    return true;
}

class Reader {
  public:
    Reader(const char *data, std::size_t size) : data_(data), size_(size) {}
    template <typename T>
    void read(std::vector<T> &out, std::size_t count) {
        out.resize(count);
        std::size_t nbytes = count * sizeof(T);
        if (pos_ + nbytes > size_) throw FormatError("truncated");
        if (nbytes) std::memcpy(out.data(), data_ + pos_, nbytes);
        pos_ += nbytes;
    }
    // ``count`` 64-bit entries of the file as 32-bit ones (node indices, view.hh NodeIndex, and
    // barrier group ids); an entry outside the 32-bit range is refused here, the rest of its
    // checks are Graph::validate's.
    void readIndex(std::vector<NodeIndex> &out, std::size_t count, const char *name, const std::string &where) {
        std::vector<std::int64_t> wide;
        read(wide, count);
        out.resize(count);
        for (std::size_t k = 0; k < count; ++k) {
            if (wide[k] < std::numeric_limits<NodeIndex>::min() || wide[k] > std::numeric_limits<NodeIndex>::max())
                throw FormatError(where + ": array '" + name + "' entry " + std::to_string(k) +
                                  " is outside the 32-bit range of a node index");
            out[k] = static_cast<NodeIndex>(wide[k]);
        }
    }
    template <typename T>
    T scalar() {
        T v;
        if (pos_ + sizeof(T) > size_) throw FormatError("truncated");
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    void skip(std::size_t n) { pos_ += n; }
    std::size_t pos() const { return pos_; }

  private:
    const char *data_;
    std::size_t size_;
    std::size_t pos_ = 0;
};

inline bool littleEndianHost() {
    const std::uint16_t probe = 1;
    unsigned char first;
    std::memcpy(&first, &probe, 1);
    return first == 1;
}

}  // namespace detail

// Parse a version-2 graph held in memory. ``where`` names the source in error messages.
inline Graph parseGraph(const char *data, std::size_t size, const std::string &where) {
    if (!detail::littleEndianHost()) throw FormatError(where + ": big-endian hosts are not supported");
    if (size < kHeaderBytes)
        throw FormatError(where + ": " + std::to_string(size) + " bytes is too short for a Fastrack graph "
                          "(the header alone is 64 bytes)");
    if (std::memcmp(data, kMagic, 8) != 0)
        throw FormatError(where + ": not a Fastrack graph export (bad magic; expected 'FTRKGRPH')");
    detail::Reader rd(data, size);
    rd.skip(8);
    auto version = rd.scalar<std::uint32_t>();
    if (version != kFormatVersion)
        throw FormatError(where + ": graph format version " + std::to_string(version) +
                          " is not supported (this reader knows version " + std::to_string(kFormatVersion) + ")");
    auto header_bytes = rd.scalar<std::uint32_t>();
    if (header_bytes != kHeaderBytes)
        throw FormatError(where + ": header size " + std::to_string(header_bytes) + ", expected 64");
    auto n = rd.scalar<std::uint64_t>();
    auto e = rd.scalar<std::uint64_t>();
    auto l = rd.scalar<std::uint64_t>();
    auto flags = rd.scalar<std::uint64_t>();
    if (flags != 0) throw FormatError(where + ": unknown header flags " + std::to_string(flags));
    rd.skip(16);
    // Expected size from the counts, with overflow checks, *before* allocating anything.
    std::uint64_t expect = kHeaderBytes + 8;
    bool ok = detail::mulAdd(l, kLaneBytes, expect) && detail::mulAdd(n, kNodeBytes, expect) &&
              detail::mulAdd(n + 1, 8, expect) && detail::mulAdd(e, kEdgeBytes, expect);
    if (!ok || expect != size)
        throw FormatError(where + ": counts in the header (" + std::to_string(n) + " nodes, " + std::to_string(e) +
                          " edges, " + std::to_string(l) + " lanes) imply " +
                          (ok ? std::to_string(expect) : std::string("an impossible number of")) +
                          " bytes, but the file has " + std::to_string(size) + " (truncated or corrupt)");
    if (n > static_cast<std::uint64_t>(INT32_MAX) || l > static_cast<std::uint64_t>(INT32_MAX))
        throw FormatError(where + ": too many nodes or lanes (at most 2^31 - 1 of each: a node index is 32 bits)");
    Graph g;
    rd.read(g.lane_servers, l);
    rd.read(g.lane_type, l);
    rd.read(g.lane_rank, l);
    rd.read(g.lane_shared, l);
    rd.read(g.lane_max_servers, l);
    g.lane_names.assign(l, std::string());
    rd.read(g.op_id, n);
    rd.read(g.rank, n);
    rd.read(g.lane, n);
    rd.read(g.kind, n);
    rd.read(g.category, n);
    rd.read(g.dur, n);
    rd.read(g.bytes, n);
    rd.read(g.order, n);
    rd.read(g.release, n);
    rd.readIndex(g.group, n, "group", where);
    rd.read(g.hold_lane, n);
    rd.readIndex(g.hold_until, n, "hold_until", where);
    rd.read(g.dep_ptr, n + 1);
    rd.readIndex(g.dep_src, e, "dep_src", where);
    rd.read(g.dep_kind, e);
    rd.read(g.dep_lag, e);
    if (std::memcmp(data + rd.pos(), kEndMagic, 8) != 0)
        throw FormatError(where + ": end marker missing (the file is corrupt)");
    g.validate(where);
    return g;
}

inline void Graph::validate(const std::string &where) const {
    const std::size_t N = n();
    const std::size_t E = numEdges();
    const std::size_t L = numLanes();
    auto sizeErr = [&](const char *name, std::size_t got, std::size_t want) {
        if (got != want)
            throw FormatError(where + ": array '" + name + "' has " + std::to_string(got) + " entries, expected " +
                              std::to_string(want));
    };
    sizeErr("lane_type", lane_type.size(), L);
    sizeErr("lane_rank", lane_rank.size(), L);
    sizeErr("lane_shared", lane_shared.size(), L);
    sizeErr("lane_max_servers", lane_max_servers.size(), L);
    sizeErr("op_id", op_id.size(), N);
    sizeErr("rank", rank.size(), N);
    sizeErr("lane", lane.size(), N);
    sizeErr("kind", kind.size(), N);
    sizeErr("category", category.size(), N);
    sizeErr("bytes", bytes.size(), N);
    sizeErr("order", order.size(), N);
    sizeErr("release", release.size(), N);
    sizeErr("group", group.size(), N);
    sizeErr("hold_lane", hold_lane.size(), N);
    sizeErr("hold_until", hold_until.size(), N);
    sizeErr("dep_ptr", dep_ptr.size(), N + 1);
    sizeErr("dep_kind", dep_kind.size(), E);
    sizeErr("dep_lag", dep_lag.size(), E);
    for (std::size_t k = 0; k < L; ++k) {
        if (lane_servers[k] < 1)
            throw FormatError(where + ": lane " + std::to_string(k) + " has " + std::to_string(lane_servers[k]) +
                              " servers, expected at least 1");
        if (lane_type[k] < 0 || lane_type[k] >= kNumLaneTypes)
            throw FormatError(where + ": lane " + std::to_string(k) + " has unknown type " +
                              std::to_string(lane_type[k]));
        if (lane_shared[k] != 0 && lane_shared[k] != 1)
            throw FormatError(where + ": lane " + std::to_string(k) + " has discipline " +
                              std::to_string(lane_shared[k]) + ", expected 0 (in order) or 1 (shared)");
        if (lane_max_servers[k] < lane_servers[k])
            throw FormatError(where + ": lane " + std::to_string(k) + " may grow to " +
                              std::to_string(lane_max_servers[k]) + " servers, fewer than its " +
                              std::to_string(lane_servers[k]));
    }
    if (dep_ptr[0] != 0)
        throw FormatError(where + ": dependency index must start at 0, found " + std::to_string(dep_ptr[0]));
    if (static_cast<std::uint64_t>(dep_ptr[N]) != E)
        throw FormatError(where + ": dependency index ends at " + std::to_string(dep_ptr[N]) + ", but there are " +
                          std::to_string(E) + " edges");
    // Bound on |times|: keeps every sum the scheduler forms far from int64 overflow.
    constexpr std::int64_t kMaxTime = std::int64_t(1) << 60;
    for (std::size_t i = 0; i < N; ++i) {
        if (dep_ptr[i + 1] < dep_ptr[i])
            throw FormatError(where + ": dependency index decreases at " + nodeLabel(i));
        if (lane[i] < kNoLane || lane[i] >= static_cast<std::int64_t>(L))
            throw FormatError(where + ": " + nodeLabel(i) + " is on lane " + std::to_string(lane[i]) +
                              ", which does not exist (" + std::to_string(L) + " lanes)");
        if (dur[i] < 0 || dur[i] > kMaxTime)
            throw FormatError(where + ": " + nodeLabel(i) + " has duration " + std::to_string(dur[i]) +
                              " ns, expected 0 .. 2^60");
        if (release[i] < -kMaxTime || release[i] > kMaxTime)
            throw FormatError(where + ": " + nodeLabel(i) + " has release time " + std::to_string(release[i]) +
                              " ns, outside +-2^60");
        if (hold_lane[i] == kNoLane) {
            if (hold_until[i] != -1)
                throw FormatError(where + ": " + nodeLabel(i) + " returns a pool server it never holds");
        } else if (hold_lane[i] < 0 || hold_lane[i] >= static_cast<std::int64_t>(L) || hold_until[i] < 0 ||
                   static_cast<std::uint64_t>(hold_until[i]) >= N) {
            throw FormatError(where + ": " + nodeLabel(i) + " holds a server of lane " + std::to_string(hold_lane[i]) +
                              " until node " + std::to_string(hold_until[i]) + "; one of them does not exist");
        } else if (group[i] >= 0) {
            throw FormatError(where + ": " + nodeLabel(i) + " is in a barrier group and holds a pool server");
        }
    }
    // a pool serves holds only: no node runs on it
    std::vector<char> pool(L, 0);
    for (std::size_t i = 0; i < N; ++i)
        if (hold_lane[i] >= 0) pool[static_cast<std::size_t>(hold_lane[i])] = 1;
    for (std::size_t i = 0; i < N; ++i)
        if (lane[i] >= 0 && pool[static_cast<std::size_t>(lane[i])])
            throw FormatError(where + ": " + nodeLabel(i) + " runs on lane " + std::to_string(lane[i]) +
                              ", which is a pool that nodes hold");
    for (std::size_t k = 0; k < E; ++k) {
        if (dep_src[k] < 0 || static_cast<std::uint64_t>(dep_src[k]) >= N)
            throw FormatError(where + ": edge " + std::to_string(k) + " comes from node " +
                              std::to_string(dep_src[k]) + ", which does not exist (" + std::to_string(N) +
                              " nodes)");
        if (dep_kind[k] >= kNumDepKinds)
            throw FormatError(where + ": edge " + std::to_string(k) + " has unknown kind " +
                              std::to_string(dep_kind[k]));
        if (dep_lag[k] < -kMaxTime || dep_lag[k] > kMaxTime)
            throw FormatError(where + ": edge " + std::to_string(k) + " has lag " + std::to_string(dep_lag[k]) +
                              " ns, outside +-2^60");
    }
}

inline Graph readGraphFile(const std::string &path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw FormatError(path + ": cannot open for reading");
    std::streamoff size = in.tellg();
    if (size < 0) throw FormatError(path + ": cannot determine its size");
    std::vector<char> buf(static_cast<std::size_t>(size));
    in.seekg(0);
    if (size > 0 && !in.read(buf.data(), size)) throw FormatError(path + ": read failed");
    return parseGraph(buf.data(), buf.size(), path);
}

// Lane names from lanes.csv ("index,type,rank,servers,name", name last and may contain commas).
// Checks that the table agrees with the graph's lanes.
inline void readLaneNames(const std::string &path, Graph &g) {
    std::ifstream in(path);
    if (!in) throw FormatError(path + ": cannot open for reading");
    std::string line;
    if (!std::getline(in, line) || line.rfind("index,type,rank,servers,name", 0) != 0)
        throw FormatError(path + ": expected the header 'index,type,rank,servers,name'");
    std::size_t row = 0;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        std::size_t c[4];
        std::size_t from = 0;
        for (int k = 0; k < 4; ++k) {
            c[k] = line.find(',', from);
            if (c[k] == std::string::npos) throw FormatError(path + ": line " + std::to_string(row + 2) + " has too few fields");
            from = c[k] + 1;
        }
        long long idx;
        try {
            idx = std::stoll(line.substr(0, c[0]));
        } catch (const std::exception &) {
            throw FormatError(path + ": line " + std::to_string(row + 2) + ": bad lane index");
        }
        if (idx != static_cast<long long>(row) || row >= g.numLanes())
            throw FormatError(path + ": line " + std::to_string(row + 2) + " is lane " + std::to_string(idx) +
                              "; expected lane " + std::to_string(row) + " of " + std::to_string(g.numLanes()));
        std::string name = line.substr(c[3] + 1);
        if (!name.empty() && name.back() == '\r') name.pop_back();
        g.lane_names[row] = name;
        ++row;
    }
    if (row != g.numLanes())
        throw FormatError(path + ": " + std::to_string(row) + " lanes listed, the graph has " +
                          std::to_string(g.numLanes()));
}

}  // namespace fastrack
