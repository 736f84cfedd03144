#!/usr/bin/env bash
# kube_job_test.sh - the kubernetes backend against the stand-in API server and kubelet
# (tests/tools/kube/): bad manifests are refused before anything is made; an iris
# parameter-server TrainJob runs as pods and services named, labelled and configured as the
# training operator's, and succeeds; deleting its root (the master's Job) deletes the rest.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kube_lib.sh"
trap 'kube_stop; [ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
cd "$TMP"

kube_start || { fail "the stand-in did not start"; finish; exit 1; }
KC=(--backend kubernetes --kubeconfig "$KUBE_DIR/kubeconfig")
NS=/api/v1/namespaces/default

# nothing_made JOB: no object of the job (by its label) in the namespace.
nothing_made() {
    local sel="?labelSelector=training.kubeflow.org%2Fjob-name%3D$1" kind
    for kind in pods services secrets configmaps persistentvolumeclaims; do
        [ "$(kube_count "$NS/$kind$sel")" = 0 ] || return 1
    done
    [ "$(kube_count "/apis/batch/v1/namespaces/default/jobs$sel")" = 0 ]
}

# ---- bad manifests: a clear error naming file, line and field; nothing is made ----
cat >noimage.yaml <<'YAML'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: noimage
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: tensorflow
              command: ["python", "train.py"]
YAML
expect_exit 2 "no image: refused" -- "$DTRAIN" run noimage.yaml "${KC[@]}"
expect_err_has "no image: names the field" "noimage.yaml:12: spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: required on Kubernetes"
nothing_made noimage && pass "no image: nothing made" || fail "no image: objects were made"

sed 's/name: noimage/name: a-job-name-that-is-far-too-long-for-its-services-to-fit-in-63/; s/command:/image: busybox\n              command:/' \
    noimage.yaml >long.yaml
expect_exit 2 "long name: refused" -- "$DTRAIN" run long.yaml "${KC[@]}"
expect_err_has "long name: says why" "more than the 63 of a DNS-1035 label"
nothing_made a-job-name-that-is-far-too-long-for-its-services-to-fit-in-63 && pass "long name: nothing made" || fail "long name: objects were made"

sed 's/name: noimage/name: Bad_Name/; s/command:/image: busybox\n              command:/' noimage.yaml >badname.yaml
expect_exit 2 "bad name: refused" -- "$DTRAIN" run badname.yaml "${KC[@]}"
expect_err_has "bad name: says why" "badname.yaml:4: metadata.name: 'Bad_Name' is not a valid name"

# ---- iris on the cluster ----
sed "s|path: data/iris.data|path: $SRC/examples/data/iris.data|; s|epochs: 100|epochs: 30|" \
    "$SRC/examples/iris_ps.yaml" >iris.yaml
# The API server answers the first two pod creates 503 (as one that restarts does): the
# launches are tried again, and the job goes on.
echo 2 >"$KUBE_DIR/fail-pod-creates"
"$DTRAIN" run iris.yaml "${KC[@]}" >run.out 2>run.err
rc=$?
[ $rc -eq 0 ] && grep -q "job iris-ps Succeeded" run.out && pass "iris: succeeded on the kubernetes backend" ||
    fail "iris: rc $rc: $(cat run.out; tail -20 run.err)"
# (the master runs in its pod: its words are in that pod's log)
[ "$(cat "$KUBE_DIR/fail-pod-creates")" = 0 ] &&
    grep -rqs "launch failed (network error), trying again" "$KUBE_DIR"/logs/default/iris-ps-master-* &&
    pass "iris: pod creates answered 503 were tried again" ||
    fail "iris: retries: $(cat "$KUBE_DIR/fail-pod-creates"); $(grep -rhs "launch failed" "$KUBE_DIR"/logs/default/iris-ps-master-* | head -3)"
grep -q "pod iris-ps-chief-0: Running" run.err && pass "iris: the run followed the pods" ||
    fail "iris: follow: $(head -20 run.err)"

VOL="$KUBE_DIR/volumes/default/iris-ps-data"   # the job dir: the job's claim
[ -f "$VOL/result.json" ] && /usr/bin/python3 - "$VOL/result.json" <<'PY' && pass "iris: result.json Succeeded, accuracy >= 0.9" || fail "iris: result: $(head -c 600 "$VOL/result.json" 2>&1)"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "Succeeded", r["status"]
assert r["replicas"]["chief-0"]["result"]["eval"]["accuracy"] >= 0.9
PY

# the PS and the evaluator ran until the end: cleanPodPolicy Running deleted their pods
for p in chief-0 worker-0; do
    kube_py $NS/pods/iris-ps-$p 'o["metadata"]["labels"]["training.kubeflow.org/replica-type"] + "-" + o["metadata"]["labels"]["training.kubeflow.org/replica-index"]' \
        >lab 2>&1
    [ "$(cat lab)" = "$p" ] && pass "iris: pod iris-ps-$p labelled as the operator's" || fail "iris: pod $p: $(cat lab)"
done
kube_count "$NS/pods?labelSelector=training.kubeflow.org%2Fjob-name%3Diris-ps,training.kubeflow.org%2Freplica-type%3Dps" >n
[ "$(cat n)" = 0 ] && pass "iris: cleanPodPolicy Running deleted the PS's pod" || fail "iris: PS pods left: $(cat n)"
kube_py $NS/services/iris-ps-ps-0 '(o["spec"]["clusterIP"], o["spec"]["ports"][0]["name"], o["spec"]["ports"][0]["port"])' >svc 2>&1
[ "$(cat svc)" = "('None', 'tfjob-port', 2222)" ] && pass "iris: headless service on tfjob-port 2222" ||
    fail "iris: service: $(cat svc)"
kube_py $NS/pods/iris-ps-worker-0 '[e["value"] for e in o["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG"][0]' >tfc 2>&1
"$DTRAIN" plan iris.yaml --backend kubernetes --namespace default --json |
    /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print([r["env"]["TF_CONFIG"] for r in j["replicas"] if r["name"]=="worker-0"][0])' >tfc.plan
cmp -s tfc tfc.plan && pass "iris: TF_CONFIG byte-identical to dtrain plan's" ||
    fail "iris: TF_CONFIG: $(cat tfc) vs $(cat tfc.plan)"
kube_py $NS/pods/iris-ps-worker-0 '[e for e in o["spec"]["containers"][0]["env"] if e["name"] == "DTRAIN_JOB_TOKEN"][0]' >tok 2>&1
grep -q "secretKeyRef" tok && ! grep -q "'value'" tok && pass "iris: the token comes from the Secret, not inline" ||
    fail "iris: token env: $(cat tok)"
kube_py $NS/pods/iris-ps-worker-0 'o["metadata"]["ownerReferences"][0]["kind"] + "/" + o["metadata"]["ownerReferences"][0]["name"]' >own 2>&1
[ "$(cat own)" = "Job/iris-ps-master" ] && pass "iris: owned by the master's Job" || fail "iris: owner: $(cat own)"
grep -rq "$(cat "$KUBE_DIR/token")" run.out run.err && fail "iris: the API token was printed" || pass "iris: no token printed"

# ---- a running job from the laptop: list, status, logs, scale, stop ----
cat >sleeper.yaml <<'YAML'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: sleeper
spec:
  tfReplicaSpecs:
    Chief:
      replicas: 1
      template:
        spec:
          containers:
            - name: tensorflow
              image: busybox
              command: ["sh", "-c"]
              args: ["echo hello from the chief at $MY_IP; sleep 300"]
              env:
                - {name: GREETING, value: hi}
                - name: MY_IP
                  valueFrom: {fieldRef: {fieldPath: status.podIP}}
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - {name: tensorflow, image: busybox, command: ["sh", "-c", "sleep 300"]}
YAML
"$DTRAIN" run sleeper.yaml "${KC[@]}" >sleeper.out 2>sleeper.err &
SLEEPER=$!
running() { "$DTRAIN" status sleeper "${KC[@]}" --json 2>/dev/null | grep -q '"phase": "Running"'; }
WAIT_POLLS=600 wait_for running && pass "status: the running job, through the API server's proxy" ||
    fail "status: $("$DTRAIN" status sleeper "${KC[@]}" 2>&1 | head -5)"
"$DTRAIN" list "${KC[@]}" >list.out 2>&1
grep -q "^sleeper .*Running .*kubernetes:default" list.out && pass "list: the job in the namespace" ||
    fail "list: $(cat list.out)"
hello() { "$DTRAIN" logs sleeper chief-0 "${KC[@]}" 2>&1 | grep -q "hello from the chief at [0-9]"; }
wait_for hello && pass "logs: the chief's pod log" || fail "logs: $("$DTRAIN" logs sleeper chief-0 "${KC[@]}" 2>&1 | head -3)"
# The watch history compacted and every stream cut: the master's watch gets 410 Gone when it
# resumes, lists again, and takes none of its running replicas for ended.
lists() { kube_api GET /_standin/requests | /usr/bin/python3 -c '
import json, sys
print(json.load(sys.stdin)["requests"].get("list /api/v1/namespaces/{namespace}/pods", 0))'; }
chief_uid=$(kube_py "$NS/pods/sleeper-chief-0" 'o["metadata"]["uid"]')
l0=$(lists)
# (a change the watches do not select moves the history on past what they have seen)
kube_api POST $NS/configmaps '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"noise"}}' >/dev/null
kube_api POST /_standin/compact >/dev/null
kube_api POST /_standin/drop-watches >/dev/null
relisted() { [ "$(lists)" -ge $((l0 + 2)) ]; } # the master's watch and the follower's
WAIT_POLLS=300 wait_for relisted && pass "410 Gone after a compaction: the watches listed again" ||
    fail "no relist: lists $l0 -> $(lists)"
sleep_ok() { "$DTRAIN" status sleeper "${KC[@]}" --json 2>/dev/null | grep -q '"phase": "Running"'; }
[ "$(kube_py "$NS/pods/sleeper-chief-0" 'o["metadata"]["uid"]')" = "$chief_uid" ] && sleep_ok &&
    ! "$DTRAIN" status sleeper "${KC[@]}" --json | grep -q '"restarts": [1-9]' &&
    pass "after the relist: the same pods, nothing restarted" ||
    fail "after the relist: $("$DTRAIN" status sleeper "${KC[@]}" 2>&1 | head -12)"
kube_py $NS/pods/sleeper-chief-0 '(o["spec"]["containers"][0]["command"], o["spec"]["containers"][0]["args"], [e for e in o["spec"]["containers"][0]["env"] if e["name"] in ("GREETING", "MY_IP")])' >tpl 2>&1
grep -qF "(['sh', '-c'], ['echo hello from the chief at \$MY_IP; sleep 300'], [{'name': 'GREETING', 'value': 'hi'}, {'name': 'MY_IP', 'valueFrom': {'fieldRef': {'fieldPath': 'status.podIP'" tpl &&
    pass "the template passed through: command, args, env with valueFrom" || fail "template: $(cat tpl)"
expect_exit 0 "scale: to 2 workers" -- "$DTRAIN" scale sleeper --workers 2 "${KC[@]}"
two() { [ "$(kube_py "$NS/pods/sleeper-worker-1" 'o.get("status", {}).get("phase", "")' 2>/dev/null)" = Running ]; }
WAIT_POLLS=600 wait_for two && pass "scale: worker-1's pod runs" || fail "scale: no worker-1 pod"
kube_py $NS/pods/sleeper-worker-1 '[e["value"] for e in o["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG"][0]' >tfc1 2>&1
grep -q '"worker":\["sleeper-worker-0.default.svc:2222","sleeper-worker-1.default.svc:2222"\]' tfc1 &&
    pass "scale: the new worker's TF_CONFIG lists both workers" || fail "scale: TF_CONFIG $(cat tfc1)"
expect_exit 0 "stop: the job" -- "$DTRAIN" stop sleeper "${KC[@]}"
wait $SLEEPER
rc=$?
[ $rc -eq 1 ] && grep -q "job sleeper Stopped" sleeper.out && pass "stop: the run that followed it ends: Stopped" ||
    fail "stop: rc $rc: $(cat sleeper.out; tail -5 sleeper.err)"
"$DTRAIN" status sleeper "${KC[@]}" >st.out 2>&1
grep -q "Stopped" st.out && pass "status after the end: Stopped (from the master's last words)" || fail "status: $(head -5 st.out)"
expect_exit 1 "status of a job not there" -- "$DTRAIN" status nosuchjob "${KC[@]}"
expect_err_has "status of a job not there: says so" "no such job"

# ---- deleting the root deletes the job ----
kube_api DELETE /apis/batch/v1/namespaces/default/jobs/iris-ps-master '{"propagationPolicy":"Background"}' >/dev/null
WAIT_POLLS=600 wait_for nothing_made iris-ps && pass "delete the master Job: everything goes with it" ||
    fail "delete: left: $(kube_api GET $NS/pods | head -c 300)"

finish
