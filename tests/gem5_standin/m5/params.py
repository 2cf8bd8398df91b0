"""``m5.params``: parameter and port declarations with gem5's checks (a subset of its types).

A declaration is ``Param.<Type>(description)`` (no default: the configuration must set it) or
``Param.<Type>(default, description)``. Values are converted as gem5 converts them, and refused
where gem5 refuses them: a Latency or MemorySize must be a string with its unit, an integer type
must be in its range, an enum value must be one of the enum's names, a SimObject parameter must be
an object of that class (or NULL).
"""

import re

__all__ = ["NULL", "AddrRange", "Enum", "Param", "RequestPort", "ResponsePort", "ScopedEnum", "VectorParam"]


class _NoDefault:
    def __repr__(self):
        return "<no default>"


NO_DEFAULT = _NoDefault()


class _Null:
    """gem5's NULL: no object for a SimObject parameter."""

    def __repr__(self):
        return "NULL"

    def describe(self):
        return None


NULL = _Null()


class AddrRange(dict):
    """An address range (kept as given: the record shows ``{"AddrRange": size}``)."""

    def __init__(self, *args, **kwargs):
        if len(args) != 1 or kwargs:
            raise TypeError("the stand-in AddrRange takes one size")
        if isinstance(args[0], str):
            _memory_size(args[0])
        else:
            _integer(args[0], 0, 2**64 - 1)
        super().__init__(AddrRange=args[0])


# ---------------------------------------------------------------------------------------------
# value conversions (the type names gem5 uses)

_BINARY = {"": 1, "Ki": 1 << 10, "k": 1 << 10, "K": 1 << 10, "Mi": 1 << 20, "M": 1 << 20, "Gi": 1 << 30,
           "G": 1 << 30, "Ti": 1 << 40, "T": 1 << 40}


def _need_str(value, what):
    if not isinstance(value, str):
        raise TypeError(f"wrong type '{type(value).__name__}' for a {what}: gem5 wants a string with its unit")


def _latency(value):
    if type(value).__name__ == "Latency":
        return value
    _need_str(value, "latency")
    if re.fullmatch(r"\d+t", value):
        return value
    if not re.fullmatch(r"[0-9]*\.?[0-9]+(?:e[-+]?\d+)?[pnum]?s", value):
        raise ValueError(f"cannot convert '{value}' to latency")
    return value


def _memory_size(value):
    _need_str(value, "memory size")
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|K|M|G|T)?B", value)
    if not m:
        raise ValueError(f"cannot convert '{value}' to memory size")
    return value


def _size_bytes(value):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|K|M|G|T)?B", _memory_size(value))
    return int(m.group(1)) * _BINARY[m.group(2) or ""]


def _bandwidth(value):
    _need_str(value, "memory bandwidth")
    if not re.fullmatch(r"[0-9]*\.?[0-9]+(Ki|Mi|Gi|Ti|k|K|M|G|T)?B/s", value):
        raise ValueError(f"cannot convert '{value}' to memory bandwidth")
    return value


def _integer(value, lo, hi):
    if isinstance(value, str):
        value = int(value, 0)
    elif isinstance(value, (int, float)):
        value = int(value)
    else:
        raise TypeError(f"wrong type '{type(value).__name__}' for an integer")
    if not lo <= value <= hi:
        raise TypeError(f"Integer param out of bounds {lo} < {value} < {hi}")
    return value


def _bool(value):
    if isinstance(value, str):
        low = value.lower()
        if low in ("true", "t", "yes", "y", "1"):
            return True
        if low in ("false", "f", "no", "n", "0"):
            return False
        raise ValueError(f"cannot convert '{value}' to bool")
    return bool(value)


def _voltage(value):
    _need_str(value, "voltage")
    if not re.fullmatch(r"[0-9]*\.?[0-9]+[mu]?V", value):
        raise ValueError(f"cannot convert '{value}' to voltage")
    return value


def _clock(value):
    _need_str(value, "clock")
    if not re.fullmatch(r"[0-9]*\.?[0-9]+([kMG]?Hz|[pnum]?s)", value):
        raise ValueError(f"cannot convert '{value}' to clock")
    return value


CONVERT = {
    "Float": float,
    "Bool": _bool,
    "String": str,
    "Int": lambda v: _integer(v, -(2**31), 2**31 - 1),
    "Int32": lambda v: _integer(v, -(2**31), 2**31 - 1),
    "Unsigned": lambda v: _integer(v, 0, 2**32 - 1),
    "UInt32": lambda v: _integer(v, 0, 2**32 - 1),
    "UInt64": lambda v: _integer(v, 0, 2**64 - 1),
    "Counter": lambda v: _integer(v, 0, 2**64 - 1),
    "Tick": lambda v: _integer(v, 0, 2**64 - 1),
    "Addr": lambda v: _integer(_size_bytes(v) if isinstance(v, str) and v.endswith("B") else v, 0, 2**64 - 1),
    "Latency": _latency,
    "MemorySize": _memory_size,
    "MemoryBandwidth": _bandwidth,
    "Voltage": _voltage,
    "Clock": _clock,
    "AddrRange": lambda v: v if isinstance(v, AddrRange) else AddrRange(v),
}


# ---------------------------------------------------------------------------------------------
# enums

ENUMS: dict[str, type] = {}


class _MetaEnum(type):
    def __init__(cls, name, bases, body):
        super().__init__(name, bases, body)
        if name not in ("Enum", "ScopedEnum"):
            if "map" in body:
                cls.vals = list(body["map"])
            elif "vals" not in body:
                raise TypeError(f"Enum-derived class {name} must define 'map' or 'vals'")
            ENUMS[name] = cls


class Enum(metaclass=_MetaEnum):
    pass


class ScopedEnum(Enum):
    pass


class MemoryMode(Enum):
    vals = ["invalid", "atomic", "timing", "atomic_noncaching"]


# ---------------------------------------------------------------------------------------------
# declarations


class ParamDesc:
    def __init__(self, ptype, vector, *args, **kwargs):
        self.ptype, self.vector = ptype, vector
        self.default = NO_DEFAULT
        if len(args) == 1:
            self.desc = args[0]
        elif len(args) == 2:
            self.default, self.desc = args
        elif not args and "desc" in kwargs:
            self.desc = kwargs.pop("desc")
        else:
            raise TypeError("too many arguments")
        if "default" in kwargs:
            self.default = kwargs.pop("default")
        if kwargs:
            raise TypeError(f"extra arguments {sorted(kwargs)}")
        if not isinstance(self.desc, str):
            raise TypeError("a parameter's description must be a string")

    @property
    def required(self):
        return self.default is NO_DEFAULT

    def convert(self, value):
        if self.vector:
            if not isinstance(value, (list, tuple)):
                value = [value]
            return [self._one(v) for v in value]
        return self._one(value)

    def _one(self, value):
        from .SimObject import SIMOBJECT_CLASSES, SimObject

        from . import proxy

        if isinstance(value, proxy._Proxy):
            return value
        if self.ptype in CONVERT:
            return CONVERT[self.ptype](value)
        if self.ptype in ENUMS:
            if value not in ENUMS[self.ptype].vals:
                raise TypeError(f"Enum param got bad value '{value}' (not in {ENUMS[self.ptype].vals})")
            return value
        cls = SIMOBJECT_CLASSES.get(self.ptype)
        if cls is None:
            raise TypeError(f"the stand-in m5 does not know the parameter type {self.ptype}")
        if value is NULL or isinstance(value, cls):
            return value
        if isinstance(value, SimObject):
            raise TypeError(f"{type(value).__name__} is not a {self.ptype}")
        raise TypeError(f"{value!r} is not a {self.ptype} SimObject (nor NULL)")


class _ParamFactory:
    def __init__(self, vector):
        self._vector = vector

    def __getattr__(self, ptype):
        if ptype.startswith("__"):
            raise AttributeError(ptype)
        return lambda *args, **kwargs: ParamDesc(ptype, self._vector, *args, **kwargs)


Param = _ParamFactory(False)
VectorParam = _ParamFactory(True)


class PortDesc:
    def __init__(self, desc, role):
        self.desc, self.role = desc, role


def RequestPort(desc):
    return PortDesc(desc, "request")


def ResponsePort(desc):
    return PortDesc(desc, "response")
