"""``m5.objects``: the Fastrack extension's real SimObject declarations, plus the few gem5 classes
``run_gem5.py`` uses, declared with their gem5 v24 parameters and defaults (only those)."""

import os
from pathlib import Path

from . import params as _params
from .params import NULL, AddrRange, Param, RequestPort, ResponsePort, VectorParam
from .proxy import Parent
from .SimObject import SimObject

_DEFAULT_DECLARATIONS = Path(__file__).resolve().parents[3] / "models" / "h100" / "gem5" / "FastrackObjects.py"


class Root(SimObject):
    abstract = False
    _the_instance = None

    full_system = Param.Bool("if this is a full system simulation")
    sim_quantum = Param.Tick(0, "simulation quantum")
    time_sync_enable = Param.Bool(False, "whether time syncing is enabled")

    @classmethod
    def getInstance(cls):
        return cls._the_instance

    def __init__(self, **kwargs):
        if Root._the_instance is not None:
            raise RuntimeError("Attempt to allocate multiple instances of Root.")
        super().__init__(**kwargs)
        Root._the_instance = self

    def path(self):
        return "root"


class VoltageDomain(SimObject):
    abstract = False
    voltage = VectorParam.Voltage("1V", "Operational voltage(s)")


class ClockDomain(SimObject):
    abstract = True


class SrcClockDomain(ClockDomain):
    abstract = False
    clock = VectorParam.Clock("Clock period")
    voltage_domain = Param.VoltageDomain("Voltage domain")
    domain_id = Param.Int32(-1, "domain id")


class System(SimObject):
    abstract = False
    system_port = RequestPort("System port")
    mem_mode = Param.MemoryMode("atomic", "The mode the memory system is in")
    mem_ranges = VectorParam.AddrRange([], "Ranges that constitute main memory")
    cache_line_size = Param.Unsigned(64, "Cache line size in bytes")


class ClockedObject(SimObject):
    abstract = True
    clk_domain = Param.ClockDomain(Parent.clk_domain, "Clock domain this clocked object belongs to")


class AbstractMemory(ClockedObject):
    abstract = True
    range = Param.AddrRange(AddrRange("128MiB"), "Address range (potentially interleaved)")
    null = Param.Bool(False, "Do not store data, always return zero")


class SimpleMemory(AbstractMemory):
    abstract = False
    port = ResponsePort("This port sends responses and receives requests")
    latency = Param.Latency("30ns", "Request to response latency")
    latency_var = Param.Latency("0ns", "Request to response latency variance")
    bandwidth = Param.MemoryBandwidth("12.8GiB/s", "Combined read and write bandwidth")


def _load_declarations(path):
    """Run the extension's SimObject file as gem5 would (its star imports from m5.*)."""
    scope = {"__name__": "m5.objects.FastrackObjects", "__file__": str(path)}
    code = compile(Path(path).read_text(encoding="utf-8"), str(path), "exec")
    exec(code, scope)
    return {k: v for k, v in scope.items() if isinstance(v, type) and (issubclass(v, SimObject) or
                                                                       issubclass(v, _params.Enum))}


for _name, _cls in _load_declarations(os.environ.get("M5_STUB_SIMOBJECTS") or _DEFAULT_DECLARATIONS).items():
    if _cls.__module__ == "m5.objects.FastrackObjects":
        globals()[_name] = _cls

__all__ = sorted(k for k, v in globals().items() if isinstance(v, type) and not k.startswith("_")) + ["NULL"]
