#!/usr/bin/env python3
"""tfevents.py - read TensorBoard event files as TensorBoard does, checking everything.

    /usr/bin/python3 tests/tools/tfevents.py RUN_DIR [RUN_DIR ...]

For each run directory: every file whose basename holds "tfevents", in name order (as
TensorBoard's loaders take them); every record's framing (uint64 length, masked CRC32C of the
length, payload, masked CRC32C of the payload: FORMATS.md 1.2) checked, with a CRC32C of this
file's own; every payload decoded as tensorflow.Event by the protobuf library (Debian's
python3-protobuf) against message definitions built here from TensorFlow's event.proto and
summary.proto field numbers. Checks that each file starts with file_version "brain.Event:2",
that wall times are finite, and that a step going backwards within a run comes only after a
SessionLog START at or below it (a resume), which drops the points at or after that step, as
TensorBoard does with file_version 2.

Prints one JSON object: {run: {"files": n, "starts": [steps], "scalars": {tag: [[step,
value], ...]}}}. Exit 1 with a message naming the file and offset when anything is wrong.
"""
import json
import math
import os
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_T = descriptor_pb2.FieldDescriptorProto


def _build():
    f = descriptor_pb2.FileDescriptorProto(name="dtrain_tfevents.proto", package="tensorflow",
                                           syntax="proto3")

    def msg(name, fields):
        m = f.message_type.add(name=name)
        for fname, num, typ, label, tname in fields:
            fd = m.field.add(name=fname, number=num, type=typ, label=label)
            if tname:
                fd.type_name = tname
        return m

    opt, rep = _T.LABEL_OPTIONAL, _T.LABEL_REPEATED
    value = msg("SummaryValue", [("tag", 1, _T.TYPE_STRING, opt, None),
                                 ("simple_value", 2, _T.TYPE_FLOAT, opt, None),
                                 ("node_name", 7, _T.TYPE_STRING, opt, None)])
    value.oneof_decl.add(name="value")
    value.field[1].oneof_index = 0
    msg("Summary", [("value", 1, _T.TYPE_MESSAGE, rep, ".tensorflow.SummaryValue")])
    e = f.enum_type.add(name="SessionStatus")
    for n, v in (("STATUS_UNSPECIFIED", 0), ("START", 1), ("STOP", 2), ("CHECKPOINT", 3)):
        e.value.add(name=n, number=v)
    msg("SessionLog", [("status", 1, _T.TYPE_ENUM, opt, ".tensorflow.SessionStatus"),
                       ("checkpoint_path", 2, _T.TYPE_STRING, opt, None),
                       ("msg", 3, _T.TYPE_STRING, opt, None)])
    ev = msg("Event", [("wall_time", 1, _T.TYPE_DOUBLE, opt, None),
                       ("step", 2, _T.TYPE_INT64, opt, None),
                       ("file_version", 3, _T.TYPE_STRING, opt, None),
                       ("graph_def", 4, _T.TYPE_BYTES, opt, None),
                       ("summary", 5, _T.TYPE_MESSAGE, opt, ".tensorflow.Summary"),
                       ("session_log", 7, _T.TYPE_MESSAGE, opt, ".tensorflow.SessionLog")])
    ev.oneof_decl.add(name="what")
    for i in (2, 3, 4, 5):
        ev.field[i].oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    d = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(d)
    return message_factory.MessageFactory(pool).GetPrototype(d)


Event = _build()


def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


class Bad(Exception):
    pass


def records(path):
    data = open(path, "rb").read()
    p = 0
    while p < len(data):
        if p + 12 > len(data):
            raise Bad(f"{path}: offset {p}: a record header cut short")
        n, = struct.unpack_from("<Q", data, p)
        if masked(data[p:p + 8]) != struct.unpack_from("<I", data, p + 8)[0]:
            raise Bad(f"{path}: offset {p}: the length's checksum is wrong")
        if p + 12 + n + 4 > len(data):
            raise Bad(f"{path}: offset {p}: a record of {n} bytes cut short")
        payload = data[p + 12:p + 12 + n]
        if masked(payload) != struct.unpack_from("<I", data, p + 12 + n)[0]:
            raise Bad(f"{path}: offset {p}: the payload's checksum is wrong")
        yield p, payload
        p += 12 + n + 4


def read_run(run):
    files = sorted(f for f in os.listdir(run) if "tfevents" in f)
    if not files:
        raise Bad(f"{run}: no event files")
    scalars, starts, last = {}, [], None
    for name in files:
        path = os.path.join(run, name)
        for i, (off, payload) in enumerate(records(path)):
            ev = Event()
            try:
                ev.ParseFromString(payload)
            except Exception as e:  # noqa: BLE001 - any decode failure is the file's fault
                raise Bad(f"{path}: offset {off}: not a tensorflow.Event: {e}")
            if not math.isfinite(ev.wall_time) or ev.wall_time <= 0:
                raise Bad(f"{path}: offset {off}: wall_time {ev.wall_time}")
            what = ev.WhichOneof("what")
            if i == 0:
                if what != "file_version" or ev.file_version != "brain.Event:2":
                    raise Bad(f"{path}: the first record is not file_version brain.Event:2")
                continue
            if what == "session_log" and ev.session_log.status == 1:
                starts.append(ev.step)
                for tag in scalars:  # TensorBoard's purge of what a restart redoes
                    scalars[tag] = [pt for pt in scalars[tag] if pt[0] < ev.step]
                last = ev.step
                continue
            if what != "summary":
                raise Bad(f"{path}: offset {off}: unexpected event {what}")
            if last is not None and ev.step < last:
                raise Bad(f"{path}: offset {off}: step {ev.step} after step {last} "
                          "with no SessionLog START")
            last = ev.step
            for v in ev.summary.value:
                if v.WhichOneof("value") != "simple_value":
                    raise Bad(f"{path}: offset {off}: tag {v.tag!r} is not a simple_value")
                scalars.setdefault(v.tag, []).append([ev.step, v.simple_value])
    return {"files": len(files), "starts": starts, "scalars": scalars}


def main(argv):
    try:
        out = {os.path.basename(os.path.normpath(r)): read_run(r) for r in argv}
    except (Bad, OSError) as e:
        print(f"tfevents.py: {e}", file=sys.stderr)
        return 1
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
