// tracegen.importers._kineto: the whole-file Kineto reader's parse and event loop in one pass.
//
// The twin of `jsonwhole.parse_whole` (Python's json building the whole document) followed by
// `kineto._collect` (sorting the events into five row lists): it reads the decompressed bytes once,
// checks the whole document as strict JSON, and builds Python objects only for what `_collect`
// keeps. Anything it does not handle with certainty makes it return None, and the Python path
// runs as before (it then gives the result or the error). The rules (tracegen/importers/kinetoscan.py
// states them for readers of the Python side; tests/test_kineto_scan.py proves the identity):
//
// * JSON as `json` (strict) reads it: whitespace " \t\n\r"; strings without control characters,
//   with the escapes \" \\ \/ \b \f \n \r \t \uXXXX, as strict UTF-8 (no encoded surrogates, no
//   overlong forms, nothing above U+10FFFF); a \u escape of a surrogate is declined (the guard scan
//   refuses those documents already); numbers by the JSON grammar, an integer without '.', 'e' or
//   'E' as a Python int (declined beyond int64), others as a correctly rounded float
//   (std::from_chars); true, false, null; NaN and Infinity declined; nothing after the document
//   but whitespace. An object that names a key twice keeps the last value, in the first key's place.
// * The top level: an array of events (bare), or an object without a key twice whose
//   "traceEvents" is an array; the members before "traceEvents" are built (a dict).
// * Each event: what `_collect` does with the dict json would build, field by field (its fast
//   path, its `.get` path, the same defaults); where `_collect` raises (an event that is not an
//   object, a category that is an array or object, a 'name' that is not a string on the paths
//   that check it, an 'args' that is neither an object nor false-like where `.get` is called on
//   it) the scanner declines.
//
// scan(buffer, cats) -> None or (before: dict, bare: bool, last_event_end: int, num_events: int,
//                                gpu: list, rt: list, sync: list, ann: list, rpc: list)
// cats maps a category string to its code, kineto._CATS (0 kernel, 1 memcpy, 2 memset, 3 runtime,
// 4 sync, 5 cpu_op, 6 user_annotation). last_event_end is the byte offset of the last byte of the
// last event (-1: no event).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace {

struct Bail {};    // outside what the scanner handles: return None
struct PyFail {};  // a Python error is set (memory): propagate it

constexpr int MAX_DEPTH = 512;  // the guard scan limits nesting far below this; here only to bound the C stack

enum Code : int { K = 0, MC = 1, MS = 2, RT = 3, SY = 4, OP = 5, UA = 6 };

class Ref {  // an owned reference
  public:
    Ref() = default;
    explicit Ref(PyObject *o) : p_(o) {}
    Ref(const Ref &) = delete;
    Ref &operator=(const Ref &) = delete;
    Ref(Ref &&o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    Ref &operator=(Ref &&o) noexcept {
        if (this != &o) {
            Py_XDECREF(p_);
            p_ = o.p_;
            o.p_ = nullptr;
        }
        return *this;
    }
    ~Ref() { Py_XDECREF(p_); }
    PyObject *get() const { return p_; }
    PyObject *release() {
        PyObject *r = p_;
        p_ = nullptr;
        return r;
    }

  private:
    PyObject *p_ = nullptr;
};

inline Ref own(PyObject *o) {
    if (o == nullptr) throw PyFail{};
    return Ref(o);
}
inline Ref borrow(PyObject *o) {
    Py_INCREF(o);
    return Ref(o);
}

template <class... R>
Ref tuple_of(R &&...items) {
    PyObject *t = PyTuple_New(sizeof...(items));
    if (t == nullptr) throw PyFail{};
    Py_ssize_t k = 0;
    ((PyTuple_SET_ITEM(t, k++, items.release())), ...);
    return Ref(t);
}

inline void append(PyObject *list, Ref &&item) {
    if (PyList_Append(list, item.get()) < 0) throw PyFail{};
}

// byte classes
struct Tables {
    unsigned char str_stop[256];  // 1: ends a run of plain string bytes ('"', '\\', control, non-ASCII)
    unsigned char hex[256];       // value + 1 of a hex digit, 0 otherwise
    constexpr Tables() : str_stop(), hex() {
        for (int c = 0; c < 0x20; ++c) str_stop[c] = 1;
        for (int c = 0x80; c < 0x100; ++c) str_stop[c] = 1;
        str_stop[static_cast<int>('"')] = str_stop[static_cast<int>('\\')] = 1;
        for (int c = '0'; c <= '9'; ++c) hex[c] = static_cast<unsigned char>(c - '0' + 1);
        for (int c = 'a'; c <= 'f'; ++c) hex[c] = static_cast<unsigned char>(c - 'a' + 11);
        for (int c = 'A'; c <= 'F'; ++c) hex[c] = static_cast<unsigned char>(c - 'A' + 11);
    }
};
constexpr Tables T;

constexpr int HAS_ESCAPE = 1, NON_ASCII = 2;

struct Span {  // one value in the buffer: [b, e); t its first byte (0: absent)
    size_t b = 0, e = 0;
    unsigned char t = 0;
    explicit operator bool() const { return t != 0; }
};

// the fields of an event that _collect reads
struct Fields {
    Span cat, name, ph, pid, tid, ts, dur, args;
};

// the keys of 'args' that _collect reads
struct ArgFields {
    Span correlation, stream, device, bytes, ext_id, ext_id_lower, coll_name, sync_kind, wait_stream, wait_corr;
};

struct SvHash {
    size_t operator()(std::string_view v) const noexcept { return std::hash<std::string_view>{}(v); }
};

class Scanner {
  public:
    Scanner(const unsigned char *s, size_t n) : s_(s), n_(n) {}
    ~Scanner() {
        for (auto &kv : cache_) Py_DECREF(kv.second);
    }

    void set_cats(PyObject *cats) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(cats, &pos, &k, &v)) {
            Py_ssize_t len;
            const char *u = PyUnicode_Check(k) ? PyUnicode_AsUTF8AndSize(k, &len) : nullptr;
            if (u == nullptr) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "cats: keys must be str");
                throw PyFail{};
            }
            long code = PyLong_Check(v) ? PyLong_AsLong(v) : -1;
            if (code < K || code > UA) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "cats: codes must be 0..6");
                throw PyFail{};
            }
            cats_.emplace(std::string(u, static_cast<size_t>(len)), static_cast<int>(code));
        }
    }

    PyObject *run() {
        Ref gpu = own(PyList_New(0)), rt = own(PyList_New(0)), sync = own(PyList_New(0));
        Ref ann = own(PyList_New(0)), rpc = own(PyList_New(0)), before = own(PyDict_New());
        gpu_ = gpu.get(), rt_ = rt.get(), sync_ = sync.get(), ann_ = ann.get(), rpc_ = rpc.get();
        empty_ = own(PyUnicode_FromStringAndSize("", 0));
        x_ = own(PyUnicode_FromStringAndSize("X", 1));
        zero_ = own(PyLong_FromLong(0));
        minus1_ = own(PyLong_FromLong(-1));
        for (int c = K; c <= UA; ++c) codes_[c] = own(PyLong_FromLong(c));

        bool bare;
        ws();
        if (cur() == '[') {
            bare = true;
            events(1);
        } else if (cur() == '{') {
            bare = false;
            top_object(before.get());
        } else {
            throw Bail{};
        }
        ws();
        if (i_ != n_) throw Bail{};
        Ref b = borrow(bare ? Py_True : Py_False);
        Ref last = own(PyLong_FromLongLong(last_event_end_));
        Ref count = own(PyLong_FromLongLong(count_));
        return tuple_of(std::move(before), std::move(b), std::move(last), std::move(count), std::move(gpu),
                        std::move(rt), std::move(sync), std::move(ann), std::move(rpc))
            .release();
    }

  private:
    const unsigned char *s_;
    size_t n_;
    size_t i_ = 0;
    long long count_ = 0;
    long long last_event_end_ = -1;
    std::unordered_map<std::string, int> cats_;
    std::unordered_map<std::string_view, PyObject *, SvHash> cache_;  // raw string bytes -> str
    std::string tmp_;
    PyObject *gpu_ = nullptr, *rt_ = nullptr, *sync_ = nullptr, *ann_ = nullptr, *rpc_ = nullptr;
    Ref empty_, x_, zero_, minus1_, codes_[7];

    // ------------------------------------------------------------------ lexing (validating)

    unsigned char cur() const { return i_ < n_ ? s_[i_] : 0; }

    void ws() {
        while (i_ < n_) {
            unsigned char c = s_[i_];
            if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
            ++i_;
        }
    }

    void expect(unsigned char c) {
        if (cur() != c) throw Bail{};
        ++i_;
    }

    // one UTF-8 sequence starting at j (s_[j] >= 0x80), as Python's strict decoder accepts it;
    // returns the index past it
    size_t utf8(size_t j) const {
        unsigned char c = s_[j];
        auto cont = [&](size_t k, unsigned char lo, unsigned char hi) {
            if (k >= n_ || s_[k] < lo || s_[k] > hi) throw Bail{};
        };
        if (c >= 0xC2 && c <= 0xDF) {
            cont(j + 1, 0x80, 0xBF);
            return j + 2;
        }
        if (c >= 0xE0 && c <= 0xEF) {
            unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
            cont(j + 1, lo, hi);
            cont(j + 2, 0x80, 0xBF);
            return j + 3;
        }
        if (c >= 0xF0 && c <= 0xF4) {
            unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
            cont(j + 1, lo, hi);
            cont(j + 2, 0x80, 0xBF);
            cont(j + 3, 0x80, 0xBF);
            return j + 4;
        }
        throw Bail{};
    }

    // the code point of the \uXXXX escape whose backslash is at j (checked)
    unsigned hex4(size_t j) const {
        if (j + 6 > n_) throw Bail{};
        unsigned cp = 0;
        for (size_t k = j + 2; k < j + 6; ++k) {
            unsigned char h = T.hex[s_[k]];
            if (h == 0) throw Bail{};
            cp = cp * 16 + (h - 1u);
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) throw Bail{};  // surrogates: the guard scan declines them
        return cp;
    }

    // the string whose opening quote is at i_: checks it, moves past the closing quote; returns
    // HAS_ESCAPE | NON_ASCII flags
    int string() {
        size_t j = i_ + 1;
        int flags = 0;
        for (;;) {
            while (j < n_ && !T.str_stop[s_[j]]) ++j;
            if (j >= n_) throw Bail{};
            unsigned char c = s_[j];
            if (c == '"') {
                i_ = j + 1;
                return flags;
            }
            if (c == '\\') {
                flags |= HAS_ESCAPE;
                if (j + 1 >= n_) throw Bail{};
                switch (s_[j + 1]) {
                    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                        j += 2;
                        break;
                    case 'u':
                        hex4(j);
                        j += 6;
                        break;
                    default:
                        throw Bail{};
                }
                continue;
            }
            if (c < 0x20) throw Bail{};  // a control character: json (strict) refuses it
            flags |= NON_ASCII;
            j = utf8(j);
        }
    }

    // the contents [b, e) of a checked string with escapes, decoded to UTF-8 into tmp_
    void unescape(size_t b, size_t e) {
        tmp_.clear();
        for (size_t j = b; j < e;) {
            unsigned char c = s_[j];
            if (c != '\\') {
                tmp_.push_back(static_cast<char>(c));
                ++j;
                continue;
            }
            unsigned char d = s_[j + 1];
            switch (d) {
                case 'b': tmp_.push_back('\b'); break;
                case 'f': tmp_.push_back('\f'); break;
                case 'n': tmp_.push_back('\n'); break;
                case 'r': tmp_.push_back('\r'); break;
                case 't': tmp_.push_back('\t'); break;
                case 'u': {
                    unsigned cp = hex4(j);
                    if (cp < 0x80) {
                        tmp_.push_back(static_cast<char>(cp));
                    } else if (cp < 0x800) {
                        tmp_.push_back(static_cast<char>(0xC0 | (cp >> 6)));
                        tmp_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
                    } else {
                        tmp_.push_back(static_cast<char>(0xE0 | (cp >> 12)));
                        tmp_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
                        tmp_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
                    }
                    j += 6;
                    continue;
                }
                default: tmp_.push_back(static_cast<char>(d)); break;  // " \ /
            }
            j += 2;
        }
    }

    // the decoded text of the string at i_ (moves past it): a view of the buffer, or of tmp_
    std::string_view key_text() {
        size_t b = i_ + 1;
        int flags = string();
        if (flags & HAS_ESCAPE) {
            unescape(b, i_ - 1);
            return std::string_view(tmp_);
        }
        return std::string_view(reinterpret_cast<const char *>(s_ + b), i_ - 1 - b);
    }

    // whether the string value in span equals the ASCII text t
    bool span_equals(const Span &sp, std::string_view t) {
        if (sp.t != '"') return false;
        size_t save = i_;
        i_ = sp.b;
        std::string_view v = key_text();
        i_ = save;
        return v == t;
    }

    // the number at i_: checks the JSON grammar, moves past it; true for a float
    bool number() {
        bool is_float = false;
        if (cur() == '-') ++i_;
        unsigned char c = cur();
        if (c == '0') {
            ++i_;
        } else if (c >= '1' && c <= '9') {
            while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        } else {
            throw Bail{};  // '-' alone, -Infinity
        }
        if (cur() == '.') {
            is_float = true;
            ++i_;
            if (!(cur() >= '0' && cur() <= '9')) throw Bail{};
            while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        }
        if (cur() == 'e' || cur() == 'E') {
            is_float = true;
            ++i_;
            if (cur() == '+' || cur() == '-') ++i_;
            if (!(cur() >= '0' && cur() <= '9')) throw Bail{};
            while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        }
        return is_float;
    }

    void literal(const char *word, size_t len) {
        if (n_ - i_ < len || std::memcmp(s_ + i_, word, len) != 0) throw Bail{};
        i_ += len;
    }

    // checks the value at i_ and moves past it
    void skip(int depth) {
        switch (cur()) {
            case '{':
                if (depth >= MAX_DEPTH) throw Bail{};
                ++i_;
                ws();
                if (cur() == '}') {
                    ++i_;
                    return;
                }
                for (;;) {
                    if (cur() != '"') throw Bail{};
                    string();
                    ws();
                    expect(':');
                    ws();
                    skip(depth + 1);
                    ws();
                    if (cur() == ',') {
                        ++i_;
                        ws();
                        continue;
                    }
                    expect('}');
                    return;
                }
            case '[':
                if (depth >= MAX_DEPTH) throw Bail{};
                ++i_;
                ws();
                if (cur() == ']') {
                    ++i_;
                    return;
                }
                for (;;) {
                    skip(depth + 1);
                    ws();
                    if (cur() == ',') {
                        ++i_;
                        ws();
                        continue;
                    }
                    expect(']');
                    return;
                }
            case '"':
                string();
                return;
            case 't':
                literal("true", 4);
                return;
            case 'f':
                literal("false", 5);
                return;
            case 'n':
                literal("null", 4);
                return;
            default:
                number();  // declines anything else (NaN, Infinity, stray bytes)
                return;
        }
    }

    // ------------------------------------------------------------------ building

    Ref str_at_cursor() {
        size_t b = i_ + 1;
        int flags = string();
        size_t e = i_ - 1;
        std::string_view raw(reinterpret_cast<const char *>(s_ + b), e - b);
        auto it = cache_.find(raw);
        if (it != cache_.end()) return borrow(it->second);
        PyObject *o;
        if (flags == 0) {
            o = PyUnicode_New(static_cast<Py_ssize_t>(e - b), 127);
            if (o == nullptr) throw PyFail{};
            std::memcpy(PyUnicode_1BYTE_DATA(o), s_ + b, e - b);
        } else if (flags & HAS_ESCAPE) {
            unescape(b, e);
            o = PyUnicode_DecodeUTF8(tmp_.data(), static_cast<Py_ssize_t>(tmp_.size()), "strict");
        } else {
            o = PyUnicode_DecodeUTF8(reinterpret_cast<const char *>(s_ + b), static_cast<Py_ssize_t>(e - b), "strict");
        }
        if (o == nullptr) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {  // not expected: checked above
                PyErr_Clear();
                throw Bail{};
            }
            throw PyFail{};
        }
        Ref r(o);
        cache_.emplace(raw, borrow(o).release());
        return r;
    }

    Ref number_at_cursor() {
        size_t b = i_;
        bool is_float = number();
        const char *first = reinterpret_cast<const char *>(s_ + b), *last = reinterpret_cast<const char *>(s_ + i_);
        if (!is_float) {
            long long v = 0;
            auto r = std::from_chars(first, last, v);
            if (r.ec != std::errc() || r.ptr != last) throw Bail{};  // beyond int64
            return own(PyLong_FromLongLong(v));
        }
        double d = 0;
        auto r = std::from_chars(first, last, d);
        if (r.ec != std::errc() || r.ptr != last) throw Bail{};  // out of range (the guard scan declines those)
        return own(PyFloat_FromDouble(d));
    }

    // the value at i_ as json builds it; moves past it
    Ref build(int depth) {
        switch (cur()) {
            case '{': {
                if (depth >= MAX_DEPTH) throw Bail{};
                Ref d = own(PyDict_New());
                ++i_;
                ws();
                if (cur() == '}') {
                    ++i_;
                    return d;
                }
                for (;;) {
                    if (cur() != '"') throw Bail{};
                    Ref k = str_at_cursor();
                    ws();
                    expect(':');
                    ws();
                    Ref v = build(depth + 1);
                    if (PyDict_SetItem(d.get(), k.get(), v.get()) < 0) throw PyFail{};  // last value wins
                    ws();
                    if (cur() == ',') {
                        ++i_;
                        ws();
                        continue;
                    }
                    expect('}');
                    return d;
                }
            }
            case '[': {
                if (depth >= MAX_DEPTH) throw Bail{};
                Ref l = own(PyList_New(0));
                ++i_;
                ws();
                if (cur() == ']') {
                    ++i_;
                    return l;
                }
                for (;;) {
                    append(l.get(), build(depth + 1));
                    ws();
                    if (cur() == ',') {
                        ++i_;
                        ws();
                        continue;
                    }
                    expect(']');
                    return l;
                }
            }
            case '"':
                return str_at_cursor();
            case 't':
                literal("true", 4);
                return borrow(Py_True);
            case 'f':
                literal("false", 5);
                return borrow(Py_False);
            case 'n':
                literal("null", 4);
                return borrow(Py_None);
            default:
                return number_at_cursor();
        }
    }

    Ref build_span(const Span &sp) {
        size_t save = i_;
        i_ = sp.b;
        Ref r = build(2);
        i_ = save;
        return r;
    }

    // ev.get(key, default)
    Ref get(const Span &sp, PyObject *dflt) { return sp ? build_span(sp) : borrow(dflt); }

    // ------------------------------------------------------------------ the document

    void top_object(PyObject *before) {
        std::unordered_set<std::string> keys;
        bool seen = false;
        ++i_;
        ws();
        if (cur() == '}') throw Bail{};  // no traceEvents
        for (;;) {
            if (cur() != '"') throw Bail{};
            size_t kb = i_;
            std::string key(key_text());
            if (!keys.insert(key).second) throw Bail{};  // a top-level key twice
            ws();
            expect(':');
            ws();
            if (key == "traceEvents") {
                if (cur() != '[') throw Bail{};
                events(2);
                seen = true;
            } else if (!seen) {
                size_t save = i_;
                i_ = kb;
                Ref k = str_at_cursor();
                i_ = save;
                Ref v = build(1);
                if (PyDict_SetItem(before, k.get(), v.get()) < 0) throw PyFail{};
            } else {
                skip(1);
            }
            ws();
            if (cur() == ',') {
                ++i_;
                ws();
                continue;
            }
            expect('}');
            break;
        }
        if (!seen) throw Bail{};
    }

    void events(int depth) {  // the array at i_
        ++i_;
        ws();
        if (cur() == ']') {
            ++i_;
            return;
        }
        for (;;) {
            event(depth + 1);
            ++count_;
            last_event_end_ = static_cast<long long>(i_) - 1;
            ws();
            if (cur() == ',') {
                ++i_;
                ws();
                continue;
            }
            expect(']');
            return;
        }
    }

    // the event object at i_: its fields, then _collect's rules
    void event(int depth) {
        if (cur() != '{') throw Bail{};  // not an object: _collect raises
        Fields f;
        ++i_;
        ws();
        if (cur() != '}') {
            for (;;) {
                if (cur() != '"') throw Bail{};
                std::string_view k = key_text();
                Span *slot = nullptr;
                switch (k.size()) {
                    case 2:
                        if (k == "ph") slot = &f.ph;
                        else if (k == "ts") slot = &f.ts;
                        break;
                    case 3:
                        if (k == "cat") slot = &f.cat;
                        else if (k == "pid") slot = &f.pid;
                        else if (k == "tid") slot = &f.tid;
                        else if (k == "dur") slot = &f.dur;
                        break;
                    case 4:
                        if (k == "name") slot = &f.name;
                        else if (k == "args") slot = &f.args;
                        break;
                    default:
                        break;
                }
                ws();
                expect(':');
                ws();
                size_t b = i_;
                unsigned char t = cur();
                skip(depth + 1);
                if (slot != nullptr) *slot = Span{b, i_, t};  // a key twice: the last value
                ws();
                if (cur() == ',') {
                    ++i_;
                    ws();
                    continue;
                }
                expect('}');
                break;
            }
        } else {
            ++i_;
        }
        size_t end = i_;
        collect(f);
        i_ = end;
    }

    void arg_fields(const Span &args, ArgFields &a) {  // args is an object
        size_t save = i_;
        i_ = args.b + 1;
        ws();
        if (cur() != '}') {
            for (;;) {
                std::string_view k = key_text();
                Span *slot = nullptr;
                switch (k.size()) {
                    case 5:
                        if (k == "bytes") slot = &a.bytes;
                        break;
                    case 6:
                        if (k == "stream") slot = &a.stream;
                        else if (k == "device") slot = &a.device;
                        break;
                    case 11:
                        if (k == "correlation") slot = &a.correlation;
                        else if (k == "External id") slot = &a.ext_id;
                        else if (k == "external id") slot = &a.ext_id_lower;
                        break;
                    case 14:
                        if (k == "cuda_sync_kind") slot = &a.sync_kind;
                        else if (k == "wait_on_stream") slot = &a.wait_stream;
                        break;
                    case 15:
                        if (k == "Collective name") slot = &a.coll_name;
                        break;
                    case 33:
                        if (k == "wait_on_cuda_event_record_corr_id") slot = &a.wait_corr;
                        break;
                    default:
                        break;
                }
                ws();
                ++i_;  // ':' (checked by the first pass)
                ws();
                size_t b = i_;
                unsigned char t = cur();
                skip(0);
                if (slot != nullptr) *slot = Span{b, i_, t};
                ws();
                if (cur() == ',') {
                    ++i_;
                    ws();
                    continue;
                }
                break;
            }
        }
        i_ = save;
    }

    // `ev.get("args") or {}`, where `.get` is then called on it: the args dict (its fields in
    // a), a new empty dict for a false-like value (absent, null, false, 0, 0.0, "", [], {}), else
    // declined (_collect raises AttributeError/TypeError)
    Ref args_or_empty(const Span &args, ArgFields &a, bool need_dict) {
        if (args.t == '{') {
            arg_fields(args, a);
            return need_dict ? build_span(args) : Ref();
        }
        if (args) {
            Ref v = build_span(args);
            int truth = PyObject_IsTrue(v.get());
            if (truth < 0) throw PyFail{};
            if (truth) throw Bail{};
        }
        return need_dict ? own(PyDict_New()) : Ref();
    }

    // a.get("External id", a.get("external id", -1))
    Ref external_id(const ArgFields &a) {
        if (a.ext_id) return build_span(a.ext_id);
        return get(a.ext_id_lower, minus1_.get());
    }

    static bool str_is(PyObject *o, const char *t) {
        return PyUnicode_CheckExact(o) && PyUnicode_CompareWithASCIIString(o, t) == 0;
    }

    // name[:n] == prefix (name a str)
    static bool starts_with(PyObject *name, const char *prefix, Py_ssize_t len) {
        if (PyUnicode_GET_LENGTH(name) < len) return false;
        for (Py_ssize_t k = 0; k < len; ++k)
            if (PyUnicode_READ_CHAR(name, k) != static_cast<Py_UCS4>(prefix[k])) return false;
        return true;
    }

    // name[:4].lower() == "nccl" (name a str)
    static bool nccl_name(PyObject *name) {
        Py_ssize_t len = PyUnicode_GET_LENGTH(name), m = len < 4 ? len : 4;
        bool ascii = true;
        for (Py_ssize_t k = 0; k < m; ++k) ascii = ascii && PyUnicode_READ_CHAR(name, k) < 0x80;
        if (ascii) {
            if (m < 4) return false;
            for (Py_ssize_t k = 0; k < 4; ++k) {
                Py_UCS4 c = PyUnicode_READ_CHAR(name, k);
                if (c >= 'A' && c <= 'Z') c += 'a' - 'A';
                if (c != static_cast<Py_UCS4>("nccl"[k])) return false;
            }
            return true;
        }
        Ref head = own(PyUnicode_Substring(name, 0, m));  // Unicode case rules: ask Python
        Ref low = own(PyObject_CallMethod(head.get(), "lower", nullptr));
        return str_is(low.get(), "nccl");
    }

    void collect(const Fields &f) {
        if (!f.cat) return;  // cats.get(None)
        int code;
        if (f.cat.t == '"') {
            size_t save = i_;
            i_ = f.cat.b;
            std::string_view c = key_text();
            i_ = save;
            auto it = cats_.find(std::string(c));
            if (it == cats_.end()) return;
            code = it->second;
        } else if (f.cat.t == '{' || f.cat.t == '[') {
            throw Bail{};  // unhashable: _collect raises
        } else {
            return;  // a number, true, false, null: no category
        }

        // the fast path: the keys Kineto always writes
        if (code == RT && f.name && f.pid && f.tid && f.ts && f.dur && f.ph && f.args.t == '{') {
            ArgFields a;
            arg_fields(f.args, a);
            if (a.correlation) {
                append(rt_, tuple_of(build_span(f.name), build_span(f.pid), build_span(f.tid), build_span(f.ts),
                                     build_span(f.dur), build_span(a.correlation), build_span(f.ph)));
                return;
            }
        }
        if (code == OP && f.name && f.pid && f.tid && f.ts && f.dur && f.ph) {
            Ref name = build_span(f.name);
            append(ann_, tuple_of(borrow(codes_[code].get()), borrow(name.get()), build_span(f.pid),
                                  build_span(f.tid), build_span(f.ts), build_span(f.dur), build_span(f.ph)));
            if (str_is(name.get(), "record_param_comms")) {
                ArgFields a;
                Ref d = args_or_empty(f.args, a, true);
                Ref ext = external_id(a);
                append(rpc_, tuple_of(std::move(name), build_span(f.pid), build_span(f.tid), build_span(f.ts),
                                      build_span(f.dur), std::move(ext), std::move(d)));
            }
            return;
        }

        // the .get path
        if (!span_equals(f.ph, "X")) return;
        if (code <= MS) {
            ArgFields a;
            bool is_obj = f.args.t == '{';
            args_or_empty(f.args, a, false);
            Ref name = get(f.name, empty_.get());
            if (!PyUnicode_CheckExact(name.get())) throw Bail{};  // _collect raises
            Ref coll = borrow(Py_None);
            if (code == K && (a.coll_name || nccl_name(name.get())))
                coll = is_obj ? build_span(f.args) : own(PyDict_New());
            append(gpu_, tuple_of(borrow(codes_[code].get()), std::move(name), get(f.pid, Py_None),
                                  get(f.tid, Py_None), get(f.ts, Py_None), get(f.dur, zero_.get()),
                                  get(a.correlation, minus1_.get()), get(a.stream, Py_None),
                                  get(a.device, Py_None), get(a.bytes, zero_.get()), external_id(a),
                                  std::move(coll)));
        } else if (code == RT) {
            ArgFields a;
            if (f.args.t == '{') arg_fields(f.args, a);
            append(rt_, tuple_of(get(f.name, empty_.get()), get(f.pid, Py_None), get(f.tid, Py_None),
                                 get(f.ts, Py_None), get(f.dur, zero_.get()), get(a.correlation, minus1_.get()),
                                 borrow(x_.get())));
        } else if (code == SY) {
            ArgFields a;
            args_or_empty(f.args, a, false);
            Ref kind = a.sync_kind ? build_span(a.sync_kind) : get(f.name, empty_.get());
            append(sync_, tuple_of(get(a.correlation, minus1_.get()), std::move(kind), get(a.stream, minus1_.get()),
                                   get(a.wait_stream, minus1_.get()), get(a.wait_corr, minus1_.get()),
                                   get(a.device, minus1_.get())));
        } else {  // cpu_op / user_annotation
            Ref name = get(f.name, empty_.get());
            if (!PyUnicode_CheckExact(name.get())) throw Bail{};  // _collect raises
            append(ann_, tuple_of(borrow(codes_[code].get()), borrow(name.get()), get(f.pid, Py_None),
                                  get(f.tid, Py_None), get(f.ts, Py_None), get(f.dur, zero_.get()),
                                  borrow(x_.get())));
            if (str_is(name.get(), "record_param_comms") || (code == UA && starts_with(name.get(), "nccl:", 5))) {
                ArgFields a;
                Ref d = args_or_empty(f.args, a, true);
                Ref ext = external_id(a);
                append(rpc_, tuple_of(std::move(name), get(f.pid, Py_None), get(f.tid, Py_None), get(f.ts, Py_None),
                                      get(f.dur, zero_.get()), std::move(ext), std::move(d)));
            }
        }
    }
};

PyObject *py_scan(PyObject *, PyObject *args) {
    Py_buffer view;
    PyObject *cats;
    if (!PyArg_ParseTuple(args, "y*O!", &view, &PyDict_Type, &cats)) return nullptr;
    PyObject *out = nullptr;
    try {
        Scanner sc(static_cast<const unsigned char *>(view.buf), static_cast<size_t>(view.len));
        sc.set_cats(cats);
        out = sc.run();
    } catch (const Bail &) {
        out = Py_NewRef(Py_None);
    } catch (const PyFail &) {
        out = nullptr;
    } catch (const std::bad_alloc &) {
        PyErr_NoMemory();
        out = nullptr;
    }
    PyBuffer_Release(&view);
    return out;
}

// split(buffer, pos, after_comma) -> (status, cut, last_item_end)
// Where the complete items of a JSON array end in a buffer that holds part of it: items are
// walked structurally from pos (just past the '[' or a ','), each complete only once the ',' or
// ']' after it is in the buffer. status 0: the buffer ends inside an item (or right after one);
// cut is the offset of the ',' after the last complete item (pos: none), the items before it are
// buffer[pos:cut]. status 1: the array ends, cut is the offset of its ']'. status -1: not an
// array of items (a ']' after a ',', a stray byte): the caller declines. last_item_end is the
// offset of the last byte of the last complete item (-1: none). The items themselves are checked
// by scan() of "[" + buffer[pos:cut] + "]"; this walk only finds where they end.
PyObject *py_split(PyObject *, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    int after_comma;
    if (!PyArg_ParseTuple(args, "y*np", &view, &pos, &after_comma)) return nullptr;
    const unsigned char *s = static_cast<const unsigned char *>(view.buf);
    const Py_ssize_t n = view.len;
    Py_ssize_t i = pos, cut = pos, last_end = -1;
    long status = 0;
    bool expect_item = after_comma != 0;
    auto is_ws = [](unsigned char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
    for (;;) {
        while (i < n && is_ws(s[i])) ++i;
        if (i >= n) break;
        if (s[i] == ']' && !expect_item && last_end < 0 && cut == pos) {  // an empty array
            status = 1;
            cut = i;
            break;
        }
        Py_ssize_t j = i;  // walk one item
        unsigned char c = s[j];
        if (c == '{' || c == '[') {
            long depth = 0;
            bool in_str = false;
            for (; j < n; ++j) {
                unsigned char d = s[j];
                if (in_str) {
                    if (d == '\\') ++j;
                    else if (d == '"') in_str = false;
                } else if (d == '"') {
                    in_str = true;
                } else if (d == '{' || d == '[') {
                    ++depth;
                } else if (d == '}' || d == ']') {
                    if (--depth == 0) break;
                }
            }
            if (j >= n) break;  // incomplete
            ++j;
        } else if (c == '"') {
            for (++j; j < n; ++j) {
                if (s[j] == '\\') ++j;
                else if (s[j] == '"') break;
            }
            if (j >= n) break;
            ++j;
        } else {  // a scalar: up to a delimiter
            while (j < n && !is_ws(s[j]) && s[j] != ',' && s[j] != ']' && s[j] != '}') ++j;
            if (j == i) {
                status = -1;
                break;
            }
        }
        Py_ssize_t end = j;
        while (j < n && is_ws(s[j])) ++j;
        if (j >= n) break;  // the delimiter is not here yet
        if (s[j] == ',') {
            cut = j;
            last_end = end - 1;
            i = j + 1;
            expect_item = true;
            continue;
        }
        if (s[j] == ']') {
            status = 1;
            cut = j;
            last_end = end - 1;
            break;
        }
        status = -1;
        break;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(lnn)", status, cut, last_end);
}

PyMethodDef methods[] = {
    {"split", py_split, METH_VARARGS,
     "split(buffer, pos, after_comma) -> (status, cut, last_item_end): where the complete items of a JSON "
     "array end in a buffer holding part of it (the streaming reader, kinetoscan.py)"},
    {"scan", py_scan, METH_VARARGS,
     "scan(buffer, cats) -> None or (before, bare, last_event_end, num_events, gpu, rt, sync, ann, rpc): "
     "the whole-file Kineto parse and event loop in one pass (see tracegen/importers/kinetoscan.py)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto",
                      "The whole-file Kineto reader's parse and event loop, compiled (kinetoscan.py).", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__kineto(void) { return PyModule_Create(&module); }
