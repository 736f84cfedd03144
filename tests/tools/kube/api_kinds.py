"""The resource kinds the stand-in serves: the built-in ones (with the defaults the real
server applies and the validation it does) and those declared by CustomResourceDefinitions."""
import copy
import ipaddress

import api_schema as S
from api_store import Cause, GoRaw  # noqa: F401 (GoRaw is used by api_registry too)


class Kind:
    def __init__(self, group, version, plural, kind, namespaced, model=None, short=(), categories=(),
                 sub=(), singular=None, crd=None, versions=None, has_spec=True):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.versions = versions or [version]
        self.namespaced, self.model = namespaced, model
        self.short_names, self.categories = list(short), list(categories)
        self.subresources = set(sub)
        self.singular = singular or kind.lower()
        self.crd = crd
        self.has_spec = has_spec
        self.res = group + "/" + plural

    def api_version(self, version=None):
        v = version or self.version
        return self.group + "/" + v if self.group else v

    @property
    def custom(self):
        return self.crd is not None

    @property
    def has_status(self):
        return "status" in self.subresources

    def verbs(self):
        return ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

    def schema(self, version):
        """The openAPIV3Schema of a custom resource version."""
        for v in self.crd["spec"]["versions"]:
            if v["name"] == version:
                return (v.get("schema") or {}).get("openAPIV3Schema") or {}
        return {}

    def printer_columns(self, version):
        for v in self.crd["spec"]["versions"]:
            if v["name"] == version:
                return v.get("additionalPrinterColumns") or []
        return []


BUILTINS = [
    Kind("", "v1", "pods", "Pod", True, "V1Pod", ["po"], ["all"], ["status", "log"]),
    Kind("", "v1", "services", "Service", True, "V1Service", ["svc"], ["all"], ["status"]),
    Kind("", "v1", "secrets", "Secret", True, "V1Secret", has_spec=False),
    Kind("", "v1", "configmaps", "ConfigMap", True, "V1ConfigMap", ["cm"], has_spec=False),
    Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, "V1PersistentVolumeClaim",
         ["pvc"], [], ["status"]),
    Kind("", "v1", "events", "Event", True, "CoreV1Event", ["ev"], has_spec=False),
    Kind("", "v1", "namespaces", "Namespace", False, "V1Namespace", ["ns"], [], ["status", "finalize"],
         has_spec=False),
    Kind("", "v1", "serviceaccounts", "ServiceAccount", True, "V1ServiceAccount", ["sa"], has_spec=False),
    Kind("batch", "v1", "jobs", "Job", True, "V1Job", [], ["all"], ["status"]),
    Kind("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
         "V1CustomResourceDefinition", ["crd", "crds"], ["api-extensions"], ["status"]),
]
BY_RES = {k.res: k for k in BUILTINS}


def builtin(plural, group=""):
    return BY_RES[group + "/" + plural]


def kind_from_crd(crd):
    spec = crd["spec"]
    names = spec["names"]
    served = [v["name"] for v in spec["versions"] if v.get("served")]
    storage = [v["name"] for v in spec["versions"] if v.get("storage")][0]
    sub = set()
    for v in spec["versions"]:
        if (v.get("subresources") or {}).get("status") is not None:
            sub.add("status")
    return Kind(spec["group"], storage, names["plural"], names["kind"], spec["scope"] == "Namespaced",
                None, names.get("shortNames") or [], names.get("categories") or [], sub,
                names.get("singular"), crd=crd, versions=served)


# ---------------------------------------------------------------- field selectors

def _path(*keys):
    def get(o):
        for k in keys:
            o = o.get(k) if isinstance(o, dict) else None
        return o
    return get


COMMON_FIELDS = {"metadata.name": _path("metadata", "name"), "metadata.namespace": _path("metadata", "namespace")}
FIELDS = {
    "/pods": dict(COMMON_FIELDS, **{
        "spec.nodeName": _path("spec", "nodeName"), "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: bool((o.get("spec") or {}).get("hostNetwork")),
        "status.phase": _path("status", "phase"), "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName")}),
    "/secrets": dict(COMMON_FIELDS, type=_path("type")),
    "/namespaces": dict(COMMON_FIELDS, **{"status.phase": _path("status", "phase")}),
    "batch/jobs": dict(COMMON_FIELDS, **{"status.successful": lambda o: (o.get("status") or {}).get("succeeded", 0)}),
    "/events": dict(COMMON_FIELDS, **{
        "involvedObject.%s" % f: _path("involvedObject", f)
        for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
        reason=_path("reason"), reportingComponent=_path("reportingComponent"),
        source=_path("source", "component"), type=_path("type")),
}


def field_getters(kind):
    return FIELDS.get(kind.res, COMMON_FIELDS)


# ---------------------------------------------------------------- defaults

def default_str(obj, key, value):
    """Default a (non-pointer, in Go) string field: "" counts as unset, as in Go."""
    if not obj.get(key):
        obj[key] = value

def image_pull_policy(image):
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def default_probe(p):
    if not p:
        return
    for k, v in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)):
        p.setdefault(k, v)
    if "httpGet" in p:
        default_str(p["httpGet"], "scheme", "HTTP")


def default_container(c):
    default_str(c, "terminationMessagePath", "/dev/termination-log")
    default_str(c, "terminationMessagePolicy", "File")
    if c.get("image") and "imagePullPolicy" not in c:
        c["imagePullPolicy"] = image_pull_policy(c["image"])
    c.setdefault("resources", {})
    res = c["resources"]
    # Requests default to the limits when only limits are given.
    if res.get("limits"):
        req = res.setdefault("requests", {})
        for k, v in res["limits"].items():
            req.setdefault(k, v)
    for p in c.get("ports") or []:
        default_str(p, "protocol", "TCP")
    for e in c.get("env") or []:
        fr = (e.get("valueFrom") or {}).get("fieldRef")
        if fr is not None:
            default_str(fr, "apiVersion", "v1")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        default_probe(c.get(probe))


VOLUME_SOURCES = None


def volume_sources():
    global VOLUME_SOURCES
    if VOLUME_SOURCES is None:
        VOLUME_SOURCES = [k for k in S.model_fields("V1Volume")[0] if k != "name"]
    return VOLUME_SOURCES


def default_volume(v):
    if not any(k in v for k in volume_sources()):
        v["emptyDir"] = {}
    for k in ("secret", "configMap", "projected", "downwardAPI"):
        if k in v:
            v[k].setdefault("defaultMode", 420)
    if "hostPath" in v:
        v["hostPath"].setdefault("type", "")


def default_pod_spec(spec):
    default_str(spec, "restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    default_str(spec, "dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    default_str(spec, "schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            default_container(c)
    for v in spec.get("volumes") or []:
        default_volume(v)


def qos_class(spec):
    cs = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for c in cs:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if any(k in req or k in lim for k in ("cpu", "memory")):
            any_set = True
        for k in ("cpu", "memory"):
            if k not in lim or (k in req and S.parse_quantity(req[k]) != S.parse_quantity(lim[k])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_service(obj):
    spec = obj.setdefault("spec", {})
    default_str(spec, "type", "ClusterIP")
    default_str(spec, "sessionAffinity", "None")
    for p in spec.get("ports") or []:
        default_str(p, "protocol", "TCP")
        if "targetPort" not in p and "port" in p:
            p["targetPort"] = p["port"]
    if spec["type"] != "ExternalName":
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        default_str(spec, "externalTrafficPolicy", "Cluster")


def default_job(obj):
    spec = obj.setdefault("spec", {})
    if "completions" not in spec and "parallelism" not in spec:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if "podFailurePolicy" not in spec:
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    tmpl = spec.get("template") or {}
    if isinstance(tmpl.get("spec"), dict):
        default_pod_spec(tmpl["spec"])


def default_secret(obj):
    import base64
    default_str(obj, "type", "Opaque")
    sd = obj.pop("stringData", None)
    if sd:
        data = obj.setdefault("data", {})
        for k, v in sd.items():
            data[k] = base64.b64encode(v.encode()).decode()


def default_pvc(obj):
    spec = obj.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    spec.setdefault("storageClassName", "standard")   # the DefaultStorageClass admission


def default_namespace(obj):
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]


def default_crd(obj):
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    if names.get("kind"):
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    spec.setdefault("conversion", {"strategy": "None"})


DEFAULTS = {"/pods": lambda o: default_pod_spec(o.setdefault("spec", {})), "/services": default_service,
            "batch/jobs": default_job, "/secrets": default_secret, "/persistentvolumeclaims": default_pvc,
            "/namespaces": default_namespace, "apiextensions.k8s.io/customresourcedefinitions": default_crd}


def apply_defaults(kind, obj):
    fn = DEFAULTS.get(kind.res)
    if fn:
        fn(obj)


# ---------------------------------------------------------------- metadata validation

NAME_RULES = {"/services": S.dns1035_label, "/namespaces": S.dns1123_label}


def validate_meta(kind, obj, creating):
    md = obj.get("metadata") or {}
    causes = []
    name_rule = NAME_RULES.get(kind.res, S.dns1123_subdomain)
    name = md.get("name", "")
    if not name:
        causes.append(Cause("metadata.name", "Required", "name or generateName is required"))
    else:
        S.check(causes, "metadata.name", name, name_rule(name))
    if creating and md.get("generateName"):
        prefix = md["generateName"]
        S.check(causes, "metadata.generateName", prefix, name_rule(prefix.rstrip("-") or "a"))
    S.check_labels(causes, "metadata.labels", md.get("labels"))
    S.check_annotations(causes, "metadata.annotations", md.get("annotations"))
    for i, f in enumerate(md.get("finalizers") or []):
        S.check(causes, "metadata.finalizers[%d]" % i, f, S.qualified_name(f))
    causes += validate_owner_refs(md.get("ownerReferences") or [])
    return causes


def validate_owner_refs(refs):
    causes = []
    controllers = []
    for r in refs:
        for f, what in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
            if not r.get(f):
                causes.append(Cause("metadata.ownerReferences." + f, "Invalid", "%s must not be empty" % what, ""))
        if r.get("controller"):
            controllers.append(r.get("kind", "") + "/" + r.get("name", ""))
    if len(controllers) > 1:
        causes.append(Cause("metadata.ownerReferences", "Invalid",
                            "Only one reference can have Controller set to true. Found \"true\" in references for "
                            + " and ".join(controllers), GoRaw("[]v1.OwnerReference{...}")))
    return causes


# ---------------------------------------------------------------- pod validation

RESTART_POLICIES = ["Always", "OnFailure", "Never"]
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "storage", "pods"}


def validate_container(c, p, volumes, causes, init=False):
    if c.get("name"):
        S.check(causes, p + ".name", c["name"], S.dns1123_label(c["name"]))
    if not c.get("image"):
        causes.append(Cause(p + ".image", "Required"))
    if c.get("imagePullPolicy") not in (None, "Always", "Never", "IfNotPresent"):
        causes.append(Cause(p + ".imagePullPolicy", "NotSupported", ["Always", "IfNotPresent", "Never"],
                            c["imagePullPolicy"]))
    if c.get("terminationMessagePolicy") not in (None, "File", "FallbackToLogsOnError"):
        causes.append(Cause(p + ".terminationMessagePolicy", "NotSupported",
                            ["File", "FallbackToLogsOnError"], c["terminationMessagePolicy"]))
    if "restartPolicy" in c:
        if not init:
            causes.append(Cause(p + ".restartPolicy", "Forbidden", "may not be set for non-init containers"))
        elif c["restartPolicy"] != "Always":
            causes.append(Cause(p + ".restartPolicy", "NotSupported", ["Always"], c["restartPolicy"]))
    validate_ports(c.get("ports") or [], p + ".ports", causes)
    validate_env(c.get("env") or [], p + ".env", causes)
    validate_mounts(c.get("volumeMounts") or [], p + ".volumeMounts", volumes, causes)
    validate_resources(c.get("resources") or {}, p + ".resources", causes)


def validate_ports(ports, p, causes):
    names = set()
    for i, port in enumerate(ports):
        pp = "%s[%d]" % (p, i)
        cp = port.get("containerPort", 0)
        if not cp:
            causes.append(Cause(pp + ".containerPort", "Required"))
        elif not 1 <= cp <= 65535:
            causes.append(Cause(pp + ".containerPort", "Invalid", S.PORT_RANGE, cp))
        if port.get("hostPort") and not 1 <= port["hostPort"] <= 65535:
            causes.append(Cause(pp + ".hostPort", "Invalid", S.PORT_RANGE, port["hostPort"]))
        if port.get("name"):
            S.check(causes, pp + ".name", port["name"], S.iana_svc_name(port["name"]))
            if port["name"] in names:
                causes.append(Cause(pp + ".name", "Duplicate", "", port["name"]))
            names.add(port["name"])
        if port.get("protocol") not in (None, "TCP", "UDP", "SCTP"):
            causes.append(Cause(pp + ".protocol", "NotSupported", ["SCTP", "TCP", "UDP"], port["protocol"]))


def validate_env(env, p, causes):
    for i, e in enumerate(env):
        ep = "%s[%d]" % (p, i)
        if e.get("name"):
            S.check(causes, ep + ".name", e["name"], S.env_var_name(e["name"]))
        vf = e.get("valueFrom")
        if vf is not None:
            if e.get("value"):
                causes.append(Cause(ep + ".valueFrom", "Invalid", "may not be specified when `value` is not empty", ""))
            n = len([k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef") if k in vf])
            if n == 0:
                causes.append(Cause(ep + ".valueFrom", "Invalid", "must specify one of: `fieldRef`, "
                                    "`resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`", ""))
            elif n > 1:
                causes.append(Cause(ep + ".valueFrom", "Invalid", "may not have more than one field specified at a time", ""))
            for ref in ("configMapKeyRef", "secretKeyRef"):
                if ref in vf and not vf[ref].get("name"):
                    causes.append(Cause(ep + ".valueFrom.%s.name" % ref, "Required"))


def validate_mounts(mounts, p, volumes, causes):
    paths = set()
    for i, m in enumerate(mounts):
        mp = "%s[%d]" % (p, i)
        if m.get("name") and m["name"] not in volumes:
            causes.append(Cause(mp + ".name", "NotFound", "", m["name"]))
        if m.get("mountPath"):
            if m["mountPath"] in paths:
                causes.append(Cause(mp + ".mountPath", "Invalid", "must be unique", m["mountPath"]))
            paths.add(m["mountPath"])


def validate_resources(res, p, causes):
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    for which, vals in (("limits", lim), ("requests", req)):
        for name, q in vals.items():
            fp = "%s.%s[%s]" % (p, which, name)
            if name not in STANDARD_RESOURCES and not name.startswith("hugepages-") and "/" not in name:
                causes.append(Cause(fp, "Invalid", "must be a standard resource type or fully qualified", name))
            elif "/" in name:
                S.check(causes, fp, name, S.qualified_name(name))
            if S.parse_quantity(q) < 0:
                causes.append(Cause(fp, "Invalid", "must be greater than or equal to 0", GoRaw('"%s"' % q)))
    for name, q in req.items():
        if name in lim and S.parse_quantity(q) > S.parse_quantity(lim[name]):
            causes.append(Cause("%s.requests" % p, "Invalid", "must be less than or equal to %s limit of %s"
                                % (name, lim[name]), GoRaw('"%s"' % q)))


def validate_volumes(vols, p, causes):
    names = set()
    for i, v in enumerate(vols):
        vp = "%s[%d]" % (p, i)
        if v.get("name"):
            S.check(causes, vp + ".name", v["name"], S.dns1123_label(v["name"]))
            if v["name"] in names:
                causes.append(Cause(vp + ".name", "Duplicate", "", v["name"]))
            names.add(v["name"])
        srcs = [k for k in volume_sources() if k in v]
        if len(srcs) > 1:
            causes.append(Cause(vp, "Forbidden", "may not specify more than 1 volume type"))
        if "persistentVolumeClaim" in v and not v["persistentVolumeClaim"].get("claimName"):
            pass   # reported as a missing required field
        if "secret" in v and not v["secret"].get("secretName"):
            causes.append(Cause(vp + ".secret.secretName", "Required"))
        if "configMap" in v and not v["configMap"].get("name"):
            causes.append(Cause(vp + ".configMap.name", "Required"))
        ed = v.get("emptyDir")
        if ed and ed.get("medium") not in (None, "", "Memory", "HugePages"):
            causes.append(Cause(vp + ".emptyDir.medium", "NotSupported", ["", "Memory", "HugePages"], ed["medium"]))
    return names


def validate_pod_spec(spec, p, causes, restart_policies=RESTART_POLICIES):
    volumes = validate_volumes(spec.get("volumes") or [], p + ".volumes", causes)
    seen = set()
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            cp = "%s.%s[%d]" % (p, key, i)
            validate_container(c, cp, volumes, causes, init=(key == "initContainers"))
            if c.get("name") in seen:
                causes.append(Cause(cp + ".name", "Duplicate", "", c["name"]))
            seen.add(c.get("name"))
    rp = spec.get("restartPolicy")
    if rp not in restart_policies:
        causes.append(Cause(p + ".restartPolicy", "NotSupported", restart_policies, rp))
    if spec.get("dnsPolicy") not in (None, "ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"):
        causes.append(Cause(p + ".dnsPolicy", "NotSupported",
                            ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"], spec["dnsPolicy"]))
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and not 1 <= ads <= 2147483647:
        causes.append(Cause(p + ".activeDeadlineSeconds", "Invalid", "must be between 1 and 2147483647, inclusive", ads))
    tgps = spec.get("terminationGracePeriodSeconds")
    if tgps is not None and tgps < 0:
        causes.append(Cause(p + ".terminationGracePeriodSeconds", "Invalid", "must be greater than or equal to 0", tgps))
    for f in ("hostname", "subdomain"):
        if spec.get(f):
            S.check(causes, p + "." + f, spec[f], S.dns1123_label(spec[f]))
    if spec.get("serviceAccountName"):
        S.check(causes, p + ".serviceAccountName", spec["serviceAccountName"],
                S.dns1123_subdomain(spec["serviceAccountName"]))
    S.check_labels(causes, p + ".nodeSelector", spec.get("nodeSelector"))


def validate_pod(obj, old=None):
    causes = []
    validate_pod_spec(obj.get("spec") or {}, "spec", causes)
    if old is not None:
        causes += pod_spec_update(old["spec"], obj.get("spec") or {})
    return causes


def _without_mutable(spec):
    s = copy.deepcopy(spec)
    for key in ("containers", "initContainers"):
        for c in s.get(key) or []:
            c.pop("image", None)
    s.pop("activeDeadlineSeconds", None)
    s.pop("tolerations", None)
    return s


def pod_spec_update(old, new):
    if _without_mutable(old) != _without_mutable(new):
        return [Cause("spec", "Forbidden", "pod updates may not change fields other than "
                      "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
                      "`spec.tolerations` (only additions to existing tolerations),"
                      "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")]
    old_t, new_t = old.get("tolerations") or [], new.get("tolerations") or []
    if any(t not in new_t for t in old_t):
        return [Cause("spec.tolerations", "Forbidden", "existing toleration can not be modified except its tolerationSeconds")]
    return []


def _valid_ip(s):
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False


def normalize_pod_status(status):
    """podIP and podIPs (hostIP and hostIPs) agree, the single field winning, as the
    real server's conversion makes them."""
    for one, many in (("podIP", "podIPs"), ("hostIP", "hostIPs")):
        if status.get(one):
            ips = status.get(many) or []
            if not ips or ips[0].get("ip") != status[one]:
                status[many] = [{"ip": status[one]}] + [x for x in ips if x.get("ip") != status[one]]
        elif status.get(many):
            status[one] = status[many][0].get("ip", "")


def validate_pod_status(obj, old):
    causes = []
    st = obj.get("status") or {}
    for one, many in (("podIP", "podIPs"), ("hostIP", "hostIPs")):
        for i, x in enumerate(st.get(many) or []):
            if not _valid_ip(x.get("ip", "")):
                causes.append(Cause("status.%s[%d].ip" % (many, i), "Invalid", "must be a valid IP address", x.get("ip", "")))
    if (obj.get("spec") or {}).get("restartPolicy") == "Never":
        olds = {c.get("name"): c for c in (old.get("status") or {}).get("containerStatuses") or []}
        for i, c in enumerate(st.get("containerStatuses") or []):
            was = olds.get(c.get("name"))
            if was and "terminated" in (was.get("state") or {}) and "terminated" not in (c.get("state") or {}):
                causes.append(Cause("status.containerStatuses[%d].state" % i, "Forbidden",
                                    "may not be transitioned to non-terminated state"))
    return causes


# ---------------------------------------------------------------- other kinds

def validate_service(obj, old=None):
    causes = []
    spec = obj.get("spec") or {}
    stype = spec.get("type")
    if stype not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        causes.append(Cause("spec.type", "NotSupported", ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"], stype))
    headless = spec.get("clusterIP") == "None"
    ports = spec.get("ports") or []
    if not ports and not headless and stype != "ExternalName":
        causes.append(Cause("spec.ports", "Required"))
    names = set()
    for i, p in enumerate(ports):
        pp = "spec.ports[%d]" % i
        if len(ports) > 1 and not p.get("name"):
            causes.append(Cause(pp + ".name", "Required"))
        if p.get("name"):
            S.check(causes, pp + ".name", p["name"], S.dns1123_label(p["name"]))
            if p["name"] in names:
                causes.append(Cause(pp + ".name", "Duplicate", "", p["name"]))
            names.add(p["name"])
        if not 1 <= p.get("port", 0) <= 65535:
            causes.append(Cause(pp + ".port", "Invalid", S.PORT_RANGE, p.get("port", 0)))
        if p.get("protocol") not in (None, "TCP", "UDP", "SCTP"):
            causes.append(Cause(pp + ".protocol", "NotSupported", ["SCTP", "TCP", "UDP"], p["protocol"]))
        tp = p.get("targetPort")
        if isinstance(tp, int) and not 1 <= tp <= 65535:
            causes.append(Cause(pp + ".targetPort", "Invalid", S.PORT_RANGE, tp))
        elif isinstance(tp, str):
            S.check(causes, pp + ".targetPort", tp, S.iana_svc_name(tp))
        if p.get("nodePort") and stype not in ("NodePort", "LoadBalancer"):
            causes.append(Cause(pp + ".nodePort", "Forbidden", "may not be used when `type` is '%s'" % stype))
    S.check_labels(causes, "spec.selector", spec.get("selector"))
    if spec.get("sessionAffinity") not in (None, "None", "ClientIP"):
        causes.append(Cause("spec.sessionAffinity", "NotSupported", ["ClientIP", "None"], spec["sessionAffinity"]))
    ip = spec.get("clusterIP")
    if ip and ip != "None" and not _valid_ip(ip):
        causes.append(Cause("spec.clusterIPs[0]", "Invalid", "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)", ip))
    if old is not None:
        oip = (old.get("spec") or {}).get("clusterIP")
        if ip and oip and ip != oip:
            causes.append(Cause("spec.clusterIPs[0]", "Invalid", "may not change once set", ip))
    return causes


def validate_secret(obj, old=None):
    causes = []
    total = 0
    for k, v in (obj.get("data") or {}).items():
        S.check(causes, "data[%s]" % k, k, S.config_key(k))
        total += len(v) * 3 // 4
    if total > 1024 * 1024:
        causes.append(Cause("data", "TooLong", str(1024 * 1024)))
    if obj.get("type") == "kubernetes.io/tls":
        for k in ("tls.crt", "tls.key"):
            if k not in (obj.get("data") or {}):
                causes.append(Cause("data[%s]" % k, "Required"))
    if old is not None:
        if obj.get("type") != old.get("type"):
            causes.append(Cause("type", "Invalid", "field is immutable", obj.get("type", "")))
        causes += immutable_data(obj, old, ("data",))
    return causes


def immutable_data(obj, old, keys):
    causes = []
    if old.get("immutable"):
        if not obj.get("immutable"):
            causes.append(Cause("immutable", "Forbidden", "field is immutable when `immutable` is set"))
        for k in keys:
            if obj.get(k) != old.get(k):
                causes.append(Cause(k, "Forbidden", "field is immutable when `immutable` is set"))
    return causes


def validate_configmap(obj, old=None):
    causes = []
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    for k in data:
        S.check(causes, "data[%s]" % k, k, S.config_key(k))
    for k in binary:
        S.check(causes, "binaryData[%s]" % k, k, S.config_key(k))
        if k in data:
            causes.append(Cause("data[%s]" % k, "Invalid", "duplicate of key present in binaryData", k))
    if sum(len(k) + len(v) for k, v in list(data.items()) + list(binary.items())) > 1024 * 1024:
        causes.append(Cause("", "TooLong", str(1024 * 1024)))
    if old is not None:
        causes += immutable_data(obj, old, ("data", "binaryData"))
    return causes


ACCESS_MODES = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]


def validate_pvc(obj, old=None):
    causes = []
    spec = obj.get("spec") or {}
    modes = spec.get("accessModes") or []
    if not modes:
        causes.append(Cause("spec.accessModes", "Required", "at least 1 access mode is required"))
    for m in modes:
        if m not in ACCESS_MODES:
            causes.append(Cause("spec.accessModes", "NotSupported", ACCESS_MODES, m))
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        causes.append(Cause("spec.resources[storage]", "Required"))
    elif S.parse_quantity(storage) <= 0:
        causes.append(Cause("spec.resources[storage]", "Invalid", "must be greater than zero", GoRaw('"%s"' % storage)))
    if spec.get("volumeMode") not in (None, "Filesystem", "Block"):
        causes.append(Cause("spec.volumeMode", "NotSupported", ["Block", "Filesystem"], spec["volumeMode"]))
    if old is not None:
        a, b = copy.deepcopy(old.get("spec") or {}), copy.deepcopy(spec)
        for s in (a, b):
            (s.get("resources") or {}).pop("requests", None)
        if a != b:
            causes.append(Cause("spec", "Forbidden", "spec is immutable after creation except resources.requests "
                                "and volumeAttributesClassName for bound claims"))
    return causes


def validate_job(obj, old=None):
    causes = []
    spec = obj.get("spec") or {}
    tmpl = spec.get("template") or {}
    for f in ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"):
        if (spec.get(f) or 0) < 0:
            causes.append(Cause("spec." + f, "Invalid", "must be greater than or equal to 0", spec[f]))
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        causes.append(Cause("spec.activeDeadlineSeconds", "Invalid", "must be greater than 0", spec["activeDeadlineSeconds"]))
    if spec.get("completionMode") == "Indexed":
        # Not implemented: refused rather than run as NonIndexed (no index annotation, env, hostname).
        causes.append(Cause("spec.completionMode", "Forbidden", "Indexed Jobs are not implemented by the stand-in"))
    elif spec.get("completionMode") != "NonIndexed":
        causes.append(Cause("spec.completionMode", "NotSupported", ["NonIndexed", "Indexed"], spec.get("completionMode")))
    S.check_labels(causes, "spec.template.metadata.labels", (tmpl.get("metadata") or {}).get("labels"))
    S.check_annotations(causes, "spec.template.metadata.annotations", (tmpl.get("metadata") or {}).get("annotations"))
    if isinstance(tmpl.get("spec"), dict):
        validate_pod_spec(tmpl["spec"], "spec.template.spec", causes, ["OnFailure", "Never"])
    sel = spec.get("selector")
    if not sel:
        causes.append(Cause("spec.selector", "Required"))
    else:
        S.check_label_selector(causes, "spec.selector", sel)
        if not S.selector_matches(sel, (tmpl.get("metadata") or {}).get("labels")):
            causes.append(Cause("spec.template.metadata.labels", "Invalid",
                                "`selector` does not match template `labels`", GoRaw("map[string]string{...}")))
    if old is not None:
        ospec = old.get("spec") or {}
        for f in ("template", "selector", "completions", "completionMode"):
            if spec.get(f) != ospec.get(f) and not (f == "template" and ospec.get("suspend")):
                val = spec.get(f) if not isinstance(spec.get(f), dict) else GoRaw("core.%s{...}" % (
                    "PodTemplateSpec" if f == "template" else "LabelSelector"))
                causes.append(Cause("spec." + f, "Invalid", "field is immutable", val))
    return causes


def validate_namespace(obj, old=None):
    return []


def validate_event(obj, old=None):
    """core/v1 Events: an old-style one (no eventTime) must agree on its namespace; a
    new-style one needs its reporting fields, as the real validation has it."""
    causes = []
    io = obj.get("involvedObject") or {}
    ions, ns = io.get("namespace", ""), obj["metadata"].get("namespace", "")
    if not obj.get("eventTime"):
        if (not ions and ns not in ("", "default")) or (ions and ions != ns):
            causes.append(Cause("involvedObject.namespace", "Invalid", "does not match event.namespace", ions))
        return causes
    if not ions and ns not in ("default", "kube-system"):
        causes.append(Cause("involvedObject.namespace", "Invalid", "does not match event.namespace", ions))
    if not obj.get("reportingComponent"):
        causes.append(Cause("reportingComponent", "Required"))
    else:
        S.check(causes, "reportingComponent", obj["reportingComponent"], S.qualified_name(obj["reportingComponent"]))
    for f, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128), ("message", 1024)):
        if not obj.get(f) and f != "message":
            causes.append(Cause(f, "Required"))
        elif len(obj.get(f) or "") > limit:
            causes.append(Cause(f, "Invalid", "can have at most %d characters" % limit, ""))
    return causes


def validate_crd(obj, old=None):
    causes = []
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    group, plural = spec.get("group", ""), names.get("plural", "")
    if obj["metadata"].get("name") != plural + "." + group:
        causes.append(Cause("metadata.name", "Invalid", 'must be spec.names.plural+"."+spec.group', obj["metadata"].get("name")))
    if group and "." not in group:
        causes.append(Cause("spec.group", "Invalid", "should be a domain with at least one dot", group))
    elif group:
        S.check(causes, "spec.group", group, S.dns1123_subdomain(group))
    if spec.get("scope") not in ("Cluster", "Namespaced"):
        causes.append(Cause("spec.scope", "NotSupported", ["Cluster", "Namespaced"], spec.get("scope")))
    for f in ("plural", "singular"):
        if names.get(f):
            S.check(causes, "spec.names." + f, names[f], S.dns1035_label(names[f]))
    for f in ("kind", "listKind"):
        if names.get(f):
            S.check(causes, "spec.names." + f, names[f], S.dns1035_label(names[f].lower()) and
                    ["may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?"])
    for i, s in enumerate(names.get("shortNames") or []):
        S.check(causes, "spec.names.shortNames[%d]" % i, s, S.dns1035_label(s))
    causes += validate_crd_versions(spec.get("versions") or [])
    if old is not None:
        ospec = old.get("spec") or {}
        for f in ("group", "scope"):
            if spec.get(f) != ospec.get(f):
                causes.append(Cause("spec." + f, "Invalid", "field is immutable", spec.get(f)))
    return causes


def validate_crd_versions(versions):
    causes = []
    if not versions:
        causes.append(Cause("spec.versions", "Invalid", "must have exactly one version marked as storage version",
                            GoRaw("[]apiextensions.CustomResourceDefinitionVersion(nil)")))
        return causes
    if len([v for v in versions if v.get("storage")]) != 1:
        causes.append(Cause("spec.versions", "Invalid", "must have exactly one version marked as storage version",
                            GoRaw("[]apiextensions.CustomResourceDefinitionVersion{...}")))
    seen = set()
    for i, v in enumerate(versions):
        vp = "spec.versions[%d]" % i
        if v.get("name"):
            S.check(causes, vp + ".name", v["name"], S.dns1035_label(v["name"]))
            if v["name"] in seen:
                causes.append(Cause(vp + ".name", "Invalid", "must be unique", v["name"]))
            seen.add(v["name"])
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        sp = vp + ".schema.openAPIV3Schema"
        if not schema:
            causes.append(Cause(sp, "Required", "schemas are required"))
            continue
        if schema.get("type") != "object":
            if not schema.get("type"):
                causes.append(Cause(sp + ".type", "Required", "must not be empty at the root"))
            else:
                causes.append(Cause(sp + ".type", "Invalid", "must be object at the root", schema["type"]))
        structural(schema, sp, causes, root=True)
    return causes


def structural(s, p, causes, root=False):
    """The structural-schema rule the real server enforces first: every specified
    field has a type (unless it preserves unknown fields or is int-or-string)."""
    for k, ps in (s.get("properties") or {}).items():
        pp = "%s.properties[%s]" % (p, k)
        if not isinstance(ps, dict):
            continue
        if not ps.get("type") and not ps.get("x-kubernetes-preserve-unknown-fields") \
                and not ps.get("x-kubernetes-int-or-string"):
            causes.append(Cause(pp + ".type", "Required", "must not be empty for specified object fields"))
        structural(ps, pp, causes)
    items = s.get("items")
    if isinstance(items, dict):
        if not items.get("type") and not items.get("x-kubernetes-preserve-unknown-fields") \
                and not items.get("x-kubernetes-int-or-string"):
            causes.append(Cause(p + ".items.type", "Required", "must not be empty for specified array items"))
        structural(items, p + ".items", causes)
    ap = s.get("additionalProperties")
    if isinstance(ap, dict):
        structural(ap, p + ".additionalProperties", causes)
    if s.get("type") == "array" and not isinstance(items, dict):
        causes.append(Cause(p + ".items", "Required", "must be specified"))


VALIDATORS = {"/pods": validate_pod, "/services": validate_service, "/secrets": validate_secret,
              "/configmaps": validate_configmap, "/persistentvolumeclaims": validate_pvc,
              "batch/jobs": validate_job, "/namespaces": validate_namespace, "/events": validate_event,
              "apiextensions.k8s.io/customresourcedefinitions": validate_crd}


def validate(kind, obj, old=None):
    fn = VALIDATORS.get(kind.res)
    return fn(obj, old) if fn else []
