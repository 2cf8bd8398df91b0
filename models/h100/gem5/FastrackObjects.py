# Fastrack H100 TEE model as a gem5 extension: SimObject declarations.
#
# Build it into gem5 (v24.0) with  scons EXTRAS=<fastrack>/models/h100/gem5 build/NULL/gem5.opt
# and run a configuration written by `replay export-gem5` (docs/gem5.md).
#
# The parameters mirror the H100 presets (models/h100/presets/*.toml) one by one; the preset
# key is given in each description. Rates are GB/s floats (1 GB/s = 1 byte/ns), converted to
# exact fractions as the Python model does, so prices are bit-identical.

from m5.params import *
from m5.proxy import *
from m5.SimObject import SimObject


class FastrackLaneType(ScopedEnum):
    """The lane types of replay.graph.LaneType (same codes)."""

    map = {
        "host_thread": 0,
        "stream": 1,
        "copy_engine": 2,
        "pcie_h2d": 3,
        "pcie_d2h": 4,
        "cpu_crypto": 5,
        "gpu_crypto": 6,
        "gpu_auth": 7,
        "submit": 8,
        "link": 9,
    }


class FastrackResource(SimObject):
    """A hardware resource of the H100 TEE model that serves (and prices) graph nodes."""

    type = "FastrackResource"
    abstract = True
    cxx_header = "fastrack_resources.hh"
    cxx_class = "gem5::FastrackResource"

    rank = Param.Int(-1, "rank whose nodes this object serves; -1 = every rank")


class FastrackPCIeLink(FastrackResource):
    """One direction of the host<->GPU PCIe link: occupancy ceil(bytes / bandwidth); the
    latency is paid on the edge to the next stage (it does not occupy the link)."""

    type = "FastrackPCIeLink"
    cxx_header = "fastrack_resources.hh"
    cxx_class = "gem5::FastrackPCIeLink"

    lane_type = Param.FastrackLaneType(
        "pcie_h2d", "lanes of this type (on rank `rank`) are this object's servers"
    )
    bandwidth_gb_s = Param.Float(
        "achieved bandwidth of this direction, GB/s "
        "(pcie.h2d_bandwidth_gb_s / pcie.d2h_bandwidth_gb_s)"
    )
    latency = Param.Latency("one-way DMA latency per transfer stage (pcie.latency_ns)")


class FastrackCpuCrypto(FastrackResource):
    """AES-GCM on the host CPU (encrypt into / decrypt out of bounce buffers):
    max(ceil(bytes / call_size), 1) * call_overhead + ceil(bytes / core_gb_s)."""

    type = "FastrackCpuCrypto"
    cxx_header = "fastrack_resources.hh"
    cxx_class = "gem5::FastrackCpuCrypto"

    lane_type = Param.FastrackLaneType(
        "cpu_crypto", "lanes of this type (on rank `rank`) are this object's servers"
    )
    core_gb_s = Param.Float("AES-256-GCM throughput of one core, GB/s (cpu_crypto.core_gb_s)")
    call_overhead = Param.Latency("fixed cost of one AES-GCM call (cpu_crypto.call_overhead_ns)")
    call_size = Param.MemorySize("bytes per AES-GCM call (cpu_crypto.call_bytes)")
    threads = Param.Unsigned(
        1,
        "CPU threads doing crypto for one transfer; 1 = the calling thread "
        "(cpu_crypto.threads)",
    )


class FastrackCopyEngine(FastrackResource):
    """AES-GCM in the GPU copy engines: op_overhead + ceil(bytes / crypto_gb_s) per chunk."""

    type = "FastrackCopyEngine"
    cxx_header = "fastrack_resources.hh"
    cxx_class = "gem5::FastrackCopyEngine"

    lane_type = Param.FastrackLaneType(
        "copy_engine", "lanes of this type (on rank `rank`) are this object's servers"
    )
    crypto_gb_s = Param.Float("AES-GCM throughput of one copy engine, GB/s (ce.crypto_gb_s)")
    op_overhead = Param.Latency("fixed cost per copy-engine crypto operation (ce.op_overhead_ns)")
    engines = Param.Unsigned("copy engines usable for secure copies (gpu.copy_engines)")
    parallel_auth = Param.Bool(
        False,
        "the protocol authenticates in parallel (fastrack, fastrack:auth): a host copy's "
        "secure copy is spread over every engine, partial tags combined",
    )


class FastrackGpuAuth(FastrackResource):
    """GPU-side authentication: op_overhead + ceil(bytes / rate), rate = serial_gb_s, or
    parallel_gb_s_per_sm * sms when the protocol parallelises it. The emulated authentication
    kernel of the optional [auth] table: an export has this object only when its preset has
    that table (no shipped preset does)."""

    type = "FastrackGpuAuth"
    cxx_header = "fastrack_resources.hh"
    cxx_class = "gem5::FastrackGpuAuth"

    lane_type = Param.FastrackLaneType(
        "gpu_auth", "lanes of this type (on rank `rank`) are this object's servers"
    )
    serial_gb_s = Param.Float("serial GHASH authentication throughput, GB/s (auth.serial_gb_s)")
    parallel_gb_s_per_sm = Param.Float(
        "parallel authentication throughput per SM, GB/s (auth.parallel_gb_s_per_sm)"
    )
    sms = Param.Unsigned("streaming multiprocessors (gpu.sms)")
    op_overhead = Param.Latency("fixed cost per authentication (auth.op_overhead_ns)")
    parallel = Param.Bool(
        False,
        "the protocol authenticates in parallel (fastrack, fastrack:auth); must agree with "
        "the copy engine's parallel_auth",
    )


class FastrackSubmit(FastrackResource):
    """Encrypted command submission under CC: extra CPU time per launched GPU op, by kind."""

    type = "FastrackSubmit"
    cxx_header = "fastrack_resources.hh"
    cxx_class = "gem5::FastrackSubmit"

    kernel = Param.Latency("per kernel launch (submit.kernel_ns)")
    copy = Param.Latency("per copy submission (submit.copy_ns)")
    memset = Param.Latency("per memset (submit.memset_ns)")
    collective = Param.Latency("per collective kernel launch (submit.collective_ns)")


class FastrackBouncePool(FastrackResource):
    """A rank's bounce-buffer (staging) pool: `slots` slots of `slot_size` bytes (at first; the
    pool doubles on demand) in shared (unencrypted) host memory. The schedule already hands the
    slots out (the graph's pool holds, served by the core's engine); this object accounts for
    them and, when `mem_side` is connected, writes (H2D
    encryption) and reads (D2H decryption) the slots through gem5's memory system in timing
    mode, with retry on back pressure. That traffic is observational: it does not change the
    replay's times (the transform priced the CPU crypto that produces it)."""

    type = "FastrackBouncePool"
    cxx_header = "fastrack_resources.hh"
    cxx_class = "gem5::FastrackBouncePool"

    slot_size = Param.MemorySize("size of one slot (bounce.slot_bytes)")
    slots = Param.Unsigned("slots the pool starts with (bounce.slots); addresses cycle through them")
    mem_side = RequestPort("staging memory (optional): slot writes and reads")
    system = Param.System(NULL, "system owning the memory (needed with mem_side)")
    base_addr = Param.Addr(0, "address of slot 0 of rank 0 in the staging memory")
    packet_size = Param.MemorySize("4KiB", "bytes per memory request")
    max_queued = Param.Unsigned(
        4096, "requests waiting to be sent; more are counted as dropped"
    )


class FastrackReplayer(SimObject):
    """Replays a graph exported by `replay export-gem5` (graph.bin): the schedule is the
    Fastrack core's (bit-exact with the Python engine), and every node start and completion is
    a gem5 event, so the simulated time at exit equals the replay's span."""

    type = "FastrackReplayer"
    cxx_header = "fastrack_replayer.hh"
    cxx_class = "gem5::FastrackReplayer"

    graph = Param.String("graph.bin written by replay export-gem5")
    lanes = Param.String("", "lanes.csv (lane names for statistics); empty = none")
    check_prices = Param.Bool(
        True,
        "re-price derived nodes with the resources' parameters and stop on any difference",
    )
    reprice = Param.Bool(
        False,
        "use the resources' prices instead of the exported durations (sweeps in gem5; "
        "latencies on edges are not re-priced)",
    )
    exit_when_done = Param.Bool(True, "exit the simulation loop after the last completion")

    pcie_h2d = Param.FastrackPCIeLink(NULL, "host-to-device PCIe link")
    pcie_d2h = Param.FastrackPCIeLink(NULL, "device-to-host PCIe link")
    cpu_crypto = Param.FastrackCpuCrypto(NULL, "CPU AES-GCM")
    copy_engine = Param.FastrackCopyEngine(NULL, "copy-engine AES-GCM")
    gpu_auth = Param.FastrackGpuAuth(NULL, "GPU authentication")
    submit = Param.FastrackSubmit(NULL, "encrypted command submission")
    bounce_pool = Param.FastrackBouncePool(NULL, "bounce-buffer pool")
