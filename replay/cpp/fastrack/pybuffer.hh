// Fastrack's CPython extension modules: numpy arrays acquired through the buffer protocol.
//
// For the extension modules only (replay/cpp/*_module.cpp): this header includes Python.h, so
// the core headers beside it (view.hh, graph.hh, engine.hh, results.hh) never include it, and
// neither do the standalone driver nor the gem5 build (tests/test_native_engine.py checks that).
// Include it first in a module, as Python.h asks to come before the standard headers.
//
// One rule for every array a module reads or fills: a C-contiguous buffer of at most one
// dimension (a 0-d array counts as one entry) whose elements have the C type's size and a
// matching struct-module format code in native byte order. An output (a non-const element type)
// must be writable. Anything else raises TypeError in one style, naming the module function and
// the array: "replay.pipeline._build.settle: array lag must be a writable C-contiguous 1-D int64 array".
// Buffers are released on every path out (scope exit). No numpy headers are used.
#pragma once

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <cstddef>
#include <deque>
#include <new>
#include <type_traits>

#include "fastrack/view.hh"

namespace fastrack::py {

// What an array's elements are, beyond their size.
enum class Elem {
    Int,         // signed integers (b h i l q)
    UInt,        // unsigned integers (B H I L Q; a buffer without a format is bytes)
    Bool,        // numpy bool (?)
    BoolOrInt8,  // numpy bool or int8, read as int8 0/1
};

// The Elem of a C element type: bool, signed or unsigned integer.
template <typename T>
constexpr Elem elemOf() {
    using U = std::remove_const_t<T>;
    static_assert(std::is_integral_v<U>, "arrays of integers or bools only");
    if constexpr (std::is_same_v<U, bool>)
        return Elem::Bool;
    else if constexpr (std::is_signed_v<U>)
        return Elem::Int;
    else
        return Elem::UInt;
}

namespace detail {

// Whether a buffer's format names one native-order element of ``elem`` (the size is checked
// apart, against the itemsize).
inline bool formatIs(const char *fmt, Elem elem) {
    if (fmt == nullptr) fmt = "B";  // the buffer protocol's default: unsigned bytes
    const char native = PY_LITTLE_ENDIAN ? '<' : '>';
    if (*fmt == '@' || *fmt == '=' || *fmt == '|' || *fmt == native) ++fmt;
    if (fmt[0] == '\0' || fmt[1] != '\0') return false;
    const char c = fmt[0];
    switch (elem) {
    case Elem::Int:
        return c == 'b' || c == 'h' || c == 'i' || c == 'l' || c == 'q';
    case Elem::UInt:
        return c == 'B' || c == 'H' || c == 'I' || c == 'L' || c == 'Q';
    case Elem::Bool:
        return c == '?';
    case Elem::BoolOrInt8:
        return c == '?' || c == 'b';
    }
    return false;
}

// Sets the TypeError for an array that is not what ``func`` takes.
inline void refuse(const char *func, const char *name, Elem elem, Py_ssize_t itemsize, bool writable) {
    const int bits = static_cast<int>(8 * itemsize);
    const char *w = writable ? "writable " : "";
    switch (elem) {
    case Elem::Bool:
        PyErr_Format(PyExc_TypeError, "%s: array %s must be a %sC-contiguous 1-D bool array", func, name, w);
        break;
    case Elem::BoolOrInt8:
        PyErr_Format(PyExc_TypeError, "%s: array %s must be a %sC-contiguous 1-D bool or int8 array", func, name, w);
        break;
    default:
        PyErr_Format(PyExc_TypeError, "%s: array %s must be a %sC-contiguous 1-D %s%d array", func, name, w,
                     elem == Elem::UInt ? "uint" : "int", bits);
    }
}

}  // namespace detail

// One acquired buffer, released when it goes out of scope. Neither copied nor moved: an exporter
// may point the Py_buffer's fields into the struct itself.
class Held {
  public:
    Held() = default;
    Held(const Held &) = delete;
    Held &operator=(const Held &) = delete;
    ~Held() {
        if (held_) PyBuffer_Release(&view_);
    }

    // Acquires ``obj`` (see the header comment for the rule); ``func`` and ``name`` go into the
    // error. Returns false with a Python error set.
    bool acquire(PyObject *obj, Elem elem, Py_ssize_t itemsize, bool writable, const char *func, const char *name) {
        if (held_) {
            PyBuffer_Release(&view_);
            held_ = false;
        }
        const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj, &view_, flags) != 0) {
            PyErr_Clear();  // (not a buffer, not contiguous, read-only): said by the one message below
            detail::refuse(func, name, elem, itemsize, writable);
            return false;
        }
        held_ = true;
        if (view_.ndim > 1 || view_.itemsize != itemsize || !detail::formatIs(view_.format, elem)) {
            detail::refuse(func, name, elem, itemsize, writable);
            return false;
        }
        return true;
    }

    void *buf() const { return view_.buf; }
    Py_ssize_t size() const { return held_ ? view_.len / view_.itemsize : 0; }

  private:
    Py_buffer view_{};
    bool held_ = false;
};

// An array of ``T`` (const T: read only; T: an output, must be writable) held for one call.
template <typename T>
class Array {
  public:
    bool get(PyObject *obj, const char *func, const char *name, Elem elem = elemOf<T>()) {
        return held_.acquire(obj, elem, static_cast<Py_ssize_t>(sizeof(T)), !std::is_const_v<T>, func, name);
    }
    T *data() const { return static_cast<T *>(held_.buf()); }
    Py_ssize_t size() const { return held_.size(); }
    Span<T> span() const { return Span<T>{data(), static_cast<std::size_t>(size())}; }

  private:
    Held held_;
};

// The arrays of one call of ``func``, read through Spans, all released when it returns.
class Buffers {
  public:
    explicit Buffers(const char *func) : func_(func) {}
    Buffers(const Buffers &) = delete;
    Buffers &operator=(const Buffers &) = delete;

    const char *func() const { return func_; }

    template <typename T>
    bool get(PyObject *obj, const char *name, Span<T> &out, Elem elem = elemOf<T>()) {
        Held *h;
        try {
            h = &held_.emplace_back();  // a deque never moves what it holds
        } catch (const std::bad_alloc &) {
            PyErr_NoMemory();
            return false;
        }
        if (!h->acquire(obj, elem, static_cast<Py_ssize_t>(sizeof(T)), !std::is_const_v<T>, func_, name)) return false;
        out.data = static_cast<T *>(h->buf());
        out.size = static_cast<std::size_t>(h->size());
        return true;
    }

  private:
    const char *func_;
    std::deque<Held> held_;
};

// The itemsize of ``obj``'s C-contiguous buffer (for a function that takes more than one element
// type), or -1 with a TypeError naming ``func`` and ``name``.
inline Py_ssize_t itemsizeOf(PyObject *obj, const char *func, const char *name) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: array %s must be a C-contiguous 1-D array", func, name);
        return -1;
    }
    const Py_ssize_t size = view.itemsize;
    PyBuffer_Release(&view);
    return size;
}

}  // namespace fastrack::py
