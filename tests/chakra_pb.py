"""Chakra's et_def.proto as a protobuf descriptor built in code (no generated files), for tests
that check our own wire codec (fastrack_core/chakra.py) against the ``protobuf`` package."""

from __future__ import annotations

from fastrack_core.chakra import _ATTR_FIELDS  # the oneof field numbers


def messages():
    """{message name: class} of the ChakraProtoMsg package, from a descriptor built here."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    scalar = {"double": F.TYPE_DOUBLE, "float": F.TYPE_FLOAT, "int32": F.TYPE_INT32, "int64": F.TYPE_INT64,
              "uint32": F.TYPE_UINT32, "uint64": F.TYPE_UINT64, "sint32": F.TYPE_SINT32, "sint64": F.TYPE_SINT64,
              "fixed32": F.TYPE_FIXED32, "fixed64": F.TYPE_FIXED64, "sfixed32": F.TYPE_SFIXED32,
              "sfixed64": F.TYPE_SFIXED64, "bool": F.TYPE_BOOL, "string": F.TYPE_STRING, "bytes": F.TYPE_BYTES}
    fd = descriptor_pb2.FileDescriptorProto(name="et_def_test.proto", package="ChakraProtoMsg", syntax="proto3")

    def msg(name, fields):
        m = fd.message_type.add(name=name)
        for num, fname, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
        return m

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    list_names = {}
    for kind, t in scalar.items():
        cname = "".join(p.capitalize() for p in kind.split("_")) + "List"
        list_names[kind] = cname
        msg(cname, [(1, "values", t, rep, None)])
    attr = msg("AttributeProto", [(1, "name", F.TYPE_STRING, opt, None), (2, "doc_string", F.TYPE_STRING, opt, None)])
    attr.oneof_decl.add(name="value")
    for num, kind in _ATTR_FIELDS.items():
        if kind.endswith("_list"):
            f = attr.field.add(name=kind, number=num, type=F.TYPE_MESSAGE, label=opt,
                               type_name=".ChakraProtoMsg." + list_names[kind[:-5]])
        else:
            f = attr.field.add(name=kind + "_val", number=num, type=scalar[kind], label=opt)
        f.oneof_index = 0
    msg("GlobalMetadata", [(1, "version", F.TYPE_STRING, opt, None),
                           (2, "attr", F.TYPE_MESSAGE, rep, ".ChakraProtoMsg.AttributeProto")])
    msg("IOInfo", [(1, "values", F.TYPE_STRING, opt, None), (2, "shapes", F.TYPE_STRING, opt, None),
                   (3, "types", F.TYPE_STRING, opt, None)])
    msg("Node", [(1, "id", F.TYPE_UINT64, opt, None), (2, "name", F.TYPE_STRING, opt, None),
                 (3, "type", F.TYPE_INT32, opt, None), (4, "ctrl_deps", F.TYPE_UINT64, rep, None),
                 (5, "data_deps", F.TYPE_UINT64, rep, None), (6, "start_time_micros", F.TYPE_UINT64, opt, None),
                 (7, "duration_micros", F.TYPE_UINT64, opt, None),
                 (8, "inputs", F.TYPE_MESSAGE, opt, ".ChakraProtoMsg.IOInfo"),
                 (9, "outputs", F.TYPE_MESSAGE, opt, ".ChakraProtoMsg.IOInfo"),
                 (10, "attr", F.TYPE_MESSAGE, rep, ".ChakraProtoMsg.AttributeProto")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}"))
            for name in ("GlobalMetadata", "Node", "AttributeProto")}
