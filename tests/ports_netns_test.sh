#!/usr/bin/env bash
# ports_netns_test.sh - no two processes of a job get the same port, the master included.
# A job of 16 replicas, each binding the port its TF_CONFIG gives it, runs in a network
# namespace of its own whose ephemeral range (net.ipv4.ip_local_port_range, one per
# namespace) has only 16 ports: every port the kernel hands out there (a bind to port 0, a
# client socket's) is one of those 16. Had the replicas' ports been drawn from that range,
# the master's own HTTP port would be one of them and that replica's bind would fail (it
# did, before the master chose every port outside the range and held it). Then the job is
# scaled up while it runs: the new worker's port is outside the range too.
# Needs root (ip netns); the namespace is removed at the end.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
LO=40000 HI=40015
export DTRAIN_HOME="$TMP/home"
cd "$TMP"

# spec NAME COMMAND...: a TFJob of 16 workers running COMMAND, never restarted.
spec() {
    local name=$1; shift
    local cmd=""
    for a in "$@"; do cmd="$cmd, \"$a\""; done
    cat >"$name.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: $name}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 16
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.13.0
              command: [${cmd#, }]
YAML
}

# in_ns CMD...: run CMD in the namespace NS, whose ephemeral range is LO-HI.
NS=dtports-$$
cleanup() {
    for d in "$TMP"/job-*; do [ -f "$d/master.json" ] && in_ns "$DTRAIN" stop "$d" >/dev/null 2>&1; done
    ip netns del "$NS" 2>/dev/null
    [ -n "${KEEP:-}" ] && echo "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT
in_ns() { ip netns exec "$NS" "$@"; }

# ports_ok JOB: the master's port and every replica's are distinct and outside LO-HI.
ports_ok() {
    $PY - "$TMP/job-$1/journal.jsonl" "$LO" "$HI" <<'PYEOF'
import json, sys
lo, hi = int(sys.argv[2]), int(sys.argv[3])
ports = {}
for line in open(sys.argv[1]):
    ev = json.loads(line)
    if ev["ev"] == "start":
        ports["master"] = ev["httpPort"]
        ports.update(ev["ports"])
    elif ev["ev"] == "scale":
        ports.update(ev["ports"])
vals = list(ports.values())
assert len(ports) >= 17, ports
assert len(set(vals)) == len(vals), ports
inside = {k: v for k, v in ports.items() if lo <= v <= hi}
assert not inside, "in the kernel's ephemeral range: %s" % inside
print(len(ports), "ports, none shared, none in the ephemeral range")
PYEOF
}

ip netns add "$NS" && in_ns ip link set lo up &&
    in_ns sh -c "echo $LO $HI >/proc/sys/net/ipv4/ip_local_port_range" &&
    [ "$(in_ns cat /proc/sys/net/ipv4/ip_local_port_range | tr -s '\t ' ' ')" = "$LO $HI" ] ||
    { fail "cannot make a network namespace (root?)"; finish; exit 1; }
pass "a network namespace whose ephemeral range is $LO-$HI"

# Each worker binds its port, listens, and holds it until the file go exists: all 16 at once.
cat >hold.py <<'PYEOF'
import os, runpy, sys, time
runpy.run_path(sys.argv[1])
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
PYEOF
spec hold "$PY" "$TMP/hold.py" "$SRC/tests/data/ports/bind_own_port.py" "$TMP/go"
in_ns "$DTRAIN" run hold.yaml --job-dir job-hold >"$TMP/out-hold" 2>&1 &
RUN=$!
# all 16 have bound their ports, or one could not (then stop waiting)
settled() {
    grep -qh "cannot bind" job-hold/logs/*.log 2>/dev/null ||
        [ "$(grep -l "^bound " job-hold/logs/*.log 2>/dev/null | wc -l)" -ge 16 ]
}
WAIT_POLLS=600 wait_for settled
clash=$(grep -h "cannot bind" job-hold/logs/*.log 2>/dev/null | head -3)
[ -z "$clash" ] && [ "$(grep -l "^bound " job-hold/logs/*.log 2>/dev/null | wc -l)" -eq 16 ] &&
    pass "16 replicas each bound the port TF_CONFIG gives it, all at once" ||
    fail "a replica could not bind its port: ${clash:-$(tail -3 "$TMP/out-hold")}"
# Scaled up while they run: the new worker's port comes from outside the range as well.
expect_exit 0 scale -- in_ns "$DTRAIN" scale job-hold --workers 17 && pass "scaled to 17 workers"
w16() { grep -q "^bound \|cannot bind" job-hold/logs/worker-16.log 2>/dev/null; }
WAIT_POLLS=600 wait_for w16
grep -q "^bound " job-hold/logs/worker-16.log 2>/dev/null && pass "worker-16 bound its port" ||
    fail "worker-16: $(tail -3 job-hold/logs/worker-16.log 2>/dev/null)"
touch "$TMP/go"
wait "$RUN"
rc=$?
[ "$rc" -eq 0 ] && pass "the job succeeded" || fail "job exit $rc: $(tail -3 "$TMP/out-hold")"
out=$(ports_ok hold) && pass "$out" || fail "$out"
finish
