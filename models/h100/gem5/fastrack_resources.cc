/*
 * Fastrack H100 TEE model, gem5 extension: the hardware resources (see fastrack_resources.hh).
 */

#include "fastrack_resources.hh"

#include <algorithm>
#include <exception>

#include "base/logging.hh"
#include "base/trace.hh"
#include "debug/FastrackBounce.hh"
#include "debug/FastrackResource.hh"
#include "sim/core.hh"
#include "sim/cur_tick.hh"

namespace gem5
{

std::int64_t
fastrackTicksToNs(Tick t, const std::string &what)
{
    const Tick perNs = sim_clock::as_int::ns;
    fatal_if(perNs == 0, "Fastrack: the tick is longer than 1 ns; the model needs ns resolution");
    fatal_if(t % perNs != 0, "Fastrack: %s = %llu ticks is not a whole number of ns",
             what, (unsigned long long)t);
    return static_cast<std::int64_t>(t / perNs);
}

namespace
{

/** Build a core object, turning its parameter errors into gem5 fatal errors. */
template <typename T, typename... Args>
T
makeCore(const std::string &who, Args &&...args)
{
    try {
        return T(std::forward<Args>(args)...);
    } catch (const std::exception &e) {
        fatal("%s: %s", who, e.what());
    }
}

} // anonymous namespace

// ---------------------------------------------------------------------------------------------
// FastrackResource

FastrackResource::FastrackResource(const FastrackResourceParams &p, int laneType)
    : SimObject(p), _laneType(laneType), _rank(p.rank), resourceStats(this)
{
    resourceStats.lanes.scalar(nLanes);
    resourceStats.servers.scalar(nServers);
    resourceStats.priced.scalar(nPriced);
    resourceStats.priceMismatches.scalar(nMismatches);
}

bool
FastrackResource::serves(int laneType, int rank) const
{
    return _laneType >= 0 && laneType == _laneType && coversRank(rank);
}

void
FastrackResource::bindLane(int lane, const std::string &laneName, int servers)
{
    if (static_cast<std::size_t>(lane) >= ownsLane.size())
        ownsLane.resize(lane + 1, 0);
    ownsLane[lane] = 1;
    boundNames.push_back(laneName);
    nLanes++;
    nServers += static_cast<std::uint64_t>(servers);
    DPRINTF(FastrackResource, "serves lane %d '%s' (%d servers)\n", lane, laneName, servers);
}

void
FastrackResource::nodeCompleted(const ::fastrack::Graph &g, std::size_t i,
                                std::int64_t startNs, std::int64_t finishNs)
{
    const int lane = g.lane[i];
    if (lane < 0 || static_cast<std::size_t>(lane) >= ownsLane.size() || !ownsLane[lane])
        return;
    resourceStats.ops++;
    resourceStats.busyTicks += static_cast<double>((finishNs - startNs) * sim_clock::as_int::ns);
    resourceStats.bytes += static_cast<double>(g.bytes[i]);
    DPRINTF(FastrackResource, "node %d (op %lld) done on lane %d: [%lld, %lld] ns\n", i,
            (long long)g.op_id[i], lane, (long long)startNs, (long long)finishNs);
}

void
FastrackResource::countPriceCheck(bool ok)
{
    nPriced++;
    if (!ok)
        nMismatches++;
}

FastrackResource::ResourceStats::ResourceStats(statistics::Group *parent)
    : statistics::Group(parent),
      ADD_STAT(lanes, statistics::units::Count::get(), "lanes this object serves"),
      ADD_STAT(servers, statistics::units::Count::get(), "servers of those lanes"),
      ADD_STAT(ops, statistics::units::Count::get(), "nodes served on those lanes"),
      ADD_STAT(busyTicks, statistics::units::Tick::get(),
               "busy time of those lanes, summed over servers"),
      ADD_STAT(bytes, statistics::units::Byte::get(), "bytes of the nodes served"),
      ADD_STAT(priced, statistics::units::Count::get(),
               "nodes re-priced with this object's parameters"),
      ADD_STAT(priceMismatches, statistics::units::Count::get(),
               "re-priced nodes whose exported duration differs")
{}

// ---------------------------------------------------------------------------------------------
// PCIe link

FastrackPCIeLink::FastrackPCIeLink(const FastrackPCIeLinkParams &p)
    : FastrackResource(p, static_cast<int>(p.lane_type)),
      _link(makeCore<::fastrack::PcieLink>(p.name, p.bandwidth_gb_s,
                                             fastrackTicksToNs(p.latency, p.name + ".latency")))
{
    fatal_if(p.lane_type != FastrackLaneType::pcie_h2d && p.lane_type != FastrackLaneType::pcie_d2h,
             "%s: lane_type must be pcie_h2d or pcie_d2h", p.name);
}

// ---------------------------------------------------------------------------------------------
// CPU crypto

FastrackCpuCrypto::FastrackCpuCrypto(const FastrackCpuCryptoParams &p)
    : FastrackResource(p, static_cast<int>(p.lane_type)),
      _engine(makeCore<::fastrack::CpuCryptoEngine>(
          p.name, p.core_gb_s, fastrackTicksToNs(p.call_overhead, p.name + ".call_overhead"),
          static_cast<std::int64_t>(p.call_size), static_cast<std::int64_t>(p.threads)))
{}

void
FastrackCpuCrypto::bindLane(int lane, const std::string &laneName, int servers)
{
    fatal_if(servers != _engine.threads(),
             "%s: lane '%s' has %d servers but threads = %lld (export and parameters disagree)",
             name(), laneName, servers, (long long)_engine.threads());
    FastrackResource::bindLane(lane, laneName, servers);
}

// ---------------------------------------------------------------------------------------------
// Copy engines

FastrackCopyEngine::FastrackCopyEngine(const FastrackCopyEngineParams &p)
    : FastrackResource(p, static_cast<int>(p.lane_type)),
      _engine(makeCore<::fastrack::GpuCryptoEngine>(
          p.name, p.crypto_gb_s, fastrackTicksToNs(p.op_overhead, p.name + ".op_overhead"),
          static_cast<std::int64_t>(p.engines))),
      _parallelAuth(p.parallel_auth)
{}

void
FastrackCopyEngine::bindLane(int lane, const std::string &laneName, int servers)
{
    fatal_if(servers != _engine.engines(),
             "%s: lane '%s' has %d servers but engines = %lld (export and parameters disagree)",
             name(), laneName, servers, (long long)_engine.engines());
    FastrackResource::bindLane(lane, laneName, servers);
}

// ---------------------------------------------------------------------------------------------
// GPU authentication

FastrackGpuAuth::FastrackGpuAuth(const FastrackGpuAuthParams &p)
    : FastrackResource(p, static_cast<int>(p.lane_type)),
      _engine(makeCore<::fastrack::GpuAuthEngine>(
          p.name, p.serial_gb_s, p.parallel_gb_s_per_sm, static_cast<std::int64_t>(p.sms),
          fastrackTicksToNs(p.op_overhead, p.name + ".op_overhead"))),
      _parallel(p.parallel)
{}

// ---------------------------------------------------------------------------------------------
// Command submission

FastrackSubmit::FastrackSubmit(const FastrackSubmitParams &p)
    : FastrackResource(p, -1),
      _cost(fastrackTicksToNs(p.kernel, p.name + ".kernel"), fastrackTicksToNs(p.copy, p.name + ".copy"),
            fastrackTicksToNs(p.memset, p.name + ".memset"),
            fastrackTicksToNs(p.collective, p.name + ".collective"))
{}

// ---------------------------------------------------------------------------------------------
// Bounce-buffer pool

namespace
{
struct SendTime : public Packet::SenderState
{
    explicit SendTime(Tick t) : sent(t) {}
    Tick sent;
};
} // anonymous namespace

FastrackBouncePool::FastrackBouncePool(const FastrackBouncePoolParams &p)
    : FastrackResource(p, -1),
      pool(makeCore<::fastrack::BouncePool>(p.name, static_cast<std::int64_t>(p.slot_size),
                                            static_cast<std::int64_t>(p.slots))),
      memPort(p.name + ".mem_side", this),
      system(p.system),
      baseAddr(p.base_addr),
      packetSize(p.packet_size),
      maxQueued(p.max_queued),
      poolStats(this)
{
    fatal_if(packetSize == 0, "%s: packet_size must be > 0", p.name);
    if (system)
        requestorId = system->getRequestorId(this);
}

Port &
FastrackBouncePool::getPort(const std::string &if_name, PortID idx)
{
    if (if_name == "mem_side")
        return memPort;
    return SimObject::getPort(if_name, idx);
}

void
FastrackBouncePool::init()
{
    FastrackResource::init();
    if (memPort.isConnected()) {
        fatal_if(!system, "%s: mem_side is connected, so `system` must be set", name());
        fatal_if(!system->isTimingMode(),
                 "%s: the staging-memory port needs timing mode (system.mem_mode = 'timing')",
                 name());
    }
}

void
FastrackBouncePool::nodeStarted(const ::fastrack::Graph &g, std::size_t i,
                                std::int64_t /* startNs */, std::int64_t /* finishNs */)
{
    const int k = g.kind[i];
    if (!coversRank(g.rank[i]) || (k != ::fastrack::kind::kCpuEncrypt && k != ::fastrack::kind::kCpuDecrypt))
        return;
    fatal_if(g.bytes[i] > pool.slotBytes(),
             "%s: %s stages %lld bytes, more than a slot (%lld): export and parameters disagree",
             name(), g.nodeLabel(i), (long long)g.bytes[i], (long long)pool.slotBytes());
    poolStats.stagedChunks++;
    poolStats.stagedBytes += static_cast<double>(g.bytes[i]);
    if (memPort.isConnected())
        queueTraffic(g.rank[i], k == ::fastrack::kind::kCpuEncrypt, g.bytes[i]);
}

void
FastrackBouncePool::nodeCompleted(const ::fastrack::Graph &g, std::size_t i,
                                  std::int64_t /* startNs */, std::int64_t /* finishNs */)
{
    if (coversRank(g.rank[i]) && g.hold_lane[i] >= 0)
        poolStats.holds++;
}

void
FastrackBouncePool::slotWait()
{
    poolStats.slotWaits++;
}

void
FastrackBouncePool::queueTraffic(int rank, bool write, std::int64_t bytes)
{
    if (rank < 0)
        rank = 0;
    if (static_cast<std::size_t>(rank) >= ringPos.size())
        ringPos.resize(rank + 1, 0);
    const std::int64_t slot = ringPos[rank]++ % pool.slots();
    const Addr slotAddr = baseAddr +
        static_cast<Addr>((static_cast<std::int64_t>(rank) * pool.slots() + slot) * pool.slotBytes());
    for (std::int64_t off = 0; off < bytes; off += static_cast<std::int64_t>(packetSize)) {
        const unsigned size = static_cast<unsigned>(
            std::min<std::int64_t>(static_cast<std::int64_t>(packetSize), bytes - off));
        if (queue.size() >= maxQueued) {
            poolStats.memDropped++;
            continue;
        }
        queue.push_back(Pending{slotAddr + static_cast<Addr>(off), size, write});
    }
    sendQueued();
}

void
FastrackBouncePool::sendQueued()
{
    while (!queue.empty() && !memPort.blocked()) {
        const Pending p = queue.front();
        queue.pop_front();
        RequestPtr req = std::make_shared<Request>(p.addr, p.size, Request::UNCACHEABLE, requestorId);
        PacketPtr pkt = new Packet(req, p.write ? MemCmd::WriteReq : MemCmd::ReadReq);
        pkt->allocate();
        pkt->pushSenderState(new SendTime(curTick()));
        poolStats.memRequests++;
        outstanding++;
        DPRINTF(FastrackBounce, "%s %#x (%u bytes)\n", p.write ? "write" : "read", p.addr, p.size);
        memPort.trySend(pkt);
    }
}

bool
FastrackBouncePool::MemSidePort::trySend(PacketPtr pkt)
{
    panic_if(blockedPacket != nullptr, "sending while blocked");
    if (!sendTimingReq(pkt)) {
        DPRINTF(FastrackBounce, "blocked at %#x; waiting for a retry\n", pkt->getAddr());
        blockedPacket = pkt;
        return false;
    }
    return true;
}

void
FastrackBouncePool::MemSidePort::recvReqRetry()
{
    panic_if(blockedPacket == nullptr, "retry without a blocked packet");
    PacketPtr pkt = blockedPacket;
    blockedPacket = nullptr;
    owner->poolStats.memRetries++;
    if (trySend(pkt))
        owner->sendQueued();
}

bool
FastrackBouncePool::MemSidePort::recvTimingResp(PacketPtr pkt)
{
    owner->handleResponse(pkt);
    return true;
}

void
FastrackBouncePool::handleResponse(PacketPtr pkt)
{
    auto *st = dynamic_cast<SendTime *>(pkt->popSenderState());
    panic_if(!st, "response without its send time");
    const Tick latency = curTick() - st->sent;
    delete st;
    poolStats.memLatency.sample(static_cast<double>(latency));
    poolStats.memResponses++;
    DPRINTF(FastrackBounce, "response %#x after %llu ticks\n", pkt->getAddr(),
            (unsigned long long)latency);
    delete pkt;
    outstanding--;
    if (outstanding == 0 && queue.empty() && drainState() == DrainState::Draining)
        signalDrainDone();
}

DrainState
FastrackBouncePool::drain()
{
    return (outstanding == 0 && queue.empty()) ? DrainState::Drained : DrainState::Draining;
}

FastrackBouncePool::PoolStats::PoolStats(statistics::Group *parent)
    : statistics::Group(parent),
      ADD_STAT(stagedChunks, statistics::units::Count::get(),
               "chunks staged through a slot (CPU encrypt/decrypt)"),
      ADD_STAT(stagedBytes, statistics::units::Byte::get(), "bytes staged through slots"),
      ADD_STAT(holds, statistics::units::Count::get(),
               "nodes that took a slot (graph hold_lane), counted at their completion"),
      ADD_STAT(slotWaits, statistics::units::Count::get(),
               "nodes whose start was delayed by waiting for a free slot (slot_wait > 0)"),
      ADD_STAT(memRequests, statistics::units::Count::get(), "staging-memory requests sent"),
      ADD_STAT(memRetries, statistics::units::Count::get(), "retries after back pressure"),
      ADD_STAT(memResponses, statistics::units::Count::get(), "staging-memory responses"),
      ADD_STAT(memDropped, statistics::units::Count::get(),
               "requests not sent because the queue was full"),
      ADD_STAT(memLatency, statistics::units::Tick::get(), "request-to-response latency")
{
    memLatency.init(16);
}

} // namespace gem5
