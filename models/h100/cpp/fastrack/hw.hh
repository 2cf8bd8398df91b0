// Fastrack gem5-free core: the H100 TEE pricing formulas, mirroring models/h100/model.py and
// replay/model.py exactly (integer ns, rounded up). Thin on purpose: the Python model is the
// reference; these classes exist so that the gem5 SimObjects and the standalone driver can
// re-price nodes and check that an exported graph agrees with its parameters.
//
// Rates are GB/s (1 GB/s = 1 byte/ns). As in Python's ``bytes_ns``, a rate is taken as the
// decimal fraction its shortest repr spells (4.15 is 415/100), limited to a denominator of
// 10,000 (fractions.Fraction.limit_denominator), and ``ceil(bytes * den / num)`` is exact.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>

namespace fastrack {

__extension__ typedef __int128 i128;

class ParamError : public std::invalid_argument {
  public:
    using std::invalid_argument::invalid_argument;
};

struct Rational {
    std::int64_t num = 1;  // bytes
    std::int64_t den = 1;  // per den ns
};

namespace detail {

inline i128 gcd128(i128 a, i128 b) {
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b != 0) {
        i128 t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// Fraction(str(x)) for a positive finite double: the exact value of its shortest decimal repr.
inline void decimalFraction(double x, i128 &num, i128 &den) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, x);  // shortest round-trip repr
    if (res.ec != std::errc()) throw ParamError("cannot format rate");
    std::string s(buf, res.ptr);
    std::string digits;
    int exp10 = 0;
    std::size_t epos = s.find_first_of("eE");
    std::string mant = s.substr(0, epos);
    if (epos != std::string::npos) exp10 = std::stoi(s.substr(epos + 1));
    std::size_t dot = mant.find('.');
    if (dot != std::string::npos) {
        exp10 -= static_cast<int>(mant.size() - dot - 1);
        mant.erase(dot, 1);
    }
    std::size_t nz = mant.find_first_not_of('0');
    mant = nz == std::string::npos ? std::string("0") : mant.substr(nz);
    // |mantissa| < 10^19 and 10^-30 .. 10^18 keep every product below in 128 bits
    if (mant.size() > 19 || exp10 > 18 || exp10 < -30)
        throw ParamError("rate " + s + " GB/s is outside the range the C++ core represents exactly");
    i128 m = 0;
    for (char c : mant) m = m * 10 + (c - '0');
    i128 p = 1;
    for (int k = 0; k < (exp10 < 0 ? -exp10 : exp10); ++k) p *= 10;
    if (exp10 >= 0) {
        num = m * p;
        den = 1;
    } else {
        num = m;
        den = p;
    }
    i128 g = gcd128(num, den);
    num /= g;
    den /= g;
}

}  // namespace detail

// fractions.Fraction(str(float(gb_s))).limit_denominator(max_den), as (numerator, denominator).
inline Rational rateFraction(double gb_s, std::int64_t max_den = 10000) {
    if (!(gb_s > 0) || !std::isfinite(gb_s)) throw ParamError("rate must be positive and finite, got " + std::to_string(gb_s) + " GB/s");
    i128 N, D;
    detail::decimalFraction(gb_s, N, D);
    i128 rn = N, rd = D;
    if (D > max_den) {
        i128 p0 = 0, q0 = 1, p1 = 1, q1 = 0, n = N, d = D;
        while (true) {
            i128 a = n / d;
            i128 q2 = q0 + a * q1;
            if (q2 > max_den) break;
            i128 np1 = p0 + a * p1;
            p0 = p1;
            q0 = q1;
            p1 = np1;
            q1 = q2;
            i128 nd = n - a * d;
            n = d;
            d = nd;
        }
        i128 k = (max_den - q0) / q1;
        i128 P = p0 + k * p1, Q = q0 + k * q1;
        // Python 3.11 returns bound2 = p1/q1 if |bound2 - self| <= |bound1 - self|, else
        // bound1 = P/Q. The two bounds are 1/(q1*Q) apart and p1/q1 is d/(q1*D) from self, so
        // that is 2*d*Q <= D (the integer form Python 3.12 uses; same answer, no overflow).
        if (2 * d * Q <= D) {
            rn = p1;
            rd = q1;
        } else {
            rn = P;
            rd = Q;
        }
        i128 g = detail::gcd128(rn, rd);
        rn /= g;
        rd /= g;
    }
    if (rn <= 0 || rn > INT64_MAX || rd <= 0 || rd > INT64_MAX)
        throw ParamError("rate " + std::to_string(gb_s) + " GB/s has no positive int64 fraction with a "
                         "denominator <= " + std::to_string(max_den) + " (too small or too large)");
    return Rational{static_cast<std::int64_t>(rn), static_cast<std::int64_t>(rd)};
}

// ceil(bytes * den / num): time to move ``bytes`` at the rate (replay.model.bytes_ns).
inline std::int64_t bytesNs(std::int64_t bytes, const Rational &r) {
    i128 b = static_cast<i128>(bytes) * r.den;
    i128 q = b / r.num;
    if (q * r.num < b) ++q;  // ceil (for b < 0, truncation toward zero already is)
    return static_cast<std::int64_t>(q);
}

inline std::int64_t bytesNs(std::int64_t bytes, double gb_s) { return bytesNs(bytes, rateFraction(gb_s)); }

inline std::int64_t ceilDiv(std::int64_t a, std::int64_t b) {
    i128 q = static_cast<i128>(a) / b;
    if (q * b < a) ++q;
    return static_cast<std::int64_t>(q);
}

// PCIe link, one direction: occupancy ceil(bytes / bandwidth); latency per transfer stage, paid
// on the edge to the next stage (does not occupy the link).
class PcieLink {
  public:
    PcieLink(double bandwidth_gb_s, std::int64_t latency_ns)
        : bw_gb_s_(bandwidth_gb_s), rate_(rateFraction(bandwidth_gb_s)), latency_ns_(latency_ns) {
        if (latency_ns < 0) throw ParamError("PCIe latency must be >= 0 ns");
    }
    std::int64_t occupancyNs(std::int64_t bytes) const { return bytesNs(bytes, rate_); }
    std::int64_t latencyNs() const { return latency_ns_; }
    std::int64_t transferNs(std::int64_t bytes) const { return occupancyNs(bytes) + latency_ns_; }
    double bandwidthGbS() const { return bw_gb_s_; }

  private:
    double bw_gb_s_;
    Rational rate_;
    std::int64_t latency_ns_;
};

// AES-GCM on the CPU: max(ceil(bytes / call_bytes), 1) * call_overhead + ceil(bytes / core rate).
class CpuCryptoEngine {
  public:
    CpuCryptoEngine(double core_gb_s, std::int64_t call_overhead_ns, std::int64_t call_bytes, std::int64_t threads)
        : rate_(rateFraction(core_gb_s)), call_overhead_ns_(call_overhead_ns), call_bytes_(call_bytes),
          threads_(threads) {
        if (call_overhead_ns < 0) throw ParamError("cpu_crypto.call_overhead_ns must be >= 0");
        if (call_bytes < 1) throw ParamError("cpu_crypto.call_bytes must be >= 1");
        if (threads < 1) throw ParamError("cpu_crypto.threads must be >= 1");
    }
    std::int64_t encryptNs(std::int64_t bytes) const {
        std::int64_t calls = ceilDiv(bytes, call_bytes_);
        if (calls < 1) calls = 1;
        return calls * call_overhead_ns_ + bytesNs(bytes, rate_);
    }
    std::int64_t decryptNs(std::int64_t bytes) const { return encryptNs(bytes); }
    std::int64_t threads() const { return threads_; }

  private:
    Rational rate_;
    std::int64_t call_overhead_ns_, call_bytes_, threads_;
};

// One copy-engine secure copy (decrypt+verify or encrypt+tag): op_overhead + ceil(ceil(bytes / parts) / rate),
// parts = 1, or the engines one operation's AES-GCM is spread over (Fastrack fix 2, partial tags).
class GpuCryptoEngine {
  public:
    GpuCryptoEngine(double crypto_gb_s, std::int64_t op_overhead_ns, std::int64_t engines)
        : rate_(rateFraction(crypto_gb_s)), op_overhead_ns_(op_overhead_ns), engines_(engines) {
        if (op_overhead_ns < 0) throw ParamError("ce.op_overhead_ns must be >= 0");
        if (engines < 1) throw ParamError("gpu.copy_engines must be >= 1");
    }
    std::int64_t cryptoNs(std::int64_t bytes, std::int64_t parts = 1) const {
        if (parts < 1) parts = 1;
        return op_overhead_ns_ + bytesNs(ceilDiv(bytes, parts), rate_);
    }
    std::int64_t engines() const { return engines_; }

  private:
    Rational rate_;
    std::int64_t op_overhead_ns_, engines_;
};

// GPU-side authentication: op_overhead + ceil(bytes / rate), rate = serial or per-SM x SMs.
class GpuAuthEngine {
  public:
    GpuAuthEngine(double serial_gb_s, double parallel_gb_s_per_sm, std::int64_t sms, std::int64_t op_overhead_ns)
        : serial_(rateFraction(serial_gb_s)),
          parallel_(rateFraction(parallel_gb_s_per_sm * static_cast<double>(sms))),  // the same float product as Python
          op_overhead_ns_(op_overhead_ns) {
        if (sms < 1) throw ParamError("gpu.sms must be >= 1");
        if (op_overhead_ns < 0) throw ParamError("auth.op_overhead_ns must be >= 0");
    }
    std::int64_t authNs(std::int64_t bytes, bool parallel) const {
        return op_overhead_ns_ + bytesNs(bytes, parallel ? parallel_ : serial_);
    }

  private:
    Rational serial_, parallel_;
    std::int64_t op_overhead_ns_;
};

// The per-rank bounce-buffer (staging) pool: a ring of ``slots`` slots of ``slot_bytes``.
class BouncePool {
  public:
    BouncePool(std::int64_t slot_bytes, std::int64_t slots) : slot_bytes_(slot_bytes), slots_(slots) {
        if (slot_bytes < 1) throw ParamError("bounce.slot_bytes must be >= 1");
        if (slots < 1) throw ParamError("bounce.slots must be >= 1");
    }
    std::int64_t slotBytes() const { return slot_bytes_; }
    std::int64_t slots() const { return slots_; }
    // chunks a transfer of ``bytes`` is split into (at least one)
    std::int64_t chunks(std::int64_t bytes) const {
        std::int64_t c = ceilDiv(bytes, slot_bytes_);
        return c < 1 ? 1 : c;
    }
    std::int64_t chunkBytes(std::int64_t bytes, std::int64_t k) const {
        std::int64_t off = k * slot_bytes_;
        std::int64_t left = bytes - off;
        return left < slot_bytes_ ? (left < 0 ? 0 : left) : slot_bytes_;
    }

  private:
    std::int64_t slot_bytes_, slots_;
};

// CPU time to encrypt one command submission under CC, per OpKind code; a host call that launches
// several ops submits once, priced by the most expensive kind (Pricer::prepare takes the maximum).
class SubmitCost {
  public:
    SubmitCost(std::int64_t kernel_ns, std::int64_t copy_ns, std::int64_t memset_ns, std::int64_t collective_ns)
        : kernel_(kernel_ns), copy_(copy_ns), memset_(memset_ns), collective_(collective_ns) {}
    std::int64_t submitNs(int op_kind) const {
        switch (op_kind) {
        case 3: return kernel_;      // KERNEL
        case 4: return copy_;        // MEMCPY
        case 5: return memset_;      // MEMSET
        case 6: return collective_;  // COLLECTIVE
        default: return 0;
        }
    }

  private:
    std::int64_t kernel_, copy_, memset_, collective_;
};

}  // namespace fastrack
