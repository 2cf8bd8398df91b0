// Fastrack gem5-free core: re-pricing the derived nodes of an exported graph.
//
// A protocol transform (replay/protocols/) prices every node it derives with the H100 model;
// the node's kind says which formula (replay/protocols/kinds.py). This file maps kinds to the
// pricing classes of hw.hh, so that the standalone driver and the gem5 SimObjects can check an
// export against a set of parameters, or re-price it with other parameters.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fastrack/graph.hh"  // the replay core (replay/cpp, on the include path: Makefile, SConscript)
#include "hw.hh"

namespace fastrack {

// Derived node kinds (replay/protocols/kinds.py, DerivedKind).
namespace kind {
constexpr int kCcSubmit = 16;      // encrypted command submission (host lane)
constexpr int kCpuEncrypt = 17;    // CPU AES-GCM of one chunk into a bounce slot
constexpr int kCpuDecrypt = 18;    // CPU AES-GCM decrypt of one chunk out of a bounce slot
constexpr int kPcie = 19;          // one chunk on the PCIe link of its direction
constexpr int kCeDecrypt = 20;     // copy-engine decrypt (H2D)
constexpr int kCeEncrypt = 21;     // copy-engine encrypt (D2H)
constexpr int kGpuAuth = 22;       // emulated GPU authentication kernel (only with the optional [auth] table)
constexpr int kSyncWait = 23;      // zero-time marker
constexpr int kCpuRecrypt = 31;    // the extra CPU AES-GCM pass over client-encrypted data (baseline)
}  // namespace kind

// Which formula prices a node.
enum class PricedBy { Nothing, PcieH2D, PcieD2H, CpuCrypto, CopyEngine, GpuAuth, Submit, Marker };

inline PricedBy pricedBy(const Graph &g, std::size_t i) {
    switch (g.kind[i]) {
    case kind::kCcSubmit: return PricedBy::Submit;
    case kind::kCpuEncrypt:
    case kind::kCpuDecrypt:
    case kind::kCpuRecrypt: return PricedBy::CpuCrypto;
    case kind::kPcie:
        if (g.lane[i] < 0) return PricedBy::Nothing;
        if (g.lane_type[g.lane[i]] == static_cast<std::int8_t>(LaneType::PcieH2D)) return PricedBy::PcieH2D;
        if (g.lane_type[g.lane[i]] == static_cast<std::int8_t>(LaneType::PcieD2H)) return PricedBy::PcieD2H;
        return PricedBy::Nothing;
    case kind::kCeDecrypt:
    case kind::kCeEncrypt: return PricedBy::CopyEngine;
    case kind::kGpuAuth: return PricedBy::GpuAuth;
    case kind::kSyncWait: return PricedBy::Marker;
    default: return PricedBy::Nothing;
    }
}

// The pricing objects of one model configuration (any may be absent: its nodes are not priced).
struct Pricer {
    const PcieLink *h2d = nullptr;
    const PcieLink *d2h = nullptr;
    const CpuCryptoEngine *cpu = nullptr;
    const GpuCryptoEngine *ce = nullptr;
    const GpuAuthEngine *auth = nullptr;
    bool parallel_auth = false;
    const SubmitCost *submit = nullptr;

    // Per node: the cost of its one encrypted submission, the most expensive kind among the GPU ops it
    // launches (LAUNCH edges from it): a call (a graph launch included) submits one pushbuffer segment.
    std::vector<std::int64_t> launch_cost;

    void prepare(const Graph &g) {
        launch_cost.assign(g.n(), 0);
        if (!submit) return;
        const auto launch = static_cast<std::uint8_t>(DepKind::Launch);
        for (std::size_t i = 0; i < g.n(); ++i)
            for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e)
                if (g.dep_kind[e] == launch) {
                    const std::int64_t c = submit->submitNs(g.kind[i]);
                    if (c > launch_cost[g.dep_src[e]]) launch_cost[g.dep_src[e]] = c;
                }
    }

    // The node's price in ns, or -1 when it is not a derived node this pricer can price.
    std::int64_t price(const Graph &g, std::size_t i) const {
        const std::int64_t b = g.bytes[i];
        switch (pricedBy(g, i)) {
        case PricedBy::PcieH2D: return h2d ? h2d->occupancyNs(b) : -1;
        case PricedBy::PcieD2H: return d2h ? d2h->occupancyNs(b) : -1;
        case PricedBy::CpuCrypto:
            if (!cpu) return -1;
            // a re-encryption pass costs one AES-GCM pass, priced like encryption (decryption costs the same)
            return g.kind[i] == kind::kCpuDecrypt ? cpu->decryptNs(b) : cpu->encryptNs(b);
        case PricedBy::CopyEngine: {
            if (!ce) return -1;
            // a host copy's secure copy (on a per-direction secure channel, GPU_CRYPTO) is spread over every
            // engine under parallel authentication; GPU-to-GPU CE operations (COPY_ENGINE lane) are not
            const bool channel = g.lane[i] >= 0 &&
                                 g.lane_type[g.lane[i]] == static_cast<std::int8_t>(LaneType::GpuCrypto);
            return ce->cryptoNs(b, (parallel_auth && channel) ? ce->engines() : 1);
        }
        case PricedBy::GpuAuth: return auth ? auth->authNs(b, parallel_auth) : -1;
        case PricedBy::Submit:
            // a submit node follows its launching call (its PROGRAM prerequisite)
            if (!submit || launch_cost.size() != g.n()) return -1;
            for (std::int64_t e = g.dep_ptr[i]; e < g.dep_ptr[i + 1]; ++e)
                if (g.dep_kind[e] == static_cast<std::uint8_t>(DepKind::Program)) return launch_cost[g.dep_src[e]];
            return -1;
        case PricedBy::Marker: return 0;
        case PricedBy::Nothing: break;
        }
        return -1;
    }
};

struct PriceCheck {
    std::size_t priced = 0;
    std::size_t mismatches = 0;
    std::int64_t first = -1;  // first node whose price differs
    std::int64_t first_price = -1;
    std::int64_t first_exported = -1;
};

// Compare every priceable node's duration with its price; with ``reprice``, replace it.
inline PriceCheck checkPrices(Graph &g, const Pricer &p, bool reprice) {
    PriceCheck out;
    for (std::size_t i = 0; i < g.n(); ++i) {
        const std::int64_t price = p.price(g, i);
        if (price < 0) continue;
        ++out.priced;
        if (price == g.dur[i]) continue;
        if (out.mismatches++ == 0) {
            out.first = static_cast<std::int64_t>(i);
            out.first_price = price;
            out.first_exported = g.dur[i];
        }
        if (reprice) g.dur[i] = price;
    }
    return out;
}

// The H100 parameters of an export (params.txt: "section.key = value" lines, '#' comments).
class H100Params {
  public:
    static H100Params read(const std::string &path) {
        std::ifstream in(path);
        if (!in) throw FormatError(path + ": cannot open for reading");
        H100Params p;
        p.path_ = path;
        std::string line;
        int lineno = 0;
        while (std::getline(in, line)) {
            ++lineno;
            if (!line.empty() && line.back() == '\r') line.pop_back();
            std::size_t s = line.find_first_not_of(" \t");
            if (s == std::string::npos || line[s] == '#') continue;
            std::size_t eq = line.find('=');
            if (eq == std::string::npos)
                throw FormatError(path + ": line " + std::to_string(lineno) + ": expected 'key = value'");
            auto trim = [](std::string v) {
                std::size_t a = v.find_first_not_of(" \t"), b = v.find_last_not_of(" \t");
                return a == std::string::npos ? std::string() : v.substr(a, b - a + 1);
            };
            p.values_[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
        }
        if (p.text("format_version") != "1")
            throw FormatError(path + ": params format_version '" + p.text("format_version") + "' is not supported (expected 1)");
        return p;
    }
    bool has(const std::string &k) const { return values_.count(k) != 0; }
    std::string text(const std::string &k) const {
        auto it = values_.find(k);
        return it == values_.end() ? std::string() : it->second;
    }
    double real(const std::string &k) const {
        try {
            std::size_t used = 0;
            double v = std::stod(need(k), &used);
            if (used != need(k).size()) throw std::invalid_argument(k);
            return v;
        } catch (const std::exception &) {
            throw FormatError(path_ + ": " + k + " = '" + text(k) + "' is not a number");
        }
    }
    std::int64_t integer(const std::string &k) const {
        try {
            std::size_t used = 0;
            long long v = std::stoll(need(k), &used);
            if (used != need(k).size()) throw std::invalid_argument(k);
            return v;
        } catch (const std::exception &) {
            throw FormatError(path_ + ": " + k + " = '" + text(k) + "' is not an integer");
        }
    }

  private:
    const std::string &need(const std::string &k) const {
        auto it = values_.find(k);
        if (it == values_.end()) throw FormatError(path_ + ": missing parameter " + k);
        return it->second;
    }
    std::string path_;
    std::map<std::string, std::string> values_;
};

// The pricing objects built from an export's H100 parameters (owns them).
struct H100Pricing {
    std::unique_ptr<PcieLink> h2d, d2h;
    std::unique_ptr<CpuCryptoEngine> cpu;
    std::unique_ptr<GpuCryptoEngine> ce;
    std::unique_ptr<GpuAuthEngine> auth;
    std::unique_ptr<SubmitCost> submit;
    Pricer pricer;

    explicit H100Pricing(const H100Params &p) {
        try {
            h2d = std::make_unique<PcieLink>(p.real("pcie.h2d_bandwidth_gb_s"), p.integer("pcie.latency_ns"));
            d2h = std::make_unique<PcieLink>(p.real("pcie.d2h_bandwidth_gb_s"), p.integer("pcie.latency_ns"));
            cpu = std::make_unique<CpuCryptoEngine>(p.real("cpu_crypto.core_gb_s"), p.integer("cpu_crypto.call_overhead_ns"),
                                                    p.integer("cpu_crypto.call_bytes"), p.integer("cpu_crypto.threads"));
            ce = std::make_unique<GpuCryptoEngine>(p.real("ce.crypto_gb_s"), p.integer("ce.op_overhead_ns"),
                                                   p.integer("gpu.copy_engines"));
            if (p.has("auth.serial_gb_s"))  // optional table: the emulated authentication kernel
                auth = std::make_unique<GpuAuthEngine>(p.real("auth.serial_gb_s"), p.real("auth.parallel_gb_s_per_sm"),
                                                       p.integer("gpu.sms"), p.integer("auth.op_overhead_ns"));
            submit = std::make_unique<SubmitCost>(p.integer("submit.kernel_ns"), p.integer("submit.copy_ns"),
                                                  p.integer("submit.memset_ns"), p.integer("submit.collective_ns"));
        } catch (const ParamError &e) {
            throw FormatError(std::string("bad parameter: ") + e.what());
        }
        pricer.h2d = h2d.get();
        pricer.d2h = d2h.get();
        pricer.cpu = cpu.get();
        pricer.ce = ce.get();
        pricer.auth = auth.get();
        pricer.parallel_auth = p.integer("protocol.parallel_auth") != 0;
        pricer.submit = submit.get();
    }
};

}  // namespace fastrack
