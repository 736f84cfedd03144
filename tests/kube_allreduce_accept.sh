#!/usr/bin/env bash
# kube_allreduce_accept.sh - examples/fashion_mnist_allreduce.yaml (2 workers in a ring and
# an evaluator) on the kubernetes backend, against the stand-in API server and kubelet
# (tests/tools/kube/): the workers find each other through the master's rendezvous at
# <job>-master.<ns>.svc, form their ring across pods (each its own network namespace and
# IP), and the job succeeds with eval accuracy >= 0.88.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kube_lib.sh"
trap 'kube_stop; [ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
cd "$TMP"

kube_start || { fail "the stand-in did not start"; finish; exit 1; }
JOB=fashion-mnist-allreduce
expect_exit 0 "dtrain run --backend kubernetes exits 0" -- \
    "$DTRAIN" run "$SRC/examples/fashion_mnist_allreduce.yaml" --backend kubernetes \
    --kubeconfig "$KUBE_DIR/kubeconfig" && pass "dtrain run --backend kubernetes exits 0"
/usr/bin/python3 - "$KUBE_DIR/volumes/default/$JOB-data/result.json" <<'PY' &&
import json, sys
r = json.load(open(sys.argv[1]))
reps = r["replicas"]
print("status", r["status"], "worker-0 eval", reps["worker-0"]["result"]["eval"],
      "evaluator", reps["evaluator-0"]["result"]["eval"])
assert r["status"] == "Succeeded"
assert reps["worker-0"]["result"]["eval"]["accuracy"] >= 0.88
assert reps["evaluator-0"]["result"]["eval"]["accuracy"] >= 0.88
PY
    pass "result.json: Succeeded, accuracy >= 0.88" ||
    fail "result: $(head -c 1500 "$KUBE_DIR/volumes/default/$JOB-data/result.json")"
grep -q '"ev": *"rdzv.ring"' "$KUBE_DIR/volumes/default/$JOB-data/journal.jsonl" &&
    pass "the ring was formed through the master's rendezvous" || fail "no ring in the journal"
finish
