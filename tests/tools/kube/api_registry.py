"""The REST semantics of the stand-in API server: create, get, list, update, patch and
delete of every kind, with the admission, defaulting, validation, optimistic
concurrency, graceful deletion and finalizers of the real server. The HTTP layer and
the controllers both go through it."""
import copy
import ipaddress
import os
import random
import uuid

import api_kinds as K
import api_patch as P
import api_schema as S
from api_store import (ApiError, Cause, already_exists, bad_request, conflict, forbidden, invalid,
                       not_found, now_rfc3339, rand_suffix, stale_conflict, unsupported_media)

NODE_NAME = "standin-node"
SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/16")
NODE_PORTS = (30000, 32767)
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
CRD_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
PVC_FINALIZER = "kubernetes.io/pvc-protection"
PATCH_TYPES = ["application/json-patch+json", "application/merge-patch+json",
               "application/strategic-merge-patch+json", "application/apply-patch+yaml"]


class Registry:
    def __init__(self, store, data_dir=None):
        self.store = store
        self.data_dir = data_dir
        self.custom = {}          # res -> Kind, for the established CRDs

    # ------------------------------------------------------------ kinds

    def kinds(self):
        return K.BUILTINS + list(self.custom.values())

    def find(self, group, version, plural):
        for k in self.kinds():
            if k.group == group and k.plural == plural and version in k.versions:
                return k
        return None

    def kind_of_res(self, res):
        return K.BY_RES.get(res) or self.custom.get(res)

    # ------------------------------------------------------------ decoding

    def decode(self, kind, body, version):
        """Strict-decode a request body as kind: (object, causes for missing required fields)."""
        if not isinstance(body, dict):
            raise bad_request("couldn't get version/kind; json parse error: json: cannot unmarshal %s into Go "
                              "value of type struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; "
                              "Kind string \"json:\\\"kind,omitempty\\\"\" }" % S.json_type(body))
        want = kind.api_version(version)
        if kind.custom and not body.get("kind"):
            raise bad_request("Object 'Kind' is missing in '%s'" % _short_json(body))
        if body.get("apiVersion") and body["apiVersion"] != want:
            raise bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                              % (body["apiVersion"], want))
        if body.get("kind") and body["kind"] != kind.kind:
            raise bad_request("the kind in the data (%s) does not match the expected kind (%s)"
                              % (body["kind"], kind.kind))
        if kind.custom:
            obj, missing = self.decode_custom(kind, body, version)
        else:
            obj, missing = S.decode_builtin(body, kind.model, kind.kind, version)
        obj["apiVersion"], obj["kind"] = kind.api_version(), kind.kind
        obj.setdefault("metadata", {})
        return canonical(obj), missing

    def decode_custom(self, kind, body, version):
        obj = copy.deepcopy(body)
        d = S.Decoder()
        md = body.get("metadata")
        if md is not None and not isinstance(md, dict):
            d.fail("json: cannot unmarshal %s into Go struct field %s.metadata of type v1.ObjectMeta"
                   % (S.json_type(md), kind.kind))
        elif md is not None:
            obj["metadata"] = d.model(md, "V1ObjectMeta", "metadata", "metadata")
        schema = kind.schema(version)
        S.schema_defaults(obj, schema)
        v = S.SchemaValidator()
        v.validate(obj, schema, "", root=True)
        prefix = '%s in version "%s" cannot be handled as a %s: ' % (kind.kind, version, kind.kind)
        if d.type_error:
            raise bad_request(prefix + d.type_error)
        if d.strict or v.unknown:
            raise bad_request(prefix + "strict decoding error: " + ", ".join(d.strict + v.unknown))
        return obj, d.missing

    def custom_causes(self, kind, obj, version):
        """The schema's rules (types, required, enum, bounds) on the object to be stored."""
        if not kind.custom:
            return []
        v = S.SchemaValidator()
        v.validate(self.render(kind, obj, version), kind.schema(version), "", root=True)
        return v.causes

    # ------------------------------------------------------------ reads

    def get(self, kind, ns, name):
        obj = self.store.get(kind.res, ns if kind.namespaced else "", name)
        if obj is None:
            raise not_found(kind.group, kind.plural, name)
        return obj

    # ------------------------------------------------------------ create

    def create(self, kind, ns, body, version=None, dry_run=False):
        version = version or kind.version
        obj, missing = self.decode(kind, body, version)
        md = obj["metadata"]
        ns = ns if kind.namespaced else ""
        if kind.namespaced:
            if md.get("namespace") and md["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        if md.get("resourceVersion"):
            raise ApiError(500, "InternalError", "resourceVersion should not be set on objects to be created")
        if kind.custom and kind.crd["metadata"].get("deletionTimestamp"):
            raise ApiError(405, "MethodNotAllowed", "create not allowed while custom resource definition is terminating")
        if kind.namespaced:
            self.admit_namespace(kind, ns, md.get("name") or md.get("generateName", ""))
        self.prepare_create(kind, obj)
        if kind.res == "/pods":
            self.admit_pod(obj)
        causes = K.validate_meta(kind, obj, True) + missing + K.validate(kind, obj) + \
            self.custom_causes(kind, obj, version)
        if causes:
            raise invalid(kind.kind, kind.group, md.get("name", ""), _dedup(causes))
        self.allocate(kind, obj)
        if dry_run:
            return obj
        return self.insert(kind, obj)

    def prepare_create(self, kind, obj):
        md = obj["metadata"]
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + rand_suffix()
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now_rfc3339()
        for f in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields", "generation"):
            md.pop(f, None)
        if kind.has_spec or kind.custom:
            md["generation"] = 1
        if kind.has_status:
            obj.pop("status", None)
        K.apply_defaults(kind, obj)
        init = INITIAL_STATUS.get(kind.res)
        if init:
            obj["status"] = init(obj)
        if kind.res == "batch/jobs":
            job_selector(obj)
        if kind.res == "apiextensions.k8s.io/customresourcedefinitions":
            md.setdefault("finalizers", [])
            if CRD_FINALIZER not in md["finalizers"]:
                md["finalizers"].append(CRD_FINALIZER)

    def insert(self, kind, obj):
        """Store a new object: 409 if the name is taken (a generated name is retried)."""
        obj = canonical(obj)
        md = obj["metadata"]
        with self.store.lock:
            for _ in range(8):
                if self.store.get(kind.res, md.get("namespace", ""), md["name"]) is None:
                    break
                if not md.get("generateName"):
                    raise already_exists(kind.group, kind.plural, md["name"])
                md["name"] = md["generateName"] + rand_suffix()
            else:
                raise already_exists(kind.group, kind.plural, md["name"])
            stored = self.store.put(kind.res, obj)
        if kind.res == "/persistentvolumeclaims" and self.data_dir:
            os.makedirs(os.path.join(self.data_dir, "volumes", md["namespace"], md["name"]), exist_ok=True)
        return stored

    def admit_namespace(self, kind, ns, name):
        nso = self.store.get("/namespaces", "", ns)
        if nso is None:
            raise not_found("", "namespaces", ns)
        if nso["metadata"].get("deletionTimestamp"):
            raise forbidden(kind.group, kind.plural, name, "unable to create new content in namespace %s "
                            "because it is being terminated" % ns)

    def admit_pod(self, pod):
        """The admission plugins a pod goes through: ServiceAccount, Priority,
        DefaultTolerationSeconds; and the scheduler's choice of node."""
        md, spec = pod["metadata"], pod["spec"]
        sa_name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = spec["serviceAccount"] = sa_name
        sa = self.store.get("/serviceaccounts", md["namespace"], sa_name)
        if sa is None:
            raise forbidden("", "pods", md.get("name", ""), 'error looking up service account %s/%s: '
                            'serviceaccount "%s" not found' % (md["namespace"], sa_name, sa_name))
        automount = spec.get("automountServiceAccountToken", sa.get("automountServiceAccountToken", True))
        if automount is not False:
            mount_sa_token(spec)
        if not spec.get("priorityClassName"):
            spec.setdefault("priority", 0)
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        tol = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") == key for t in tol):
                tol.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
        if not spec.get("nodeName"):
            spec["nodeName"] = NODE_NAME      # as the scheduler would

    def allocate(self, kind, obj):
        if kind.res == "/services":
            self.allocate_service(obj, None)

    # ------------------------------------------------------------ services

    def allocate_service(self, svc, old):
        spec = svc["spec"]
        if spec["type"] == "ExternalName":
            return
        ospec = (old or {}).get("spec") or {}
        if old is not None and not spec.get("clusterIP") and ospec.get("clusterIP"):
            spec["clusterIP"] = ospec["clusterIP"]
        if not spec.get("clusterIP"):
            spec["clusterIP"] = self.free_ip()
        elif spec["clusterIP"] != "None" and spec["clusterIP"] != ospec.get("clusterIP"):
            self.claim_ip(spec["clusterIP"], svc["metadata"]["name"])
        spec["clusterIPs"] = [spec["clusterIP"]]
        if spec["type"] in ("NodePort", "LoadBalancer"):
            self.allocate_node_ports(spec, ospec, svc["metadata"]["name"])

    def used_ips(self):
        svcs, _ = self.store.list("/services")
        return {s["spec"].get("clusterIP") for s in svcs}

    def free_ip(self):
        used = self.used_ips() | {"10.96.0.1"}
        while True:
            ip = str(SERVICE_CIDR[random.randint(2, SERVICE_CIDR.num_addresses - 2)])
            if ip not in used:
                return ip

    def claim_ip(self, ip, name):
        why = None
        try:
            inside = ipaddress.ip_address(ip) in SERVICE_CIDR
        except ValueError:
            inside = False
        if not inside:
            why = "provided IP is not in the valid range. The range of valid IPs is %s" % SERVICE_CIDR
        elif ip in self.used_ips():
            why = "provided IP is already allocated"
        if why:
            raise invalid("Service", "", name, [Cause("spec.clusterIPs", "Invalid", "failed to allocate IP %s: %s"
                                                      % (ip, why), [ip])])

    def allocate_node_ports(self, spec, ospec, svc_name):
        svcs, _ = self.store.list("/services")
        used = {p.get("nodePort") for s in svcs for p in s["spec"].get("ports") or []}
        olds = {p.get("port"): p.get("nodePort") for p in ospec.get("ports") or []}
        for i, p in enumerate(spec.get("ports") or []):
            if not p.get("nodePort") and olds.get(p.get("port")):
                p["nodePort"] = olds[p["port"]]
            elif not p.get("nodePort"):
                p["nodePort"] = random.choice([n for n in range(NODE_PORTS[0], NODE_PORTS[1] + 1) if n not in used])
            elif p["nodePort"] != olds.get(p.get("port")):
                why = None
                if not NODE_PORTS[0] <= p["nodePort"] <= NODE_PORTS[1]:
                    why = "provided port is not in the valid range. The range of valid ports is %d-%d" % NODE_PORTS
                elif p["nodePort"] in used:
                    why = "provided port is already allocated"
                if why:
                    raise invalid("Service", "", svc_name, [Cause("spec.ports[%d].nodePort" % i, "Invalid", why,
                                                                  p["nodePort"])])
            used.add(p["nodePort"])

    # ------------------------------------------------------------ update

    def update(self, kind, ns, name, body, version=None, sub=None):
        version = version or kind.version
        obj, missing = self.decode(kind, body, version)
        ns = ns if kind.namespaced else ""
        md = obj["metadata"]
        if md.get("name") != name:
            raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                              % (md.get("name", ""), name))
        if kind.namespaced and md.get("namespace") and md["namespace"] != ns:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        with self.store.lock:
            old = self.get(kind, ns, name)
            self.check_preconditions(kind, old, md)
            new = self.merge_for_update(kind, old, obj, sub)
            causes = []
            if sub != "status":
                causes += K.validate_meta(kind, new, False) + missing + K.validate(kind, new, old)
            else:
                causes += self.validate_status(kind, new, old, missing)
            causes += self.custom_causes(kind, new, version) + self.finalizer_rules(old, new)
            if causes:
                raise invalid(kind.kind, kind.group, name, _dedup(causes))
            if kind.res == "/services" and sub != "status":
                self.allocate_service(new, old)
            return self.commit(kind, old, new)

    def check_preconditions(self, kind, old, md):
        rv = md.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise stale_conflict(kind.group, kind.plural, old["metadata"]["name"])
        uid = md.get("uid")
        if uid and uid != old["metadata"]["uid"]:
            raise conflict(kind.group, kind.plural, old["metadata"]["name"],
                           "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                           % (uid, old["metadata"]["uid"]))

    def merge_for_update(self, kind, old, obj, sub):
        """The object an update stores: a status write changes only .status; any other
        write keeps the old .status (when the kind has a status subresource) and the
        system-owned metadata."""
        if sub == "status":
            new = copy.deepcopy(old)
            new["status"] = obj.get("status") or {}
            if kind.res == "/pods":
                st = new["status"]
                if not st.get("qosClass") and (old.get("status") or {}).get("qosClass"):
                    st["qosClass"] = old["status"]["qosClass"]
                K.normalize_pod_status(st)
            return new
        new = obj
        omd, nmd = old["metadata"], new["metadata"]
        for f in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "namespace"):
            if f in omd:
                nmd[f] = omd[f]
            else:
                nmd.pop(f, None)
        nmd.pop("selfLink", None)
        nmd.pop("managedFields", None)
        K.apply_defaults(kind, new)
        if kind.has_status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        if kind.res == "/pods":
            self.keep_pod_admission(old, new)
        if kind.res == "/namespaces":
            new["spec"] = copy.deepcopy(old.get("spec") or {})
        return new

    def keep_pod_admission(self, old, new):
        """A PUT of a pod leaves what admission set at creation (the client read it back)."""
        ospec, nspec = old["spec"], new.setdefault("spec", {})
        for f in ("serviceAccountName", "serviceAccount", "nodeName", "priority", "preemptionPolicy"):
            if f in ospec and f not in nspec:
                nspec[f] = ospec[f]

    def validate_status(self, kind, new, old, missing):
        causes = [c for c in missing if c.field.startswith("status")]
        if kind.res == "/pods":
            causes += K.validate_pod_status(new, old)
        return causes

    def finalizer_rules(self, old, new):
        if not old["metadata"].get("deletionTimestamp"):
            return []
        added = [f for f in new["metadata"].get("finalizers") or [] if f not in old["metadata"].get("finalizers") or []]
        if added:
            return [Cause("metadata.finalizers", "Forbidden", "no new finalizers can be added if the object is "
                          "being deleted, found new finalizers %s" % S_list(added))]
        return []

    def commit(self, kind, old, new):
        """Store an updated object: bump generation when the spec changed; a no-op update
        stores nothing; an object being deleted whose last finalizer went goes away."""
        if (kind.has_spec or kind.custom) and spec_part(kind, old) != spec_part(kind, new):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        new = canonical(new)
        if new == old:
            return old
        md = new["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers") and md.get("deletionGracePeriodSeconds", 0) == 0:
            self.store.put(kind.res, new)
            return self.remove(kind, new)
        return self.store.put(kind.res, new)

    # ------------------------------------------------------------ patch

    def patch(self, kind, ns, name, ctype, body, version=None, sub=None, field_manager=None):
        version = version or kind.version
        ctype = (ctype or "").split(";")[0].strip().lower()
        if ctype not in PATCH_TYPES or (kind.custom and ctype == "application/strategic-merge-patch+json"):
            raise unsupported_media([t for t in PATCH_TYPES
                                     if not (kind.custom and t == "application/strategic-merge-patch+json")])
        ns = ns if kind.namespaced else ""
        if ctype == "application/apply-patch+yaml":
            return self.apply(kind, ns, name, body, version, sub, field_manager)
        with self.store.lock:
            old = self.get(kind, ns, name)
            doc = self.render(kind, old, version)
            if ctype == "application/json-patch+json":
                new = P.json_patch(doc, body)
            elif not isinstance(body, dict):
                raise bad_request("json: cannot unmarshal %s into Go value of type map[string]interface {}"
                                  % S.json_type(body))
            elif ctype == "application/merge-patch+json":
                new = P.merge_patch(doc, body)
            else:
                new = P.strategic_merge(doc, body)
            return self.update(kind, ns, name, new, version, sub)

    def apply(self, kind, ns, name, body, version, sub, field_manager):
        """Server-side apply, approximated: create when absent, else a merge patch of
        the applied configuration (no field ownership, no conflicts)."""
        if not field_manager:
            raise bad_request("PATCH, application/apply-patch+yaml requests must have a fieldManager parameter")
        if not isinstance(body, dict):
            raise bad_request("error decoding YAML: the applied configuration is not an object")
        with self.store.lock:
            old = self.store.get(kind.res, ns, name)
            if old is None:
                if sub:
                    raise not_found(kind.group, kind.plural, name)
                return self.create(kind, ns, body, version)
            new = P.merge_patch(self.render(kind, old, version), body)
            return self.update(kind, ns, name, new, version, sub)

    # ------------------------------------------------------------ delete

    def delete(self, kind, ns, name, opts=None):
        """DELETE: (response object, whether it is gone)."""
        opts = opts or {}
        ns = ns if kind.namespaced else ""
        with self.store.lock:
            old = self.get(kind, ns, name)
            self.check_delete_preconditions(kind, old, opts.get("preconditions") or {})
            policy = self.propagation(kind, opts)
            if kind.res == "/namespaces":
                return self.delete_namespace(old), False
            grace = self.grace_period(kind, old, opts)
            new = copy.deepcopy(old)
            md = new["metadata"]
            fins = md.setdefault("finalizers", [])
            want = {"Orphan": "orphan", "Foreground": "foregroundDeletion"}.get(policy)
            if md.get("deletionTimestamp"):
                return self.delete_again(kind, old, new, grace)
            if want and want not in fins:
                fins.append(want)
            if not fins and not grace:
                return self.deleted_response(kind, self.remove(kind, old)), True
            if not fins:
                md.pop("finalizers")
            md["deletionTimestamp"] = now_rfc3339(grace or 0)
            md["deletionGracePeriodSeconds"] = grace or 0
            if kind.res == "apiextensions.k8s.io/customresourcedefinitions":
                set_condition(new["status"], "Terminating", "True", "InstanceDeletionPending",
                              "CustomResourceDefinition marked for deletion; instance deletion pending")
            return self.store.put(kind.res, new), False

    def delete_again(self, kind, old, new, grace):
        """DELETE of an object already being deleted: a shorter grace period is taken."""
        md = new["metadata"]
        cur = md.get("deletionGracePeriodSeconds", 0)
        if grace is not None and grace < cur:
            md["deletionGracePeriodSeconds"] = grace
            md["deletionTimestamp"] = now_rfc3339(grace)
            if grace == 0 and not md.get("finalizers"):
                self.store.put(kind.res, new)
                return self.deleted_response(kind, self.remove(kind, new)), True
            return self.store.put(kind.res, new), False
        return old, False

    def check_delete_preconditions(self, kind, old, pre):
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise conflict(kind.group, kind.plural, old["metadata"]["name"],
                           "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                           % (pre["uid"], old["metadata"]["uid"]))
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise conflict(kind.group, kind.plural, old["metadata"]["name"],
                           "Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object "
                           "meta: %s" % (pre["resourceVersion"], old["metadata"]["resourceVersion"]))

    def propagation(self, kind, opts):
        pol = opts.get("propagationPolicy")
        orphan = opts.get("orphanDependents")
        if pol is not None and orphan is not None:
            raise invalid("DeleteOptions", "meta.k8s.io", "", [Cause("propagationPolicy", "Invalid",
                          "orphanDependents and deletionPropagation cannot be both set", pol)])
        if pol is not None and pol not in ("Foreground", "Background", "Orphan"):
            raise invalid("DeleteOptions", "meta.k8s.io", "", [Cause("propagationPolicy", "NotSupported",
                          ["Foreground", "Background", "Orphan", "nil"], pol)])
        if orphan is not None:
            return "Orphan" if orphan else "Background"
        if pol is None and kind.res == "batch/jobs":
            # batch/v1 Jobs orphan their pods by default, for backward compatibility.
            return "Orphan"
        return pol or "Background"

    def grace_period(self, kind, old, opts):
        """The grace period of a pod's deletion (None for kinds deleted at once)."""
        if kind.res != "/pods":
            return None
        g = opts.get("gracePeriodSeconds")
        if g is None:
            g = old["spec"].get("terminationGracePeriodSeconds", 30)
        if g < 0:
            g = 1
        if not old["spec"].get("nodeName") or (old.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            g = 0
        return g

    def remove(self, kind, obj):
        md = obj["metadata"]
        gone = self.store.remove(kind.res, md.get("namespace", ""), md["name"])
        if kind.res == "/persistentvolumeclaims" and self.data_dir and gone is not None:
            import shutil
            shutil.rmtree(os.path.join(self.data_dir, "volumes", md["namespace"], md["name"]), ignore_errors=True)
        return gone

    def deleted_response(self, kind, gone):
        if kind.res in ("/pods", "/services"):
            return gone
        d = {"name": gone["metadata"]["name"]}
        if kind.group:
            d["group"] = kind.group
        d.update(kind=kind.plural, uid=gone["metadata"]["uid"])
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d}

    def delete_namespace(self, old):
        name = old["metadata"]["name"]
        if name in PROTECTED_NAMESPACES:
            raise forbidden("", "namespaces", name, "this namespace may not be deleted")
        if old["metadata"].get("deletionTimestamp"):
            return old
        new = copy.deepcopy(old)
        new["metadata"]["deletionTimestamp"] = now_rfc3339()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new["status"] = {"phase": "Terminating"}
        return self.store.put("/namespaces", new)

    # ------------------------------------------------------------ output

    def render(self, kind, obj, version=None):
        """The object as served at `version` (custom resources convert by apiVersion only)."""
        if kind.custom and version and version != kind.version:
            obj = dict(obj, apiVersion=kind.api_version(version))
        return obj


# ---------------------------------------------------------------- helpers

TOP_ORDER = ["kind", "apiVersion", "metadata", "spec"]
META_ORDER = ["name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
              "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
              "ownerReferences", "finalizers", "managedFields"]


def _ordered(d, order, last=()):
    out = {k: d[k] for k in order if k in d}
    out.update((k, v) for k, v in d.items() if k not in out and k not in last)
    out.update((k, d[k]) for k in last if k in d)
    return out


def canonical(obj):
    """The object with its fields in the order the real server writes them (Go struct order)."""
    obj = _ordered(obj, TOP_ORDER, ("status",))
    if isinstance(obj.get("metadata"), dict):
        obj["metadata"] = _ordered(obj["metadata"], META_ORDER)
    return obj

def _dedup(causes):
    seen, out = set(), []
    for c in causes:
        key = (c.field, c.kind, str(c.detail), str(c.value))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _short_json(v):
    import json
    s = json.dumps(v, separators=(",", ":"))
    return s


def S_list(vals):
    return "[]string{%s}" % ", ".join('"%s"' % v for v in vals)


def spec_part(kind, obj):
    """What a change of bumps metadata.generation."""
    if kind.custom:
        skip = {"metadata"} | ({"status"} if kind.has_status else set())
        return {k: v for k, v in obj.items() if k not in skip}
    return obj.get("spec")


def set_condition(status, ctype, value, reason, message, probe=False):
    """Set a condition (probe: it has a lastProbeTime too, as Job conditions do)."""
    conds = status.setdefault("conditions", [])
    for c in conds:
        if c["type"] == ctype:
            if c.get("status") != value:
                c["lastTransitionTime"] = now_rfc3339()
            if probe:
                c["lastProbeTime"] = now_rfc3339()
            c.update(status=value, reason=reason, message=message)
            return
    c = {"type": ctype, "status": value}
    if probe:
        c["lastProbeTime"] = now_rfc3339()
    c.update(lastTransitionTime=now_rfc3339(), reason=reason, message=message)
    conds.append(c)


def job_selector(job):
    """The selector and pod labels the real server generates for a Job (manualSelector unset)."""
    md, spec = job["metadata"], job.setdefault("spec", {})
    if spec.get("manualSelector"):
        return
    if spec.get("selector"):
        raise invalid("Job", "batch", md.get("name", ""), [Cause("spec.selector", "Invalid",
                      "`selector` not auto-generated", K.GoRaw("v1.LabelSelector{...}"))])
    uid, name = md["uid"], md.get("name", "")
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    tmpl = spec.setdefault("template", {})
    if isinstance(tmpl, dict):
        labels = tmpl.setdefault("metadata", {}).setdefault("labels", {})
        labels.update({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                       "controller-uid": uid, "job-name": name})


def mount_sa_token(spec):
    """The ServiceAccount admission's projected token volume, mounted in every container."""
    if any(m.get("mountPath") == SA_MOUNT for c in spec.get("containers") or [] for m in c.get("volumeMounts") or []):
        return
    vname = "kube-api-access-" + rand_suffix()
    spec.setdefault("volumes", []).append({"name": vname, "projected": {"sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                     "fieldPath": "metadata.namespace"}}]}}],
        "defaultMode": 420}})
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            c.setdefault("volumeMounts", []).append({"name": vname, "readOnly": True, "mountPath": SA_MOUNT})


def pod_initial_status(pod):
    return {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                                "lastTransitionTime": now_rfc3339()}],
            "qosClass": K.qos_class(pod.get("spec") or {})}


def pvc_initial_status(pvc):
    """Bound at once to a volume named after the claim's uid (a directory the kubelet mounts)."""
    md, spec = pvc["metadata"], pvc["spec"]
    spec["volumeName"] = "pvc-" + md["uid"]
    ann = md.setdefault("annotations", {})
    ann.update({"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes",
                "volume.beta.kubernetes.io/storage-provisioner": "standin.local/hostpath",
                "volume.kubernetes.io/storage-provisioner": "standin.local/hostpath"})
    fins = md.setdefault("finalizers", [])
    if PVC_FINALIZER not in fins:
        fins.append(PVC_FINALIZER)
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    st = {"phase": "Bound", "accessModes": list(spec.get("accessModes") or [])}
    if storage is not None:
        st["capacity"] = {"storage": storage}
    return st


INITIAL_STATUS = {
    "/pods": pod_initial_status,
    "/services": lambda o: {"loadBalancer": {}},
    "/persistentvolumeclaims": pvc_initial_status,
    "/namespaces": lambda o: {"phase": "Active"},
    "batch/jobs": lambda o: {},
    "apiextensions.k8s.io/customresourcedefinitions": lambda o: {
        "conditions": [], "acceptedNames": {"plural": "", "kind": ""}, "storedVersions": []},
}
