// fastrack_price: the C++ core's H100 pricing formulas as a line-oriented oracle, so that tests
// can compare them with the Python model (models/h100/model.py) on many inputs.
//
// Each input line is one query; each output line the integer ns (or "error: ..." for that line):
//   fraction GB_S                                        -> "NUM DEN" (the exact rate)
//   bytes GB_S BYTES                                     -> replay.model.bytes_ns
//   pcie GB_S LATENCY_NS BYTES                           -> occupancy ns (latency not included)
//   cpu CORE_GB_S CALL_OVERHEAD_NS CALL_BYTES BYTES      -> cpu_encrypt_ns
//   ce CRYPTO_GB_S OP_OVERHEAD_NS BYTES [PARTS]          -> ce_crypto_ns (PARTS engines, default 1)
//   auth SERIAL_GB_S PAR_GB_S_PER_SM SMS OVERHEAD_NS PARALLEL(0|1) BYTES -> auth_ns
//   submit KERNEL_NS COPY_NS MEMSET_NS COLLECTIVE_NS OPKIND             -> submit_ns
//   chunks SLOT_BYTES SLOTS BYTES                        -> chunks of a transfer
#include <iostream>
#include <sstream>
#include <string>

#include "fastrack/hw.hh"

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string what;
        in >> what;
        try {
            if (what == "fraction") {
                double r;
                in >> r;
                if (!in) throw fastrack::ParamError("bad line");
                auto f = fastrack::rateFraction(r);
                std::cout << f.num << " " << f.den << "\n";
                continue;
            }
            std::int64_t out = 0;
            if (what == "bytes") {
                double r;
                std::int64_t b;
                in >> r >> b;
                if (!in) throw fastrack::ParamError("bad line");
                out = fastrack::bytesNs(b, r);
            } else if (what == "pcie") {
                double r;
                std::int64_t lat, b;
                in >> r >> lat >> b;
                if (!in) throw fastrack::ParamError("bad line");
                out = fastrack::PcieLink(r, lat).occupancyNs(b);
            } else if (what == "cpu") {
                double r;
                std::int64_t ov, cb, b;
                in >> r >> ov >> cb >> b;
                if (!in) throw fastrack::ParamError("bad line");
                out = fastrack::CpuCryptoEngine(r, ov, cb, 1).encryptNs(b);
            } else if (what == "ce") {
                double r;
                std::int64_t ov, b, parts = 1;
                in >> r >> ov >> b;
                if (!in) throw fastrack::ParamError("bad line");
                if (!(in >> parts)) parts = 1;
                out = fastrack::GpuCryptoEngine(r, ov, 1).cryptoNs(b, parts);
            } else if (what == "auth") {
                double s, p;
                std::int64_t sms, ov, par, b;
                in >> s >> p >> sms >> ov >> par >> b;
                if (!in) throw fastrack::ParamError("bad line");
                out = fastrack::GpuAuthEngine(s, p, sms, ov).authNs(b, par != 0);
            } else if (what == "submit") {
                std::int64_t k, c, m, co;
                int kind;
                in >> k >> c >> m >> co >> kind;
                if (!in) throw fastrack::ParamError("bad line");
                out = fastrack::SubmitCost(k, c, m, co).submitNs(kind);
            } else if (what == "chunks") {
                std::int64_t sb, sl, b;
                in >> sb >> sl >> b;
                if (!in) throw fastrack::ParamError("bad line");
                out = fastrack::BouncePool(sb, sl).chunks(b);
            } else {
                throw fastrack::ParamError("unknown query '" + what + "'");
            }
            std::cout << out << "\n";
        } catch (const std::exception &e) {
            std::cout << "error: " << e.what() << "\n";
        }
    }
    return 0;
}
