// replay.protocols._edit: the edge merge of GraphEditor.build (replay/protocols/editor.py) in one
// linear pass. Optional accelerator: editor.py falls back to its numpy merge when this module is
// missing, and tests/test_editor.py checks that both build identical graphs.
//
// merge_edges(old_ptr, old_src, old_kind, old_lag, batches, out_ptr, out_src, out_kind, out_lag
//             [, src_idx, src_val, lag_idx, lag_val])
//   old_*:   the existing CSR (int64 ptr of n0 + 1 entries; int32 src, uint8 kind, int64 lag)
//   *_idx/*_val: edits of the existing edges' sources and lags (int64 indices strictly increasing,
//            below E0; int32 source values, int64 lags), written over the copied values
//   batches: a list of (src int64[m], dst int64[m], kind uint8[m or 1], lag int64[m or 1]) in the
//            order they were added (a 1-entry kind/lag applies to every edge of its batch)
//   out_*:   preallocated: int64 ptr of n + 1 entries, and E = E0 + sum(m) src (int32), kind, lag entries
//   (sources are node indices, 32 bits: replay.graph.INDEX; a new edge's source must be a node)
// Result: every dependent's existing edges first, in their order, then its new edges in the order
// added: the stable sort by dependent of the existing edges followed by the new ones.
// Raises TypeError for an array of the wrong type or layout (fastrack/pybuffer.hh, one message style
// for every module), ValueError on a shape or index mismatch (nothing is written past any buffer).

#include "fastrack/pybuffer.hh"  // first: it includes Python.h

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr const char* FN = "replay.protocols._edit.merge_edges";
using fastrack::py::Array;
using I64 = Array<const int64_t>;  // inputs
using I32 = Array<const int32_t>;
using U8 = Array<const uint8_t>;
using OutI64 = Array<int64_t>;  // preallocated outputs (writable)
using OutI32 = Array<int32_t>;
using OutU8 = Array<uint8_t>;

// One batch of new edges: (src, dst, kind, lag).
struct Batch {
    I64 src, dst;
    U8 kind;
    I64 lag;
};

PyObject* merge_edges(PyObject*, PyObject* args) {
    PyObject *o_ptr, *o_src, *o_kind, *o_lag, *batches, *r_ptr, *r_src, *r_kind, *r_lag;
    PyObject *o_si = nullptr, *o_sv = nullptr, *o_li = nullptr, *o_lv = nullptr;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO|OOOO", &o_ptr, &o_src, &o_kind, &o_lag, &batches, &r_ptr, &r_src, &r_kind,
                          &r_lag, &o_si, &o_sv, &o_li, &o_lv))
        return nullptr;
    I64 optr, olag, si, li, lv;
    I32 osrc, sv;
    U8 okind;
    OutI64 ptr, lag;
    OutI32 src;
    OutU8 kind;
    if (!optr.get(o_ptr, FN, "old_ptr") || !osrc.get(o_src, FN, "old_src") || !okind.get(o_kind, FN, "old_kind") ||
        !olag.get(o_lag, FN, "old_lag") || !ptr.get(r_ptr, FN, "out_ptr") || !src.get(r_src, FN, "out_src") ||
        !kind.get(r_kind, FN, "out_kind") || !lag.get(r_lag, FN, "out_lag"))
        return nullptr;
    const bool edits = o_si != nullptr;
    if (edits && (o_sv == nullptr || o_li == nullptr || o_lv == nullptr)) {
        PyErr_SetString(PyExc_ValueError, "merge_edges: give all four edit arrays or none");
        return nullptr;
    }
    if (edits && (!si.get(o_si, FN, "src_idx") || !sv.get(o_sv, FN, "src_val") || !li.get(o_li, FN, "lag_idx") ||
                  !lv.get(o_lv, FN, "lag_val")))
        return nullptr;
    const Py_ssize_t n0 = optr.size() - 1;
    const Py_ssize_t n = ptr.size() - 1;
    const Py_ssize_t e0 = osrc.size();
    const auto* old_ptr = optr.data();
    if (n0 < 0 || n < n0 || okind.size() != e0 || olag.size() != e0 || old_ptr[0] != 0 || old_ptr[n0] != e0) {
        PyErr_SetString(PyExc_ValueError, "merge_edges: the existing CSR arrays do not fit together");
        return nullptr;
    }
    for (Py_ssize_t d = 0; d < n0; ++d) {
        if (old_ptr[d + 1] < old_ptr[d]) {
            PyErr_SetString(PyExc_ValueError, "merge_edges: old_ptr is not non-decreasing");
            return nullptr;
        }
    }
    Py_ssize_t n_si = 0, n_li = 0;
    const int64_t *s_idx = nullptr, *l_idx = nullptr, *l_val = nullptr;
    const int32_t *s_val = nullptr;
    if (edits) {
        n_si = si.size();
        n_li = li.size();
        s_idx = si.data();
        s_val = sv.data();
        l_idx = li.data();
        l_val = lv.data();
        bool fine = sv.size() == n_si && lv.size() == n_li;
        for (Py_ssize_t i = 0; fine && i < n_si; ++i)
            fine = s_idx[i] >= 0 && s_idx[i] < e0 && (i == 0 || s_idx[i] > s_idx[i - 1]);
        for (Py_ssize_t i = 0; fine && i < n_li; ++i)
            fine = l_idx[i] >= 0 && l_idx[i] < e0 && (i == 0 || l_idx[i] > l_idx[i - 1]);
        if (!fine) {
            PyErr_SetString(PyExc_ValueError, "merge_edges: edit indices must increase strictly and name existing edges");
            return nullptr;
        }
    }
    PyObject* seq = PySequence_Fast(batches, "merge_edges: batches must be a sequence");
    if (seq == nullptr) return nullptr;
    const Py_ssize_t nb = PySequence_Fast_GET_SIZE(seq);
    std::vector<Batch> bufs(static_cast<size_t>(nb));  // (not resized: an acquired buffer never moves)
    Py_ssize_t total = e0;
    bool ok = true;
    for (Py_ssize_t b = 0; b < nb && ok; ++b) {
        PyObject* item = PySequence_Fast_GET_ITEM(seq, b);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
            PyErr_SetString(PyExc_ValueError, "merge_edges: each batch is a (src, dst, kind, lag) tuple");
            ok = false;
            break;
        }
        Batch& q = bufs[static_cast<size_t>(b)];
        ok = q.src.get(PyTuple_GET_ITEM(item, 0), FN, "src of a batch") &&
             q.dst.get(PyTuple_GET_ITEM(item, 1), FN, "dst of a batch") &&
             q.kind.get(PyTuple_GET_ITEM(item, 2), FN, "kind of a batch") &&
             q.lag.get(PyTuple_GET_ITEM(item, 3), FN, "lag of a batch");
        if (!ok) break;
        const Py_ssize_t m = q.src.size();
        if (q.dst.size() != m || (q.kind.size() != m && q.kind.size() != 1) ||
            (q.lag.size() != m && q.lag.size() != 1)) {
            PyErr_SetString(PyExc_ValueError, "merge_edges: a batch's arrays differ in length");
            ok = false;
            break;
        }
        const int64_t* dst = q.dst.data();
        const int64_t* from = q.src.data();
        for (Py_ssize_t i = 0; i < m; ++i) {
            if (dst[i] < 0 || dst[i] >= n || from[i] < 0 || from[i] >= n) {
                PyErr_SetString(PyExc_ValueError, "merge_edges: an edge's source or dependent is not a node");
                ok = false;
                break;
            }
        }
        total += m;
    }
    if (ok && (src.size() != total || kind.size() != total || lag.size() != total)) {
        PyErr_SetString(PyExc_ValueError, "merge_edges: the output edge arrays have the wrong length");
        ok = false;
    }
    if (!ok) {
        Py_DECREF(seq);
        return nullptr;
    }
    auto* out_ptr = ptr.data();
    auto* out_src = src.data();
    auto* out_kind = kind.data();
    auto* out_lag = lag.data();
    const auto* in_src = osrc.data();
    const auto* in_kind = okind.data();
    const auto* in_lag = olag.data();
    // out_ptr[d + 1] serves as dependent d's write cursor: first the number of its edges, then
    // the start of its run (the sum of the counts before it), advanced past every edge written,
    // so that it ends as the start of run d + 1: the CSR pointer, without a cursor array.
    std::memset(out_ptr, 0, sizeof(int64_t) * static_cast<size_t>(n + 1));
    for (Py_ssize_t d = 0; d < n0; ++d) out_ptr[d + 1] = old_ptr[d + 1] - old_ptr[d];
    for (Py_ssize_t b = 0; b < nb; ++b) {
        const I64& bd = bufs[static_cast<size_t>(b)].dst;
        const int64_t* dst = bd.data();
        for (Py_ssize_t i = 0, m = bd.size(); i < m; ++i) ++out_ptr[dst[i] + 1];
    }
    int64_t run = 0;
    for (Py_ssize_t d = 0; d < n; ++d) {
        const int64_t count = out_ptr[d + 1];
        out_ptr[d + 1] = run;
        run += count;
    }
    // the existing edges of each dependent first (with their edits), then its new edges in the
    // order added
    Py_ssize_t ps = 0, pl = 0;
    for (Py_ssize_t d = 0; d < n0; ++d) {
        const int64_t lo = old_ptr[d], hi = old_ptr[d + 1], k = hi - lo, at = out_ptr[d + 1];
        if (k) {
            std::memcpy(out_src + at, in_src + lo, sizeof(int32_t) * static_cast<size_t>(k));
            std::memcpy(out_kind + at, in_kind + lo, static_cast<size_t>(k));
            std::memcpy(out_lag + at, in_lag + lo, sizeof(int64_t) * static_cast<size_t>(k));
            for (; ps < n_si && s_idx[ps] < hi; ++ps) out_src[at + (s_idx[ps] - lo)] = s_val[ps];
            for (; pl < n_li && l_idx[pl] < hi; ++pl) out_lag[at + (l_idx[pl] - lo)] = l_val[pl];
            out_ptr[d + 1] = at + k;
        }
    }
    for (Py_ssize_t b = 0; b < nb; ++b) {
        const Batch& q = bufs[static_cast<size_t>(b)];
        const int64_t* s = q.src.data();
        const int64_t* dst = q.dst.data();
        const uint8_t* k = q.kind.data();
        const int64_t* l = q.lag.data();
        const bool k1 = q.kind.size() == 1, l1 = q.lag.size() == 1;
        for (Py_ssize_t i = 0, m = q.src.size(); i < m; ++i) {
            const int64_t at = out_ptr[dst[i] + 1]++;
            out_src[at] = static_cast<int32_t>(s[i]);  // (checked above: a node index)
            out_kind[at] = k1 ? k[0] : k[i];
            out_lag[at] = l1 ? l[0] : l[i];
        }
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"merge_edges", merge_edges, METH_VARARGS,
     "merge_edges(old_ptr, old_src, old_kind, old_lag, batches, out_ptr, out_src, out_kind, out_lag): the existing "
     "CSR and the new edge batches merged into the preallocated outputs (stable by dependent)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_edit", "GraphEditor's edge merge in one linear pass.", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__edit(void) { return PyModule_Create(&module); }
