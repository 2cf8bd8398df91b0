// replay.protocols._edit: the edge merge of GraphEditor.build (replay/protocols/editor.py) in one
// linear pass. Optional accelerator: editor.py falls back to its numpy merge when this module is
// missing, and tests/test_editor.py checks that both build identical graphs.
//
// merge_edges(old_ptr, old_src, old_kind, old_lag, batches, out_ptr, out_src, out_kind, out_lag
//             [, src_idx, src_val, lag_idx, lag_val])
//   old_*:   the existing CSR (int64 ptr of n0 + 1 entries; int64 src, uint8 kind, int64 lag)
//   *_idx/*_val: edits of the existing edges' sources and lags (int64; indices strictly increasing,
//            below E0), written over the copied values
//   batches: a list of (src int64[m], dst int64[m], kind uint8[m or 1], lag int64[m or 1]) in the
//            order they were added (a 1-entry kind/lag applies to every edge of its batch)
//   out_*:   preallocated: int64 ptr of n + 1 entries, and E = E0 + sum(m) src/kind/lag entries
// Result: every dependent's existing edges first, in their order, then its new edges in the order
// added: the stable sort by dependent of the existing edges followed by the new ones.
// Raises ValueError on a shape, type or index mismatch (nothing is written past any buffer).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

// A C-contiguous 1-D buffer of one element type, released on scope exit.
struct Buf {
    Py_buffer view{};
    bool held = false;
    Buf() = default;
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
    ~Buf() {
        if (held) PyBuffer_Release(&view);
    }
    Py_ssize_t size() const { return view.len / view.itemsize; }
};

bool is_int64(const char* fmt) {
    if (fmt == nullptr) return false;
    if (*fmt == '<' || *fmt == '=' || *fmt == '@') ++fmt;
    return (fmt[0] == 'q' || fmt[0] == 'l') && fmt[1] == '\0';
}

bool is_uint8(const char* fmt) {
    if (fmt == nullptr) return false;
    if (*fmt == '<' || *fmt == '=' || *fmt == '@' || *fmt == '|') ++fmt;
    return fmt[0] == 'B' && fmt[1] == '\0';
}

// Acquire ``obj`` as a contiguous 1-D buffer of int64 (``want_u8`` false) or uint8 (true).
bool get(PyObject* obj, Buf& b, bool want_u8, bool writable, const char* what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b.view, flags) != 0) return false;
    b.held = true;
    bool ok = want_u8 ? (b.view.itemsize == 1 && is_uint8(b.view.format))
                      : (b.view.itemsize == 8 && is_int64(b.view.format));
    if (!ok || b.view.ndim > 1) {
        PyErr_Format(PyExc_ValueError, "merge_edges: %s must be a contiguous 1-D %s array", what,
                     want_u8 ? "uint8" : "int64");
        return false;
    }
    return true;
}

PyObject* merge_edges(PyObject*, PyObject* args) {
    PyObject *o_ptr, *o_src, *o_kind, *o_lag, *batches, *r_ptr, *r_src, *r_kind, *r_lag;
    PyObject *o_si = nullptr, *o_sv = nullptr, *o_li = nullptr, *o_lv = nullptr;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO|OOOO", &o_ptr, &o_src, &o_kind, &o_lag, &batches, &r_ptr, &r_src, &r_kind,
                          &r_lag, &o_si, &o_sv, &o_li, &o_lv))
        return nullptr;
    Buf optr, osrc, okind, olag, ptr, src, kind, lag, si, sv, li, lv;
    if (!get(o_ptr, optr, false, false, "old_ptr") || !get(o_src, osrc, false, false, "old_src") ||
        !get(o_kind, okind, true, false, "old_kind") || !get(o_lag, olag, false, false, "old_lag") ||
        !get(r_ptr, ptr, false, true, "out_ptr") || !get(r_src, src, false, true, "out_src") ||
        !get(r_kind, kind, true, true, "out_kind") || !get(r_lag, lag, false, true, "out_lag"))
        return nullptr;
    const bool edits = o_si != nullptr;
    if (edits && (o_sv == nullptr || o_li == nullptr || o_lv == nullptr)) {
        PyErr_SetString(PyExc_ValueError, "merge_edges: give all four edit arrays or none");
        return nullptr;
    }
    if (edits && (!get(o_si, si, false, false, "src_idx") || !get(o_sv, sv, false, false, "src_val") ||
                  !get(o_li, li, false, false, "lag_idx") || !get(o_lv, lv, false, false, "lag_val")))
        return nullptr;
    const Py_ssize_t n0 = optr.size() - 1;
    const Py_ssize_t n = ptr.size() - 1;
    const Py_ssize_t e0 = osrc.size();
    const auto* old_ptr = static_cast<const int64_t*>(optr.view.buf);
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
    const int64_t *s_idx = nullptr, *s_val = nullptr, *l_idx = nullptr, *l_val = nullptr;
    if (edits) {
        n_si = si.size();
        n_li = li.size();
        s_idx = static_cast<const int64_t*>(si.view.buf);
        s_val = static_cast<const int64_t*>(sv.view.buf);
        l_idx = static_cast<const int64_t*>(li.view.buf);
        l_val = static_cast<const int64_t*>(lv.view.buf);
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
    std::vector<Buf> bufs(static_cast<size_t>(4 * nb));
    Py_ssize_t total = e0;
    bool ok = true;
    for (Py_ssize_t b = 0; b < nb && ok; ++b) {
        PyObject* item = PySequence_Fast_GET_ITEM(seq, b);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
            PyErr_SetString(PyExc_ValueError, "merge_edges: each batch is a (src, dst, kind, lag) tuple");
            ok = false;
            break;
        }
        Buf* q = &bufs[static_cast<size_t>(4 * b)];
        ok = get(PyTuple_GET_ITEM(item, 0), q[0], false, false, "a batch's src") &&
             get(PyTuple_GET_ITEM(item, 1), q[1], false, false, "a batch's dst") &&
             get(PyTuple_GET_ITEM(item, 2), q[2], true, false, "a batch's kind") &&
             get(PyTuple_GET_ITEM(item, 3), q[3], false, false, "a batch's lag");
        if (!ok) break;
        const Py_ssize_t m = q[0].size();
        if (q[1].size() != m || (q[2].size() != m && q[2].size() != 1) || (q[3].size() != m && q[3].size() != 1)) {
            PyErr_SetString(PyExc_ValueError, "merge_edges: a batch's arrays differ in length");
            ok = false;
            break;
        }
        const auto* dst = static_cast<const int64_t*>(q[1].view.buf);
        for (Py_ssize_t i = 0; i < m; ++i) {
            if (dst[i] < 0 || dst[i] >= n) {
                PyErr_SetString(PyExc_ValueError, "merge_edges: an edge's dependent is not a node");
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
    auto* out_ptr = static_cast<int64_t*>(ptr.view.buf);
    auto* out_src = static_cast<int64_t*>(src.view.buf);
    auto* out_kind = static_cast<uint8_t*>(kind.view.buf);
    auto* out_lag = static_cast<int64_t*>(lag.view.buf);
    const auto* in_src = static_cast<const int64_t*>(osrc.view.buf);
    const auto* in_kind = static_cast<const uint8_t*>(okind.view.buf);
    const auto* in_lag = static_cast<const int64_t*>(olag.view.buf);
    // out_ptr[d + 1] serves as dependent d's write cursor: first the number of its edges, then
    // the start of its run (the sum of the counts before it), advanced past every edge written,
    // so that it ends as the start of run d + 1: the CSR pointer, without a cursor array.
    std::memset(out_ptr, 0, sizeof(int64_t) * static_cast<size_t>(n + 1));
    for (Py_ssize_t d = 0; d < n0; ++d) out_ptr[d + 1] = old_ptr[d + 1] - old_ptr[d];
    for (Py_ssize_t b = 0; b < nb; ++b) {
        const Buf& bd = bufs[static_cast<size_t>(4 * b + 1)];
        const auto* dst = static_cast<const int64_t*>(bd.view.buf);
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
            std::memcpy(out_src + at, in_src + lo, sizeof(int64_t) * static_cast<size_t>(k));
            std::memcpy(out_kind + at, in_kind + lo, static_cast<size_t>(k));
            std::memcpy(out_lag + at, in_lag + lo, sizeof(int64_t) * static_cast<size_t>(k));
            for (; ps < n_si && s_idx[ps] < hi; ++ps) out_src[at + (s_idx[ps] - lo)] = s_val[ps];
            for (; pl < n_li && l_idx[pl] < hi; ++pl) out_lag[at + (l_idx[pl] - lo)] = l_val[pl];
            out_ptr[d + 1] = at + k;
        }
    }
    for (Py_ssize_t b = 0; b < nb; ++b) {
        const Buf* q = &bufs[static_cast<size_t>(4 * b)];
        const auto* s = static_cast<const int64_t*>(q[0].view.buf);
        const auto* dst = static_cast<const int64_t*>(q[1].view.buf);
        const auto* k = static_cast<const uint8_t*>(q[2].view.buf);
        const auto* l = static_cast<const int64_t*>(q[3].view.buf);
        const bool k1 = q[2].size() == 1, l1 = q[3].size() == 1;
        for (Py_ssize_t i = 0, m = q[0].size(); i < m; ++i) {
            const int64_t at = out_ptr[dst[i] + 1]++;
            out_src[at] = s[i];
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

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_edit", "GraphEditor's edge merge in one linear pass.", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__edit(void) { return PyModule_Create(&module); }
