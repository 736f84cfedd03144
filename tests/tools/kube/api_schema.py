"""Strict decoding and the generic validation rules of the stand-in API server.

Built-in kinds are checked against the python3-kubernetes models (their attribute_map
gives the JSON names, openapi_types the types): wrong types and unknown or duplicate
fields are refused as the real server's strict decoder refuses them (400). Custom
resources are checked against their CRD's openAPIV3Schema. The field-level rules that the
real validation applies to every kind (names, labels, ...) are here too."""
import base64
import fractions
import inspect
import re

import kubernetes.client.models as M

from api_store import Cause, bad_request

# ---------------------------------------------------------------- model types

# Fields added to the API after python3-kubernetes 22 (Kubernetes 1.22) that a 1.32
# server accepts; the X_ models are these additions' own types: {json: type}, required.
EXTRA_FIELDS = {
    "V1PodSpec": {"hostUsers": "bool", "os": "X_PodOS", "schedulingGates": "list[X_NameOnly]",
                  "resourceClaims": "list[X_PodResourceClaim]", "resources": "V1ResourceRequirements"},
    "V1Container": {"resizePolicy": "list[X_ContainerResizePolicy]", "restartPolicy": "str"},
    "V1EphemeralContainer": {"resizePolicy": "list[X_ContainerResizePolicy]", "restartPolicy": "str"},
    "V1ResourceRequirements": {"claims": "list[X_ResourceClaim]"},
    "V1ContainerStatus": {"allocatedResources": "dict(str, str)", "resources": "V1ResourceRequirements",
                          "user": "object", "volumeMounts": "list[object]",
                          "allocatedResourcesStatus": "list[object]"},
    "V1PodStatus": {"hostIPs": "list[X_HostIP]", "resize": "str", "resourceClaimStatuses": "list[object]"},
    "V1JobSpec": {"podFailurePolicy": "object", "backoffLimitPerIndex": "int", "maxFailedIndexes": "int",
                  "podReplacementPolicy": "str", "successPolicy": "object", "managedBy": "str"},
    "V1JobStatus": {"terminating": "int", "failedIndexes": "str", "ready": "int"},
    "V1ServiceSpec": {"trafficDistribution": "str"},
    "V1PersistentVolumeClaimSpec": {"volumeAttributesClassName": "str"},
    "V1PersistentVolumeClaimStatus": {"allocatedResources": "dict(str, str)",
                                      "allocatedResourceStatuses": "dict(str, str)",
                                      "currentVolumeAttributesClassName": "str", "modifyVolumeStatus": "object"},
    "V1Probe": {"grpc": "X_GRPCAction"},
    "V1Handler": {"sleep": "X_SleepAction"},
    "V1SecurityContext": {"appArmorProfile": "X_AppArmorProfile"},
    "V1PodSecurityContext": {"appArmorProfile": "X_AppArmorProfile", "supplementalGroupsPolicy": "str",
                             "seLinuxChangePolicy": "str"},
    "V1VolumeMount": {"recursiveReadOnly": "str"},
    "V1Volume": {"image": "X_ImageVolumeSource"},
    "V1TopologySpreadConstraint": {"matchLabelKeys": "list[str]", "minDomains": "int",
                                   "nodeAffinityPolicy": "str", "nodeTaintsPolicy": "str"},
    "V1PodAffinityTerm": {"matchLabelKeys": "list[str]", "mismatchLabelKeys": "list[str]"},
    "V1CustomResourceDefinitionVersion": {"selectableFields": "list[X_SelectableField]"},
    "V1JSONSchemaProps": {"x-kubernetes-validations": "list[X_ValidationRule]"},
}
REMOVED_FIELDS = {"V1ObjectMeta": {"clusterName"}}   # gone from the API since 1.25
X_MODELS = {
    "X_PodOS": ({"name": "str"}, {"name"}),
    "X_NameOnly": ({"name": "str"}, {"name"}),
    "X_PodResourceClaim": ({"name": "str", "resourceClaimName": "str",
                            "resourceClaimTemplateName": "str", "source": "object"}, {"name"}),
    "X_ContainerResizePolicy": ({"resourceName": "str", "restartPolicy": "str"},
                                {"resourceName", "restartPolicy"}),
    "X_ResourceClaim": ({"name": "str", "request": "str"}, {"name"}),
    "X_HostIP": ({"ip": "str"}, {"ip"}),
    "X_GRPCAction": ({"port": "int", "service": "str"}, set()),
    "X_SleepAction": ({"seconds": "int"}, set()),
    "X_AppArmorProfile": ({"type": "str", "localhostProfile": "str"}, {"type"}),
    "X_ImageVolumeSource": ({"reference": "str", "pullPolicy": "str"}, set()),
    "X_SelectableField": ({"jsonPath": "str"}, {"jsonPath"}),
    "X_ValidationRule": ({"rule": "str", "message": "str", "messageExpression": "str", "reason": "str",
                          "fieldPath": "str", "optionalOldSelf": "bool"}, {"rule"}),
}
# Special JSON forms the models only call str / dict(str, str) / object.
INT_OR_STRING = {("V1HTTPGetAction", "port"), ("V1TCPSocketAction", "port"), ("V1ServicePort", "targetPort")}
QUANTITY_MAPS = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests"),
                 ("V1PersistentVolumeClaimStatus", "capacity"), ("V1PodSpec", "overhead"),
                 ("V1ContainerStatus", "allocatedResources"),
                 ("V1PersistentVolumeClaimStatus", "allocatedResources")}
QUANTITY = {("V1EmptyDirVolumeSource", "sizeLimit")}
BYTES_MAPS = {("V1Secret", "data"), ("V1ConfigMap", "binaryData")}
BYTES = {("ApiextensionsV1WebhookClientConfig", "caBundle")}
SCHEMA_FIELDS = {("V1JSONSchemaProps", "items"), ("V1JSONSchemaProps", "additionalProperties"),
                 ("V1JSONSchemaProps", "additionalItems")}
INT64_FIELDS = {"activeDeadlineSeconds", "terminationGracePeriodSeconds", "deletionGracePeriodSeconds",
                "gracePeriodSeconds", "generation", "runAsUser", "runAsGroup", "fsGroup",
                "observedGeneration", "expirationSeconds", "supplementalGroups", "maxLength", "minLength",
                "maxItems", "minItems", "maxProperties", "minProperties"}
# Required by the models but not by the real validation (which checks these itself or
# accepts an empty value).
NOT_REQUIRED = {("V1HTTPHeader", "value"), ("V1Sysctl", "value")}
SKIP_REQUIRED_MODELS = {"V1OwnerReference"}

_fields_cache = {}


def model_fields(name):
    """{json name: type} and the set of required JSON names of a model."""
    if name in _fields_cache:
        return _fields_cache[name]
    if name in X_MODELS:
        out = X_MODELS[name]
    else:
        cls = getattr(M, name)
        fields = {cls.attribute_map[a]: t for a, t in cls.openapi_types.items()}
        for f in REMOVED_FIELDS.get(name, ()):
            fields.pop(f, None)
        fields.update(EXTRA_FIELDS.get(name, {}))
        req = set()
        if name not in SKIP_REQUIRED_MODELS:
            # The generated setters raise ValueError for None on the required fields.
            for attr in re.findall(r"Invalid value for `(\w+)`, must not be `None`", inspect.getsource(cls)):
                js = cls.attribute_map[attr]
                if cls.openapi_types[attr] not in ("bool", "int", "float") and (name, js) not in NOT_REQUIRED:
                    req.add(js)
        out = (fields, req)
    _fields_cache[name] = out
    return out


def is_model(t):
    return t in X_MODELS or (re.match(r"^[A-Z]\w+$", t or "") is not None and hasattr(M, t))


def go_struct_name(model):
    return re.sub(r"^(X_|(Core|Events|Apiextensions|Admissionregistration|Storage|Discovery)?V\d+((alpha|beta)\d+)?)",
                  "", model)


def go_type(t, field=""):
    if t == "str":
        return "string"
    if t == "int":
        return "int64" if field in INT64_FIELDS else "int32"
    if t == "float":
        return "float64"
    if t == "bool":
        return "bool"
    if t == "datetime":
        return "v1.Time"
    if t == "object":
        return "interface {}"
    m = re.match(r"^list\[(.*)\]$", t)
    if m:
        return "[]" + go_type(m.group(1))
    m = re.match(r"^dict\(str, (.*)\)$", t)
    if m:
        return "map[string]" + go_type(m.group(1))
    return "v1." + go_struct_name(t)


def json_type(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


class DupDict(dict):
    """A JSON object in which some key appeared more than once (the last one wins,
    as in Go); the strict decoder reports the duplicates."""
    dups = ()


def pairs_hook(pairs):
    d, dups = {}, []
    for k, v in pairs:
        if k in d and k not in dups:
            dups.append(k)
        d[k] = v
    if not dups:
        return d
    dd = DupDict(d)
    dd.dups = dups
    return dd


# ---------------------------------------------------------------- quantities

QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
QUANTITY_MSG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
SUFFIXES = {"": 1, "n": fractions.Fraction(1, 10**9), "u": fractions.Fraction(1, 10**6),
            "m": fractions.Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
            "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
            "Pi": 2**50, "Ei": 2**60}


def parse_quantity(v):
    """A Kubernetes quantity (string or JSON number) as a Fraction; ValueError if invalid."""
    if isinstance(v, bool):
        raise ValueError(QUANTITY_MSG)
    if isinstance(v, (int, float)):
        return fractions.Fraction(v)
    m = QUANTITY_RE.match(v or "")
    if not m:
        raise ValueError(QUANTITY_MSG)
    num, suf = m.group(1), m.group(2)
    try:
        n = fractions.Fraction(num)
    except ValueError:
        raise ValueError(QUANTITY_MSG)
    if suf in SUFFIXES:
        return n * SUFFIXES[suf]
    e = re.match(r"^[eE]([-+]?[0-9]+)$", suf)
    if e:
        return n * fractions.Fraction(10) ** int(e.group(1))
    raise ValueError(QUANTITY_MSG)


def fmt_quantity(q):
    return str(q.numerator) if q.denominator == 1 else "%gm" % float(q * 1000)


def b64_error(s):
    """Go's base64.StdEncoding error for s, or None when it decodes."""
    alphabet = re.compile(r"[A-Za-z0-9+/]")
    body = s.replace("\r", "").replace("\n", "")
    for i, ch in enumerate(body):
        if ch == "=":
            rest = body[i:]
            if len(body) % 4 != 0 or rest.strip("=") or len(rest) > 2:
                return "illegal base64 data at input byte %d" % i
            break
        if not alphabet.match(ch):
            return "illegal base64 data at input byte %d" % i
    if len(body) % 4 != 0:
        return "illegal base64 data at input byte %d" % (len(body) - len(body) % 4 if "=" not in body
                                                           else len(body))
    try:
        base64.b64decode(body, validate=True)
    except Exception:
        return "illegal base64 data at input byte %d" % max(0, len(body) - 1)
    return None


# ---------------------------------------------------------------- strict decoding


class Decoder:
    """Walks a JSON value against a model type. Collects the first type error (Go's
    decoder reports the earliest), the unknown and duplicate fields (strict errors),
    and the missing required fields (reported later as 422 with the rest of the
    validation); drops JSON nulls (Go decodes null as the zero value)."""

    def __init__(self, skip_status_required=True):
        self.type_error = None
        self.strict = []
        self.missing = []
        self.skip_status_required = skip_status_required

    def fail(self, msg):
        if self.type_error is None:
            self.type_error = msg

    def unmarshal_error(self, value, struct, gopath, t, field):
        jt = json_type(value)
        if jt == "number" and t == "int" and isinstance(value, (int, float)):
            jt = "number " + (repr(value) if isinstance(value, float) else str(value))
        self.fail("json: cannot unmarshal %s into Go struct field %s.%s of type %s"
                  % (jt, struct, gopath, go_type(t, field)))

    def model(self, obj, name, path, gopath):
        """obj is a dict decoded as model `name`; returns the cleaned dict."""
        fields, required = model_fields(name)
        struct = go_struct_name(name)
        for k in getattr(obj, "dups", ()):
            self.strict.append('duplicate field "%s"' % join(path, k))
        out = {}
        for k, v in obj.items():
            if k not in fields:
                self.strict.append('unknown field "%s"' % join(path, k))
                continue
            if v is None:
                continue
            out[k] = self.value(v, fields[k], name, k, join(path, k), join(gopath, k), struct)
        in_status = self.skip_status_required and (path == "status" or path.startswith("status."))
        if not in_status:
            for r in sorted(required):
                if r not in out or out[r] in ("", [], {}):
                    self.missing.append(Cause(join(path, r), "Required"))
        return out

    def value(self, v, t, model, field, path, gopath, struct):
        key = (model, field)
        if key in INT_OR_STRING:
            if not isinstance(v, (str, int)) or isinstance(v, bool):
                self.fail("json: cannot unmarshal %s into Go struct field %s.%s of type intstr.IntOrString"
                          % (json_type(v), struct, gopath))
            return v
        if key in QUANTITY or key in QUANTITY_MAPS:
            return self.quantities(v, key in QUANTITY_MAPS, struct, gopath)
        if key in BYTES_MAPS or key in BYTES:
            return self.bytes_value(v, key in BYTES_MAPS, struct, gopath)
        if key in SCHEMA_FIELDS:
            return self.schema_or_bool(v, path, gopath)
        return self.typed(v, t, path, gopath, struct, field)

    def typed(self, v, t, path, gopath, struct, field):
        if t in ("str", "datetime"):
            if not isinstance(v, str):
                return self.unmarshal_error(v, struct, gopath, t, field)
            if t == "datetime" and v and not re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$", v):
                self.fail('parsing time "\\"%s\\"" as "\\"2006-01-02T15:04:05Z07:00\\"": cannot parse "%s" as "2006"'
                          % (v, v))
            return v
        if t == "bool":
            if not isinstance(v, bool):
                self.unmarshal_error(v, struct, gopath, t, field)
            return v
        if t == "int":
            if isinstance(v, bool) or not isinstance(v, int) or not _fits(v, field):
                self.unmarshal_error(v, struct, gopath, t, field)
            return v
        if t == "float":
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                self.unmarshal_error(v, struct, gopath, t, field)
            return v
        if t == "object":
            return v
        m = re.match(r"^list\[(.*)\]$", t)
        if m:
            if not isinstance(v, list):
                return self.unmarshal_error(v, struct, gopath, t, field)
            et = m.group(1)
            return [self.typed(_zero(et) if x is None else x, et, "%s[%d]" % (path, i), gopath, struct, field)
                    for i, x in enumerate(v)]
        m = re.match(r"^dict\(str, (.*)\)$", t)
        if m:
            if not isinstance(v, dict):
                return self.unmarshal_error(v, struct, gopath, t, field)
            return {k: self.typed(x, m.group(1), join(path, k), gopath, struct, field)
                    for k, x in v.items() if x is not None}
        if is_model(t):
            if not isinstance(v, dict):
                return self.unmarshal_error(v, struct, gopath, t, field)
            return self.model(v, t, path, gopath)
        return v

    def quantities(self, v, is_map, struct, gopath):
        vals = v if is_map else {"": v}
        if not isinstance(vals, dict):
            self.fail("json: cannot unmarshal %s into Go struct field %s.%s of type v1.ResourceList"
                      % (json_type(v), struct, gopath))
            return v
        for q in vals.values():
            if q is None:
                continue
            try:
                parse_quantity(q)
            except ValueError as e:
                self.fail(str(e))
        return v

    def bytes_value(self, v, is_map, struct, gopath):
        vals = v if is_map else {"": v}
        if not isinstance(vals, dict):
            self.fail("json: cannot unmarshal %s into Go struct field %s.%s of type map[string][]uint8"
                      % (json_type(v), struct, gopath))
            return v
        for s in vals.values():
            if s is None:
                continue
            if not isinstance(s, str):
                self.fail("json: cannot unmarshal %s into Go struct field %s.%s of type []uint8"
                          % (json_type(s), struct, gopath))
                continue
            err = b64_error(s)
            if err:
                self.fail(err)
        return {k: x for k, x in v.items() if x is not None} if is_map else v

    def schema_or_bool(self, v, path, gopath):
        if isinstance(v, bool):
            return v
        if isinstance(v, list):
            return [self.model(x, "V1JSONSchemaProps", "%s[%d]" % (path, i), gopath)
                    for i, x in enumerate(v) if isinstance(x, dict)]
        if isinstance(v, dict):
            return self.model(v, "V1JSONSchemaProps", path, gopath)
        self.fail("json: cannot unmarshal %s into Go struct field JSONSchemaProps.%s of type "
                  "v1.JSONSchemaPropsOrBool" % (json_type(v), gopath))
        return v


def _zero(t):
    """Go's zero value for a JSON null inside a list."""
    return {"str": "", "int": 0, "float": 0, "bool": False}.get(t, {} if is_model(t) else None)


def _fits(v, field):
    bits = 64 if field in INT64_FIELDS else 32
    return -(2 ** (bits - 1)) <= v < 2 ** (bits - 1)


def join(path, k):
    return path + "." + k if path else k


def decode_builtin(obj, model, kind, version):
    """Strict-decode obj as `model`: ApiError 400 on a type error or on unknown or
    duplicate fields; else (cleaned object, causes for missing required fields)."""
    d = Decoder()
    out = d.model(obj, model, "", "")
    prefix = '%s in version "%s" cannot be handled as a %s: ' % (kind, version, kind)
    if d.type_error:
        raise bad_request(prefix + d.type_error)
    if d.strict:
        raise bad_request(prefix + "strict decoding error: " + ", ".join(d.strict))
    return out, d.missing


# ---------------------------------------------------------------- field rules

DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = DNS1123_LABEL + r"(\." + DNS1123_LABEL + ")*"
DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE = "(" + QUALIFIED_NAME + ")?"
ENV_VAR_NAME = "[-._a-zA-Z][-._a-zA-Z0-9]*"
CONFIG_KEY = "[-._a-zA-Z0-9]+"

MSG_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
             "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
             "regex used for validation is '%s')" % DNS1123_LABEL)
MSG_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                 "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                 "regex used for validation is '%s')" % DNS1123_SUBDOMAIN)
MSG_1035 = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
            "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
            "'abc-123', regex used for validation is '%s')" % DNS1035_LABEL)
MSG_QNAME = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
             "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
             "used for validation is '%s')" % QUALIFIED_NAME)
MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', "
                   "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  "
                   "or 'my_value',  or '12345', regex used for validation is '%s')" % LABEL_VALUE)
MSG_ENV = ("a valid environment variable name must consist of alphabetic characters, digits, '_', '-', "
           "or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
           "'MyEnvName1', regex used for validation is '%s')" % ENV_VAR_NAME)
MSG_CONFIG_KEY = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
                  "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '%s')" % CONFIG_KEY)


def _full(regex, v):
    return re.fullmatch(regex, v) is not None


def max_len(n):
    return "must be no more than %d characters" % n


def dns1123_label(v):
    errs = [max_len(63)] if len(v) > 63 else []
    return errs + ([] if _full(DNS1123_LABEL, v) else [MSG_LABEL])


def dns1123_subdomain(v):
    errs = [max_len(253)] if len(v) > 253 else []
    return errs + ([] if _full(DNS1123_SUBDOMAIN, v) else [MSG_SUBDOMAIN])


def dns1035_label(v):
    errs = [max_len(63)] if len(v) > 63 else []
    return errs + ([] if _full(DNS1035_LABEL, v) else [MSG_1035])


def qualified_name(v):
    parts = v.split("/")
    if len(parts) > 2:
        return ["a qualified name " + MSG_QNAME[len("name part "):] +
                " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    errs = []
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain(parts[0])]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + max_len(63))
    if name and not _full(QUALIFIED_NAME, name):
        errs.append(MSG_QNAME)
    return errs


def label_value(v):
    errs = [max_len(63)] if len(v) > 63 else []
    return errs + ([] if _full(LABEL_VALUE, v) else [MSG_LABEL_VALUE])


def env_var_name(v):
    return [] if _full(ENV_VAR_NAME, v) else [MSG_ENV]


def config_key(v):
    errs = [max_len(253)] if len(v) > 253 else []
    if not _full(CONFIG_KEY, v):
        errs.append(MSG_CONFIG_KEY)
    if v in (".", ".."):
        errs.append("must not be '%s'" % v)
    elif v.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def iana_svc_name(v):
    errs = []
    if len(v) > 15:
        errs.append("must be no more than 15 characters")
    if not re.fullmatch("[-a-z0-9]+", v):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if "--" in v:
        errs.append("must not contain consecutive hyphens")
    if not re.search("[a-z]", v):
        errs.append("must contain at least one letter (a-z)")
    if v.startswith("-") or v.endswith("-"):
        errs.append("must not begin or end with a hyphen")
    return errs


PORT_RANGE = "must be between 1 and 65535, inclusive"


def check(causes, field, value, msgs):
    """Add one Invalid cause per message (as the real validation does)."""
    for m in msgs:
        causes.append(Cause(field, "Invalid", m, value))


def check_labels(causes, field, labels):
    for k, v in (labels or {}).items():
        check(causes, field, k, qualified_name(k))
        check(causes, field, v, label_value(v))


def check_annotations(causes, field, ann):
    total = 0
    for k, v in (ann or {}).items():
        check(causes, field, k, [m for m in qualified_name(k.lower())])
        total += len(k) + len(v)
    if total > 256 * 1024:
        causes.append(Cause(field, "TooLong", str(256 * 1024)))


def check_label_selector(causes, field, sel):
    if not sel:
        return
    check_labels(causes, field + ".matchLabels", sel.get("matchLabels"))
    for i, req in enumerate(sel.get("matchExpressions") or []):
        p = "%s.matchExpressions[%d]" % (field, i)
        op = req.get("operator")
        vals = req.get("values") or []
        if op in ("In", "NotIn") and not vals:
            causes.append(Cause(p + ".values", "Required", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and vals:
            causes.append(Cause(p + ".values", "Forbidden", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        elif op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            causes.append(Cause(p + ".operator", "Invalid", "not a valid selector operator", op))
        check(causes, p + ".key", req.get("key", ""), qualified_name(req.get("key", "")))


def selector_matches(sel, labels):
    """Does a metav1.LabelSelector match labels?"""
    labels = labels or {}
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for req in sel.get("matchExpressions") or []:
        k, op, vals = req.get("key"), req.get("operator"), req.get("values") or []
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and k in labels and labels[k] in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


# ---------------------------------------------------------------- custom resources (openAPIV3Schema)

JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def schema_type_ok(v, t):
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "boolean":
        return isinstance(v, bool)
    return isinstance(v, JSON_TYPES[t]) if t in JSON_TYPES else True


def schema_type_name(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def schema_defaults(v, s):
    """Apply the schema's defaults inside v (a CR or part of one), as the real server
    does while decoding."""
    if not isinstance(s, dict):
        return v
    if isinstance(v, dict):
        props = s.get("properties") or {}
        for k, ps in props.items():
            if k not in v and isinstance(ps, dict) and "default" in ps:
                v[k] = _copy(ps["default"])
            if k in v:
                v[k] = schema_defaults(v[k], ps)
        ap = s.get("additionalProperties")
        if isinstance(ap, dict):
            for k in v:
                if k not in props:
                    v[k] = schema_defaults(v[k], ap)
    elif isinstance(v, list) and isinstance(s.get("items"), dict):
        return [schema_defaults(x, s["items"]) for x in v]
    return v


def _copy(v):
    import copy
    return copy.deepcopy(v)


class SchemaValidator:
    """Validates a CR against a structural schema: unknown fields (strict errors, 400)
    and the value rules (422 causes)."""

    def __init__(self):
        self.unknown = []
        self.causes = []

    def validate(self, v, s, path, root=False):
        if not isinstance(s, dict):
            return
        if v is None:
            if not s.get("nullable"):
                self.type_error(v, s.get("type") or "object", path)
            return
        if s.get("x-kubernetes-int-or-string"):
            if not (isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))):
                self.type_error(v, "integer/string", path)
                return
        elif s.get("type") and not schema_type_ok(v, s["type"]):
            self.type_error(v, s["type"], path)
            return
        self.enum(v, s, path)
        if isinstance(v, dict):
            self.object(v, s, path, root)
        elif isinstance(v, list):
            self.array(v, s, path)
        elif isinstance(v, str):
            self.string(v, s, path)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            self.number(v, s, path)

    def type_error(self, v, t, path):
        actual = schema_type_name(v)
        self.causes.append(Cause(path, "Invalid", '%s in body must be of type %s: "%s"' % (path, t, actual), actual))

    def enum(self, v, s, path):
        if "enum" in s and v not in s["enum"]:
            self.causes.append(Cause(path, "NotSupported", [str(e) for e in s["enum"]], v))

    def object(self, v, s, path, root):
        props = s.get("properties") or {}
        ap = s.get("additionalProperties")
        implicit = {"apiVersion", "kind", "metadata"} if (root or s.get("x-kubernetes-embedded-resource")) else set()
        for r in s.get("required") or []:
            if r not in v:
                self.causes.append(Cause(join(path, r), "Required"))
        for k, x in v.items():
            p = join(path, k)
            if root and k in implicit:
                # The root's apiVersion, kind and metadata are the server's, whatever the schema says.
                if k == "metadata" and not isinstance(x, dict) and x is not None:
                    self.type_error(x, "object", p)
                continue
            if k in props:
                self.validate(x, props[k], p)
            elif isinstance(ap, dict):
                self.validate(x, ap, p)
            elif k in implicit:
                if k == "metadata" and not isinstance(x, dict) and x is not None:
                    self.type_error(x, "object", p)
            elif not (s.get("x-kubernetes-preserve-unknown-fields") or ap is True):
                self.unknown.append('unknown field "%s"' % p)
        n = len(v)
        if "minProperties" in s and n < s["minProperties"]:
            self.causes.append(Cause(path, "Invalid", "%s in body should have at least %d properties" % (path, s["minProperties"]), n))
        if "maxProperties" in s and n > s["maxProperties"]:
            self.causes.append(Cause(path, "TooMany", "must have at most %d items" % s["maxProperties"], n))

    def array(self, v, s, path):
        items = s.get("items")
        for i, x in enumerate(v):
            if isinstance(items, dict):
                self.validate(x, items, "%s[%d]" % (path, i))
        if "minItems" in s and len(v) < s["minItems"]:
            self.causes.append(Cause(path, "Invalid", "%s in body should have at least %d items" % (path, s["minItems"]), len(v)))
        if "maxItems" in s and len(v) > s["maxItems"]:
            self.causes.append(Cause(path, "TooMany", "must have at most %d items" % s["maxItems"], len(v)))
        if s.get("uniqueItems") or s.get("x-kubernetes-list-type") == "set":
            seen = []
            for i, x in enumerate(v):
                if x in seen:
                    self.causes.append(Cause("%s[%d]" % (path, i), "Duplicate", "", x))
                seen.append(x)

    def string(self, v, s, path):
        if "minLength" in s and len(v) < s["minLength"]:
            self.causes.append(Cause(path, "Invalid", "%s in body should be at least %d chars long" % (path, s["minLength"]), v))
        if "maxLength" in s and len(v) > s["maxLength"]:
            self.causes.append(Cause(path, "TooLong", str(s["maxLength"]), v))
        if "pattern" in s:
            try:
                ok = re.search(s["pattern"], v) is not None
            except re.error:
                ok = True
            if not ok:
                self.causes.append(Cause(path, "Invalid", "%s in body should match '%s'" % (path, s["pattern"]), v))

    def number(self, v, s, path):
        if "minimum" in s:
            lo, ex = s["minimum"], s.get("exclusiveMinimum")
            if v < lo or (ex and v == lo):
                word = "greater than" if ex else "greater than or equal to"
                self.causes.append(Cause(path, "Invalid", "%s in body should be %s %s" % (path, word, lo), v))
        if "maximum" in s:
            hi, ex = s["maximum"], s.get("exclusiveMaximum")
            if v > hi or (ex and v == hi):
                word = "less than" if ex else "less than or equal to"
                self.causes.append(Cause(path, "Invalid", "%s in body should be %s %s" % (path, word, hi), v))
        if s.get("multipleOf"):
            if (v / s["multipleOf"]) != int(v / s["multipleOf"]):
                self.causes.append(Cause(path, "Invalid", "%s in body should be a multiple of %s" % (path, s["multipleOf"]), v))
