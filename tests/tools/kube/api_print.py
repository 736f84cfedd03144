"""Server-side printing: the meta.k8s.io/v1 Table the real server answers to
`kubectl get` (Accept: application/json;as=Table;v=v1;g=meta.k8s.io), with the
columns of the real printers for the kinds served here."""
import re
import time

from api_store import parse_rfc3339

NAME_DESC = ("Name must be unique within a namespace. Is required when creating resources, although some "
             "resources may allow a client to request the generation of an appropriate name automatically. "
             "Name is primarily intended for creation idempotence and configuration definition. Cannot be "
             "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
AGE_DESC = ("CreationTimestamp is a timestamp representing the server time when this object was created. "
            "It is not guaranteed to be set in happens-before order across separate operations. Clients may "
            "not set this value. It is represented in RFC3339 form and is in UTC.")


def human_duration(seconds):
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    m = s // 60
    if m < 10:
        return "%dm" % m if s % 60 == 0 else "%dm%ds" % (m, s % 60)
    if m < 180:
        return "%dm" % m
    h = s // 3600
    if h < 8:
        return "%dh" % h if m % 60 == 0 else "%dh%dm" % (h, m % 60)
    if h < 48:
        return "%dh" % h
    if h < 24 * 8:
        return "%dd" % (h // 24) if h % 24 == 0 else "%dd%dh" % (h // 24, h % 24)
    if h < 24 * 365 * 2:
        return "%dd" % (h // 24)
    y, d = h // 24 // 365, (h // 24) % 365
    if h < 24 * 365 * 8:
        return "%dy" % y if d == 0 else "%dy%dd" % (y, d)
    return "%dy" % y


def since(ts):
    t = parse_rfc3339(ts)
    return "<unknown>" if t is None else human_duration(time.time() - t)


def col(name, fn, ctype="string", priority=0, fmt="", desc=""):
    return {"name": name, "type": ctype, "format": fmt, "description": desc, "priority": priority, "fn": fn}


NAME = col("Name", lambda o: o["metadata"]["name"], fmt="name", desc=NAME_DESC)
AGE = col("Age", lambda o: since(o["metadata"].get("creationTimestamp")), desc=AGE_DESC)


# ---------------------------------------------------------------- pods

def pod_status(pod):
    st = pod.get("status") or {}
    reason = st.get("reason") or st.get("phase") or ""
    running = False
    for c in reversed(st.get("containerStatuses") or []):
        state = c.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            t = state["terminated"]
            reason = t.get("reason") or ("Signal:%d" % t["signal"] if t.get("signal")
                                         else "ExitCode:%d" % t.get("exitCode", 0))
        elif "running" in state and c.get("ready"):
            running = True
    if reason == "Completed" and running:
        reason = "Running"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Unknown" if st.get("reason") == "NodeLost" else "Terminating"
    return reason


def pod_ready(pod):
    cs = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return "%d/%d" % (sum(1 for c in cs if c.get("ready")), total)


def pod_restarts(pod):
    cs = (pod.get("status") or {}).get("containerStatuses") or []
    n = sum(c.get("restartCount", 0) for c in cs)
    last = [parse_rfc3339(((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt")) for c in cs]
    last = [t for t in last if t]
    if n and last:
        return "%d (%s ago)" % (n, human_duration(time.time() - max(last)))
    return str(n)


POD_COLUMNS = [
    NAME,
    col("Ready", pod_ready, desc="The aggregate readiness state of this pod for accepting traffic."),
    col("Status", pod_status, desc="The aggregate status of the containers in this pod."),
    col("Restarts", pod_restarts, desc="The number of times the containers in this pod have been restarted "
        "and when the last container in this pod has restarted."),
    AGE,
    col("IP", lambda o: (o.get("status") or {}).get("podIP") or "<none>", priority=1,
        desc="The IP address assigned to the pod"),
    col("Node", lambda o: (o.get("spec") or {}).get("nodeName") or "<none>", priority=1,
        desc="The name of the node to which the pod is assigned"),
    col("Nominated Node", lambda o: (o.get("status") or {}).get("nominatedNodeName") or "<none>", priority=1,
        desc="The name of the node where the pod is nominated"),
    col("Readiness Gates", lambda o: "<none>", priority=1, desc="Readiness gates"),
]


# ---------------------------------------------------------------- jobs

def job_status(job):
    conds = {c["type"]: c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
    for t in ("Failed", "Complete", "Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if t in conds:
            return t
    return "Terminating" if job["metadata"].get("deletionTimestamp") else "Running"


def job_completions(job):
    spec, st = job.get("spec") or {}, job.get("status") or {}
    if spec.get("completions") is not None:
        return "%d/%d" % (st.get("succeeded", 0), spec["completions"])
    par = spec.get("parallelism", 1)
    return "%d/1 of %d" % (st.get("succeeded", 0), par) if par > 1 else "%d/1" % st.get("succeeded", 0)


def job_duration(job):
    st = job.get("status") or {}
    start = parse_rfc3339(st.get("startTime"))
    if start is None:
        return ""
    end = parse_rfc3339(st.get("completionTime")) or time.time()
    return human_duration(end - start)


def template_containers(job, field):
    cs = (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return ",".join(c.get(field, "") for c in cs)


JOB_COLUMNS = [
    NAME,
    col("Status", job_status, desc="Status of the job."),
    col("Completions", job_completions, desc="The desired number of successfully finished pods the job should "
        "be run with."),
    col("Duration", job_duration, desc="Time required to complete the job."),
    AGE,
    col("Containers", lambda o: template_containers(o, "name"), priority=1, desc="Names of each container in the template."),
    col("Images", lambda o: template_containers(o, "image"), priority=1, desc="Images referenced by each container in the template."),
    col("Selector", lambda o: selector_text(((o.get("spec") or {}).get("selector") or {}).get("matchLabels")),
        priority=1, desc="Selector of the job."),
]


# ---------------------------------------------------------------- the others

def selector_text(labels):
    return ",".join("%s=%s" % kv for kv in sorted((labels or {}).items())) or "<none>"


def service_ports(svc):
    out = []
    for p in (svc.get("spec") or {}).get("ports") or []:
        if p.get("nodePort"):
            out.append("%d:%d/%s" % (p.get("port", 0), p["nodePort"], p.get("protocol", "TCP")))
        else:
            out.append("%d/%s" % (p.get("port", 0), p.get("protocol", "TCP")))
    return ",".join(out) or "<none>"


def external_ip(svc):
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return spec.get("externalName", "")
    if spec.get("externalIPs"):
        return ",".join(spec["externalIPs"])
    if spec.get("type") == "LoadBalancer":
        ing = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        return ",".join(i.get("ip") or i.get("hostname", "") for i in ing) or "<pending>"
    return "<none>"


SERVICE_COLUMNS = [
    NAME,
    col("Type", lambda o: o["spec"].get("type", ""), desc="The type of the service."),
    col("Cluster-IP", lambda o: o["spec"].get("clusterIP") or "<none>", desc="The cluster IP of the service."),
    col("External-IP", external_ip, desc="The external IP of the service."),
    col("Port(s)", service_ports, desc="The ports of the service."),
    AGE,
    col("Selector", lambda o: selector_text(o["spec"].get("selector")), priority=1, desc="The selector of the service."),
]

ACCESS_SHORT = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
PVC_COLUMNS = [
    NAME,
    col("Status", lambda o: (o.get("status") or {}).get("phase", "") if not o["metadata"].get("deletionTimestamp")
        else "Terminating", desc="The phase of the claim."),
    col("Volume", lambda o: o["spec"].get("volumeName", ""), desc="The volume bound to the claim."),
    col("Capacity", lambda o: ((o.get("status") or {}).get("capacity") or {}).get("storage", ""), desc="Capacity."),
    col("Access Modes", lambda o: ",".join(ACCESS_SHORT.get(m, m) for m in (o.get("status") or {}).get("accessModes") or []),
        desc="Access modes."),
    col("StorageClass", lambda o: o["spec"].get("storageClassName", ""), desc="Storage class."),
    col("VolumeAttributesClass", lambda o: o["spec"].get("volumeAttributesClassName") or "<unset>", desc="Volume attributes class."),
    AGE,
    col("VolumeMode", lambda o: o["spec"].get("volumeMode", ""), priority=1, desc="Volume mode."),
]

OTHER_COLUMNS = {
    "/namespaces": [NAME, col("Status", lambda o: (o.get("status") or {}).get("phase", ""), desc="The status of the namespace"), AGE],
    "/configmaps": [NAME, col("Data", lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                              "integer", desc="Number of data keys."), AGE],
    "/secrets": [NAME, col("Type", lambda o: o.get("type", ""), desc="The type of the secret"),
                 col("Data", lambda o: len(o.get("data") or {}), "integer", desc="The number of data items."), AGE],
    "/serviceaccounts": [NAME, col("Secrets", lambda o: len(o.get("secrets") or []), "integer", desc="Secrets."), AGE],
    "/events": [
        col("Last Seen", lambda o: since(o.get("lastTimestamp") or o.get("eventTime") or o["metadata"].get("creationTimestamp")),
            desc="Last seen."),
        col("Type", lambda o: o.get("type", ""), desc="Type."),
        col("Reason", lambda o: o.get("reason", ""), desc="Reason."),
        col("Object", lambda o: "%s/%s" % ((o.get("involvedObject") or {}).get("kind", "").lower(),
                                           (o.get("involvedObject") or {}).get("name", "")), desc="Object."),
        col("Message", lambda o: (o.get("message") or "").strip(), desc="Message.")],
    "apiextensions.k8s.io/customresourcedefinitions": [
        NAME, col("Created At", lambda o: o["metadata"].get("creationTimestamp", ""), fmt="date", desc="Created at.")],
    "/pods": POD_COLUMNS, "batch/jobs": JOB_COLUMNS, "/services": SERVICE_COLUMNS,
    "/persistentvolumeclaims": PVC_COLUMNS,
}


# ---------------------------------------------------------------- custom resources

def json_path(obj, path):
    """The few JSONPath forms printer columns use: .a.b, .a[0].b, .a[-1:].b."""
    vals = [obj]
    for m in re.finditer(r"\.([^.\[\]]+)|\[(-?\d+)(:?)\]", path or ""):
        nxt = []
        for v in vals:
            if m.group(1) is not None:
                if isinstance(v, dict) and m.group(1) in v:
                    nxt.append(v[m.group(1)])
            elif isinstance(v, list) and v:
                i = int(m.group(2))
                sel = v[i:] if m.group(3) else ([v[i]] if -len(v) <= i < len(v) else [])
                nxt.extend(sel)
        vals = nxt
    return vals


def printer_cell(obj, c):
    vals = json_path(obj, c.get("jsonPath"))
    if not vals:
        return None if c.get("type") in ("integer", "number", "boolean") else "<none>"
    v = vals[0]
    if c.get("type") == "date":
        return since(v)
    if c.get("type") in ("integer", "number", "boolean"):
        return v
    return ",".join(str(x) for x in vals) if len(vals) > 1 else str(v) if not isinstance(v, str) else v


def custom_columns(kind, version):
    cols = [NAME]
    pcs = kind.printer_columns(version)
    for c in pcs:
        cols.append(col(c["name"], lambda o, c=c: printer_cell(o, c), c.get("type", "string"),
                        c.get("priority", 0), c.get("format", ""), c.get("description", "")))
    if not any(c["name"] == "Age" for c in pcs):
        cols.append(AGE)
    return cols


def columns(kind, version):
    if kind.custom:
        return custom_columns(kind, version)
    return OTHER_COLUMNS.get(kind.res, [NAME, AGE])


def table(kind, objs, rv, version, include="Metadata"):
    cols = columns(kind, version)
    rows = []
    for o in objs:
        row = {"cells": [c["fn"](o) for c in cols]}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(rv)},
            "columnDefinitions": [{k: c[k] for k in ("name", "type", "format", "description", "priority")} for c in cols],
            "rows": rows}
