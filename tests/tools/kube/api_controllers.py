"""The controllers the stand-in runs beside its API (the kube-controller-manager's part
that dtrain relies on): namespaces (default service account, CA config map, deletion of
a terminating namespace's content), CRDs (Established, instance clean-up), the garbage
collector (ownerReferences, orphan and foreground deletion), the batch/v1 Job controller,
its TTL-after-finished, and the PVC protection finalizer.

One thread runs every controller in turn, under the store lock, whenever the store
changed and at least twice a second (for the timers: backoff, deadlines, TTL)."""
import copy
import sys
import threading
import time
import traceback

import api_kinds as K
import api_schema as S
from api_registry import CRD_FINALIZER, PVC_FINALIZER, set_condition
from api_store import ApiError, now_rfc3339, parse_rfc3339

JOB_FINALIZER = "batch.kubernetes.io/job-tracking"
CA_DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
                  "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
                  "guaranteed across distributions of Kubernetes clusters.")
POD = K.builtin("pods")
JOB = K.builtin("jobs", "batch")
CRD = K.builtin("customresourcedefinitions", "apiextensions.k8s.io")


def log(msg):
    sys.stderr.write("standin-controllers: %s\n" % msg)
    sys.stderr.flush()


class Controllers(threading.Thread):
    def __init__(self, registry, ca_pem="", job_backoff=10.0, crd_delay=0.5):
        super().__init__(daemon=True, name="controllers")
        self.reg, self.store = registry, registry.store
        self.ca_pem = ca_pem
        self.job_backoff = job_backoff
        self.crd_delay = crd_delay
        self.last_failure = {}       # job uid -> time of its last counted pod failure
        self.first_seen = {}         # CRD uid -> when this controller first saw it
        self.stopping = False
        self.next_wake = 0.0         # earliest time a timer wants a pass

    def wake_at(self, t):
        if not self.next_wake or t < self.next_wake:
            self.next_wake = t

    def run(self):
        while not self.stopping:
            timeout = 0.5
            if self.next_wake:
                timeout = max(0.0, min(timeout, self.next_wake - time.time()))
            self.store.changed.wait(timeout)
            self.store.changed.clear()
            self.next_wake = 0.0
            try:
                with self.store.lock:
                    self.reconcile()
            except Exception:
                log(traceback.format_exc())

    def reconcile(self):
        for step in (self.namespaces, self.crds, self.garbage_collector, self.jobs, self.pvc_protection):
            step()

    # ------------------------------------------------------------ helpers

    def objects(self, res, ns=None):
        return self.store.list(res, ns)[0]

    def try_(self, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except ApiError as e:
            if e.code not in (404, 409):
                log("%s: %s" % (fn.__name__, e.message))
            return None

    def write(self, kind, old, new):
        """A system write (no validation): status, finalizers, ownerReferences."""
        return self.reg.commit(kind, old, new)

    def drop_finalizer(self, kind, obj, fin):
        new = copy.deepcopy(obj)
        new["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or [] if f != fin]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
        return self.write(kind, obj, new)

    def delete(self, kind, obj, policy="Background"):
        md = obj["metadata"]
        return self.try_(self.reg.delete, kind, md.get("namespace", ""), md["name"],
                         {"propagationPolicy": policy, "preconditions": {"uid": md["uid"]}})

    # ------------------------------------------------------------ namespaces

    def namespaces(self):
        for ns in self.objects("/namespaces"):
            name = ns["metadata"]["name"]
            if ns["metadata"].get("deletionTimestamp"):
                self.finish_namespace(ns)
                continue
            if self.store.get("/serviceaccounts", name, "default") is None:
                self.try_(self.reg.create, K.builtin("serviceaccounts"), name,
                          {"metadata": {"name": "default"}})
            if self.store.get("/configmaps", name, "kube-root-ca.crt") is None:
                self.try_(self.reg.create, K.builtin("configmaps"), name,
                          {"metadata": {"name": "kube-root-ca.crt",
                                        "annotations": {"kubernetes.io/description": CA_DESCRIPTION}},
                           "data": {"ca.crt": self.ca_pem}})

    def finish_namespace(self, ns):
        name = ns["metadata"]["name"]
        left = [(k, o) for (res, n, _), o in list(self.store.objects.items())
                if n == name and (k := self.reg.kind_of_res(res)) is not None and k.namespaced]
        for kind, o in left:
            if not o["metadata"].get("deletionTimestamp"):
                self.delete(kind, o)
        if not left:
            self.reg.remove(K.builtin("namespaces"), ns)

    # ------------------------------------------------------------ CRDs

    def crds(self):
        live = {}
        for crd in self.objects(CRD.res):
            if crd["metadata"].get("deletionTimestamp"):
                self.cleanup_crd(crd)
                if established(crd):
                    kind = K.kind_from_crd(crd)
                    live[kind.res] = kind    # still served (but refuses creates) until it is gone
            elif not established(crd):
                self.establish(crd)
            else:
                kind = K.kind_from_crd(crd)
                live[kind.res] = kind
        self.reg.custom = live

    def establish(self, crd):
        # (creationTimestamp has whole seconds only: too coarse for the delay)
        age = time.time() - self.first_seen.setdefault(crd["metadata"]["uid"], time.time())
        if age < self.crd_delay:
            self.wake_at(time.time() + self.crd_delay - age)
            return
        new = copy.deepcopy(crd)
        spec, st = new["spec"], new.setdefault("status", {})
        st["acceptedNames"] = copy.deepcopy(spec["names"])
        st["storedVersions"] = [v["name"] for v in spec["versions"] if v.get("storage")]
        set_condition(st, "NamesAccepted", "True", "NoConflicts", "no conflicts found")
        set_condition(st, "Established", "True", "InitialNamesAccepted", "the initial names have been accepted")
        self.write(CRD, crd, new)

    def cleanup_crd(self, crd):
        kind = K.kind_from_crd(crd)
        items = self.objects(kind.res)
        for o in items:
            if not o["metadata"].get("deletionTimestamp"):
                self.delete(kind, o)
        if not items and CRD_FINALIZER in (crd["metadata"].get("finalizers") or []):
            self.drop_finalizer(CRD, crd, CRD_FINALIZER)

    # ------------------------------------------------------------ garbage collector

    def garbage_collector(self):
        for (res, ns, name), obj in list(self.store.objects.items()):
            kind = self.reg.kind_of_res(res)
            if kind is None or self.store.get(res, ns, name) is not obj:
                continue
            md = obj["metadata"]
            fins = md.get("finalizers") or []
            if md.get("deletionTimestamp") and "orphan" in fins:
                self.orphan_dependents(kind, obj)
            elif md.get("deletionTimestamp") and "foregroundDeletion" in fins:
                self.foreground(kind, obj)
            if md.get("ownerReferences") and not md.get("deletionTimestamp"):
                self.check_owners(kind, obj)

    def dependents(self, owner):
        uid = owner["metadata"]["uid"]
        out = []
        for (res, _, _), o in list(self.store.objects.items()):
            refs = o["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs):
                out.append((self.reg.kind_of_res(res), o))
        return [(k, o) for k, o in out if k is not None]

    def orphan_dependents(self, kind, owner):
        uid = owner["metadata"]["uid"]
        for dk, d in self.dependents(owner):
            new = copy.deepcopy(d)
            new["metadata"]["ownerReferences"] = [r for r in d["metadata"]["ownerReferences"] if r.get("uid") != uid]
            if not new["metadata"]["ownerReferences"]:
                del new["metadata"]["ownerReferences"]
            self.write(dk, d, new)
        self.drop_finalizer(kind, self.store.get(kind.res, owner["metadata"].get("namespace", ""),
                                                 owner["metadata"]["name"]), "orphan")

    def foreground(self, kind, owner):
        uid = owner["metadata"]["uid"]
        blocking = 0
        for dk, d in self.dependents(owner):
            if not d["metadata"].get("deletionTimestamp"):
                self.delete(dk, d, "Foreground" if self.dependents(d) else "Background")
            ref = next(r for r in d["metadata"]["ownerReferences"] if r.get("uid") == uid)
            if ref.get("blockOwnerDeletion") and self.store.get(dk.res, d["metadata"].get("namespace", ""),
                                                                  d["metadata"]["name"]) is not None:
                blocking += 1
        if not blocking:
            self.drop_finalizer(kind, owner, "foregroundDeletion")

    def owner_exists(self, obj, ref):
        key, owner = self.store.by_uid(ref.get("uid", ""))
        if owner is None:
            return False
        okind = self.reg.kind_of_res(key[0])
        same_group = ref.get("apiVersion", "").rsplit("/", 1)[0] if "/" in ref.get("apiVersion", "") else ""
        if okind.kind != ref.get("kind") or okind.group != same_group or owner["metadata"]["name"] != ref.get("name"):
            return False
        # A namespaced owner must be in the dependent's namespace.
        return not okind.namespaced or key[1] == obj["metadata"].get("namespace", "")

    def check_owners(self, kind, obj):
        refs = obj["metadata"]["ownerReferences"]
        dangling = [r for r in refs if not self.owner_exists(obj, r)]
        if not dangling:
            return
        if len(dangling) == len(refs):
            self.delete(kind, obj)
            return
        new = copy.deepcopy(obj)
        new["metadata"]["ownerReferences"] = [r for r in refs if r not in dangling]
        self.write(kind, obj, new)

    # ------------------------------------------------------------ jobs

    def jobs(self):
        for job in self.objects(JOB.res):
            if job["spec"].get("managedBy", "kubernetes.io/job-controller") == "kubernetes.io/job-controller":
                JobSync(self, job, self.claim_pods(job)).run()
        # Pods whose Job is gone (or that lost their controller) give up the tracking finalizer.
        for p in self.objects("/pods"):
            if JOB_FINALIZER in (p["metadata"].get("finalizers") or []):
                ref = controller_ref(p)
                if ref is None or self.store.by_uid(ref.get("uid"))[1] is None:
                    self.drop_finalizer(POD, p, JOB_FINALIZER)

    def claim_pods(self, job):
        """The Job's pods, as the real controller's getPodsForJob (ClaimPods) has them: the
        pods of its namespace that match its selector and whose controller it is. A pod it
        controls that does not match the selector is released (its ownerReference to the Job
        and the tracking finalizer removed); a pod with no controller that matches is adopted
        (ownerReference and tracking finalizer added) unless it or the Job is being deleted.
        Pods controlled by anything else are left alone."""
        jmd = job["metadata"]
        uid, deleting = jmd["uid"], bool(jmd.get("deletionTimestamp"))
        sel = job["spec"].get("selector")
        out = []
        for p in self.objects("/pods", jmd["namespace"]):
            md = p["metadata"]
            # (LabelSelectorAsSelector: a nil selector selects nothing, an empty one everything)
            match = sel is not None and S.selector_matches(sel, md.get("labels"))
            ref = controller_ref(p)
            if ref is not None:
                if ref.get("uid") != uid:
                    continue                    # another controller's
                if match:
                    out.append(p)
                elif not deleting:
                    self.release_pod(job, p)
                continue
            if deleting or not match or md.get("deletionTimestamp"):
                continue
            adopted = self.adopt_pod(job, p)
            if adopted is not None:
                out.append(adopted)
        return out

    def release_pod(self, job, pod):
        """ReleasePod: a strategic merge patch deleting the ownerReference with the Job's uid
        and the tracking finalizer."""
        uid = job["metadata"]["uid"]
        new = copy.deepcopy(pod)
        md = new["metadata"]
        md["ownerReferences"] = [r for r in md.get("ownerReferences") or [] if r.get("uid") != uid]
        if not md["ownerReferences"]:
            del md["ownerReferences"]
        md["finalizers"] = [f for f in md.get("finalizers") or [] if f != JOB_FINALIZER]
        if not md["finalizers"]:
            del md["finalizers"]
        log("job %s/%s releases pod %s: it does not match the Job's selector" %
            (job["metadata"]["namespace"], job["metadata"]["name"], pod["metadata"]["name"]))
        return self.try_(self.write, POD, pod, new)

    def adopt_pod(self, job, pod):
        """AdoptPod: the Job's controller ownerReference (merged by uid) and the tracking
        finalizer added."""
        jmd = job["metadata"]
        new = copy.deepcopy(pod)
        md = new["metadata"]
        md["ownerReferences"] = [r for r in md.get("ownerReferences") or [] if r.get("uid") != jmd["uid"]] + \
            [{"apiVersion": "batch/v1", "kind": "Job", "name": jmd["name"], "uid": jmd["uid"],
              "controller": True, "blockOwnerDeletion": True}]
        if JOB_FINALIZER not in (md.get("finalizers") or []):
            md["finalizers"] = (md.get("finalizers") or []) + [JOB_FINALIZER]
        return self.try_(self.write, POD, pod, new)

    # ------------------------------------------------------------ PVCs

    def pvc_protection(self):
        for pvc in self.objects("/persistentvolumeclaims"):
            md = pvc["metadata"]
            if not md.get("deletionTimestamp") or PVC_FINALIZER not in (md.get("finalizers") or []):
                continue
            in_use = any(v.get("persistentVolumeClaim", {}).get("claimName") == md["name"]
                         for p in self.objects("/pods", md["namespace"])
                         if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                         for v in p["spec"].get("volumes") or [])
            if not in_use:
                self.drop_finalizer(K.builtin("persistentvolumeclaims"), pvc, PVC_FINALIZER)


def established(crd):
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


def controller_ref(obj):
    for r in obj["metadata"].get("ownerReferences") or []:
        if r.get("controller"):
            return r
    return None


def condition(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype and c.get("status") == "True":
            return c
    return None


def phase(pod):
    return (pod.get("status") or {}).get("phase")


class JobSync:
    """One pass of the Job controller over one Job (NonIndexed; parallelism and
    completions honoured; pods tracked with the job-tracking finalizer, as the real one)."""

    def __init__(self, ctl, job, pods):
        self.ctl, self.job, self.pods = ctl, job, pods
        self.spec = job["spec"]
        self.status = copy.deepcopy(job.get("status") or {})
        self.now = time.time()

    def run(self):
        counted = self.account()
        active = [p for p in self.pods if not p["metadata"].get("deletionTimestamp")
                  and phase(p) not in ("Succeeded", "Failed")]
        if not self.finished() and not self.job["metadata"].get("deletionTimestamp"):
            active = self.decide(active)
        elif condition(self.job, "FailureTarget") or condition(self.job, "Failed"):
            self.kill(active)
            active = []
        self.finish_failure(active)
        self.write_status(active)
        for p in counted:
            cur = self.ctl.store.get("/pods", p["metadata"]["namespace"], p["metadata"]["name"])
            if cur is not None:
                self.ctl.drop_finalizer(POD, cur, JOB_FINALIZER)
        self.ttl()

    def finished(self):
        return condition(self.job, "Complete") or condition(self.job, "Failed")

    def account(self):
        """Count the pods that ended since the last pass (a deleted pod that had not
        succeeded counts as failed, as with podReplacementPolicy TerminatingOrFailed)."""
        counted = []
        for p in self.pods:
            if JOB_FINALIZER not in (p["metadata"].get("finalizers") or []):
                continue
            if phase(p) == "Succeeded":
                self.status["succeeded"] = self.status.get("succeeded", 0) + 1
            elif phase(p) == "Failed" or p["metadata"].get("deletionTimestamp"):
                self.status["failed"] = self.status.get("failed", 0) + 1
                self.ctl.last_failure[self.job["metadata"]["uid"]] = self.now
            else:
                continue
            counted.append(p)
        return counted

    def decide(self, active):
        spec, st = self.spec, self.status
        completions = spec.get("completions")
        succeeded = st.get("succeeded", 0)
        if (completions is not None and succeeded >= completions) or \
                (completions is None and succeeded > 0 and not active):
            self.complete()
            return active
        if st.get("failed", 0) > spec.get("backoffLimit", 6) or self.past_backoff_on_failure(active):
            self.fail("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif self.past_deadline():
            self.fail("DeadlineExceeded", "Job was active longer than specified deadline")
        elif spec.get("suspend"):
            self.kill(active)
            set_condition(st, "Suspended", "True", "JobSuspended", "Job suspended", probe=True)
            return []
        else:
            if condition(self.job, "Suspended"):
                set_condition(st, "Suspended", "False", "JobResumed", "Job resumed", probe=True)
            st.setdefault("startTime", now_rfc3339())
            return active + self.create_pods(active)
        self.kill(active)
        return []

    def past_backoff_on_failure(self, active):
        tmpl = self.spec["template"]["spec"]
        if tmpl.get("restartPolicy") != "OnFailure":
            return False
        restarts = sum(c.get("restartCount", 0) for p in active if phase(p) in ("Running", "Pending")
                       for key in ("initContainerStatuses", "containerStatuses")
                       for c in (p.get("status") or {}).get(key) or [])
        limit = self.spec.get("backoffLimit", 6)
        return restarts > 0 if limit == 0 else restarts >= limit

    def past_deadline(self):
        ads = self.spec.get("activeDeadlineSeconds")
        start = parse_rfc3339(self.status.get("startTime"))
        return ads is not None and start is not None and self.now - start >= ads

    def complete(self):
        msg = "Reached expected number of succeeded pods"
        set_condition(self.status, "SuccessCriteriaMet", "True", "CompletionsReached", msg, probe=True)
        set_condition(self.status, "Complete", "True", "CompletionsReached", msg, probe=True)
        self.status["completionTime"] = now_rfc3339()

    def fail(self, reason, message):
        set_condition(self.status, "FailureTarget", "True", reason, message, probe=True)

    def finish_failure(self, active):
        """Failed comes once no pod of a failing Job is left running (Kubernetes 1.31+)."""
        target = next((c for c in self.status.get("conditions") or []
                       if c["type"] == "FailureTarget" and c["status"] == "True"), None)
        if target and not active and not self.terminating() and not condition({"status": self.status}, "Failed"):
            set_condition(self.status, "Failed", "True", target["reason"], target["message"], probe=True)

    def terminating(self):
        """The Job's pods being deleted that have not ended (read afresh: this pass may
        have deleted some)."""
        out = []
        for p in self.pods:
            cur = self.ctl.store.get("/pods", p["metadata"]["namespace"], p["metadata"]["name"])
            if cur is not None and cur["metadata"]["uid"] == p["metadata"]["uid"] \
                    and cur["metadata"].get("deletionTimestamp") and phase(cur) not in ("Succeeded", "Failed"):
                out.append(cur)
        return out

    def kill(self, pods):
        for p in pods:
            self.ctl.delete(POD, p)

    def create_pods(self, active):
        completions = self.spec.get("completions")
        want = self.spec.get("parallelism", 1)
        if completions is not None:
            want = min(want, completions - self.status.get("succeeded", 0))
        n = want - len(active)
        if n < 0:
            self.remove_excess(active, -n)
            return []
        if n == 0 or not self.backoff_elapsed():
            return []
        made = []
        for _ in range(n):
            pod = self.ctl.try_(self.ctl.reg.create, POD, self.job["metadata"]["namespace"], self.pod_from_template())
            if pod is not None:
                made.append(pod)
        return made

    def remove_excess(self, active, n):
        """More active pods than wanted (parallelism lowered, a pod adopted): the first n in
        the order of controller.ActivePods (unscheduled, Pending before Running, not ready
        before ready, more restarts, newer first) are deleted, each after losing its
        tracking finalizer (deleteJobPods): not counted as failed. (The pods deleted stay in
        this pass's active count, as they do until the next sync for the real one.)"""
        def ready(p):
            return any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (p.get("status") or {}).get("conditions") or [])
        def rank(p):
            st = p.get("status") or {}
            restarts = sum(c.get("restartCount", 0) for c in st.get("containerStatuses") or [])
            created = parse_rfc3339(p["metadata"].get("creationTimestamp")) or float("inf")
            return (bool(p["spec"].get("nodeName")), {"Pending": 0, "Unknown": 1, "Running": 2}.get(phase(p), 0),
                    ready(p), -restarts, -created)
        for p in sorted(active, key=rank)[:n]:
            cur = self.ctl.store.get("/pods", p["metadata"]["namespace"], p["metadata"]["name"])
            if cur is None or cur["metadata"]["uid"] != p["metadata"]["uid"]:
                continue
            if JOB_FINALIZER in (cur["metadata"].get("finalizers") or []):
                cur = self.ctl.drop_finalizer(POD, cur, JOB_FINALIZER)
            if cur is not None and not cur["metadata"].get("deletionTimestamp"):
                self.ctl.delete(POD, cur)

    def backoff_elapsed(self):
        failed = self.status.get("failed", 0)
        last = self.ctl.last_failure.get(self.job["metadata"]["uid"])
        if not failed or last is None:
            return True
        delay = min(self.ctl.job_backoff * 2 ** (failed - 1), 360.0)
        if self.now - last >= delay:
            return True
        self.ctl.wake_at(last + delay)
        return False

    def pod_from_template(self):
        md, tmpl = self.job["metadata"], self.spec["template"]
        tmd = tmpl.get("metadata") or {}
        pmd = {"generateName": md["name"] + "-", "namespace": md["namespace"],
               "labels": copy.deepcopy(tmd.get("labels") or {}), "finalizers": [JOB_FINALIZER],
               "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": md["name"],
                                    "uid": md["uid"], "controller": True, "blockOwnerDeletion": True}]}
        if tmd.get("annotations"):
            pmd["annotations"] = copy.deepcopy(tmd["annotations"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pmd, "spec": copy.deepcopy(tmpl.get("spec") or {})}

    def write_status(self, active):
        st = self.status
        for f, n in (("active", len(active)),):
            if n:
                st[f] = n
            else:
                st.pop(f, None)
        st["ready"] = sum(1 for p in active if any(c.get("type") == "Ready" and c.get("status") == "True"
                                                   for c in (p.get("status") or {}).get("conditions") or []))
        st["terminating"] = len(self.terminating())
        st.setdefault("uncountedTerminatedPods", {})
        if st != (self.job.get("status") or {}):
            cur = self.ctl.store.get(JOB.res, self.job["metadata"]["namespace"], self.job["metadata"]["name"])
            if cur is not None and cur["metadata"]["uid"] == self.job["metadata"]["uid"]:
                new = copy.deepcopy(cur)
                new["status"] = st
                self.job = self.ctl.write(JOB, cur, new)

    def ttl(self):
        ttl = self.spec.get("ttlSecondsAfterFinished")
        done = condition(self.job, "Complete") or condition(self.job, "Failed")
        if ttl is None or not done or self.job["metadata"].get("deletionTimestamp"):
            return
        at = parse_rfc3339(done.get("lastTransitionTime")) or self.now
        if self.now >= at + ttl:
            self.ctl.delete(JOB, self.job, "Background")
        else:
            self.ctl.wake_at(at + ttl)
