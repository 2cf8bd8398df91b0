// tracegen.importers._jsonscan: the guard scan of tracegen/importers/jsondepth.py, compiled.
//
// One pass over the raw bytes of a JSON document (or one chunk of it, the state carried from the
// previous chunk) that finds the first byte where the nesting depth passes `limit` or a number
// passes `num_limit` characters, and notes numbers the streaming parser (yajl) may refuse but
// Python's json accepts (integers of 20 digits or more, or of 19 starting with 9: beyond int64
// perhaps; exponents of 3 digits or more: beyond float64 perhaps).
// The byte-for-byte twin is jsondepth._scan (numba, or plain Python): same state, same result.
//
// scan(buffer, depth, flags, num_len, exp_digits, tokens, limit, num_limit)
//     -> (depth, flags, num_len, exp_digits, tokens, index of the first byte past a limit or -1,
//         which: 0 none, 1 depth, 2 number)
// tokens counts the '[', '{' and ',' outside strings: about one per value, which bounds the
// memory of the parsed document (jsonwhole.py).
// flags: bit 0 inside a string, bit 1 after a backslash, bit 2 the current number has '.', 'e'
// or 'E', bit 3 inside its exponent, bit 4 a wide number was seen (sticky), bit 5 the current
// number starts with '-', bit 6 its first digit is 9, bits 7 and 8 inside "\u" and "\uD" of a
// string, bit 9 a surrogate escape (\uD800-\uDFFF) was seen (sticky).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>

namespace {

constexpr long long IN_STR = 1, ESCAPED = 2, IS_FLOAT = 4, IN_EXP = 8, WIDE = 16, NEG = 32, FIRST9 = 64;
constexpr long long U1 = 128, U2 = 256, SURROGATE = 512;
constexpr long long WIDE_INT_DIGITS = 19;  // int64 max 9223372036854775807 has 19 digits
constexpr long long WIDE_EXP_DIGITS = 3;

struct State {
    long long depth, flags, num_len, exp_digits, tokens, at, which;
};

// byte classes outside strings (0: anything else, whitespace included)
enum : unsigned char { OTHER = 0, NUM = 1, QUOTE = 2, OPEN = 3, CLOSE = 4 };
// inside strings: 1 for the two bytes that end a run of plain string bytes
struct Tables {
    unsigned char cls[256];
    unsigned char stop[256];
    constexpr Tables() : cls(), stop() {
        for (int c = '0'; c <= '9'; ++c) cls[c] = NUM;
        cls[static_cast<int>('-')] = cls[static_cast<int>('+')] = cls[static_cast<int>('.')] = NUM;
        cls[static_cast<int>('e')] = cls[static_cast<int>('E')] = NUM;
        cls[static_cast<int>('"')] = QUOTE;
        cls[static_cast<int>('[')] = cls[static_cast<int>('{')] = OPEN;
        cls[static_cast<int>(']')] = cls[static_cast<int>('}')] = CLOSE;
        stop[static_cast<int>('"')] = stop[static_cast<int>('\\')] = 1;
    }
};
constexpr Tables T;

inline bool is_hex_8_to_f(unsigned char c) {
    return (c >= '8' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

void scan(const unsigned char *buf, Py_ssize_t n, State &s, long long limit, long long num_limit) {
    long long depth = s.depth, flags = s.flags, num_len = s.num_len, exp_digits = s.exp_digits, tokens = s.tokens;
    s.at = -1;
    s.which = 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
        unsigned char c = buf[i];
        if (flags & IN_STR) {
            if (flags & ESCAPED) {
                flags &= ~ESCAPED;
                if (c == 'u') flags |= U1;
                continue;
            }
            if (flags & U1) {  // "\u" seen: a surrogate escape is \uD800-\uDFFF
                flags &= ~U1;
                if (c == 'd' || c == 'D') {
                    flags |= U2;
                    continue;
                }
            } else if (flags & U2) {
                flags &= ~U2;
                if (is_hex_8_to_f(c)) {
                    flags |= SURROGATE;
                    continue;
                }
            }
            // the bulk of a trace is string bytes: skip to the next quote or backslash
            while (!T.stop[c]) {
                if (++i == n) goto done;
                c = buf[i];
            }
            if (c == '\\') flags |= ESCAPED;
            else flags &= ~IN_STR;
            continue;
        }
        unsigned char k = T.cls[c];
        if (k == NUM) {
            ++num_len;
            if (num_len > num_limit) {
                s.at = i;
                s.which = 2;
                break;
            }
            if (c == '.') {
                flags |= IS_FLOAT;
            } else if (c == 'e' || c == 'E') {
                flags |= IS_FLOAT | IN_EXP;
                exp_digits = 0;
            } else if (c == '-') {
                if (num_len == 1) flags |= NEG;
            } else if (c >= '0' && c <= '9') {
                if (flags & IN_EXP) {
                    if (++exp_digits >= WIDE_EXP_DIGITS) flags |= WIDE;
                } else if (!(flags & IS_FLOAT)) {
                    long long digits = num_len - ((flags & NEG) ? 1 : 0);
                    if (digits == 1 && c == '9') flags |= FIRST9;
                    if (digits > WIDE_INT_DIGITS || (digits == WIDE_INT_DIGITS && (flags & FIRST9))) flags |= WIDE;
                }
            }
            continue;
        }
        if (num_len) {
            num_len = 0;
            exp_digits = 0;
            flags &= ~(IS_FLOAT | IN_EXP | NEG | FIRST9);
        }
        if (k == OTHER) {
            if (c == ',') ++tokens;
            continue;
        }
        if (k == QUOTE) {
            flags |= IN_STR;
        } else if (k == OPEN) {
            ++tokens;
            if (++depth > limit) {
                s.at = i;
                s.which = 1;
                break;
            }
        } else {
            --depth;
        }
    }
done:
    s.depth = depth;
    s.flags = flags;
    s.num_len = num_len;
    s.exp_digits = exp_digits;
    s.tokens = tokens;
}

PyObject *py_scan(PyObject *, PyObject *args) {
    Py_buffer view;
    State s{};
    long long limit, num_limit;
    if (!PyArg_ParseTuple(args, "y*LLLLLLL", &view, &s.depth, &s.flags, &s.num_len, &s.exp_digits, &s.tokens,
                          &limit, &num_limit))
        return nullptr;
    Py_BEGIN_ALLOW_THREADS
    scan(static_cast<const unsigned char *>(view.buf), view.len, s, limit, num_limit);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(LLLLLLL)", s.depth, s.flags, s.num_len, s.exp_digits, s.tokens, s.at, s.which);
}

PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS,
     "scan(buffer, depth, flags, num_len, exp_digits, tokens, limit, num_limit) -> "
     "(depth, flags, num_len, exp_digits, tokens, at, which)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonscan",
                      "Guard scan of raw JSON bytes (nesting depth, number length); see jsondepth.py.", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit__jsonscan(void) { return PyModule_Create(&module); }
