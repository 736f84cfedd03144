#!/usr/bin/env bash
# why_test.sh - one answer to "why": a failed job's result.json and last lines name the
# replica that failed it, its exit and the end of its log; each replica's state carries a
# message a person can act on (an exit by a signal named, the restart policy or the
# backoffLimit that made it final); a succeeded job's result.json leads with the exported
# model's figures.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export DTRAIN_HOME="$TMP/home"
cd "$TMP"

tfjob() { # NAME POLICY BACKOFF COMMAND
    cat >"$1.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: $1
spec:
  runPolicy: {backoffLimit: $3}
  tfReplicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: $2
      template:
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.13.0
              command: ["bash", "-c", '$4']
YAML
}

# ---- a replica that fails for good: Never restarted ----
tfjob failing Never 3 'for i in $(seq 30); do echo line $i; done; echo "ValueError: bad shape (3, 4)" >&2; exit 3'
expect_exit 1 failing -- "$DTRAIN" run failing.yaml --job-dir "$TMP/failing"
grep -q '^failed by worker-0 (exit 3); the last lines of its log:$' "$TMP/out" &&
    grep -q '^  | ValueError: bad shape (3, 4)$' "$TMP/out" &&
    pass "dtrain run's last lines name the replica, its exit and its log's end" || fail "run output: $(cat "$TMP/out")"
$PY - "$TMP/failing" <<'PYEOF' && pass "result.json: failure names worker-0, exit 3, the event and the last 20 log lines; its state says why" || fail "failing result"
import json, sys
d = sys.argv[1]
r = json.load(open(d + "/result.json"))
f = r["failure"]
assert f["replica"] == "worker-0" and f["exitCode"] == 3, f
assert "worker-0 exited with code 3, restartPolicy Never" in f["event"], f
assert f["log"].endswith("/logs/worker-0.log")
assert f["logTail"][-1] == "ValueError: bad shape (3, 4)" and f["logTail"][0] == "line 12" and len(f["logTail"]) == 20, f["logTail"]
s = json.load(open(d + "/status.json"))
w = s["replicas"][0]
assert w["reason"] == "Failed" and w["message"] == "exit 3; restartPolicy Never: ValueError: bad shape (3, 4)", w
PYEOF

# ---- killed by a signal, restarted, killed again: the backoffLimit makes it final ----
tfjob killed ExitCode 1 'echo about to be killed; kill -KILL $$'
expect_exit 1 killed -- "$DTRAIN" run killed.yaml --job-dir "$TMP/killed"
$PY - "$TMP/killed" <<'PYEOF' && pass "SIGKILL twice with backoffLimit 1: 'exit 137 (SIGKILL); backoffLimit 1 reached', reason BackoffLimitExceeded" || fail "killed: $(head -c 800 "$TMP/killed/status.json")"
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/status.json"))
w = s["replicas"][0]
assert w["restarts"] == 1 and w["exitCode"] == 137, w
assert w["message"] == "exit 137 (SIGKILL); backoffLimit 1 reached: about to be killed", w["message"]
r = json.load(open(d + "/result.json"))
assert r["reason"] == "BackoffLimitExceeded" and r["failure"]["replica"] == "worker-0", r
PYEOF
"$DTRAIN" status "$TMP/killed" >"$TMP/st.txt" 2>&1
grep -q '^    Failed: exit 137 (SIGKILL); backoffLimit 1 reached: about to be killed$' "$TMP/st.txt" &&
    pass "dtrain status says why under the replica" || fail "dtrain status: $(cat "$TMP/st.txt")"

# ---- a succeeded job: result.json leads with what a user looks for ----
sed 's|path: data/iris.data|path: '"$SRC"'/examples/data/iris.data|' "$SRC/examples/iris_ps.yaml" >iris.yaml
expect_exit 0 iris -- "$DTRAIN" run iris.yaml --job-dir "$TMP/iris"
grep -qE '^eval accuracy 0\.9[0-9]+, loss [0-9.]+; exported .*/iris/export/[0-9]+; [0-9]+ samples/s; [0-9.]+ s$' "$TMP/out" &&
    pass "dtrain run's last lines: accuracy, loss, export, samples/s, wall time" || fail "run output: $(cat "$TMP/out")"
$PY - "$TMP/iris" <<'PYEOF' && pass "result.json leads with eval, export, samples_per_sec (the chief's), then the rest" || fail "iris result"
import json, os, sys
d = sys.argv[1]
r = json.load(open(d + "/result.json"))
keys = list(r)
assert keys[:8] == ["status", "name", "kind", "reason", "message", "eval", "export", "samples_per_sec"], keys
ch = r["replicas"]["chief-0"]["result"]
assert r["eval"] == ch["eval"] and r["export"] == ch["export"], (r["eval"], ch)
assert os.path.isfile(r["export"] + "/model.onnx")
assert "failure" not in r
PYEOF
finish
