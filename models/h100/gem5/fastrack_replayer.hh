/*
 * Fastrack H100 TEE model, gem5 extension: the trace replayer.
 *
 * Reads a graph exported by `replay export-gem5` (graph.bin, format version 1), validates it,
 * optionally re-prices the derived nodes with the resource SimObjects' parameters, schedules
 * it with the gem5-free core (replay/cpp/fastrack/engine.hh: the Python engine's rules,
 * bit-exact), and then plays the schedule out in gem5 time: every node start and completion
 * is an event (two EventFunctionWrappers walking the sorted start and finish times), resources
 * see their nodes start and complete at the right tick, and the last completion exits the
 * simulation loop. Tick 0 is the first node's start and 1 ns of the replay is
 * sim_clock::as_int::ns ticks (1000 with gem5's default 1 ps tick), so the simulated time at
 * exit is the replay's makespan.
 */

#ifndef __FASTRACK_GEM5_REPLAYER_HH__
#define __FASTRACK_GEM5_REPLAYER_HH__

#include <cstdint>
#include <string>
#include <vector>

#include "base/statistics.hh"
#include "fastrack/engine.hh"
#include "fastrack/graph.hh"
#include "fastrack/pricing.hh"
#include "fastrack/results.hh"
#include "fastrack_resources.hh"
#include "params/FastrackReplayer.hh"
#include "sim/eventq.hh"
#include "sim/sim_object.hh"

namespace gem5
{

class FastrackReplayer : public SimObject
{
  public:
    PARAMS(FastrackReplayer);
    FastrackReplayer(const Params &p);

    void init() override;
    void regStats() override;
    void startup() override;

    /** Simulated tick of a replay time in ns. */
    Tick tickOf(std::int64_t ns) const;

  private:
    void loadGraph();
    void bindResources();
    void checkPrices();
    void buildEvents();

    void processStarts();
    void processCompletions();

    /** The resources that hear about node @p i (lane owner, pricer, observer), deduplicated. */
    void listeners(std::size_t i, std::vector<FastrackResource *> &out) const;
    /** The resource whose parameters price node @p i, if any. */
    FastrackResource *pricedByObject(std::size_t i) const;

    FastrackPCIeLink *pcieH2D;
    FastrackPCIeLink *pcieD2H;
    FastrackCpuCrypto *cpuCrypto;
    FastrackCopyEngine *copyEngine;
    FastrackGpuAuth *gpuAuth;
    FastrackSubmit *submitCost;
    FastrackBouncePool *bouncePool;
    std::vector<FastrackResource *> serving;  // the objects that may own lanes

    ::fastrack::Graph graph;
    ::fastrack::Schedule sched;
    ::fastrack::Summary summary;
    std::vector<FastrackResource *> laneOwner;  // by lane
    ::fastrack::Pricer pricer;                  // the resources' pricing objects
    std::vector<std::uint32_t> byStart;         // node indices sorted by (start, index)
    std::vector<std::uint32_t> byFinish;        // node indices sorted by (finish, index)
    std::size_t nextStart = 0;
    std::size_t nextFinish = 0;
    std::int64_t originNs = 0;
    Tick ticksPerNs = 1;
    std::vector<FastrackResource *> scratch;

    // set before the simulation starts (gem5 resets statistics then): reported as Values
    std::uint64_t nMismatches = 0;
    std::uint64_t nRepriced = 0;
    double makespanNs = 0;

    EventFunctionWrapper startEvent;
    EventFunctionWrapper completionEvent;

    struct ReplayerStats : public statistics::Group
    {
        ReplayerStats(statistics::Group *parent);
        statistics::Value nodes;
        statistics::Value edges;
        statistics::Scalar started;
        statistics::Scalar completed;
        statistics::Value makespanNs;
        statistics::Value priceMismatches;
        statistics::Value repriced;
        statistics::Vector laneBusyNs;
        statistics::Vector laneOps;
        statistics::Vector rankMakespanNs;
    } stats;
};

} // namespace gem5

#endif // __FASTRACK_GEM5_REPLAYER_HH__
