"""MLCommons Chakra execution traces (ET): the protobuf messages, read and written without protoc.

A Chakra ET file (``schema/protobuf/et_def.proto`` of github.com/mlcommons/chakra, package
``ChakraProtoMsg``) is a stream of length-delimited protobuf messages: one ``GlobalMetadata``, then
one ``Node`` per operation; each message is preceded by its byte length as a varint. One file per
rank (``<name>.<rank>.et`` by Chakra's convention). Files may be gzip-compressed.

This module is the one place that knows the field numbers. It implements the protobuf wire format
itself (varints, zigzag, fixed32/64, length-delimited fields; packed and unpacked repeated
scalars), so neither Chakra's generated code nor ``protobuf`` is needed. Only what the two
messages use is implemented (no groups, no unknown-field preservation).

Messages (field numbers from et_def.proto)::

    GlobalMetadata { string version = 1; repeated AttributeProto attr = 2; }
    Node { uint64 id = 1; string name = 2; NodeType type = 3; repeated uint64 ctrl_deps = 4;
           repeated uint64 data_deps = 5; uint64 start_time_micros = 6; uint64 duration_micros = 7;
           IOInfo inputs = 8; IOInfo outputs = 9; repeated AttributeProto attr = 10; }
    IOInfo { string values = 1; string shapes = 2; string types = 3; }
    AttributeProto { string name = 1; string doc_string = 2; oneof value { ... 3..32 } }

Errors are :class:`~fastrack_core.errors.TraceFormatError` naming the file, the message (metadata or
node index) and the field; data values are never echoed.
"""

from __future__ import annotations

import enum
import gzip
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterator

from fastrack_core.errors import TraceFormatError
from fastrack_core.schema import MAX_DECOMPRESSED_BYTES, MAX_DEPS_PER_NODE, MAX_NAME_CHARS, MAX_NODES_PER_FILE

GZIP_MAGIC = b"\x1f\x8b"

# Versions of the GlobalMetadata.version string this reader accepts: major 0 (Chakra 0.0.x) and 1
# (Chakra 1.0.x, "1.0.0" since mlcommons/chakra#213). Chakra's PyTorch converter leaves it empty.
SUPPORTED_MAJOR = (0, 1)
WRITE_VERSION = "1.0.0"
MAX_MESSAGE_BYTES = 1 << 28  # a single node larger than 256 MiB is taken as corruption


class NodeType(enum.IntEnum):
    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveCommType(enum.IntEnum):
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


# AttributeProto oneof: field number -> (value kind, scalar wire decoding). Lists are sub-messages
# whose field 1 is the repeated value (packed or not).
_ATTR_FIELDS: dict[int, str] = {
    3: "double", 4: "double_list", 5: "float", 6: "float_list", 7: "int32", 8: "int32_list",
    9: "int64", 10: "int64_list", 11: "uint32", 12: "uint32_list", 13: "uint64", 14: "uint64_list",
    15: "sint32", 16: "sint32_list", 17: "sint64", 18: "sint64_list", 19: "fixed32", 20: "fixed32_list",
    21: "fixed64", 22: "fixed64_list", 23: "sfixed32", 24: "sfixed32_list", 25: "sfixed64",
    26: "sfixed64_list", 27: "bool", 28: "bool_list", 29: "string", 30: "string_list", 31: "bytes",
    32: "bytes_list",
}  # fmt: skip
_ATTR_NUMBER = {kind: num for num, kind in _ATTR_FIELDS.items()}
_VARINT_KINDS = {"int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool"}
_FIXED = {"double": "<d", "float": "<f", "fixed32": "<I", "fixed64": "<Q", "sfixed32": "<i", "sfixed64": "<q"}


@dataclass
class Attr:
    """One AttributeProto: a name, the kind of its oneof value (e.g. ``int64``, ``string_list``)
    and the value (a Python scalar, str, bytes or list)."""

    name: str
    kind: str
    value: Any
    doc: str = ""


@dataclass
class IOInfo:
    values: str = ""
    shapes: str = ""
    types: str = ""


@dataclass
class Node:
    id: int
    name: str = ""
    type: int = NodeType.INVALID_NODE
    ctrl_deps: list[int] = field(default_factory=list)
    data_deps: list[int] = field(default_factory=list)
    start_time_micros: int = 0
    duration_micros: int = 0
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    attrs: list[Attr] = field(default_factory=list)

    def attr(self, name: str, default: Any = None) -> Any:
        """The value of the last attribute called ``name`` (``default`` when absent)."""
        return last_attr(self.attrs, name, default)


def last_attr(attrs: list, name: str, default: Any = None) -> Any:
    """The value of the last attribute called ``name`` in ``attrs`` (``default`` when absent)."""
    for a in reversed(attrs):
        if a.name == name:
            return a.value
    return default


@dataclass
class GlobalMetadata:
    version: str = ""
    attrs: list[Attr] = field(default_factory=list)

    def attr(self, name: str, default: Any = None) -> Any:
        """The value of the last attribute called ``name`` (``default`` when absent)."""
        return last_attr(self.attrs, name, default)


class _Bad(Exception):
    """A decoding failure inside one message; the reader adds the file and the message."""

    def __init__(self, field_name: str, what: str):
        self.field, self.what = field_name, what
        super().__init__(f"field '{field_name}': {what}")


# --------------------------------------------------------------------------- wire format: encode


def _varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64  # negative int32/int64: ten-byte two's complement, as protobuf does
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


varint = _varint  # the protobuf base-128 varint, for other protobuf writers (Perfetto's .pftrace)


def _zigzag(v: int) -> int:
    return (v << 1) ^ (v >> 63)


def _key(num: int, wire: int) -> bytes:
    return _varint((num << 3) | wire)


def _len_field(num: int, payload: bytes) -> bytes:
    return _key(num, 2) + _varint(len(payload)) + payload


def _scalar_bytes(kind: str, v: Any) -> bytes:
    if kind in ("sint32", "sint64"):
        return _varint(_zigzag(int(v)))
    if kind in _VARINT_KINDS:
        return _varint(int(bool(v)) if kind == "bool" else int(v))
    return struct.pack(_FIXED[kind], v)


def _encode_attr(a: Attr) -> bytes:
    out = _len_field(1, a.name.encode())
    if a.doc:
        out += _len_field(2, a.doc.encode())
    num = _ATTR_NUMBER.get(a.kind)
    if num is None:
        raise ValueError(f"unknown attribute kind {a.kind!r}")
    if a.kind in ("string", "bytes"):
        raw = a.value.encode() if isinstance(a.value, str) else bytes(a.value)
        return out + _len_field(num, raw)
    if a.kind in ("string_list", "bytes_list"):
        items = b"".join(_len_field(1, x.encode() if isinstance(x, str) else bytes(x)) for x in a.value)
        return out + _len_field(num, items)
    if a.kind.endswith("_list"):  # packed repeated scalars
        base = a.kind[: -len("_list")]
        packed = b"".join(_scalar_bytes(base, x) for x in a.value)
        return out + _len_field(num, _len_field(1, packed) if packed else b"")
    wire = 0 if a.kind in _VARINT_KINDS else (1 if struct.calcsize(_FIXED[a.kind]) == 8 else 5)
    return out + _key(num, wire) + _scalar_bytes(a.kind, a.value)


def _encode_io(io: IOInfo) -> bytes:
    return b"".join(_len_field(i, s.encode()) for i, s in ((1, io.values), (2, io.shapes), (3, io.types)) if s)


def encode_metadata(meta: GlobalMetadata) -> bytes:
    out = _len_field(1, meta.version.encode()) if meta.version else b""
    return out + b"".join(_len_field(2, _encode_attr(a)) for a in meta.attrs)


def encode_node(node: Node) -> bytes:
    out = bytearray(_key(1, 0) + _varint(int(node.id)))
    if node.name:
        out += _len_field(2, node.name.encode())
    if node.type:
        out += _key(3, 0) + _varint(int(node.type))
    for num, deps in ((4, node.ctrl_deps), (5, node.data_deps)):
        if deps:
            out += _len_field(num, b"".join(_varint(int(d)) for d in deps))
    if node.start_time_micros:
        out += _key(6, 0) + _varint(int(node.start_time_micros))
    if node.duration_micros:
        out += _key(7, 0) + _varint(int(node.duration_micros))
    for num, io in ((8, node.inputs), (9, node.outputs)):
        if io is not None:
            out += _len_field(num, _encode_io(io))
    for a in node.attrs:
        out += _len_field(10, _encode_attr(a))
    return bytes(out)


def write_et(fh: BinaryIO, meta: GlobalMetadata, nodes: list[Node]) -> None:
    """Write one ET stream (metadata, then the nodes), each message prefixed by its length."""
    for payload in [encode_metadata(meta)] + [encode_node(n) for n in nodes]:
        fh.write(_varint(len(payload)))
        fh.write(payload)


# --------------------------------------------------------------------------- wire format: decode


def _read_varint(buf: bytes, pos: int, end: int, field_name: str) -> tuple[int, int]:
    if pos < end and buf[pos] < 0x80:  # one byte: most keys, lengths and small values
        return buf[pos], pos + 1
    result = shift = 0
    while True:
        if pos >= end:
            raise _Bad(field_name, "truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise _Bad(field_name, "varint longer than 10 bytes")


def _fields(buf: bytes, start: int, end: int, msg: str) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of each field of the message in ``buf[start:end]``; the
    value is an int (varint), bytes (fixed32/64 raw, length-delimited). Field names for errors
    are built only when one is raised."""
    pos = start
    num = 0
    try:
        while pos < end:
            key, pos = _read_varint(buf, pos, end, "")
            num, wire = key >> 3, key & 7
            if num == 0:
                raise _Bad("", "field number 0")
            if wire == 0:
                val, pos = _read_varint(buf, pos, end, "")
            elif wire == 2:
                n, pos = _read_varint(buf, pos, end, "")
                if pos + n > end:
                    raise _Bad("", f"length {n} runs past the end of the message")
                val, pos = buf[pos : pos + n], pos + n
            elif wire == 1 or wire == 5:
                size = 8 if wire == 1 else 4
                if pos + size > end:
                    raise _Bad("", "truncated fixed-width value")
                val, pos = buf[pos : pos + size], pos + size
            else:
                raise _Bad("", f"unsupported wire type {wire}")
            yield num, wire, val
            num = 0
    except _Bad as exc:
        if exc.field:
            raise
        raise _Bad(f"{msg}.{num}" if num else f"{msg} field key", exc.what) from None


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _scalar(kind: str, wire: int, val: Any, fname: str) -> Any:
    if kind in _VARINT_KINDS:
        if wire != 0:
            raise _Bad(fname, f"wire type {wire}, expected a varint")
        if kind == "bool":
            return bool(val)
        if kind == "int32":
            return _signed(val, 32)
        if kind == "int64":
            return _signed(val, 64)
        if kind == "uint32":
            return val & 0xFFFFFFFF
        if kind == "uint64":
            return val & 0xFFFFFFFFFFFFFFFF
        return (val >> 1) ^ -(val & 1)  # sint32/sint64: zigzag
    fmt = _FIXED[kind]
    if not isinstance(val, bytes) or len(val) != struct.calcsize(fmt):
        raise _Bad(fname, f"expected a {struct.calcsize(fmt)}-byte value")
    return struct.unpack(fmt, val)[0]


def _packed(kind: str, raw: bytes, fname: str) -> list[Any]:
    out: list[Any] = []
    pos, end = 0, len(raw)
    if kind in _VARINT_KINDS:
        while pos < end:
            v, pos = _read_varint(raw, pos, end, fname)
            out.append(_scalar(kind, 0, v, fname))
        return out
    size = struct.calcsize(_FIXED[kind])
    if end % size:
        raise _Bad(fname, f"packed length {end} is not a multiple of {size}")
    return [_scalar(kind, 1, raw[i : i + size], fname) for i in range(0, end, size)]


def _text(val: Any, fname: str) -> str:
    if not isinstance(val, bytes):
        raise _Bad(fname, "expected a string (length-delimited)")
    try:
        return val.decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad(fname, "string is not valid UTF-8") from None


def _decode_attr(raw: bytes, msg: str) -> Attr:
    a = Attr(name="", kind="", value=None)
    for num, wire, val in _fields(raw, 0, len(raw), f"{msg}.attr"):
        if num == 1:
            a.name = _text(val, f"{msg}.attr.name")
        elif num == 2:
            a.doc = _text(val, f"{msg}.attr.doc_string")
        elif num in _ATTR_FIELDS:
            kind = a.kind = _ATTR_FIELDS[num]
            try:  # errors are named after the attribute once caught (names cost time on every value)
                a.value = _attr_value(kind, wire, val)
            except _Bad as exc:
                raise _Bad(f"{msg}.attr[{a.name or '?'}].{kind}_val", exc.what) from None
    return a


def _attr_value(kind: str, wire: int, val: Any) -> Any:
    if kind == "string":
        return _text(val, "")
    if kind == "bytes":
        if wire != 2:
            raise _Bad("", "expected bytes")
        return bytes(val)
    if not kind.endswith("_list"):
        return _scalar(kind, wire, val, "")
    if wire != 2:
        raise _Bad("", "expected a list message")
    base = kind[: -len("_list")]
    items: list[Any] = []
    for inum, iwire, ival in _fields(val, 0, len(val), ""):
        if inum != 1:
            continue
        if base == "string":
            items.append(_text(ival, ""))
        elif base == "bytes":
            items.append(bytes(ival))
        elif iwire == 2:
            items.extend(_packed(base, ival, ""))
        else:
            items.append(_scalar(base, iwire, ival, ""))
    return items


def _decode_io(raw: bytes, fname: str) -> IOInfo:
    io = IOInfo()
    for num, _wire, val in _fields(raw, 0, len(raw), fname):
        if num in (1, 2, 3):
            setattr(io, ("values", "shapes", "types")[num - 1], _text(val, fname))
    return io


def _uints(wire: int, val: Any, fname: str) -> list[int]:
    if wire == 2:
        return _packed("uint64", val, fname)
    return [_scalar("uint64", wire, val, fname)]


def decode_metadata(raw: bytes) -> GlobalMetadata:
    meta = GlobalMetadata()
    for num, _wire, val in _fields(raw, 0, len(raw), "GlobalMetadata"):
        if num == 1:
            meta.version = _text(val, "GlobalMetadata.version")
        elif num == 2:
            if not isinstance(val, bytes):
                raise _Bad("GlobalMetadata.attr", "expected a message")
            meta.attrs.append(_decode_attr(val, "GlobalMetadata"))
    return meta


def decode_node(raw: bytes, index: int) -> Node:
    msg = f"node {index}"
    node = Node(id=-1)
    for num, wire, val in _fields(raw, 0, len(raw), msg):
        if num == 1:
            node.id = _scalar("uint64", wire, val, f"{msg}.id")
        elif num == 2:
            if len(val) > MAX_NAME_CHARS:  # (bytes; a name of more characters has at least as many)
                raise _Bad(f"{msg}.name", f"longer than {MAX_NAME_CHARS:,} bytes (fastrack_core.schema.MAX_NAME_CHARS)")
            node.name = _text(val, f"{msg}.name")
        elif num == 3:
            node.type = _scalar("int32", wire, val, f"{msg}.type")
        elif num == 4:
            node.ctrl_deps.extend(_uints(wire, val, f"{msg}.ctrl_deps"))
            if len(node.ctrl_deps) > MAX_DEPS_PER_NODE:
                raise _Bad(f"{msg}.ctrl_deps", f"more than {MAX_DEPS_PER_NODE:,} dependencies "
                           "(fastrack_core.schema.MAX_DEPS_PER_NODE)")
        elif num == 5:
            node.data_deps.extend(_uints(wire, val, f"{msg}.data_deps"))
            if len(node.data_deps) > MAX_DEPS_PER_NODE:
                raise _Bad(f"{msg}.data_deps", f"more than {MAX_DEPS_PER_NODE:,} dependencies "
                           "(fastrack_core.schema.MAX_DEPS_PER_NODE)")
        elif num == 6:
            node.start_time_micros = _scalar("uint64", wire, val, f"{msg}.start_time_micros")
        elif num == 7:
            node.duration_micros = _scalar("uint64", wire, val, f"{msg}.duration_micros")
        elif num in (8, 9):
            if not isinstance(val, bytes):
                raise _Bad(f"{msg}.{'inputs' if num == 8 else 'outputs'}", "expected a message")
            io = _decode_io(val, f"{msg}.{'inputs' if num == 8 else 'outputs'}")
            if num == 8:
                node.inputs = io
            else:
                node.outputs = io
        elif num == 10:
            if not isinstance(val, bytes):
                raise _Bad(f"{msg}.attr", "expected a message")
            node.attrs.append(_decode_attr(val, msg))
    if node.id < 0:
        raise _Bad(f"{msg}.id", "missing")
    return node


# --------------------------------------------------------------------------- files


def _read_capped(f, limit: int) -> bytes | bytearray:
    """At most ``limit`` + 1 bytes of ``f``, read in 1 MiB chunks into one buffer (no chunk list
    joined at the end, so a bomb costs the limit, not twice it)."""
    buf = bytearray()
    while len(buf) <= limit:
        chunk = f.read(min(1 << 20, limit + 1 - len(buf)))
        if not chunk:
            break
        buf += chunk
    return buf if len(buf) > limit else bytes(buf)  # (over the limit: refused by the caller, not copied)


def read_bytes(path: str, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The (decompressed) bytes of an ET file, at most ``limit`` of them (a file that decompresses
    to more is refused, naming the limit, before more than ``limit`` bytes are held)."""
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
            f.seek(0)
            if magic == GZIP_MAGIC:
                with gzip.GzipFile(fileobj=f) as g:
                    data = _read_capped(g, limit)
            else:
                data = _read_capped(f, limit)
    except EOFError:
        raise TraceFormatError("truncated gzip stream (file ends before the end of the compressed data)",
                               path=path) from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise TraceFormatError(f"corrupt gzip data ({exc})", path=path) from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read file ({exc.strerror or exc})", path=path) from None
    if len(data) > limit:
        raise TraceFormatError(f"{'decompresses to' if magic == GZIP_MAGIC else 'holds'} more than {limit:,} bytes "
                               "(the limit of one file read whole: fastrack_core.schema.MAX_DECOMPRESSED_BYTES)",
                               path=path)
    return data


def messages(data: bytes, path: str) -> Iterator[tuple[int, bytes]]:
    """(index, payload) of each length-prefixed message; index 0 is the GlobalMetadata."""
    pos, end, i = 0, len(data), 0
    while pos < end:
        what = "GlobalMetadata" if i == 0 else f"node {i - 1}"
        try:
            n, pos = _read_varint(data, pos, end, f"{what} length prefix")
        except _Bad as exc:
            raise TraceFormatError(f"truncated Chakra ET: {exc}", path=path) from None
        if n > MAX_MESSAGE_BYTES:
            raise TraceFormatError(f"not a Chakra ET: {what} length prefix says {n} bytes", path=path)
        if pos + n > end:
            raise TraceFormatError(f"truncated Chakra ET: {what} needs {n} bytes, the file has {end - pos} left",
                                   path=path)
        yield i, data[pos : pos + n]
        pos += n
        i += 1


def check_version(version: str, path: str) -> None:
    """Refuse a GlobalMetadata.version this reader does not know (empty is accepted: Chakra's
    PyTorch converter leaves it unset)."""
    if not version:
        return
    head = version.split(".")[0]
    if not head.isdigit() or int(head) not in SUPPORTED_MAJOR:
        shown = version if len(version) <= 16 and version.replace(".", "").replace("-", "").isalnum() else "?"
        raise TraceFormatError(f"field 'GlobalMetadata.version': Chakra ET schema version {shown!r} is not supported "
                               f"(expected {' or '.join(f'{m}.x' for m in SUPPORTED_MAJOR)})", path=path)


def read_et(path: str) -> tuple[GlobalMetadata, list[Node]]:
    """The metadata and the nodes of one ET file. Raises :class:`TraceFormatError` naming the file,
    the message and the field on anything malformed, and on an unsupported schema version."""
    data = read_bytes(path)
    if not data:
        raise TraceFormatError("empty file", path=path)
    meta: GlobalMetadata | None = None
    nodes: list[Node] = []
    try:
        for i, payload in messages(data, path):
            if i == 0:
                meta = decode_metadata(payload)
                check_version(meta.version, path)
            else:
                if i > MAX_NODES_PER_FILE:
                    raise TraceFormatError(f"holds more than {MAX_NODES_PER_FILE:,} nodes (the limit of one file: "
                                           "fastrack_core.schema.MAX_NODES_PER_FILE)", path=path)
                nodes.append(decode_node(payload, i - 1))
    except _Bad as exc:
        raise TraceFormatError(f"not a valid Chakra ET: {exc}", path=path) from None
    assert meta is not None
    return meta, nodes


def looks_like_et(head: bytes) -> bool:
    """Whether the (decompressed) first bytes of a file start a Chakra ET: a length prefix, then a
    GlobalMetadata (its first field a short printable ``version`` or an ``attr`` that starts with
    its name), then, when the head reaches it, a Node that starts with its id. The sniff of the
    format."""
    if not head or head.lstrip()[:1] in (b"{", b"[") or head.startswith((b"SQLite format 3\x00", b"PAR1")):
        return False  # JSON, an SQLite database, a Parquet file
    try:
        n, pos = _read_varint(head, 0, len(head), "length")
        if n > MAX_MESSAGE_BYTES:
            return False
        if n:
            key = head[pos : pos + 1]
            m, p2 = _read_varint(head, pos + 1, len(head), "length")
            if key == b"\x0a":  # version: a short printable string
                text = head[p2 : p2 + m]
                if m > 64 or len(text) < min(m, len(head) - p2) or not all(32 <= c < 127 for c in text):
                    return False
            elif key == b"\x12":  # attr: an AttributeProto, which starts with its name
                if head[p2 : p2 + 1] not in (b"\x0a", b""):
                    return False
            else:
                return False
            if p2 + m > pos + n:
                return False
        pos += n
        if pos >= len(head):
            return True  # a metadata-only file, or a head that ends inside the metadata
        m, pos2 = _read_varint(head, pos, len(head), "length")
        return m > 0 and head[pos2 : pos2 + 1] in (b"\x08", b"")  # a Node starts with its id (field 1, varint)
    except _Bad:
        return False


__all__ = ["NodeType", "CollectiveCommType", "Attr", "IOInfo", "Node", "GlobalMetadata", "encode_metadata",
           "encode_node", "write_et", "read_et", "read_bytes", "messages", "check_version", "looks_like_et",
           "decode_metadata", "decode_node", "SUPPORTED_MAJOR", "WRITE_VERSION"]
