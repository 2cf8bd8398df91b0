// fastrack_replay: replay an exported Fastrack graph with the gem5-free C++ core and print the
// makespan and per-resource busy time as one JSON object.
//
//   fastrack_replay EXPORT_DIR_OR_GRAPH_BIN [--lanes lanes.csv] [--schedule OUT.bin]
//                   [--check-prices [--params params.txt] [--reprice]]
//
// EXPORT_DIR is what `replay export-gem5 ... -o DIR` wrote (DIR/graph.bin, DIR/lanes.csv,
// DIR/params.txt). --schedule writes every node's start/finish/crit_pred/bound_by, the order in
// which nodes were placed, their slot waits and every lane's final server count (format in
// docs/gem5.md) so that tests can compare schedules node by node.
// --check-prices re-prices every derived node with the H100 formulas and the export's
// parameters and reports differences ("price_check" in the JSON); --reprice replays with the
// re-priced durations instead of the exported ones.
// Exit codes: 0 ok, 1 prices differ (--check-prices without --reprice), 2 bad input (message
// on stderr, one line), 3 out of memory.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <new>
#include <string>

#include "fastrack/engine.hh"
#include "fastrack/graph.hh"
#include "fastrack/pricing.hh"
#include "fastrack/results.hh"

namespace {

std::string jsonString(const std::string &s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    return out + "\"";
}

bool isDirectory(const std::string &p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string &p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0;
}

template <typename T>
void writeArray(std::ofstream &out, const std::vector<T> &v) {
    if (!v.empty()) out.write(reinterpret_cast<const char *>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

// Node indices (32 bits in memory) as the schedule file's 64-bit entries.
void writeWide(std::ofstream &out, const std::vector<fastrack::NodeIndex> &v) {
    writeArray(out, std::vector<std::int64_t>(v.begin(), v.end()));
}

void writeSchedule(const std::string &path, const fastrack::Schedule &s) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw fastrack::FormatError(path + ": cannot open for writing");
    const char magic[8] = {'F', 'T', 'R', 'K', 'S', 'C', 'H', 'D'};
    std::uint32_t version = 2, pad = 0;
    std::uint64_t n = s.start.size(), lanes = s.lane_servers.size();
    out.write(magic, 8);
    out.write(reinterpret_cast<const char *>(&version), 4);
    out.write(reinterpret_cast<const char *>(&pad), 4);
    out.write(reinterpret_cast<const char *>(&n), 8);
    out.write(reinterpret_cast<const char *>(&lanes), 8);
    writeArray(out, s.start);
    writeArray(out, s.finish);
    writeWide(out, s.crit_pred);
    writeArray(out, s.bound_by);
    writeWide(out, s.order);
    writeArray(out, s.slot_wait);
    writeArray(out, s.lane_servers);
    if (!out) throw fastrack::FormatError(path + ": write failed");
}

int usage() {
    std::cerr << "usage: fastrack_replay EXPORT_DIR_OR_GRAPH_BIN [--lanes lanes.csv] [--schedule OUT.bin]\n"
                 "                       [--check-prices [--params params.txt] [--reprice]]\n";
    return 2;
}

}  // namespace

int main(int argc, char **argv) {
    std::string input, lanesPath, schedulePath, paramsPath;
    bool checkPrices = false, reprice = false;
    for (int k = 1; k < argc; ++k) {
        std::string a = argv[k];
        if (a == "--check-prices") {
            checkPrices = true;
        } else if (a == "--reprice") {
            checkPrices = reprice = true;
        } else if (a == "--params" && k + 1 < argc) {
            paramsPath = argv[++k];
        } else if (a == "--lanes" && k + 1 < argc) {
            lanesPath = argv[++k];
        } else if (a == "--schedule" && k + 1 < argc) {
            schedulePath = argv[++k];
        } else if (a == "-h" || a == "--help") {
            usage();
            return 0;
        } else if (!a.empty() && a[0] == '-') {
            std::cerr << "error: unknown option '" << a << "'\n";
            return usage();
        } else if (input.empty()) {
            input = a;
        } else {
            std::cerr << "error: more than one input given\n";
            return usage();
        }
    }
    if (input.empty()) return usage();
    try {
        std::string graphPath = input;
        if (isDirectory(input)) {
            graphPath = input + "/graph.bin";
            if (lanesPath.empty() && exists(input + "/lanes.csv")) lanesPath = input + "/lanes.csv";
            if (paramsPath.empty()) paramsPath = input + "/params.txt";
        }
        auto t0 = std::chrono::steady_clock::now();
        fastrack::Graph g = fastrack::readGraphFile(graphPath);
        if (!lanesPath.empty()) fastrack::readLaneNames(lanesPath, g);
        std::string priceJson;
        bool pricesDiffer = false;
        if (checkPrices) {
            if (paramsPath.empty()) throw fastrack::FormatError("--check-prices needs --params (or an export directory)");
            fastrack::H100Params params = fastrack::H100Params::read(paramsPath);
            if (params.text("model") != "h100") {
                priceJson = ", \"price_check\": {\"skipped\": " +
                            jsonString("no hardware model in this export (model '" + params.text("model") + "')") + "}";
            } else {
                fastrack::H100Pricing pricing(params);
                pricing.pricer.prepare(g);
                fastrack::PriceCheck pc = fastrack::checkPrices(g, pricing.pricer, reprice);
                pricesDiffer = pc.mismatches > 0 && !reprice;
                priceJson = ", \"price_check\": {\"priced\": " + std::to_string(pc.priced) +
                            ", \"mismatches\": " + std::to_string(pc.mismatches) +
                            ", \"repriced\": " + std::string(reprice ? "true" : "false");
                if (pc.first >= 0)
                    priceJson += ", \"first\": " +
                                 jsonString(g.nodeLabel(static_cast<std::size_t>(pc.first)) + " kind " +
                                            std::to_string(g.kind[pc.first]) + ", " + std::to_string(g.bytes[pc.first]) +
                                            " bytes: exported " + std::to_string(pc.first_exported) + " ns, priced " +
                                            std::to_string(pc.first_price) + " ns");
                priceJson += "}";
            }
        }
        auto t1 = std::chrono::steady_clock::now();
        fastrack::Schedule s = fastrack::schedule(g);
        auto t2 = std::chrono::steady_clock::now();
        fastrack::Summary sum = fastrack::summarize(g, s);
        if (!schedulePath.empty()) writeSchedule(schedulePath, s);

        std::string o;
        o.reserve(256 + 160 * g.numLanes());
        o += "{\"format_version\": " + std::to_string(fastrack::kFormatVersion);
        o += ", \"nodes\": " + std::to_string(g.n()) + ", \"edges\": " + std::to_string(g.numEdges());
        o += ", \"makespan_ns\": " + std::to_string(sum.makespan_ns);
        o += ", \"origin_ns\": " + std::to_string(sum.origin_ns);
        o += ", \"per_rank\": [";
        bool first = true;
        for (const auto &kv : sum.per_rank) {
            o += std::string(first ? "" : ", ") + "{\"rank\": " + std::to_string(kv.first) +
                 ", \"makespan_ns\": " + std::to_string(kv.second) + "}";
            first = false;
        }
        o += "], \"resources\": [";
        for (std::size_t k = 0; k < g.numLanes(); ++k) {
            o += std::string(k ? ", " : "") + "{\"index\": " + std::to_string(k) +
                 ", \"name\": " + jsonString(g.lane_names[k]) +
                 ", \"type\": " + jsonString(fastrack::laneTypeLabel(g.lane_type[k])) +
                 ", \"rank\": " + std::to_string(g.lane_rank[k]) +
                 ", \"servers\": " + std::to_string(g.lane_servers[k]) +
                 ", \"ops\": " + std::to_string(sum.lanes[k].ops) +
                 ", \"busy_ns\": " + std::to_string(sum.lanes[k].busy_ns) +
                 (sum.lanes[k].pool ? ", \"peak_servers\": " + std::to_string(sum.lanes[k].peak_servers) : "") + "}";
        }
        using ms = std::chrono::duration<double, std::milli>;
        char timing[160];
        std::snprintf(timing, sizeof timing, "], \"timing_ms\": {\"read\": %.3f, \"schedule\": %.3f}}",
                      ms(t1 - t0).count(), ms(t2 - t1).count());
        o += timing;
        o.insert(o.size() - 1, priceJson);  // before the closing brace
        std::cout << o << std::endl;
        if (pricesDiffer) {
            std::cerr << "error: " << input << ": exported durations differ from the parameters' prices\n";
            return 1;
        }
        return 0;
    } catch (const fastrack::FormatError &e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    } catch (const fastrack::GraphError &e) {
        std::cerr << "error: " << input << ": " << e.what() << "\n";
        return 2;
    } catch (const std::bad_alloc &) {
        std::cerr << "error: " << input << ": out of memory\n";
        return 3;
    } catch (const std::exception &e) {
        std::cerr << "error: " << input << ": " << e.what() << "\n";
        return 2;
    }
}
