"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the
Kubernetes strategic merge patch (lists merged by their patchMergeKey, as the Go
types declare them, plus the $patch / $setElementOrder / $deleteFromPrimitiveList /
$retainKeys directives)."""
import copy

from api_store import ApiError, bad_request

# ---------------------------------------------------------------- JSON merge patch


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# ---------------------------------------------------------------- JSON patch


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise _patch_error('add operation does not apply: doc is missing path: "%s": missing value' % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _patch_error(msg):
    return ApiError(422, "Invalid", msg)


def _parent(doc, parts, path, op):
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise _patch_error('%s operation does not apply: doc is missing path: "%s": missing value' % (op, path))
    return cur


def _get(doc, path, op):
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path, op)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise _patch_error('%s operation does not apply: doc is missing path: "%s": missing value' % (op, path))


def _remove(doc, path, op="remove"):
    parts = _pointer(path)
    parent = _parent(doc, parts, path, op)
    last = parts[-1] if parts else None
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last is not None and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise _patch_error('%s operation does not apply: doc is missing path: "%s": missing value' % (op, path))


def _add(doc, path, value, op="add"):
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path, op)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise _patch_error('%s operation does not apply: doc is missing path: "%s": missing value' % (op, path))
    else:
        raise _patch_error('%s operation does not apply: doc is missing path: "%s": missing value' % (op, path))
    return doc


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for o in ops:
        if not isinstance(o, dict) or "op" not in o:
            raise bad_request("Unexpected kind: ")
        op, path = o["op"], o.get("path", "")
        if op == "add":
            doc = _add(doc, path, copy.deepcopy(o.get("value")))
        elif op == "remove":
            _remove(doc, path)
        elif op == "replace":
            _get(doc, path, "replace")
            if _pointer(path):
                _remove(doc, path, "replace")
            doc = _add(doc, path, copy.deepcopy(o.get("value")), "replace")
        elif op == "move":
            v = _remove(doc, o.get("from", ""), "move")
            doc = _add(doc, path, v, "move")
        elif op == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, o.get("from", ""), "copy")), "copy")
        elif op == "test":
            if _get(doc, path, "test") != o.get("value"):
                raise _patch_error("testing value %s failed: test failed" % path)
        else:
            raise bad_request("Unexpected kind: %s" % op)
    return doc


# ---------------------------------------------------------------- strategic merge patch

# (field name, parent field name or None for any parent) -> merge key; "" for a
# primitive list merged as a set. From the patchMergeKey tags of the Go types.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "imagePullSecrets": "name", "env": "name", "ports": None,
    "volumeMounts": "mountPath", "volumeDevices": "devicePath", "conditions": "type",
    "podIPs": "ip", "hostIPs": "ip", "hostAliases": "ip", "ownerReferences": "uid",
    "finalizers": "", "topologySpreadConstraints": "topologyKey", "resourceClaims": "name",
    "schedulingGates": "name", "readinessGates": None,
}


def merge_key(field, elems):
    """The merge key of a list field, or None for a list that a patch replaces."""
    if field == "ports":
        # Container ports merge by containerPort, service ports by port.
        sample = next((e for e in elems if isinstance(e, dict)), {})
        return "containerPort" if "containerPort" in sample else "port" if "port" in sample else None
    return MERGE_KEYS.get(field)


def strategic_merge(target, patch):
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return _strip(copy.deepcopy(patch))
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip({k: v for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return None
    out = copy.deepcopy(target)
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k.startswith("$"):
            if k.startswith("$deleteFromPrimitiveList/"):
                f = k.split("/", 1)[1]
                out[f] = [x for x in out.get(f) or [] if x not in (v or [])]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, list):
            out[k] = _merge_list(k, out.get(k), v, patch.get("$setElementOrder/" + k))
        elif isinstance(v, dict):
            merged = strategic_merge(out.get(k) if isinstance(out.get(k), dict) else {}, v)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        else:
            out[k] = v
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(field, cur, patch, order):
    cur = cur if isinstance(cur, list) else []
    if any(isinstance(e, dict) and e.get("$patch") == "replace" for e in patch):
        return _strip([e for e in patch if not (isinstance(e, dict) and e.get("$patch") == "replace")])
    key = merge_key(field, cur + patch)
    if key == "":
        out = list(cur)
        for e in patch:
            if e not in out:
                out.append(e)
        return out
    if key is None:
        return _strip(copy.deepcopy(patch))
    out = copy.deepcopy(cur)
    for e in patch:
        if not isinstance(e, dict):
            raise bad_request("unable to find api field in struct for the patch: %s" % field)
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == e.get(key)), None)
        if e.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append(_strip(copy.deepcopy(e)))
        else:
            out[idx] = strategic_merge(out[idx], e)
    if isinstance(order, list):
        pos = {(o.get(key) if isinstance(o, dict) else o): i for i, o in enumerate(order)}
        out.sort(key=lambda x: pos.get(x.get(key), len(pos)))
    return out


def _strip(v):
    """Drop $-directives and nulls from a value a patch puts in whole."""
    if isinstance(v, dict):
        return {k: _strip(x) for k, x in v.items() if not k.startswith("$") and x is not None}
    if isinstance(v, list):
        return [_strip(x) for x in v]
    return v
