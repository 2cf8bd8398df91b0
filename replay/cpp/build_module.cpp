// replay.pipeline._build: the edge passes of the graph builder's causal lags (replay/pipeline/build.py,
// _causal_lags) as compiled loops over each node's edges, without the edge-sized temporaries of
// the numpy path. Optional: without this module replay/pipeline/build.py runs its numpy twin, which gives
// identical graphs (tests/test_build_reference.py runs both).
//
// Plain CPython C API and the buffer protocol: numpy arrays in, preallocated numpy arrays out.
// Edges are in CSR order by dependent node (dep_ptr, length n + 1); every per-kind output array
// lists that kind's edges in edge order (what numpy's flatnonzero(kinds == K) gives).

#include "fastrack/pybuffer.hh"  // first: it includes Python.h

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace {

constexpr int64_t NONE = INT64_MIN / 4;  // replay.pipeline.build._NONE
// DepKind codes (fastrack_core/schema.py)
constexpr uint8_t PROGRAM = 0, LAUNCH = 1, STREAM = 2, SYNC = 4;
// OpKind codes
constexpr int8_t RUNTIME = 1, SYNC_OP = 2;

using fastrack::py::Array;
using I64 = Array<const int64_t>;  // read-only inputs
using I32 = Array<const int32_t>;
using I8 = Array<const int8_t>;
using U8 = Array<const uint8_t>;
using OutI64 = Array<int64_t>;  // preallocated outputs (writable)
using OutI32 = Array<int32_t>;
using OutBool = Array<bool>;

template <typename T>
bool same_len(const Array<T> &b, Py_ssize_t n, const char *what) {
    if (b.size() != n) {
        PyErr_Format(PyExc_ValueError, "replay.pipeline._build: array '%s' has %zd entries, expected %zd", what, b.size(), n);
        return false;
    }
    return true;
}

// The graph: dep_ptr, src, kinds, start, finish; checked for consistent lengths and edge bounds.
struct Graph {
    I64 ptr, src;
    U8 kinds;
    I64 start, finish;
    Py_ssize_t n = 0, m = 0;
    bool get(const char *fn, PyObject *p, PyObject *s, PyObject *k, PyObject *st, PyObject *fi) {
        if (!ptr.get(p, fn, "dep_ptr") || !src.get(s, fn, "src") || !kinds.get(k, fn, "kinds") ||
            !start.get(st, fn, "start") || !finish.get(fi, fn, "finish"))
            return false;
        n = ptr.size() - 1;
        m = src.size();
        if (n < 0 || !same_len(kinds, m, "kinds") || !same_len(start, n, "start") || !same_len(finish, n, "finish"))
            return false;
        const int64_t *pp = ptr.data();
        if (pp[0] != 0 || pp[n] != m) {
            PyErr_SetString(PyExc_ValueError, "replay.pipeline._build: dep_ptr does not span the edges");
            return false;
        }
        for (Py_ssize_t v = 0; v < n; ++v)
            if (pp[v + 1] < pp[v]) {
                PyErr_SetString(PyExc_ValueError, "replay.pipeline._build: dep_ptr is not non-decreasing");
                return false;
            }
        const int64_t *ss = src.data();
        for (Py_ssize_t e = 0; e < m; ++e)
            if (ss[e] < 0 || ss[e] >= n) {
                PyErr_SetString(PyExc_ValueError, "replay.pipeline._build: an edge names a node that does not exist");
                return false;
            }
        return true;
    }
};

Py_ssize_t count_kind(const Graph &g, uint8_t kind) {
    const uint8_t *k = g.kinds.data();
    Py_ssize_t c = 0;
    for (Py_ssize_t e = 0; e < g.m; ++e) c += k[e] == kind;
    return c;
}

// launch_samples(dep_ptr, src, kinds, start, finish, rank, l_rank, l2s, idle): per LAUNCH edge,
// the launched op's rank, its launch-to-start time (>= 0), and whether every other prerequisite
// of the op (stream overlap included) was done when the launching call started.
PyObject *launch_samples(PyObject *, PyObject *args) {
    PyObject *a[9];
    if (!PyArg_UnpackTuple(args, "launch_samples", 9, 9, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], &a[7],
                           &a[8]))
        return nullptr;
    constexpr const char *FN = "replay.pipeline._build.launch_samples";
    Graph g;
    I32 rank;
    OutI64 l_rank, l2s;
    OutBool idle;
    if (!g.get(FN, a[0], a[1], a[2], a[3], a[4]) || !rank.get(a[5], FN, "rank") ||
        !l_rank.get(a[6], FN, "l_rank") || !l2s.get(a[7], FN, "l2s") ||
        !idle.get(a[8], FN, "idle"))
        return nullptr;
    Py_ssize_t nl = count_kind(g, LAUNCH);
    if (!same_len(rank, g.n, "rank") || !same_len(l_rank, nl, "l_rank") || !same_len(l2s, nl, "l2s") ||
        !same_len(idle, nl, "idle"))
        return nullptr;
    const int64_t *ptr = g.ptr.data(), *src = g.src.data();
    const int64_t *start = g.start.data(), *finish = g.finish.data();
    const uint8_t *kinds = g.kinds.data();
    const int32_t *rk = rank.data();
    int64_t *o_rank = l_rank.data(), *o_l2s = l2s.data();
    bool *o_idle = idle.data();
    Py_BEGIN_ALLOW_THREADS;
    Py_ssize_t k = 0;
    for (Py_ssize_t v = 0; v < g.n; ++v) {
        int64_t other_done = NONE;
        for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) {
            if (kinds[e] == LAUNCH) continue;
            int64_t f = finish[src[e]];
            if (kinds[e] == STREAM) f += std::min<int64_t>(0, start[v] - f);
            other_done = std::max(other_done, f);
        }
        for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) {
            if (kinds[e] != LAUNCH) continue;
            int64_t call = start[src[e]];
            o_rank[k] = rk[v];
            o_l2s[k] = std::max<int64_t>(0, start[v] - call);
            o_idle[k] = other_done <= call;
            ++k;
        }
    }
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

// stream_samples(dep_ptr, src, kinds, start, finish, rank, l_lag, b2b_max, lag, arrival, s_rank,
// s_gap, s_b2b): writes each LAUNCH edge's lag (l_lag, in launch-edge order) into lag, each node's
// launch arrival (latest call start + lag over its LAUNCH edges, NONE without), and per STREAM
// edge the op's rank, the measured gap and whether it is a back-to-back gap (0 <= gap <=
// b2b_max and the op's launch had arrived when its predecessor finished).
PyObject *stream_samples(PyObject *, PyObject *args) {
    PyObject *a[13];
    if (!PyArg_UnpackTuple(args, "stream_samples", 13, 13, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], &a[7],
                           &a[8], &a[9], &a[10], &a[11], &a[12]))
        return nullptr;
    long long b2b_max = PyLong_AsLongLong(a[7]);
    if (b2b_max == -1 && PyErr_Occurred()) return nullptr;
    constexpr const char *FN = "replay.pipeline._build.stream_samples";
    Graph g;
    I32 rank;
    I64 l_lag;
    OutI64 lag, arrival, s_rank, s_gap;
    OutBool s_b2b;
    if (!g.get(FN, a[0], a[1], a[2], a[3], a[4]) || !rank.get(a[5], FN, "rank") ||
        !l_lag.get(a[6], FN, "l_lag") || !lag.get(a[8], FN, "lag") ||
        !arrival.get(a[9], FN, "arrival") || !s_rank.get(a[10], FN, "s_rank") ||
        !s_gap.get(a[11], FN, "s_gap") || !s_b2b.get(a[12], FN, "s_b2b"))
        return nullptr;
    Py_ssize_t nl = count_kind(g, LAUNCH), ns = count_kind(g, STREAM);
    if (!same_len(rank, g.n, "rank") || !same_len(l_lag, nl, "l_lag") || !same_len(lag, g.m, "lag") ||
        !same_len(arrival, g.n, "arrival") || !same_len(s_rank, ns, "s_rank") || !same_len(s_gap, ns, "s_gap") ||
        !same_len(s_b2b, ns, "s_b2b"))
        return nullptr;
    const int64_t *ptr = g.ptr.data(), *src = g.src.data();
    const int64_t *start = g.start.data(), *finish = g.finish.data();
    const uint8_t *kinds = g.kinds.data();
    const int32_t *rk = rank.data();
    const int64_t *ll = l_lag.data();
    int64_t *o_lag = lag.data(), *o_arr = arrival.data();
    int64_t *o_rank = s_rank.data(), *o_gap = s_gap.data();
    bool *o_b2b = s_b2b.data();
    Py_BEGIN_ALLOW_THREADS;
    Py_ssize_t kl = 0, ks = 0;
    for (Py_ssize_t v = 0; v < g.n; ++v) {
        int64_t arrived = NONE;
        for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) {
            if (kinds[e] != LAUNCH) continue;
            o_lag[e] = ll[kl];
            arrived = std::max(arrived, start[src[e]] + ll[kl]);
            ++kl;
        }
        o_arr[v] = arrived;
        for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) {
            if (kinds[e] != STREAM) continue;
            int64_t f = finish[src[e]], gap = start[v] - f;
            o_rank[ks] = rk[v];
            o_gap[ks] = gap;
            o_b2b[ks] = gap >= 0 && gap <= b2b_max && arrived <= f;
            ++ks;
        }
    }
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

// settle(dep_ptr, src, kinds, start, finish, kind, s_lag, lag, arrival, ready, sync_done, half):
// writes each STREAM edge's lag (s_lag, in stream-edge order) into lag; per node the earliest
// start its prerequisites allow (ready: max of finish + lag over non-LAUNCH edges and the launch
// arrival), each PROGRAM edge's lag max(0, start - ready), the latest finish of the GPU work a
// node waits for (sync_done, over SYNC edges), and half[i] = 1 for a runtime op that is the first
// half of a split blocking call (a sync op right after it in program order waits for an op it
// launched). Ties resolve as numpy's fancy assignment does: the last edge wins.
PyObject *settle(PyObject *, PyObject *args) {
    PyObject *a[12];
    if (!PyArg_UnpackTuple(args, "settle", 12, 12, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], &a[7], &a[8],
                           &a[9], &a[10], &a[11]))
        return nullptr;
    constexpr const char *FN = "replay.pipeline._build.settle";
    Graph g;
    I8 kind;
    I64 s_lag, arrival;
    OutI64 lag, ready, sync_done;
    OutBool half;
    if (!g.get(FN, a[0], a[1], a[2], a[3], a[4]) || !kind.get(a[5], FN, "kind") ||
        !s_lag.get(a[6], FN, "s_lag") || !lag.get(a[7], FN, "lag") ||
        !arrival.get(a[8], FN, "arrival") || !ready.get(a[9], FN, "ready") ||
        !sync_done.get(a[10], FN, "sync_done") || !half.get(a[11], FN, "half"))
        return nullptr;
    Py_ssize_t ns = count_kind(g, STREAM);
    if (!same_len(kind, g.n, "kind") || !same_len(s_lag, ns, "s_lag") || !same_len(lag, g.m, "lag") ||
        !same_len(arrival, g.n, "arrival") || !same_len(ready, g.n, "ready") ||
        !same_len(sync_done, g.n, "sync_done") || !same_len(half, g.n, "half"))
        return nullptr;
    const int64_t *ptr = g.ptr.data(), *src = g.src.data();
    const int64_t *start = g.start.data(), *finish = g.finish.data();
    const uint8_t *kinds = g.kinds.data();
    const int8_t *kd = kind.data();
    const int64_t *sl = s_lag.data(), *arr = arrival.data();
    int64_t *o_lag = lag.data(), *o_ready = ready.data(), *o_sync = sync_done.data();
    bool *o_half = half.data();
    bool any_split = false;
    Py_BEGIN_ALLOW_THREADS;
    Py_ssize_t ks = 0;
    for (Py_ssize_t v = 0; v < g.n; ++v) {
        int64_t bound = NONE, done = NONE;
        for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) {
            uint8_t k = kinds[e];
            if (k == STREAM) o_lag[e] = sl[ks++];
            if (k == LAUNCH) continue;
            int64_t f = finish[src[e]];
            bound = std::max(bound, f + o_lag[e]);
            if (k == SYNC) done = std::max(done, f);
            if (k == PROGRAM && kd[v] == SYNC_OP && kd[src[e]] == RUNTIME) any_split = true;
        }
        int64_t r = std::max(bound, arr[v]);
        o_ready[v] = r;
        o_sync[v] = done;
        for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e)
            if (kinds[e] == PROGRAM) o_lag[e] = std::max<int64_t>(0, start[v] - r);
    }
    std::fill(o_half, o_half + g.n, false);
    Py_END_ALLOW_THREADS;
    if (!any_split) Py_RETURN_NONE;
    // split blocking calls: the runtime op just before each sync op, and each op's launcher
    std::vector<int64_t> before, launcher;
    try {
        before.assign(g.n, -1);
        launcher.assign(g.n, -1);
    } catch (const std::bad_alloc &) {
        return PyErr_NoMemory();
    }
    for (Py_ssize_t v = 0; v < g.n; ++v)
        for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) {
            int64_t s = src[e];
            if (kinds[e] == PROGRAM && kd[v] == SYNC_OP && kd[s] == RUNTIME) before[v] = s;
            if (kinds[e] == LAUNCH) launcher[v] = s;
        }
    for (Py_ssize_t v = 0; v < g.n; ++v) {
        int64_t h = before[v];
        if (h < 0) continue;
        for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e)
            if (kinds[e] == SYNC && launcher[src[e]] == h) o_half[h] = true;
    }
    Py_RETURN_NONE;
}

// first_self_loop(dep_ptr, src): the first edge (in edge order) from a node to itself, or -1.
PyObject *first_self_loop(PyObject *, PyObject *args) {
    PyObject *a[2];
    if (!PyArg_UnpackTuple(args, "first_self_loop", 2, 2, &a[0], &a[1])) return nullptr;
    constexpr const char *FN = "replay.pipeline._build.first_self_loop";
    I64 ptr, src;
    if (!ptr.get(a[0], FN, "dep_ptr") || !src.get(a[1], FN, "src")) return nullptr;
    Py_ssize_t n = ptr.size() - 1;
    const int64_t *pp = ptr.data(), *ss = src.data();
    if (n < 0 || pp[0] != 0 || pp[n] != src.size()) {
        PyErr_SetString(PyExc_ValueError, "replay.pipeline._build: dep_ptr does not span the edges");
        return nullptr;
    }
    for (Py_ssize_t v = 0; v < n; ++v) {
        if (pp[v + 1] < pp[v]) {
            PyErr_SetString(PyExc_ValueError, "replay.pipeline._build: dep_ptr is not non-decreasing");
            return nullptr;
        }
        for (int64_t e = pp[v]; e < pp[v + 1]; ++e)
            if (ss[e] == v) return PyLong_FromLongLong(e);
    }
    return PyLong_FromLongLong(-1);
}

// has_other_edge(dep_ptr, kinds, kind, out): out[v] = 1 when node v has an edge of a kind other
// than ``kind``.
PyObject *has_other_edge(PyObject *, PyObject *args) {
    PyObject *a[4];
    if (!PyArg_UnpackTuple(args, "has_other_edge", 4, 4, &a[0], &a[1], &a[2], &a[3])) return nullptr;
    long k = PyLong_AsLong(a[2]);
    if (k == -1 && PyErr_Occurred()) return nullptr;
    constexpr const char *FN = "replay.pipeline._build.has_other_edge";
    I64 ptr;
    U8 kinds;
    OutBool out;
    if (!ptr.get(a[0], FN, "dep_ptr") || !kinds.get(a[1], FN, "kinds") ||
        !out.get(a[3], FN, "out"))
        return nullptr;
    Py_ssize_t n = ptr.size() - 1;
    const int64_t *pp = ptr.data();
    if (n < 0 || !same_len(out, n, "out") || pp[0] != 0 || pp[n] != kinds.size()) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "replay.pipeline._build: dep_ptr does not span the edges");
        return nullptr;
    }
    const uint8_t *kk = kinds.data();
    bool *o = out.data();
    for (Py_ssize_t v = 0; v < n; ++v) {
        bool any = false;
        for (int64_t e = pp[v]; e < pp[v + 1] && !any; ++e) any = kk[e] != k;
        o[v] = any;
    }
    Py_RETURN_NONE;
}

// encode(values, codes): codes[i] = the index of values[i] among the distinct values in order of
// first appearance, which are returned as bytes of int64 (what Arrow's dictionary_encode gives:
// linear time, hashed). Used for the lane rows of build_graph (_unique_rows).
PyObject *encode(PyObject *, PyObject *args) {
    PyObject *a[2];
    if (!PyArg_UnpackTuple(args, "encode", 2, 2, &a[0], &a[1])) return nullptr;
    constexpr const char *FN = "replay.pipeline._build.encode";
    I64 values;
    OutI32 codes;
    if (!values.get(a[0], FN, "values") || !codes.get(a[1], FN, "codes")) return nullptr;
    Py_ssize_t n = values.size();
    if (!same_len(codes, n, "codes")) return nullptr;
    if (n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "replay.pipeline._build: too many values to encode");
        return nullptr;
    }
    const int64_t *v = values.data();
    int32_t *c = codes.data();
    std::vector<int64_t> seen;
    std::unordered_map<int64_t, int32_t> index;
    Py_BEGIN_ALLOW_THREADS
    int64_t last = 0;
    int32_t last_code = -1;
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (last_code < 0 || v[i] != last) {  // (runs of one value are the common case)
            auto it = index.find(v[i]);
            if (it == index.end()) {
                it = index.emplace(v[i], static_cast<int32_t>(seen.size())).first;
                seen.push_back(v[i]);
            }
            last = v[i];
            last_code = it->second;
        }
        c[i] = last_code;
    }
    Py_END_ALLOW_THREADS
    return PyBytes_FromStringAndSize(reinterpret_cast<const char *>(seen.data()),
                                     static_cast<Py_ssize_t>(seen.size() * sizeof(int64_t)));
}

PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS, "Codes of values by first appearance, and the distinct values (int64 bytes)."},
    {"first_self_loop", first_self_loop, METH_VARARGS, "The first edge from a node to itself, or -1."},
    {"has_other_edge", has_other_edge, METH_VARARGS, "Per node: has an edge of another kind than the one given."},
    {"launch_samples", launch_samples, METH_VARARGS, "Per LAUNCH edge: rank, launch-to-start, launch-bound."},
    {"stream_samples", stream_samples, METH_VARARGS, "LAUNCH lags and arrivals; per STREAM edge: rank, gap, b2b."},
    {"settle", settle, METH_VARARGS, "STREAM and PROGRAM lags, ready, sync_done, split-call halves."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "replay.pipeline._build", "Compiled edge passes of replay.pipeline.build.", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__build(void) { return PyModule_Create(&module); }
