# gem5 configuration of a Fastrack export. `replay export-gem5` copies this file, unchanged,
# into every export directory; run it with a gem5 built with the Fastrack extension (docs/gem5.md):
#
#     build/NULL/gem5.opt DIR/run_gem5.py [--with-memory] [--reprice --param OBJ.PARAM=VALUE ...]
#
# Everything about the export is read from the files next to this script, never pasted into it:
# params.json (protocol, model, preset, parameter digest, and the SimObject parameters under
# "gem5") and expected.json (trace, the Python replay's makespan and the ticks it must take).
#
# It replays graph.bin (the transformed graph) with the FastrackReplayer SimObject, whose node
# completions are gem5 events, and checks that the simulated time equals the Python replay's
# makespan (expected.json): exit code 0 when it does, 1 when it does not.
import argparse
import json
import os
import sys

import m5
from m5.objects import *  # noqa: F401,F403  (Root, FastrackReplayer, Fastrack* resources)
from m5.params import AddrRange

HERE = os.path.dirname(os.path.abspath(__file__))

parser = argparse.ArgumentParser(description="Fastrack replay in gem5")
parser.add_argument("--with-memory", action="store_true",
                    help="connect the bounce pool's staging port to a SimpleMemory (observational: "
                         "memory traffic does not change the replay's times)")
parser.add_argument("--no-check-prices", action="store_true",
                    help="do not re-price nodes with the SimObjects' parameters at start-up")
parser.add_argument("--param", action="append", default=[], metavar="OBJECT.PARAM=VALUE",
                    help="change a resource parameter, e.g. pcie_h2d.bandwidth_gb_s=25.0 (needs --reprice)")
parser.add_argument("--reprice", action="store_true",
                    help="use the SimObjects' prices instead of the exported durations (then the simulated "
                         "time is not compared with expected.json)")
args = parser.parse_args()

with open(os.path.join(HERE, "expected.json")) as fh:
    expected = json.load(fh)
with open(os.path.join(HERE, "params.json")) as fh:
    RESOURCES = json.load(fh)["gem5"]  # {attribute: {"class": SimObject class, "params": {...}}}

for change in args.param:
    target, _, value = change.partition("=")
    obj, _, name = target.partition(".")
    if obj not in RESOURCES or not name or not value:
        sys.exit(f"--param {change}: expected OBJECT.PARAM=VALUE with OBJECT one of {', '.join(sorted(RESOURCES))}")
    RESOURCES[obj]["params"][name] = value

root = Root(full_system=False)
replayer = FastrackReplayer(
    graph=os.path.join(HERE, "graph.bin"),
    lanes=os.path.join(HERE, "lanes.csv"),
    check_prices=not args.no_check_prices,
    reprice=args.reprice,
)
objects = []
for attr, spec in sorted(RESOURCES.items()):
    obj = getattr(m5.objects, spec["class"])(**spec["params"])
    setattr(replayer, attr, obj)
    objects.append(obj)
if args.with_memory:
    if "bounce_pool" not in RESOURCES:
        sys.exit("--with-memory needs a model (this export has no bounce pool)")
    pool = RESOURCES["bounce_pool"]["params"]
    ranks = max(1, len(expected["per_rank"]))
    staging = ranks * int(pool["slots"]) * int(str(pool["slot_size"]).rstrip("B"))
    root.system = System(mem_ranges=[AddrRange(max(staging, 1 << 20))], mem_mode="timing")
    root.system.clk_domain = SrcClockDomain(clock="1GHz", voltage_domain=VoltageDomain())
    root.system.mem = SimpleMemory(range=root.system.mem_ranges[0], latency="100ns", bandwidth="64GiB/s")
    replayer.bounce_pool.system = root.system
    replayer.bounce_pool.mem_side = root.system.mem.port
root.replayer = replayer

m5.instantiate()
event = m5.simulate()
ticks = m5.curTick()
want = int(expected["expected_ticks"])
match = None if args.reprice else ticks == want
print(json.dumps({"exit_cause": event.getCause(), "sim_ticks": ticks, "sim_ns": ticks / expected["ticks_per_ns"],
                  "expected_ticks": want, "makespan_ns": expected["makespan_ns"], "match": match}))
sys.exit(0 if match in (True, None) else 1)
