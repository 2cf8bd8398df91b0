/*
 * Fastrack H100 TEE model, gem5 extension: the trace replayer (see fastrack_replayer.hh).
 */

#include "fastrack_replayer.hh"

#include <algorithm>
#include <cctype>
#include <exception>
#include <limits>

#include "base/logging.hh"
#include "base/trace.hh"
#include "debug/FastrackReplay.hh"
#include "sim/core.hh"
#include "sim/cur_tick.hh"
#include "sim/sim_exit.hh"

namespace gem5
{

namespace
{

std::string
statName(const std::string &s, std::size_t fallback)
{
    std::string out;
    for (char c : s)
        out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
    return out.empty() ? "lane" + std::to_string(fallback) : out;
}

} // anonymous namespace

FastrackReplayer::FastrackReplayer(const Params &p)
    : SimObject(p),
      pcieH2D(p.pcie_h2d),
      pcieD2H(p.pcie_d2h),
      cpuCrypto(p.cpu_crypto),
      copyEngine(p.copy_engine),
      gpuAuth(p.gpu_auth),
      submitCost(p.submit),
      bouncePool(p.bounce_pool),
      startEvent([this] { processStarts(); }, name() + ".startEvent"),
      completionEvent([this] { processCompletions(); }, name() + ".completionEvent"),
      stats(this)
{
    for (FastrackResource *r : {static_cast<FastrackResource *>(pcieH2D),
                                static_cast<FastrackResource *>(pcieD2H),
                                static_cast<FastrackResource *>(cpuCrypto),
                                static_cast<FastrackResource *>(copyEngine),
                                static_cast<FastrackResource *>(gpuAuth)})
        if (r)
            serving.push_back(r);
}

Tick
FastrackReplayer::tickOf(std::int64_t ns) const
{
    return static_cast<Tick>(ns - originNs) * ticksPerNs;
}

void
FastrackReplayer::init()
{
    SimObject::init();
    ticksPerNs = sim_clock::as_int::ns;
    fatal_if(ticksPerNs == 0, "%s: the tick is longer than 1 ns", name());
    loadGraph();
    bindResources();
    checkPrices();
    try {
        sched = ::fastrack::schedule(graph);
    } catch (const std::exception &e) {
        fatal("%s: %s: %s", name(), params().graph, e.what());
    }
    summary = ::fastrack::summarize(graph, sched);
    originNs = summary.origin_ns;
    fatal_if(summary.makespan_ns > 0 &&
             static_cast<Tick>(summary.makespan_ns) > MaxTick / ticksPerNs,
             "%s: the replay lasts %lld ns, more than gem5's tick counter holds", name(),
             (long long)summary.makespan_ns);
    buildEvents();
    DPRINTF(FastrackReplay, "%s: %d nodes, %d edges, %d lanes; makespan %lld ns (%llu ticks), "
            "first start at %lld ns = tick 0\n", params().graph, graph.n(), graph.numEdges(),
            graph.numLanes(), (long long)summary.makespan_ns,
            (unsigned long long)tickOf(summary.makespan_ns + originNs), (long long)originNs);
}

void
FastrackReplayer::loadGraph()
{
    try {
        graph = ::fastrack::readGraphFile(params().graph);
        if (!params().lanes.empty())
            ::fastrack::readLaneNames(params().lanes, graph);
    } catch (const std::exception &e) {
        fatal("%s: %s", name(), e.what());
    }
    fatal_if(graph.n() >= std::numeric_limits<std::uint32_t>::max(),
             "%s: %d nodes is more than this replayer indexes", name(), graph.n());
    for (std::size_t k = 0; k < graph.numLanes(); ++k)
        if (graph.lane_names[k].empty())
            graph.lane_names[k] = "lane" + std::to_string(k);
}

void
FastrackReplayer::bindResources()
{
    laneOwner.assign(graph.numLanes(), nullptr);
    for (std::size_t k = 0; k < graph.numLanes(); ++k) {
        for (FastrackResource *r : serving) {
            if (!r->serves(graph.lane_type[k], graph.lane_rank[k]))
                continue;
            fatal_if(laneOwner[k], "%s: lane '%s' is served by both %s and %s", name(),
                     graph.lane_names[k], laneOwner[k]->name(), r->name());
            laneOwner[k] = r;
            r->bindLane(static_cast<int>(k), graph.lane_names[k], graph.lane_servers[k]);
        }
    }
    // the pricing objects of the resources present (absent ones leave their nodes unpriced)
    pricer.h2d = pcieH2D ? &pcieH2D->link() : nullptr;
    pricer.d2h = pcieD2H ? &pcieD2H->link() : nullptr;
    pricer.cpu = cpuCrypto ? &cpuCrypto->engine() : nullptr;
    pricer.ce = copyEngine ? &copyEngine->engine() : nullptr;
    pricer.auth = gpuAuth ? &gpuAuth->engine() : nullptr;
    // the protocol's authentication mode: on the copy engine (present whenever a model is; the
    // emulated authentication kernel, gpu_auth, only with the optional [auth] table)
    fatal_if(copyEngine && gpuAuth && copyEngine->parallelAuth() != gpuAuth->parallel(),
             "%s: %s.parallel_auth and %s.parallel disagree", name(), copyEngine->name(),
             gpuAuth->name());
    pricer.parallel_auth = copyEngine ? copyEngine->parallelAuth() : gpuAuth && gpuAuth->parallel();
    pricer.submit = submitCost ? &submitCost->cost() : nullptr;
    pricer.prepare(graph);
}

FastrackResource *
FastrackReplayer::pricedByObject(std::size_t i) const
{
    using ::fastrack::PricedBy;
    switch (::fastrack::pricedBy(graph, i)) {
      case PricedBy::PcieH2D: return pcieH2D;
      case PricedBy::PcieD2H: return pcieD2H;
      case PricedBy::CpuCrypto: return cpuCrypto;
      case PricedBy::CopyEngine: return copyEngine;
      case PricedBy::GpuAuth: return gpuAuth;
      case PricedBy::Submit: return submitCost;
      default: return nullptr;
    }
}

void
FastrackReplayer::checkPrices()
{
    if (!params().check_prices && !params().reprice)
        return;
    std::size_t mismatches = 0, priced = 0;
    for (std::size_t i = 0; i < graph.n(); ++i) {
        const std::int64_t price = pricer.price(graph, i);
        if (price < 0)
            continue;
        ++priced;
        const bool ok = price == graph.dur[i];
        FastrackResource *r = pricedByObject(i);
        if (r)
            r->countPriceCheck(ok);
        if (ok)
            continue;
        ++mismatches;
        if (params().reprice) {
            DPRINTF(FastrackReplay, "re-priced %s: %lld -> %lld ns\n", graph.nodeLabel(i),
                    (long long)graph.dur[i], (long long)price);
            graph.dur[i] = price;
        } else {
            fatal("%s: %s (kind %d, %lld bytes) lasts %lld ns in the export, but %s prices it at "
                  "%lld ns: the export and the SimObject parameters disagree (set reprice=True "
                  "to use the parameters, or check_prices=False to skip this check)",
                  name(), graph.nodeLabel(i), (int)graph.kind[i], (long long)graph.bytes[i],
                  (long long)graph.dur[i], r ? r->name() : std::string("the replayer"),
                  (long long)price);
        }
    }
    nMismatches = params().reprice ? 0 : mismatches;
    nRepriced = params().reprice ? mismatches : 0;
    DPRINTF(FastrackReplay, "price check: %d derived nodes priced, %d differ%s\n", priced,
            mismatches, params().reprice ? " (re-priced)" : "");
}

void
FastrackReplayer::buildEvents()
{
    const std::size_t n = graph.n();
    byStart.resize(n);
    byFinish.resize(n);
    for (std::size_t i = 0; i < n; ++i)
        byStart[i] = byFinish[i] = static_cast<std::uint32_t>(i);
    std::sort(byStart.begin(), byStart.end(), [this](std::uint32_t a, std::uint32_t b) {
        return sched.start[a] < sched.start[b] || (sched.start[a] == sched.start[b] && a < b);
    });
    std::sort(byFinish.begin(), byFinish.end(), [this](std::uint32_t a, std::uint32_t b) {
        return sched.finish[a] < sched.finish[b] || (sched.finish[a] == sched.finish[b] && a < b);
    });
}

void
FastrackReplayer::regStats()
{
    SimObject::regStats();
    // a vector needs at least one entry; a graph without lanes keeps an unused one
    stats.laneBusyNs.init(std::max<std::size_t>(1, graph.numLanes()));
    stats.laneOps.init(std::max<std::size_t>(1, graph.numLanes()));
    for (std::size_t k = 0; k < graph.numLanes(); ++k) {
        stats.laneBusyNs.subname(k, statName(graph.lane_names[k], k));
        stats.laneOps.subname(k, statName(graph.lane_names[k], k));
    }
    stats.rankMakespanNs.init(std::max<std::size_t>(1, summary.per_rank.size()));
    std::size_t r = 0;
    for (const auto &kv : summary.per_rank)
        stats.rankMakespanNs.subname(r++, "rank" + std::to_string(kv.first));
    stats.nodes.functor([this] { return static_cast<statistics::Counter>(graph.n()); });
    stats.edges.functor([this] { return static_cast<statistics::Counter>(graph.numEdges()); });
    makespanNs = static_cast<double>(summary.makespan_ns);
    stats.makespanNs.scalar(makespanNs);
    stats.priceMismatches.scalar(nMismatches);
    stats.repriced.scalar(nRepriced);
}

void
FastrackReplayer::startup()
{
    SimObject::startup();
    fatal_if(curTick() != 0, "%s: checkpoint restore is not supported", name());
    if (graph.n() == 0) {
        if (params().exit_when_done)
            exitSimLoop("fastrack replay complete (empty graph)", 0);
        return;
    }
    schedule(startEvent, tickOf(sched.start[byStart[0]]));
    schedule(completionEvent, tickOf(sched.finish[byFinish[0]]));
}

void
FastrackReplayer::listeners(std::size_t i, std::vector<FastrackResource *> &out) const
{
    out.clear();
    auto add = [&out](FastrackResource *r) {
        if (r && std::find(out.begin(), out.end(), r) == out.end())
            out.push_back(r);
    };
    if (graph.lane[i] >= 0)
        add(laneOwner[graph.lane[i]]);
    add(pricedByObject(i));
    const int k = graph.kind[i];
    if (k == ::fastrack::kind::kCpuEncrypt || k == ::fastrack::kind::kCpuDecrypt || graph.hold_lane[i] >= 0)
        add(bouncePool);
}

void
FastrackReplayer::processStarts()
{
    const Tick now = curTick();
    while (nextStart < byStart.size() && tickOf(sched.start[byStart[nextStart]]) == now) {
        const std::size_t i = byStart[nextStart++];
        DPRINTF(FastrackReplay, "start %s at %lld ns\n", graph.nodeLabel(i), (long long)sched.start[i]);
        listeners(i, scratch);
        for (FastrackResource *r : scratch)
            r->nodeStarted(graph, i, sched.start[i], sched.finish[i]);
        // a chunk that had to wait for a slot
        if (bouncePool && sched.slot_wait[i] > 0)
            bouncePool->slotWait();
        stats.started++;
    }
    if (nextStart < byStart.size())
        schedule(startEvent, tickOf(sched.start[byStart[nextStart]]));
}

void
FastrackReplayer::processCompletions()
{
    const Tick now = curTick();
    while (nextFinish < byFinish.size() && tickOf(sched.finish[byFinish[nextFinish]]) == now) {
        const std::size_t i = byFinish[nextFinish++];
        DPRINTF(FastrackReplay, "complete %s at %lld ns\n", graph.nodeLabel(i), (long long)sched.finish[i]);
        listeners(i, scratch);
        for (FastrackResource *r : scratch)
            r->nodeCompleted(graph, i, sched.start[i], sched.finish[i]);
        if (graph.lane[i] >= 0) {
            stats.laneBusyNs[graph.lane[i]] += static_cast<double>(sched.finish[i] - sched.start[i]);
            stats.laneOps[graph.lane[i]]++;
        }
        if (graph.hold_lane[i] >= 0) {
            // a pool lane's ops are its holds, its busy time their spans (holder's start to the
            // returning node's finish), as in the core's results (fastrack/results.hh)
            const std::int64_t until = sched.finish[static_cast<std::size_t>(graph.hold_until[i])];
            stats.laneBusyNs[graph.hold_lane[i]] +=
                static_cast<double>(std::max<std::int64_t>(0, until - sched.start[i]));
            stats.laneOps[graph.hold_lane[i]]++;
        }
        stats.completed++;
    }
    if (nextFinish < byFinish.size()) {
        schedule(completionEvent, tickOf(sched.finish[byFinish[nextFinish]]));
    } else {
        std::size_t r = 0;  // the per-rank makespans, now that every node has completed
        for (const auto &kv : summary.per_rank)
            stats.rankMakespanNs[r++] = static_cast<double>(kv.second);
        DPRINTF(FastrackReplay, "last completion: %d nodes, makespan %lld ns\n", graph.n(),
                (long long)summary.makespan_ns);
        if (params().exit_when_done)
            exitSimLoop("fastrack replay complete", 0);
    }
}

FastrackReplayer::ReplayerStats::ReplayerStats(statistics::Group *parent)
    : statistics::Group(parent),
      ADD_STAT(nodes, statistics::units::Count::get(), "nodes in the graph"),
      ADD_STAT(edges, statistics::units::Count::get(), "dependency edges in the graph"),
      ADD_STAT(started, statistics::units::Count::get(), "nodes started"),
      ADD_STAT(completed, statistics::units::Count::get(), "nodes completed"),
      ADD_STAT(makespanNs, statistics::units::Count::get(),
               "replay makespan, ns (last finish - first start; simulated time at exit / "
               "ticks per ns)"),
      ADD_STAT(priceMismatches, statistics::units::Count::get(),
               "derived nodes whose exported duration differs from the resources' price"),
      ADD_STAT(repriced, statistics::units::Count::get(),
               "derived nodes given the resources' price (reprice=True)"),
      ADD_STAT(laneBusyNs, statistics::units::Count::get(),
               "busy time per lane, ns (a pool: the spans of its holds)"),
      ADD_STAT(laneOps, statistics::units::Count::get(), "nodes per lane (a pool: its holds)"),
      ADD_STAT(rankMakespanNs, statistics::units::Count::get(), "makespan per rank, ns")
{}

} // namespace gem5
