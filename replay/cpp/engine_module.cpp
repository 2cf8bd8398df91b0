// replay.pipeline._engine: the Fastrack core (fastrack/engine.hh, results.hh) as a CPython extension.
//
// replay/pipeline/engine.py and replay/pipeline/results.py call it when it imports (docs/performance.md,
// "Compiled core"). Plain C API and the buffer protocol: the graph's numpy arrays are read in
// place through a GraphView (nothing is copied), the results go into numpy arrays Python
// allocated, and the GIL is released while the loops run. Problems with the graph come back as
// status codes, which replay/pipeline/engine.py turns into the same GraphError messages as the numba
// engine; wrong arguments (a dtype, a length, an index out of range) raise TypeError/ValueError.
//
//   schedule(g, out) -> (status, where, placed)
//       g: the 14 arrays of a GraphView, in its order (lane_servers i32, lane_shared bool/i8,
//          lane_max_servers i32, lane i32, dur i64, order i64, release i64, group i32,
//          hold_lane i32, hold_until i32, dep_ptr i64, dep_src i32, dep_kind u8, dep_lag i64;
//          node indices are fastrack::NodeIndex, int32);
//       out: start, finish (i64), crit_pred (i32), bound_by (i8), order (i32), slot_wait (i64),
//          n each, and lane_servers (i64, L).
//   topological_order(g, issue) -> (status, where, placed)      issue: i32, n
//   retime(g, seq, pool_size, start, finish) -> bool              seq: i32, n (a placement order);
//       pool_size: i64, L; start, finish: i64, n (written). False: the order does not fit the graph
//   is_acyclic(g, extra_src, extra_dst) -> bool                   i64 node indices
//   walk_path(start, finish, crit_pred (i32), bound_by, slot_wait, node, t, t_stop, node_code (i8 or
//             i64), edge_code, launch, release, group, lane, wait, totals) -> None
// Status codes: fastrack::Status (module constants OK, GROUP_EDGE, CYCLE, POOL_RETURN, STUCK).
#include "fastrack/pybuffer.hh"  // first: it includes Python.h

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "fastrack/engine.hh"
#include "fastrack/results.hh"
#include "fastrack/view.hh"

namespace {

using fastrack::Span;
using fastrack::py::Buffers;
using fastrack::py::Elem;

template <typename T>
bool getAt(Buffers &bufs, PyObject *tuple, Py_ssize_t k, const char *name, Span<T> &out,
           Elem elem = fastrack::py::elemOf<T>()) {
    return bufs.get(PyTuple_GET_ITEM(tuple, k), name, out, elem);
}

// The GraphView of the tuple ``g`` (see the module comment); checked with fastrack::checkView.
bool graphView(Buffers &bufs, PyObject *g, fastrack::GraphView &v) {
    if (!PyTuple_Check(g) || PyTuple_GET_SIZE(g) != 14) {
        PyErr_SetString(PyExc_TypeError, "the graph: expected a tuple of 14 arrays");
        return false;
    }
    Span<const std::int8_t> shared;
    const bool ok =
        getAt(bufs, g, 0, "lane_servers", v.lane_servers) &&
        getAt(bufs, g, 1, "lane_shared", shared, Elem::BoolOrInt8) &&
        getAt(bufs, g, 2, "lane_max_servers", v.lane_max_servers) &&
        getAt(bufs, g, 3, "lane", v.lane) && getAt(bufs, g, 4, "dur", v.dur) &&
        getAt(bufs, g, 5, "order", v.order) && getAt(bufs, g, 6, "release", v.release) &&
        getAt(bufs, g, 7, "group", v.group) && getAt(bufs, g, 8, "hold_lane", v.hold_lane) &&
        getAt(bufs, g, 9, "hold_until", v.hold_until) &&
        getAt(bufs, g, 10, "dep_ptr", v.dep_ptr) && getAt(bufs, g, 11, "dep_src", v.dep_src) &&
        getAt(bufs, g, 12, "dep_kind", v.dep_kind) && getAt(bufs, g, 13, "dep_lag", v.dep_lag);
    if (!ok) return false;
    v.lane_shared = shared;
    if (v.dep_ptr.size == 0) {
        PyErr_SetString(PyExc_ValueError, "the graph: dep_ptr must have n + 1 entries");
        return false;
    }
    if (const char *why = fastrack::checkView(v)) {
        PyErr_Format(PyExc_ValueError, "the graph: %s", why);
        return false;
    }
    return true;
}

// Runs ``body`` without the GIL; turns C++ exceptions into Python ones. Returns false on error.
template <typename F>
bool withoutGil(F &&body) {
    int failed = 0;  // 1: out of memory, 2: another exception
    std::string what;
    Py_BEGIN_ALLOW_THREADS
    try {
        body();
    } catch (const std::bad_alloc &) {
        failed = 1;
    } catch (const std::exception &e) {
        failed = 2;
        what = e.what();
    }
    Py_END_ALLOW_THREADS
    if (failed == 1) {
        PyErr_NoMemory();
        return false;
    }
    if (failed == 2) {
        PyErr_SetString(PyExc_RuntimeError, what.c_str());
        return false;
    }
    return true;
}

PyObject *outcome(const fastrack::Outcome &o) {
    return Py_BuildValue("(iLn)", static_cast<int>(o.status), static_cast<long long>(o.where),
                         static_cast<Py_ssize_t>(o.placed));
}

bool lengthIs(std::size_t got, std::size_t want, const char *name) {
    if (got == want) return true;
    PyErr_Format(PyExc_ValueError, "%s: %zu entries, expected %zu", name, got, want);
    return false;
}

PyObject *py_schedule(PyObject *, PyObject *args) {
    PyObject *g, *o;
    if (!PyArg_ParseTuple(args, "O!O!:schedule", &PyTuple_Type, &g, &PyTuple_Type, &o)) return nullptr;
    Buffers bufs("replay.pipeline._engine.schedule");
    fastrack::GraphView v;
    if (!graphView(bufs, g, v)) return nullptr;
    if (PyTuple_GET_SIZE(o) != 7) {
        PyErr_SetString(PyExc_TypeError, "the outputs: expected a tuple of 7 arrays");
        return nullptr;
    }
    fastrack::ScheduleOut s;
    if (!(getAt(bufs, o, 0, "start", s.start) && getAt(bufs, o, 1, "finish", s.finish) &&
          getAt(bufs, o, 2, "crit_pred", s.crit_pred) &&
          getAt(bufs, o, 3, "bound_by", s.bound_by) && getAt(bufs, o, 4, "order", s.order) &&
          getAt(bufs, o, 5, "slot_wait", s.slot_wait) &&
          getAt(bufs, o, 6, "lane_servers", s.lane_servers)))
        return nullptr;
    const std::size_t n = v.n();
    if (!(lengthIs(s.start.size, n, "start") && lengthIs(s.finish.size, n, "finish") &&
          lengthIs(s.crit_pred.size, n, "crit_pred") && lengthIs(s.bound_by.size, n, "bound_by") &&
          lengthIs(s.order.size, n, "order") && lengthIs(s.slot_wait.size, n, "slot_wait") &&
          lengthIs(s.lane_servers.size, v.numLanes(), "lane_servers")))
        return nullptr;
    fastrack::Outcome res;
    if (!withoutGil([&] { res = fastrack::scheduleView(v, s); })) return nullptr;
    return outcome(res);
}

PyObject *py_topological_order(PyObject *, PyObject *args) {
    PyObject *g, *issueObj;
    if (!PyArg_ParseTuple(args, "O!O:topological_order", &PyTuple_Type, &g, &issueObj)) return nullptr;
    Buffers bufs("replay.pipeline._engine.topological_order");
    fastrack::GraphView v;
    Span<fastrack::NodeIndex> issue;
    if (!graphView(bufs, g, v) || !bufs.get(issueObj, "issue", issue) ||
        !lengthIs(issue.size, v.n(), "issue"))
        return nullptr;
    fastrack::Outcome res;
    if (!withoutGil([&] { res = fastrack::topologicalOrderView(v, issue); })) return nullptr;
    return outcome(res);
}

PyObject *py_retime(PyObject *, PyObject *args) {
    PyObject *g, *seqO, *poolO, *startO, *finishO;
    if (!PyArg_ParseTuple(args, "O!OOOO:retime", &PyTuple_Type, &g, &seqO, &poolO, &startO, &finishO)) return nullptr;
    Buffers bufs("replay.pipeline._engine.retime");
    fastrack::GraphView v;
    Span<const fastrack::NodeIndex> seq;
    Span<const std::int64_t> pool;
    Span<std::int64_t> start, finish;
    if (!graphView(bufs, g, v) || !bufs.get(seqO, "seq", seq) || !bufs.get(poolO, "pool_size", pool) ||
        !bufs.get(startO, "start", start) || !bufs.get(finishO, "finish", finish))
        return nullptr;
    if (!(lengthIs(seq.size, v.n(), "seq") && lengthIs(pool.size, v.numLanes(), "pool_size") &&
          lengthIs(start.size, v.n(), "start") && lengthIs(finish.size, v.n(), "finish")))
        return nullptr;
    bool ok = false;
    if (!withoutGil([&] { ok = fastrack::retimeView(v, seq, pool, start, finish); })) return nullptr;
    return PyBool_FromLong(ok);
}

PyObject *py_is_acyclic(PyObject *, PyObject *args) {
    PyObject *g, *xs, *xd;
    if (!PyArg_ParseTuple(args, "O!OO:is_acyclic", &PyTuple_Type, &g, &xs, &xd)) return nullptr;
    Buffers bufs("replay.pipeline._engine.is_acyclic");
    fastrack::GraphView v;
    Span<const std::int64_t> src, dst;
    if (!graphView(bufs, g, v) || !bufs.get(xs, "extra_src", src) ||
        !bufs.get(xd, "extra_dst", dst) || !lengthIs(dst.size, src.size, "extra_dst"))
        return nullptr;
    const std::int64_t n = static_cast<std::int64_t>(v.n());
    for (std::size_t k = 0; k < src.size; ++k)
        if (src[k] < 0 || src[k] >= n || dst[k] < 0 || dst[k] >= n) {
            PyErr_SetString(PyExc_ValueError, "extra edges: a node index is out of range");
            return nullptr;
        }
    bool ok = false;
    if (!withoutGil([&] { ok = fastrack::acyclicView(v, src, dst); })) return nullptr;
    return PyBool_FromLong(ok);
}

PyObject *py_walk_path(PyObject *, PyObject *args) {
    PyObject *startO, *finishO, *predO, *boundO, *waitO, *ncodeO, *ecodeO, *totalsO;
    long long node, t, tStop, launch, release, group, lane, wait;
    if (!PyArg_ParseTuple(args, "OOOOOLLLOOLLLLLO:walk_path", &startO, &finishO, &predO, &boundO, &waitO, &node, &t,
                          &tStop, &ncodeO, &ecodeO, &launch, &release, &group, &lane, &wait, &totalsO))
        return nullptr;
    Buffers bufs("replay.pipeline._engine.walk_path");
    Span<const std::int64_t> start, finish, slotWait, ecode;
    Span<const fastrack::NodeIndex> pred;
    Span<const std::int8_t> bound;
    Span<std::int64_t> totals;
    if (!(bufs.get(startO, "start", start) && bufs.get(finishO, "finish", finish) &&
          bufs.get(predO, "crit_pred", pred) && bufs.get(boundO, "bound_by", bound) &&
          bufs.get(waitO, "slot_wait", slotWait) && bufs.get(ecodeO, "edge_code", ecode) &&
          bufs.get(totalsO, "totals", totals)))
        return nullptr;
    const std::size_t n = start.size;
    if (!(lengthIs(finish.size, n, "finish") && lengthIs(pred.size, n, "crit_pred") &&
          lengthIs(bound.size, n, "bound_by") && lengthIs(slotWait.size, n, "slot_wait")))
        return nullptr;
    // node codes: int8 (the graph's categories) or int64 (callers' own codes)
    const Py_ssize_t itemsize = fastrack::py::itemsizeOf(ncodeO, bufs.func(), "node_code");
    if (itemsize < 0) return nullptr;
    bool ok = false;
    if (itemsize == 1) {
        Span<const std::int8_t> ncode;
        if (!bufs.get(ncodeO, "node_code", ncode) || !lengthIs(ncode.size, n, "node_code")) return nullptr;
        if (!withoutGil([&] {
                ok = fastrack::walkPath(start, finish, pred, bound, slotWait, node, t, tStop, ncode, ecode, launch,
                                        release, group, lane, wait, totals);
            }))
            return nullptr;
    } else {
        Span<const std::int64_t> ncode;
        if (!bufs.get(ncodeO, "node_code", ncode) || !lengthIs(ncode.size, n, "node_code")) return nullptr;
        if (!withoutGil([&] {
                ok = fastrack::walkPath(start, finish, pred, bound, slotWait, node, t, tStop, ncode, ecode, launch,
                                        release, group, lane, wait, totals);
            }))
            return nullptr;
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "walk_path: a node, predecessor or code on the path is out of range");
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"schedule", py_schedule, METH_VARARGS, "schedule(graph_arrays, outputs) -> (status, where, placed)"},
    {"topological_order", py_topological_order, METH_VARARGS,
     "topological_order(graph_arrays, issue) -> (status, where, placed)"},
    {"retime", py_retime, METH_VARARGS, "retime(graph_arrays, seq, pool_size, start, finish) -> bool"},
    {"is_acyclic", py_is_acyclic, METH_VARARGS, "is_acyclic(graph_arrays, extra_src, extra_dst) -> bool"},
    {"walk_path", py_walk_path, METH_VARARGS, "walk_path(start, finish, crit_pred, bound_by, slot_wait, node, t, "
                                              "t_stop, node_code, edge_code, launch, release, group, lane, wait, "
                                              "totals) -> None"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, "replay.pipeline._engine",
    "The Fastrack scheduler and critical-path walk in C++ (replay/cpp; docs/performance.md, 'Compiled core').",
    -1, kMethods, nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__engine(void) {
    PyObject *m = PyModule_Create(&kModule);
    if (m == nullptr) return nullptr;
    if (PyModule_AddIntConstant(m, "OK", static_cast<int>(fastrack::Status::Ok)) < 0 ||
        PyModule_AddIntConstant(m, "GROUP_EDGE", static_cast<int>(fastrack::Status::GroupEdge)) < 0 ||
        PyModule_AddIntConstant(m, "CYCLE", static_cast<int>(fastrack::Status::Cycle)) < 0 ||
        PyModule_AddIntConstant(m, "POOL_RETURN", static_cast<int>(fastrack::Status::PoolReturn)) < 0 ||
        PyModule_AddIntConstant(m, "STUCK", static_cast<int>(fastrack::Status::Stuck)) < 0) {
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
