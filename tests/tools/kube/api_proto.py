"""Protobuf request bodies, for the few kinds kubectl's imperative commands send that way
(`kubectl create namespace|configmap|secret|serviceaccount`: Go's typed clients write
Content-Type application/vnd.kubernetes.protobuf). A body is "k8s\\0" and a
runtime.Unknown whose raw field holds the object. Only the messages below are known (field
numbers from k8s.io/api's generated.proto); any other field or kind is refused (415), so
nothing is dropped silently. Answers are always JSON (the clients accept it too)."""
import base64
import datetime

from api_store import ApiError

MAGIC = b"k8s\x00"
S, B, I, BOOL, TIME = "string", "bytes", "int", "bool", "Time"

# message -> {field number: (JSON name, type, repeated)}; a type is a scalar above, a
# message name, or ("map", value type).
MESSAGES = {
    "Unknown": {1: ("typeMeta", "TypeMeta", False), 2: ("raw", B, False), 3: ("contentEncoding", S, False),
                4: ("contentType", S, False)},
    "TypeMeta": {1: ("apiVersion", S, False), 2: ("kind", S, False)},
    "ObjectMeta": {1: ("name", S, False), 2: ("generateName", S, False), 3: ("namespace", S, False),
                   4: ("selfLink", S, False), 5: ("uid", S, False), 6: ("resourceVersion", S, False),
                   7: ("generation", I, False), 8: ("creationTimestamp", TIME, False),
                   9: ("deletionTimestamp", TIME, False), 10: ("deletionGracePeriodSeconds", I, False),
                   11: ("labels", ("map", S), False), 12: ("annotations", ("map", S), False),
                   13: ("ownerReferences", "OwnerReference", True), 14: ("finalizers", S, True)},
    "OwnerReference": {1: ("kind", S, False), 3: ("name", S, False), 4: ("uid", S, False),
                       5: ("apiVersion", S, False), 6: ("controller", BOOL, False),
                       7: ("blockOwnerDeletion", BOOL, False)},
    "Time": {1: ("seconds", I, False), 2: ("nanos", I, False)},
    "Namespace": {1: ("metadata", "ObjectMeta", False), 2: ("spec", "NamespaceSpec", False),
                  3: ("status", "NamespaceStatus", False)},
    "NamespaceSpec": {1: ("finalizers", S, True)},
    "NamespaceStatus": {1: ("phase", S, False)},
    "ConfigMap": {1: ("metadata", "ObjectMeta", False), 2: ("data", ("map", S), False),
                  3: ("binaryData", ("map", B), False), 4: ("immutable", BOOL, False)},
    "Secret": {1: ("metadata", "ObjectMeta", False), 2: ("data", ("map", B), False), 3: ("type", S, False),
               4: ("stringData", ("map", S), False), 5: ("immutable", BOOL, False)},
    "ServiceAccount": {1: ("metadata", "ObjectMeta", False), 2: ("secrets", "ObjectReference", True),
                       3: ("imagePullSecrets", "LocalObjectReference", True),
                       4: ("automountServiceAccountToken", BOOL, False)},
    "ObjectReference": {1: ("kind", S, False), 2: ("namespace", S, False), 3: ("name", S, False),
                        4: ("uid", S, False), 5: ("apiVersion", S, False), 6: ("resourceVersion", S, False),
                        7: ("fieldPath", S, False)},
    "LocalObjectReference": {1: ("name", S, False)},
}
KINDS = {"/namespaces": "Namespace", "/configmaps": "ConfigMap", "/secrets": "Secret",
         "/serviceaccounts": "ServiceAccount"}


def refuse(why):
    return ApiError(415, "UnsupportedMediaType", "the stand-in cannot decode this protobuf body (%s); "
                    "send it as application/json" % why)


def varint(buf, i):
    shift = n = 0
    while True:
        if i >= len(buf):
            raise refuse("truncated varint")
        b = buf[i]
        n |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return n, i
        shift += 7


def wire_fields(buf):
    """(field number, wire type, value) of each field of a message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise refuse("wire type %d" % wt)
        yield num, wt, v


def scalar(t, v):
    if t == S:
        return v.decode()
    if t == B:
        return base64.b64encode(v).decode()
    if t == I:
        return v - (1 << 64) if v >= 1 << 63 else v
    if t == BOOL:
        return bool(v)
    raise refuse("type %s" % t)


def message(name, buf):
    table = MESSAGES[name]
    out = {}
    for num, wt, v in wire_fields(buf):
        if num not in table:
            raise refuse("field %d of %s" % (num, name))
        key, t, repeated = table[num]
        if isinstance(t, tuple):             # a map: entries {1: key, 2: value}
            entry = dict((n, x) for n, _, x in wire_fields(v))
            out.setdefault(key, {})[entry.get(1, b"").decode()] = scalar(t[1], entry.get(2, b"" if t[1] in (S, B) else 0))
            continue
        val = time_value(message(t, v)) if t == TIME else message(t, v) if t in MESSAGES else scalar(t, v)
        if val is None or (not repeated and (val == "" or (val == 0 and not isinstance(val, bool)))):
            continue    # Go writes every non-pointer string and number: unset is absent, as in JSON
        if repeated:
            out.setdefault(key, []).append(val)
        else:
            out[key] = val
    return out


def time_value(t):
    """A metav1.Time; Go's zero time (always encoded) is JSON's null: absent."""
    if not t.get("seconds") and not t.get("nanos"):
        return None
    d = datetime.datetime.fromtimestamp(t.get("seconds", 0), datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%SZ")


def decode(kind, body):
    """A protobuf request body as the JSON object it stands for."""
    name = KINDS.get(kind.res)
    if name is None:
        raise refuse("kind %s" % kind.kind)
    if not body.startswith(MAGIC):
        raise refuse("no k8s magic prefix")
    env = message("Unknown", body[len(MAGIC):])
    if env.get("contentEncoding"):
        raise refuse("content encoding %s" % env["contentEncoding"])
    obj = message(name, base64.b64decode(env.get("raw", "")))
    tm = env.get("typeMeta") or {}
    return dict({"apiVersion": tm.get("apiVersion", kind.api_version()), "kind": tm.get("kind", kind.kind)}, **obj)
