#!/usr/bin/env bash
# netns_job_test.sh - a job across simulated hosts (`dtrain run --netns`): two network
# namespaces joined by a bridge in this one, each with its own address; the master listens
# on the bridge's address, the replicas of an all-reduce TrainJob run one in each namespace
# and form their ring across the veth links. Checks: the job succeeds, each worker listened
# on its own host's address and ran inside its namespace, every sample of every epoch was
# applied once; and --netns that names no namespace or no address is refused before anything
# starts. Needs root (ip netns); everything made is removed at the end.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export DTRAIN_HOME="$TMP/home"
N0=dtn0-$$ N1=dtn1-$$ BR=dtbr$$
NET=10.79.$(($$ % 250))
cleanup() {
    "$DTRAIN" stop "$TMP/job" >/dev/null 2>&1
    ip netns del "$N0" 2>/dev/null
    ip netns del "$N1" 2>/dev/null
    ip link del "$BR" 2>/dev/null
    [ -n "${KEEP:-}" ] && echo "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT

ip link add "$BR" type bridge && ip addr add "$NET.254/24" dev "$BR" && ip link set "$BR" up ||
    { fail "cannot make a bridge (root?)"; finish; exit 1; }
i=0
for ns in "$N0" "$N1"; do
    ip netns add "$ns" &&
        ip link add "vh$i-$$" type veth peer name "vn$i" netns "$ns" &&
        ip link set "vh$i-$$" master "$BR" && ip link set "vh$i-$$" up &&
        ip -n "$ns" addr add "$NET.$((i + 1))/24" dev "vn$i" &&
        ip -n "$ns" link set "vn$i" up && ip -n "$ns" link set lo up ||
        { fail "cannot make host $ns"; finish; exit 1; }
    i=$((i + 1))
done
pass "two hosts ($N0 at $NET.1, $N1 at $NET.2) on a bridge at $NET.254"

cat >"$TMP/job.yaml" <<YAML
apiVersion: dtrain/v1
kind: TrainJob
metadata: {name: netns-job}
spec:
  replicas: {worker: 2}
  strategy: allreduce
  # the namespaces share this host's memory: without this the ring would take its
  # shared-memory lane and not cross the veth links this test is about
  allreduce: {sharedMemory: false}
  seed: 3
  data:
    train: {format: synthetic, samples: 1024, shape: [16], classes: 4}
    eval_fraction: 0.25
  model:
    layers:
      - {type: dense, name: fc1, units: 32, activation: relu}
      - {type: dense, name: logits, units: 4}
  loss: softmax_cross_entropy
  optimizer: {type: adam, learning_rate: 0.01}
  training: {batch_size: 32, epochs: 20, threads: 1}
YAML

# refused before anything starts: no such namespace, no address
expect_exit 2 no-ns -- "$DTRAIN" run "$TMP/job.yaml" --job-dir "$TMP/bad1" --bind "$NET.254" \
    --netns "nosuch-$$=$NET.9" &&
    expect_err_has "an unknown namespace is refused, named" "nosuch-$$: no such network namespace"
expect_exit 2 no-ip -- "$DTRAIN" run "$TMP/job.yaml" --job-dir "$TMP/bad2" --netns "$N0" &&
    expect_err_has "a host without an address is refused" "expected NAME=IP"
expect_exit 2 bad-ip -- "$DTRAIN" run "$TMP/job.yaml" --job-dir "$TMP/bad3" --netns "$N0=host-a" &&
    expect_err_has "a host name is refused (an address is needed)" "'host-a' is not a numeric address"
[ ! -e "$TMP/bad1/journal.jsonl" ] && [ ! -e "$TMP/bad3/journal.jsonl" ] &&
    pass "nothing was started for the refused runs" || fail "a refused run left a journal"

expect_exit 0 run -- "$DTRAIN" run "$TMP/job.yaml" --job-dir "$TMP/job" --bind "$NET.254" \
    --netns "$N0=$NET.1,$N1=$NET.2" && pass "the job ran across the two hosts" ||
    fail "run: $(tail -5 "$TMP/job/master.log" "$TMP"/job/logs/*.log 2>/dev/null)"
for w in 0 1; do
    grep -q "listening on $NET.$((w + 1)):" "$TMP/job/logs/worker-$w.log" &&
        pass "worker-$w listened on its host's address $NET.$((w + 1))" ||
        fail "worker-$w: $(grep -m1 listening "$TMP/job/logs/worker-$w.log")"
done
! grep -q "through shared memory" "$TMP"/job/logs/worker-*.log &&
    pass "the ring crossed the links (no shared-memory lane)" || fail "a shared-memory lane between hosts"
$PY - "$TMP/job/result.json" <<'EOF' && pass "succeeded; every sample of every epoch applied once (20 x 768)" || fail "result.json"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "Succeeded", r["status"]
for n in ("worker-0", "worker-1"):
    t = r["replicas"][n]["result"]["train"]
    assert t["samples_applied"] == 20 * 768, (n, t["samples_applied"])
EOF
finish
