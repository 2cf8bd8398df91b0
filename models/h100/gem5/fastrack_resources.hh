/*
 * Fastrack H100 TEE model, gem5 extension: the hardware resources.
 *
 * Thin adapters over the gem5-free core (models/h100/cpp/fastrack/hw.hh): each SimObject holds
 * its preset parameters with gem5 units, prices the derived graph nodes it is responsible for
 * exactly as the Python model does, and keeps statistics of the nodes its lanes serve. The
 * schedule itself comes from the FastrackReplayer (fastrack_replayer.hh).
 *
 * FastrackBouncePool optionally talks to gem5's memory system: a timing-mode request port that
 * writes (H2D) and reads (D2H) bounce slots, with retry on back pressure.
 */

#ifndef __FASTRACK_GEM5_RESOURCES_HH__
#define __FASTRACK_GEM5_RESOURCES_HH__

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "base/statistics.hh"
#include "enums/FastrackLaneType.hh"
#include "fastrack/graph.hh"
#include "fastrack/hw.hh"
#include "fastrack/pricing.hh"
#include "mem/packet.hh"
#include "mem/port.hh"
#include "params/FastrackBouncePool.hh"
#include "params/FastrackCopyEngine.hh"
#include "params/FastrackCpuCrypto.hh"
#include "params/FastrackGpuAuth.hh"
#include "params/FastrackPCIeLink.hh"
#include "params/FastrackResource.hh"
#include "params/FastrackSubmit.hh"
#include "sim/sim_object.hh"
#include "sim/system.hh"

namespace gem5
{

/** Nanoseconds in a gem5 Latency parameter; fatal unless it is a whole number of ns. */
std::int64_t fastrackTicksToNs(Tick t, const std::string &what);

class FastrackResource : public SimObject
{
  public:
    /** @p laneType: the lane type whose lanes this object serves, -1 for none. */
    FastrackResource(const FastrackResourceParams &p, int laneType);

    /** Does this object serve lanes of type @p laneType on rank @p rank? */
    bool serves(int laneType, int rank) const;
    /** Does this object price / observe nodes of rank @p rank? */
    bool coversRank(int rank) const { return _rank < 0 || _rank == rank; }

    /** The replayer hands over a lane this object serves. */
    virtual void bindLane(int lane, const std::string &laneName, int servers);

    /** A node on one of this object's lanes, or one it prices, starts (at curTick()). */
    virtual void nodeStarted(const ::fastrack::Graph & /* g */, std::size_t /* i */,
                             std::int64_t /* startNs */, std::int64_t /* finishNs */) {}

    /** A node on one of this object's lanes, or one it prices, completes (at curTick()). */
    virtual void nodeCompleted(const ::fastrack::Graph &g, std::size_t i,
                               std::int64_t startNs, std::int64_t finishNs);

    /** The replayer re-priced one of this object's nodes (@p ok: same as exported). */
    void countPriceCheck(bool ok);

  protected:
    const int _laneType;
    const int _rank;
    std::vector<char> ownsLane;  // by lane index
    std::vector<std::string> boundNames;
    // set before the simulation starts (gem5 resets statistics then): reported as Values
    std::uint64_t nLanes = 0;
    std::uint64_t nServers = 0;
    std::uint64_t nPriced = 0;
    std::uint64_t nMismatches = 0;

    struct ResourceStats : public statistics::Group
    {
        ResourceStats(statistics::Group *parent);
        statistics::Value lanes;
        statistics::Value servers;
        statistics::Scalar ops;
        statistics::Scalar busyTicks;
        statistics::Scalar bytes;
        statistics::Value priced;
        statistics::Value priceMismatches;
    } resourceStats;
};

class FastrackPCIeLink : public FastrackResource
{
  public:
    FastrackPCIeLink(const FastrackPCIeLinkParams &p);
    const ::fastrack::PcieLink &link() const { return _link; }

  private:
    ::fastrack::PcieLink _link;
};

class FastrackCpuCrypto : public FastrackResource
{
  public:
    FastrackCpuCrypto(const FastrackCpuCryptoParams &p);
    void bindLane(int lane, const std::string &laneName, int servers) override;
    const ::fastrack::CpuCryptoEngine &engine() const { return _engine; }

  private:
    ::fastrack::CpuCryptoEngine _engine;
};

class FastrackCopyEngine : public FastrackResource
{
  public:
    FastrackCopyEngine(const FastrackCopyEngineParams &p);
    void bindLane(int lane, const std::string &laneName, int servers) override;
    const ::fastrack::GpuCryptoEngine &engine() const { return _engine; }
    /** The protocol authenticates in parallel: a host copy's secure copy uses every engine. */
    bool parallelAuth() const { return _parallelAuth; }

  private:
    ::fastrack::GpuCryptoEngine _engine;
    const bool _parallelAuth;
};

class FastrackGpuAuth : public FastrackResource
{
  public:
    FastrackGpuAuth(const FastrackGpuAuthParams &p);
    const ::fastrack::GpuAuthEngine &engine() const { return _engine; }
    bool parallel() const { return _parallel; }

  private:
    ::fastrack::GpuAuthEngine _engine;
    const bool _parallel;
};

class FastrackSubmit : public FastrackResource
{
  public:
    FastrackSubmit(const FastrackSubmitParams &p);
    const ::fastrack::SubmitCost &cost() const { return _cost; }

  private:
    ::fastrack::SubmitCost _cost;
};

class FastrackBouncePool : public FastrackResource
{
  public:
    FastrackBouncePool(const FastrackBouncePoolParams &p);

    Port &getPort(const std::string &if_name,
                  PortID idx = InvalidPortID) override;
    void init() override;
    DrainState drain() override;

    void nodeStarted(const ::fastrack::Graph &g, std::size_t i,
                     std::int64_t startNs, std::int64_t finishNs) override;
    void nodeCompleted(const ::fastrack::Graph &g, std::size_t i,
                       std::int64_t startNs, std::int64_t finishNs) override;
    /** A holding node waited for a slot (its schedule's slot_wait is > 0). */
    void slotWait();

  private:
    class MemSidePort : public RequestPort
    {
      public:
        MemSidePort(const std::string &name, FastrackBouncePool *owner)
            : RequestPort(name), owner(owner)
        {}
        /** Send @p pkt, or keep it until the peer asks for a retry. */
        bool trySend(PacketPtr pkt);
        bool blocked() const { return blockedPacket != nullptr; }

      protected:
        bool recvTimingResp(PacketPtr pkt) override;
        void recvReqRetry() override;
        void recvRangeChange() override {}

      private:
        FastrackBouncePool *owner;
        PacketPtr blockedPacket = nullptr;
    };

    void queueTraffic(int rank, bool write, std::int64_t bytes);
    void sendQueued();
    void handleResponse(PacketPtr pkt);

    ::fastrack::BouncePool pool;
    MemSidePort memPort;
    System *system;
    RequestorID requestorId = Request::invldRequestorId;
    const Addr baseAddr;
    const std::uint64_t packetSize;
    const std::size_t maxQueued;
    struct Pending { Addr addr; unsigned size; bool write; };
    std::deque<Pending> queue;
    std::vector<std::int64_t> ringPos;  // per rank: next slot address (round robin; observational)
    std::size_t outstanding = 0;

    struct PoolStats : public statistics::Group
    {
        PoolStats(statistics::Group *parent);
        statistics::Scalar stagedChunks;
        statistics::Scalar stagedBytes;
        statistics::Scalar holds;
        statistics::Scalar slotWaits;
        statistics::Scalar memRequests;
        statistics::Scalar memRetries;
        statistics::Scalar memResponses;
        statistics::Scalar memDropped;
        statistics::Histogram memLatency;
    } poolStats;
};

} // namespace gem5

#endif // __FASTRACK_GEM5_RESOURCES_HH__
