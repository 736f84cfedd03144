"""The stand-in API server's object store: every object in memory, one global
resourceVersion counter, a bounded history of change events, and the open watches
(each fed through its own queue). Also the API errors (Status objects) and the
label/field selectors, which the store applies to lists and watches."""
import collections
import datetime
import queue
import random
import re
import threading
import time

# Go's k8s.io/apimachinery/pkg/util/rand alphabet (no vowels, no confusable digits),
# used for generateName suffixes as the real server does.
RAND_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def rand_suffix(n=5):
    return "".join(random.choice(RAND_ALPHABET) for _ in range(n))


def now_rfc3339(offset=0.0):
    t = datetime.datetime.fromtimestamp(time.time() + offset, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(s):
    """Seconds since the epoch of an RFC 3339 time, or None."""
    if not isinstance(s, str):
        return None
    m = re.match(r"^(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)$", s)
    if not m:
        return None
    y, mo, d, h, mi, sec = (int(x) for x in m.groups()[:6])
    try:
        t = datetime.datetime(y, mo, d, h, mi, sec, tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    frac = float(m.group(7)) if m.group(7) else 0.0
    tz = m.group(8)
    off = 0
    if tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        off = sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return t.timestamp() + frac - off


# ---------------------------------------------------------------- errors


class ApiError(Exception):
    """An error answered as a metav1.Status, worded as the real server words it."""

    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": self.message}
        if self.reason:
            st["reason"] = self.reason
        if self.details:
            st["details"] = self.details
        st["code"] = self.code
        return st


def _details(name, group, kind):
    d = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    d["kind"] = kind
    return d


def qualified(group, plural):
    return plural + "." + group if group else plural


def not_found(group, plural, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (qualified(group, plural), name),
                    _details(name, group, plural))


def already_exists(group, plural, name):
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (qualified(group, plural), name),
                    _details(name, group, plural))


def conflict(group, plural, name, why):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                    % (qualified(group, plural), name, why), _details(name, group, plural))


def stale_conflict(group, plural, name):
    return conflict(group, plural, name, "the object has been modified; please apply your "
                    "changes to the latest version and try again")


def forbidden(group, plural, name, why):
    return ApiError(403, "Forbidden", '%s "%s" is forbidden: %s' % (qualified(group, plural), name, why),
                    _details(name, group, plural))


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                    {"causes": [{"reason": "UnexpectedServerResponse", "message": "405: Method Not Allowed"}]})


def no_such_resource():
    return ApiError(404, "NotFound", "the server could not find the requested resource",
                    {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})


def expired(rv, floor):
    return ApiError(410, "Expired", "too old resource version: %s (%s)" % (rv, floor))


def unsupported_media(types):
    return ApiError(415, "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: "
                    + ", ".join(types))


class Cause:
    """One field error, as k8s.io/apimachinery/pkg/util/validation/field.Error."""
    REASONS = {"Required": "FieldValueRequired", "Invalid": "FieldValueInvalid",
               "NotSupported": "FieldValueNotSupported", "Duplicate": "FieldValueDuplicate",
               "Forbidden": "FieldValueForbidden", "TooLong": "FieldValueTooLong",
               "TooMany": "FieldValueTooMany", "NotFound": "FieldValueNotFound"}

    def __init__(self, field, kind, detail="", value=None):
        self.field, self.kind, self.detail, self.value = field, kind, detail, value

    def body(self):
        k, d = self.kind, self.detail
        if k == "Required":
            return "Required value" + (": " + d if d else "")
        if k == "Forbidden":
            return "Forbidden" + (": " + d if d else "")
        if k == "Invalid":
            return "Invalid value: %s: %s" % (go_value(self.value), d) if d else \
                "Invalid value: %s" % go_value(self.value)
        if k == "NotSupported":
            return "Unsupported value: %s: supported values: %s" % (
                go_value(self.value), ", ".join('"%s"' % s for s in d))
        if k == "Duplicate":
            return "Duplicate value: %s" % go_value(self.value)
        if k == "NotFound":
            return "Not found: %s" % go_value(self.value)
        if k == "TooLong":
            return "Too long: may not be more than %s bytes" % d
        if k == "TooMany":
            return "Too many: %s: %s" % (go_value(self.value), d)
        return d

    def message(self):
        return "%s: %s" % (self.field, self.body()) if self.field else self.body()


class GoRaw(str):
    """A value a field error prints as it is (a Go struct, say)."""


def go_value(v):
    """A value printed the way field.Error prints it (strings quoted, like Go's %q)."""
    if isinstance(v, GoRaw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return "[]string{%s}" % ", ".join(go_value(x) for x in v)
    return str(v)


def invalid(kind, group, name, causes):
    qkind = kind + "." + group if group else kind
    msgs = [c.message() for c in causes]
    agg = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
    details = _details(name, group, kind)
    details["causes"] = [{"reason": Cause.REASONS.get(c.kind, "FieldValueInvalid"),
                          "message": c.body(), "field": c.field} for c in causes]
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (qkind, name, agg), details)


# ---------------------------------------------------------------- selectors

LABEL_KEY_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")


class LabelSelector:
    """A parsed label selector: a list of (key, op, values)."""

    def __init__(self, text):
        self.reqs = parse_label_selector(text or "")

    def matches(self, labels):
        labels = labels or {}
        for key, op, vals in self.reqs:
            has = key in labels
            v = labels.get(key)
            if op in ("=", "==", "in") and not (has and v in vals):
                return False
            if op in ("!=", "notin") and has and v in vals:
                return False
            if op == "exists" and not has:
                return False
            if op == "!" and has:
                return False
            if op in (">", "<"):
                try:
                    n = int(v)
                except (TypeError, ValueError):
                    return False
                if (op == ">" and not n > vals[0]) or (op == "<" and not n < vals[0]):
                    return False
        return True


def _split_top(text):
    """Split a selector at the commas that are not inside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _check_label_key(key, text):
    name = key.split("/", 1)[-1]
    if not key or not LABEL_KEY_RE.match(name) or len(name) > 63:
        raise bad_request("unable to parse requirement: <nil>: Invalid value: \"%s\": name part must "
                          "consist of alphanumeric characters, '-', '_' or '.', and must start and "
                          "end with an alphanumeric character" % key)


def parse_label_selector(text):
    reqs = []
    if not text.strip():
        return reqs
    for part in _split_top(text):
        p = part.strip()
        if not p:
            raise bad_request("unable to parse requirement: found '', expected: identifier")
        m = re.match(r"^([^\s=!<>(),]+)\s+(in|notin)\s*\((.*)\)$", p)
        if m:
            vals = [v.strip() for v in m.group(3).split(",")]
            _check_label_key(m.group(1), text)
            reqs.append((m.group(1), m.group(2), set(vals)))
            continue
        m = re.match(r"^([^\s=!<>(),]+)\s*(==|=|!=|>|<)\s*([^\s=!<>(),]*)$", p)
        if m:
            _check_label_key(m.group(1), text)
            op, val = m.group(2), m.group(3)
            if op in (">", "<"):
                try:
                    reqs.append((m.group(1), op, [int(val)]))
                except ValueError:
                    raise bad_request("unable to parse requirement: for 'Gt', 'Lt' operators, the "
                                      "value must be an integer")
            else:
                reqs.append((m.group(1), op, {val}))
            continue
        m = re.match(r"^(!?)\s*([^\s=!<>(),]+)$", p)
        if m:
            _check_label_key(m.group(2), text)
            reqs.append((m.group(2), "!" if m.group(1) else "exists", None))
            continue
        raise bad_request("unable to parse requirement: found '%s', expected: in, notin, =, ==, !=, "
                          "gt, lt" % p)
    return reqs


class FieldSelector:
    """A parsed field selector: (field, op, value) with op '=' or '!='; `getters` maps the
    fields this kind supports to functions of the object."""

    def __init__(self, text, getters):
        self.reqs = []
        for part in (text or "").split(","):
            p = part.strip()
            if not p:
                continue
            m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", p)
            if not m:
                raise bad_request("invalid selector: '%s'; can't understand '%s'" % (text, p))
            field, op, val = m.group(1).strip(), m.group(2), m.group(3).strip()
            if field not in getters:
                raise bad_request("field label not supported: %s" % field)
            self.reqs.append((getters[field], "!=" if op == "!=" else "=", val))

    def matches(self, obj):
        for get, op, val in self.reqs:
            got = get(obj)
            got = "" if got is None else str(got).lower() if isinstance(got, bool) else str(got)
            if (op == "=") != (got == val):
                return False
        return True


# ---------------------------------------------------------------- store


class Event:
    __slots__ = ("rv", "res", "ns", "type", "obj", "prev")

    def __init__(self, rv, res, ns, etype, obj, prev):
        self.rv, self.res, self.ns, self.type, self.obj, self.prev = rv, res, ns, etype, obj, prev


class Watcher:
    """One open watch. The store puts matching events in its queue under the store
    lock; the HTTP thread that serves the stream takes them out."""
    QUEUE_MAX = 10000

    def __init__(self, res, ns, match):
        self.res, self.ns, self.match = res, ns, match
        self.q = queue.Queue()
        self.dropped = False    # closed abruptly by the drop-watches hook
        self.overflow = False   # the client was too slow: the stream ends (as the real one's does)

    def offer(self, ev):
        """Translate a store event for this watcher's selectors (an object that stops
        matching is DELETED for this watcher, one that starts matching is ADDED)."""
        if ev.res != self.res or (self.ns and ev.ns != self.ns):
            return
        etype = ev.type
        if etype == "MODIFIED":
            was, now = self.match(ev.prev), self.match(ev.obj)
            if not was and not now:
                return
            etype = "MODIFIED" if was and now else ("DELETED" if was else "ADDED")
        elif not self.match(ev.obj):
            return
        self.put((etype, ev.obj, ev.rv))

    def put(self, item):
        if self.q.qsize() >= self.QUEUE_MAX:
            self.overflow = True
            return
        self.q.put(item)

    def wake(self):
        self.q.put(None)


class Store:
    def __init__(self, history=1000):
        self.lock = threading.RLock()
        self.rv = 1
        self.objects = {}          # (res, ns, name) -> object (never mutated once stored)
        self.uids = {}             # uid -> (res, ns, name)
        self.history = collections.deque()
        self.history_max = history
        self.floor = 0             # every event with rv > floor is still in the history
        self.watchers = set()
        self.changed = threading.Event()   # wakes the controllers
        self.listeners = []        # functions called (under the lock) with each event

    # -- reads

    def get(self, res, ns, name):
        with self.lock:
            return self.objects.get((res, ns or "", name))

    def by_uid(self, uid):
        with self.lock:
            key = self.uids.get(uid)
            return (key, self.objects[key]) if key else (None, None)

    def list(self, res, ns=None, match=None):
        """The objects of res (in namespace ns when given), sorted as etcd's keys are
        (namespace, then name), and the current resourceVersion."""
        with self.lock:
            out = [o for (r, n, _), o in self.objects.items()
                   if r == res and (not ns or n == ns) and (match is None or match(o))]
            out.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
            return out, self.rv

    # -- writes (the caller has made a new dict; the store stamps its resourceVersion)

    def put(self, res, obj):
        with self.lock:
            md = obj["metadata"]
            key = (res, md.get("namespace", ""), md["name"])
            prev = self.objects.get(key)
            self.rv += 1
            md["resourceVersion"] = str(self.rv)
            self.objects[key] = obj
            self.uids[md["uid"]] = key
            self._emit(Event(self.rv, res, key[1], "MODIFIED" if prev else "ADDED", obj, prev))
            return obj

    def remove(self, res, ns, name):
        with self.lock:
            key = (res, ns or "", name)
            prev = self.objects.pop(key, None)
            if prev is None:
                return None
            self.uids.pop(prev["metadata"]["uid"], None)
            self.rv += 1
            # The DELETED event carries the last state, at the deletion's resourceVersion.
            gone = dict(prev)
            gone["metadata"] = dict(prev["metadata"], resourceVersion=str(self.rv))
            self._emit(Event(self.rv, res, key[1], "DELETED", gone, prev))
            return gone

    def _emit(self, ev):
        self.history.append(ev)
        while len(self.history) > self.history_max:
            self.floor = self.history.popleft().rv
        for w in list(self.watchers):
            w.offer(ev)
        for fn in self.listeners:
            fn(ev)
        self.changed.set()

    # -- watches

    def watch(self, res, ns, match, since, initial):
        """Register a watcher. since: deliver every event after that resourceVersion
        (ApiError 410 when it is older than the history); initial: first a synthetic ADDED
        for each current object (resourceVersion "0" or absent)."""
        with self.lock:
            w = Watcher(res, ns, match)
            if initial:
                objs, _ = self.list(res, ns, match)
                for o in objs:
                    w.put(("ADDED", o, int(o["metadata"]["resourceVersion"])))
            else:
                if since < self.floor:
                    raise expired(since, self.floor)
                for ev in self.history:
                    if ev.rv > since:
                        w.offer(ev)
            self.watchers.add(w)
            return w

    def unwatch(self, w):
        with self.lock:
            self.watchers.discard(w)

    def drop_watches(self):
        with self.lock:
            ws = list(self.watchers)
            self.watchers.clear()
        for w in ws:
            w.dropped = True
            w.wake()
        return len(ws)

    def compact(self):
        with self.lock:
            self.history.clear()
            self.floor = self.rv
            return self.rv
