// replay._build: the edge passes of the graph builder's causal lags (replay/build.py,
// _causal_lags) as compiled loops over each node's edges, without the edge-sized temporaries of
// the numpy path. Optional: without this module replay/build.py runs its numpy twin, which gives
// identical graphs (tests/test_build_reference.py runs both).
//
// Plain CPython C API and the buffer protocol: numpy arrays in, preallocated numpy arrays out.
// Edges are in CSR order by dependent node (dep_ptr, length n + 1); every per-kind output array
// lists that kind's edges in edge order (what numpy's flatnonzero(kinds == K) gives).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

namespace {

constexpr int64_t NONE = INT64_MIN / 4;  // replay.build._NONE
// DepKind codes (fastrack/schema.py)
constexpr uint8_t PROGRAM = 0, LAUNCH = 1, STREAM = 2, SYNC = 4;
// OpKind codes
constexpr int8_t RUNTIME = 1, SYNC_OP = 2;

class Buf {
  public:
    Py_buffer view{};
    bool ok = false;
    Buf() = default;
    Buf(const Buf &) = delete;
    Buf &operator=(const Buf &) = delete;
    ~Buf() {
        if (ok) PyBuffer_Release(&view);
    }
    // An array of itemsize ``size`` whose format is one of ``formats`` (C-contiguous, 1-D).
    bool get(PyObject *obj, const char *what, Py_ssize_t size, const char *formats, bool writable) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj, &view, flags) != 0) return false;
        ok = true;
        const char *f = view.format ? view.format : "B";
        if (*f == '<' || *f == '=' || *f == '@') ++f;
        if (view.ndim != 1 || view.itemsize != size || std::strlen(f) != 1 || !std::strchr(formats, *f)) {
            PyErr_Format(PyExc_TypeError, "replay._build: array '%s' has the wrong type", what);
            return false;
        }
        return true;
    }
    Py_ssize_t len() const { return view.shape ? view.shape[0] : view.len / view.itemsize; }
    template <class T> T *ptr() const { return static_cast<T *>(view.buf); }
};

constexpr const char *I64 = "lq";
constexpr const char *I32 = "i";
constexpr const char *I8 = "b";
constexpr const char *U8 = "B";
constexpr const char *BOOL = "?";

bool same_len(const Buf &b, Py_ssize_t n, const char *what) {
    if (b.len() != n) {
        PyErr_Format(PyExc_ValueError, "replay._build: array '%s' has %zd entries, expected %zd", what, b.len(), n);
        return false;
    }
    return true;
}

// The graph: dep_ptr, src, kinds, start, finish; checked for consistent lengths and edge bounds.
struct Graph {
    Buf ptr, src, kinds, start, finish;
    Py_ssize_t n = 0, m = 0;
    bool get(PyObject *p, PyObject *s, PyObject *k, PyObject *st, PyObject *fi) {
        if (!ptr.get(p, "dep_ptr", 8, I64, false) || !src.get(s, "src", 8, I64, false) ||
            !kinds.get(k, "kinds", 1, U8, false) || !start.get(st, "start", 8, I64, false) ||
            !finish.get(fi, "finish", 8, I64, false))
            return false;
        n = ptr.len() - 1;
        m = src.len();
        if (n < 0 || !same_len(kinds, m, "kinds") || !same_len(start, n, "start") || !same_len(finish, n, "finish"))
            return false;
        const int64_t *pp = ptr.ptr<int64_t>();
        if (pp[0] != 0 || pp[n] != m) {
            PyErr_SetString(PyExc_ValueError, "replay._build: dep_ptr does not span the edges");
            return false;
        }
        for (Py_ssize_t v = 0; v < n; ++v)
            if (pp[v + 1] < pp[v]) {
                PyErr_SetString(PyExc_ValueError, "replay._build: dep_ptr is not non-decreasing");
                return false;
            }
        const int64_t *ss = src.ptr<int64_t>();
        for (Py_ssize_t e = 0; e < m; ++e)
            if (ss[e] < 0 || ss[e] >= n) {
                PyErr_SetString(PyExc_ValueError, "replay._build: an edge names a node that does not exist");
                return false;
            }
        return true;
    }
};

Py_ssize_t count_kind(const Graph &g, uint8_t kind) {
    const uint8_t *k = g.kinds.ptr<uint8_t>();
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
    Graph g;
    Buf rank, l_rank, l2s, idle;
    if (!g.get(a[0], a[1], a[2], a[3], a[4]) || !rank.get(a[5], "rank", 4, I32, false) ||
        !l_rank.get(a[6], "l_rank", 8, I64, true) || !l2s.get(a[7], "l2s", 8, I64, true) ||
        !idle.get(a[8], "idle", 1, BOOL, true))
        return nullptr;
    Py_ssize_t nl = count_kind(g, LAUNCH);
    if (!same_len(rank, g.n, "rank") || !same_len(l_rank, nl, "l_rank") || !same_len(l2s, nl, "l2s") ||
        !same_len(idle, nl, "idle"))
        return nullptr;
    const int64_t *ptr = g.ptr.ptr<int64_t>(), *src = g.src.ptr<int64_t>();
    const int64_t *start = g.start.ptr<int64_t>(), *finish = g.finish.ptr<int64_t>();
    const uint8_t *kinds = g.kinds.ptr<uint8_t>();
    const int32_t *rk = rank.ptr<int32_t>();
    int64_t *o_rank = l_rank.ptr<int64_t>(), *o_l2s = l2s.ptr<int64_t>();
    bool *o_idle = idle.ptr<bool>();
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
    Graph g;
    Buf rank, l_lag, lag, arrival, s_rank, s_gap, s_b2b;
    if (!g.get(a[0], a[1], a[2], a[3], a[4]) || !rank.get(a[5], "rank", 4, I32, false) ||
        !l_lag.get(a[6], "l_lag", 8, I64, false) || !lag.get(a[8], "lag", 8, I64, true) ||
        !arrival.get(a[9], "arrival", 8, I64, true) || !s_rank.get(a[10], "s_rank", 8, I64, true) ||
        !s_gap.get(a[11], "s_gap", 8, I64, true) || !s_b2b.get(a[12], "s_b2b", 1, BOOL, true))
        return nullptr;
    Py_ssize_t nl = count_kind(g, LAUNCH), ns = count_kind(g, STREAM);
    if (!same_len(rank, g.n, "rank") || !same_len(l_lag, nl, "l_lag") || !same_len(lag, g.m, "lag") ||
        !same_len(arrival, g.n, "arrival") || !same_len(s_rank, ns, "s_rank") || !same_len(s_gap, ns, "s_gap") ||
        !same_len(s_b2b, ns, "s_b2b"))
        return nullptr;
    const int64_t *ptr = g.ptr.ptr<int64_t>(), *src = g.src.ptr<int64_t>();
    const int64_t *start = g.start.ptr<int64_t>(), *finish = g.finish.ptr<int64_t>();
    const uint8_t *kinds = g.kinds.ptr<uint8_t>();
    const int32_t *rk = rank.ptr<int32_t>();
    const int64_t *ll = l_lag.ptr<int64_t>();
    int64_t *o_lag = lag.ptr<int64_t>(), *o_arr = arrival.ptr<int64_t>();
    int64_t *o_rank = s_rank.ptr<int64_t>(), *o_gap = s_gap.ptr<int64_t>();
    bool *o_b2b = s_b2b.ptr<bool>();
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
    Graph g;
    Buf kind, s_lag, lag, arrival, ready, sync_done, half;
    if (!g.get(a[0], a[1], a[2], a[3], a[4]) || !kind.get(a[5], "kind", 1, I8, false) ||
        !s_lag.get(a[6], "s_lag", 8, I64, false) || !lag.get(a[7], "lag", 8, I64, true) ||
        !arrival.get(a[8], "arrival", 8, I64, false) || !ready.get(a[9], "ready", 8, I64, true) ||
        !sync_done.get(a[10], "sync_done", 8, I64, true) || !half.get(a[11], "half", 1, BOOL, true))
        return nullptr;
    Py_ssize_t ns = count_kind(g, STREAM);
    if (!same_len(kind, g.n, "kind") || !same_len(s_lag, ns, "s_lag") || !same_len(lag, g.m, "lag") ||
        !same_len(arrival, g.n, "arrival") || !same_len(ready, g.n, "ready") ||
        !same_len(sync_done, g.n, "sync_done") || !same_len(half, g.n, "half"))
        return nullptr;
    const int64_t *ptr = g.ptr.ptr<int64_t>(), *src = g.src.ptr<int64_t>();
    const int64_t *start = g.start.ptr<int64_t>(), *finish = g.finish.ptr<int64_t>();
    const uint8_t *kinds = g.kinds.ptr<uint8_t>();
    const int8_t *kd = kind.ptr<int8_t>();
    const int64_t *sl = s_lag.ptr<int64_t>(), *arr = arrival.ptr<int64_t>();
    int64_t *o_lag = lag.ptr<int64_t>(), *o_ready = ready.ptr<int64_t>(), *o_sync = sync_done.ptr<int64_t>();
    bool *o_half = half.ptr<bool>();
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
    Buf ptr, src;
    if (!ptr.get(a[0], "dep_ptr", 8, I64, false) || !src.get(a[1], "src", 8, I64, false)) return nullptr;
    Py_ssize_t n = ptr.len() - 1;
    const int64_t *pp = ptr.ptr<int64_t>(), *ss = src.ptr<int64_t>();
    if (n < 0 || pp[0] != 0 || pp[n] != src.len()) {
        PyErr_SetString(PyExc_ValueError, "replay._build: dep_ptr does not span the edges");
        return nullptr;
    }
    for (Py_ssize_t v = 0; v < n; ++v) {
        if (pp[v + 1] < pp[v]) {
            PyErr_SetString(PyExc_ValueError, "replay._build: dep_ptr is not non-decreasing");
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
    Buf ptr, kinds, out;
    if (!ptr.get(a[0], "dep_ptr", 8, I64, false) || !kinds.get(a[1], "kinds", 1, U8, false) ||
        !out.get(a[3], "out", 1, BOOL, true))
        return nullptr;
    Py_ssize_t n = ptr.len() - 1;
    const int64_t *pp = ptr.ptr<int64_t>();
    if (n < 0 || !same_len(out, n, "out") || pp[0] != 0 || pp[n] != kinds.len()) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "replay._build: dep_ptr does not span the edges");
        return nullptr;
    }
    const uint8_t *kk = kinds.ptr<uint8_t>();
    bool *o = out.ptr<bool>();
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
    Buf values, codes;
    if (!values.get(a[0], "values", 8, I64, false) || !codes.get(a[1], "codes", 4, I32, true)) return nullptr;
    Py_ssize_t n = values.len();
    if (!same_len(codes, n, "codes")) return nullptr;
    if (n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "replay._build: too many values to encode");
        return nullptr;
    }
    const int64_t *v = values.ptr<int64_t>();
    int32_t *c = codes.ptr<int32_t>();
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

PyModuleDef module = {PyModuleDef_HEAD_INIT, "replay._build", "Compiled edge passes of replay.build.", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__build(void) { return PyModule_Create(&module); }
