#!/usr/bin/env python3
"""tfevents_write.py - write a TensorBoard event file as TensorFlow 2 does, with the protobuf
library (Debian's python3-protobuf), for src/summary/reader_test.c.

    /usr/bin/python3 tests/tools/tfevents_write.py FILE

The messages are built from TensorFlow's event.proto, summary.proto, tensor.proto and
tensor_shape.proto field numbers (FORMATS.md 1.3); the framing is this file's, the masked CRC32C tfevents.py's.
Records, in order:
  1. file_version "brain.Event:2"
  2. step 1: "loss" simple_value 0.5
  3. step 2: "eval/accuracy" as TF2's tf.summary.scalar: a DT_FLOAT tensor of shape [] in
     tensor_content, metadata plugin "scalars", data_class SCALAR
  4. step 3: "eval/accuracy" 0.75 in float_val (no metadata); "lr" DT_DOUBLE 0.125 in
     double_val; "note" a DT_STRING tensor of plugin "text" (not a scalar: skipped)
  5. step 2: SessionLog START (a restart: drops step >= 2)
  6. step 4: "eval/accuracy" 0.875 tensor_content, "loss" 0.25 simple_value
The reader must give loss [(1, 0.5), (4, 0.25)], eval/accuracy [(4, 0.875)], lr [] (purged).
"""
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tfevents import masked  # the reader's CRC32C, masked as TensorFlow does

_T = descriptor_pb2.FieldDescriptorProto


def _build():
    f = descriptor_pb2.FileDescriptorProto(name="dtrain_tfevents_w.proto", package="tensorflow",
                                           syntax="proto3")
    opt, rep = _T.LABEL_OPTIONAL, _T.LABEL_REPEATED

    def msg(name, fields):
        m = f.message_type.add(name=name)
        for fname, num, typ, label, tname in fields:
            fd = m.field.add(name=fname, number=num, type=typ, label=label)
            if tname:
                fd.type_name = tname
        return m

    msg("Dim", [("size", 1, _T.TYPE_INT64, opt, None), ("name", 2, _T.TYPE_STRING, opt, None)])
    msg("TensorShapeProto", [("dim", 2, _T.TYPE_MESSAGE, rep, ".tensorflow.Dim"),
                             ("unknown_rank", 3, _T.TYPE_BOOL, opt, None)])
    msg("TensorProto", [("dtype", 1, _T.TYPE_INT32, opt, None),
                        ("tensor_shape", 2, _T.TYPE_MESSAGE, opt, ".tensorflow.TensorShapeProto"),
                        ("version_number", 3, _T.TYPE_INT32, opt, None),
                        ("tensor_content", 4, _T.TYPE_BYTES, opt, None),
                        ("float_val", 5, _T.TYPE_FLOAT, rep, None),
                        ("double_val", 6, _T.TYPE_DOUBLE, rep, None),
                        ("string_val", 8, _T.TYPE_BYTES, rep, None)])
    msg("PluginData", [("plugin_name", 1, _T.TYPE_STRING, opt, None),
                       ("content", 2, _T.TYPE_BYTES, opt, None)])
    msg("SummaryMetadata", [("plugin_data", 1, _T.TYPE_MESSAGE, opt, ".tensorflow.PluginData"),
                            ("display_name", 2, _T.TYPE_STRING, opt, None),
                            ("summary_description", 3, _T.TYPE_STRING, opt, None),
                            ("data_class", 4, _T.TYPE_INT32, opt, None)])
    msg("SummaryValue", [("tag", 1, _T.TYPE_STRING, opt, None),
                         ("simple_value", 2, _T.TYPE_FLOAT, opt, None),
                         ("tensor", 8, _T.TYPE_MESSAGE, opt, ".tensorflow.TensorProto"),
                         ("metadata", 9, _T.TYPE_MESSAGE, opt, ".tensorflow.SummaryMetadata")])
    msg("Summary", [("value", 1, _T.TYPE_MESSAGE, rep, ".tensorflow.SummaryValue")])
    msg("SessionLog", [("status", 1, _T.TYPE_INT32, opt, None)])
    msg("Event", [("wall_time", 1, _T.TYPE_DOUBLE, opt, None),
                  ("step", 2, _T.TYPE_INT64, opt, None),
                  ("file_version", 3, _T.TYPE_STRING, opt, None),
                  ("summary", 5, _T.TYPE_MESSAGE, opt, ".tensorflow.Summary"),
                  ("session_log", 7, _T.TYPE_MESSAGE, opt, ".tensorflow.SessionLog")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    d = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(d)
    return message_factory.MessageFactory(pool).GetPrototype(d)


Event = _build()


def record(ev):
    payload = ev.SerializeToString()
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked(head)) + payload + struct.pack("<I", masked(payload))


def main(path):
    evs = []
    e = Event(wall_time=1.7e9, file_version="brain.Event:2")
    evs.append(e)
    e = Event(wall_time=1.7e9 + 1, step=1)
    e.summary.value.add(tag="loss", simple_value=0.5)
    evs.append(e)
    e = Event(wall_time=1.7e9 + 2, step=2)
    v = e.summary.value.add(tag="eval/accuracy")
    v.tensor.dtype = 1
    v.tensor.tensor_shape.SetInParent()
    v.tensor.tensor_content = struct.pack("<f", 0.625)
    v.metadata.plugin_data.plugin_name = "scalars"
    v.metadata.data_class = 1
    evs.append(e)
    e = Event(wall_time=1.7e9 + 3, step=3)
    v = e.summary.value.add(tag="eval/accuracy")
    v.tensor.dtype = 1
    v.tensor.float_val.append(0.75)
    v = e.summary.value.add(tag="lr")
    v.tensor.dtype = 2
    v.tensor.double_val.append(0.125)
    v = e.summary.value.add(tag="note")
    v.tensor.dtype = 7
    v.tensor.string_val.append(b"hello")
    v.metadata.plugin_data.plugin_name = "text"
    evs.append(e)
    e = Event(wall_time=1.7e9 + 4, step=2)
    e.session_log.status = 1
    evs.append(e)
    e = Event(wall_time=1.7e9 + 5, step=4)
    v = e.summary.value.add(tag="eval/accuracy")
    v.tensor.dtype = 1
    v.tensor.tensor_content = struct.pack("<f", 0.875)
    v.metadata.plugin_data.plugin_name = "scalars"
    e.summary.value.add(tag="loss", simple_value=0.25)
    evs.append(e)
    with open(path, "wb") as f:
        for ev in evs:
            f.write(record(ev))


if __name__ == "__main__":
    main(sys.argv[1])
