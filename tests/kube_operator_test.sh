#!/usr/bin/env bash
# kube_operator_test.sh - `dtrain operator` against the stand-in API server and kubelet
# (tests/tools/kube/): with deploy/crds.yaml applied by kubectl, a TFJob created with
# `kubectl create -f` runs to Succeeded with its status written back as the training
# operator writes it (conditions, replicaStatuses, startTime, completionTime) and shows in
# `kubectl get tfjobs`; a dtrain.io/v1 TrainJob (iris, parameter server) succeeds the same
# way; an invalid TFJob is marked Failed (InvalidSpec) with nothing made; deleting a
# resource deletes its job.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kube_lib.sh"
trap 'kill $OP 2>/dev/null; kube_stop; [ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
cd "$TMP"
OP=

kube_start || { fail "the stand-in did not start"; finish; exit 1; }
K=(kubectl --kubeconfig "$KUBE_DIR/kubeconfig")
NS=/api/v1/namespaces/default

"${K[@]}" create -f "$SRC/deploy/crds.yaml" >crd.out 2>&1 && pass "kubectl create -f deploy/crds.yaml" ||
    fail "crds: $(cat crd.out)"
established() { kube_py /apis/apiextensions.k8s.io/v1/customresourcedefinitions/tfjobs.kubeflow.org \
    'any(c["type"] == "Established" and c["status"] == "True" for c in st(o).get("conditions", []))' | grep -q True; }
wait_for established || fail "the TFJob CRD is not established"

"$DTRAIN" operator --kubeflow --kubeconfig "$KUBE_DIR/kubeconfig" --namespace default 2>operator.log &
OP=$!
wait_for grep -q "watching" operator.log && pass "the operator watches" || fail "operator: $(cat operator.log)"

cat >tfjob.yaml <<'YAML'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: dist-sleep
spec:
  tfReplicaSpecs:
    Chief:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              image: busybox
              command: ["sh", "-c", "echo \"TF_CONFIG=$TF_CONFIG\"; sleep 1"]
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              image: busybox
              command: ["sh", "-c", "sleep 30"]
YAML
"${K[@]}" create -f tfjob.yaml >create.out 2>&1 && pass "kubectl create -f tfjob.yaml" || fail "create: $(cat create.out)"
tf_state() { kube_py /apis/kubeflow.org/v1/namespaces/default/tfjobs/dist-sleep \
    '[c["type"] for c in st(o).get("conditions", []) if c["status"] == "True"]'; }
succeeded() { tf_state | grep -q Succeeded; }
WAIT_POLLS=1500 wait_for succeeded && pass "the TFJob Succeeded" ||
    fail "TFJob: $(kube_api GET /apis/kubeflow.org/v1/namespaces/default/tfjobs/dist-sleep | head -c 800; tail -5 operator.log)"
kube_api GET /apis/kubeflow.org/v1/namespaces/default/tfjobs/dist-sleep >tf.json
/usr/bin/python3 - tf.json <<'PY' && pass "its status as the training operator writes it" || fail "status: $(head -c 1200 tf.json)"
import json, sys
st = json.load(open(sys.argv[1]))["status"]
types = [c["type"] for c in st["conditions"]]
assert "Created" in types and "Running" in types and "Succeeded" in types, types
for c in st["conditions"]:
    assert c["reason"] and c["message"] and c["lastTransitionTime"], c
assert st["replicaStatuses"]["Chief"]["succeeded"] == 1, st["replicaStatuses"]
assert st["startTime"] and st["completionTime"], st
PY
"${K[@]}" get tfjobs >get.out 2>&1
grep -q "dist-sleep" get.out && grep -q "Succeeded" get.out && pass "kubectl get tfjobs shows it Succeeded" ||
    fail "get tfjobs: $(cat get.out)"
log=$(kube_api GET "$NS/pods/dist-sleep-chief-0/log")
echo "$log" | grep -q 'TF_CONFIG={"cluster":{"chief":\["dist-sleep-chief-0.default.svc:2222"\],"worker":\["dist-sleep-worker-0.default.svc:2222","dist-sleep-worker-1.default.svc:2222"\]},"task":{"type":"chief","index":0},"environment":"cloud"}' &&
    pass "the chief got the training operator's TF_CONFIG" || fail "chief log: $log"

# ---- invalid: refused, nothing made ----
sed 's/name: dist-sleep/name: no-image/; /image: busybox/d' tfjob.yaml >bad.yaml
"${K[@]}" create -f bad.yaml >/dev/null 2>&1
bad_failed() { kube_py /apis/kubeflow.org/v1/namespaces/default/tfjobs/no-image \
    '[(c["type"], c["reason"], c["message"]) for c in st(o).get("conditions", [])]' | grep -q "InvalidSpec"; }
wait_for bad_failed && pass "an invalid TFJob: Failed, InvalidSpec" || fail "invalid: $(kube_api GET /apis/kubeflow.org/v1/namespaces/default/tfjobs/no-image | head -c 600)"
kube_py /apis/kubeflow.org/v1/namespaces/default/tfjobs/no-image 'o["status"]["conditions"][0]["message"]' | grep -q "image: required on Kubernetes" &&
    pass "invalid: the message names the field" || fail "invalid: message"
[ "$(kube_count "/apis/batch/v1/namespaces/default/jobs?labelSelector=training.kubeflow.org%2Fjob-name%3Dno-image")" = 0 ] &&
    pass "invalid: nothing made" || fail "invalid: a master Job was made"

# ---- dtrain's own kind ----
sed "s|apiVersion: dtrain/v1|apiVersion: dtrain.io/v1|; s|path: data/iris.data|path: $SRC/examples/data/iris.data|; s|epochs: 100|epochs: 20|" \
    "$SRC/examples/iris_ps.yaml" >iris.yaml
"${K[@]}" create -f iris.yaml >/dev/null 2>&1 && pass "kubectl create -f iris.yaml (dtrain.io/v1 TrainJob)" || fail "create iris"
iris_done() { kube_py /apis/dtrain.io/v1/namespaces/default/trainjobs/iris-ps \
    '[c["type"] for c in st(o).get("conditions", []) if c["status"] == "True"]' | grep -q Succeeded; }
WAIT_POLLS=3000 wait_for iris_done && pass "the TrainJob Succeeded" ||
    fail "TrainJob: $(kube_api GET /apis/dtrain.io/v1/namespaces/default/trainjobs/iris-ps | head -c 800)"

# ---- deleting the resource deletes the job ----
"${K[@]}" delete tfjob dist-sleep >/dev/null 2>&1
gone() { [ "$(kube_count "$NS/pods?labelSelector=training.kubeflow.org%2Fjob-name%3Ddist-sleep")" = 0 ] &&
         [ "$(kube_count "/apis/batch/v1/namespaces/default/jobs?labelSelector=training.kubeflow.org%2Fjob-name%3Ddist-sleep")" = 0 ]; }
WAIT_POLLS=600 wait_for gone && pass "kubectl delete tfjob: its pods and master go" || fail "delete: left"

kill -TERM $OP
wait $OP
rc=$?
OP=
[ $rc -eq 0 ] && pass "the operator stops on SIGTERM, exit 0" || fail "operator exit $rc: $(tail -5 operator.log)"
finish
