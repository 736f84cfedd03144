#!/usr/bin/env bash
# kube_fashion_accept.sh - the README's main job (examples/fashion_mnist_ps.yaml: chief, 2
# workers, PS, evaluator, the Fashion-MNIST MLP) on the kubernetes backend, against the
# stand-in API server and kubelet (tests/tools/kube/), through what a cluster does to a job:
#   - every watch stream is dropped (a load balancer's idle cut): the master resumes its watch;
#   - worker-1's pod is deleted (its node lost): the master makes it again;
#   - the master's pod is deleted: its Job makes another, which resumes from the journal on
#     the job's volume and adopts the running pods, which reach it at its new address;
# and the job still succeeds with eval accuracy >= 0.88, every shard trained once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kube_lib.sh"
trap 'kill $RUN 2>/dev/null; kube_stop; [ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
cd "$TMP"
RUN=

kube_start || { fail "the stand-in did not start"; finish; exit 1; }
NS=/api/v1/namespaces/default
JOB=fashion-mnist-ps
VOL="$KUBE_DIR/volumes/default/$JOB-data"   # the job dir: the job's claim

"$DTRAIN" run "$SRC/examples/fashion_mnist_ps.yaml" --backend kubernetes \
    --kubeconfig "$KUBE_DIR/kubeconfig" >run.out 2>run.err &
RUN=$!

reported() { # reported N: at least N shard reports journaled
    local n
    n=$(grep -c '"ev": *"shard.report"' "$VOL/journal.jsonl" 2>/dev/null)
    [ "${n:-0}" -ge "$1" ]
}
watches() { # watch requests the stand-in has had
    kube_api GET /_standin/requests | /usr/bin/python3 -c '
import json, sys
print(sum(n for k, n in json.load(sys.stdin)["requests"].items() if "watch" in k.lower()))'
}
pod_uid() { kube_py "$NS/pods/$1" 'o["metadata"].get("uid", "")' 2>/dev/null; }
running_new() { # running_new POD OLD_UID: POD exists again, Running, with another uid
    [ "$(kube_py "$NS/pods/$1" 'o["metadata"].get("uid","") + " " + o.get("status",{}).get("phase","")' 2>/dev/null)" != "" ] &&
        kube_py "$NS/pods/$1" 'o["metadata"]["uid"] != "'"$2"'" and o["status"].get("phase") == "Running"' 2>/dev/null | grep -q True
}
master_pod() {
    kube_py "$NS/pods?labelSelector=dtrain.io%2Fcomponent%3Dmaster" \
        '" ".join(p["metadata"]["name"] for p in o["items"] if p.get("status",{}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))'
}

WAIT_POLLS=6000 wait_for reported 40 && pass "training runs in pods" ||
    fail "no progress: $(tail -5 run.err; tail -5 "$VOL/master.log" 2>/dev/null)"

w0=$(watches)
kube_api POST /_standin/drop-watches >/dev/null
watch_grew() { [ "$(watches)" -gt "$w0" ]; }
WAIT_POLLS=300 wait_for watch_grew && pass "dropped watches were resumed" ||
    fail "no watch after the drop ($w0: $(kube_api GET /_standin/requests | head -c 600))"

uid=$(pod_uid $JOB-worker-1)
kube_api DELETE "$NS/pods/$JOB-worker-1" '{"gracePeriodSeconds":0}' >/dev/null
WAIT_POLLS=1200 wait_for running_new $JOB-worker-1 "$uid" && pass "worker-1's pod deleted: made again" ||
    fail "worker-1 not made again: $(kube_api GET "$NS/pods/$JOB-worker-1" | head -c 400)"

n=$(grep -c '"ev": *"shard.report"' "$VOL/journal.jsonl")
WAIT_POLLS=3000 wait_for reported $((n + 10))
old=$(master_pod)
kube_api DELETE "$NS/pods/$old" '{"gracePeriodSeconds":0}' >/dev/null
new_master() { m=$(master_pod); [ -n "$m" ] && [ "$m" != "$old" ]; }
WAIT_POLLS=1200 wait_for new_master && pass "the master's pod deleted: its Job made another" ||
    fail "no new master pod (old $old)"
# (a function: a <(...) in wait_for's arguments would be read once, never again)
resumed() { kube_api GET "$NS/pods/$(master_pod)/log" | grep -q "resumed from"; }
WAIT_POLLS=600 wait_for resumed &&
    pass "the new master resumed the job from its journal" || fail "new master: $(kube_api GET "$NS/pods/$(master_pod)/log" | tail -5)"

wait $RUN
rc=$?
RUN=
[ $rc -eq 0 ] && grep -q "job $JOB Succeeded" run.out && pass "the job succeeded" ||
    fail "rc $rc: $(cat run.out; tail -20 run.err)"
/usr/bin/python3 - "$VOL/result.json" <<'PY' && pass "result.json: accuracy >= 0.88, every shard trained" || fail "result: $(head -c 1500 "$VOL/result.json")"
import json, sys
r = json.load(open(sys.argv[1]))
reps = r["replicas"]
chief = reps["chief-0"]["result"]
print("status", r["status"], "chief eval", chief["eval"], "restarts", r["restarts"])
assert r["status"] == "Succeeded"
assert chief["eval"]["accuracy"] >= 0.88
assert reps["worker-1"]["restarts"] >= 1
t = r["data"]["datasets"]["training"]
assert t["state"] == "done" and len(t["epochs"]) == 10, (t["state"], len(t["epochs"]))
for e in t["epochs"]:  # every shard trained: counted once, none missing
    assert e["shards_done"] == e["shards_total"] and e["samples_done"] == e["samples_total"] == 60000, e
print("data", t["state"], "epochs", len(t["epochs"]), "requeued", t["requeued"])
PY
# The replicas found the new master at its new address (the master's Service is headless):
# none went a heartbeat timeout without it (they did, 30 s, while a cached lookup and a
# connection to the old pod's address kept them away; they stalled for a minute).
if [ ! -s "$VOL/journal.jsonl" ]; then
    fail "no journal at $VOL/journal.jsonl"
elif grep -q '"shard.release".*no heartbeat' "$VOL/journal.jsonl"; then
    fail "replicas lost the master after its pod moved: $(grep '"shard.release".*no heartbeat' "$VOL/journal.jsonl")"
else
    pass "the replicas reached the new master before a heartbeat timeout"
fi
grep -q '"replica": *"worker-1".*"code": *137' "$VOL/journal.jsonl" &&
    pass "journal: worker-1 ended with 137 (its pod vanished)" || fail "journal: no 137 for worker-1"
finish
