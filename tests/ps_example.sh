# ps_example.sh - sourced by the *_ps_accept.sh tests (after lib.sh): one parameter-server
# example job run to its end and checked.
#
# ps_example_accept EXAMPLE TARGET WORKERS: run examples/EXAMPLE with `dtrain run`; the job
# must succeed, the chief's final evaluation, the evaluator's figures for the final step and
# its report to the master must reach TARGET, each of the WORKERS workers must have trained,
# the chief must have exported the model and ps-0 checkpointed its partition.
ps_example_accept() {
    local example=$1 target=$2 workers=$3
    export DTRAIN_HOME="$TMP/home"
    local J="$TMP/job"
    expect_exit 0 run -- "$DTRAIN" run "$SRC/examples/$example" --job-dir "$J" &&
        pass "dtrain run $example exits 0"
    /usr/bin/python3 - "$J/result.json" "$target" "$workers" <<'PY' &&
import json, sys
r = json.load(open(sys.argv[1]))
target, workers = float(sys.argv[2]), int(sys.argv[3])
reps = r["replicas"]
chief = reps["chief-0"]["result"]
ev = reps["evaluator-0"]["result"]
print("status", r["status"], "chief eval", chief["eval"], "evaluator", ev["eval"], "step", ev["step"],
      "aggregate samples/s", chief.get("aggregate_samples_per_sec"))
assert r["status"] == "Succeeded"
assert chief["eval"]["accuracy"] >= target
assert ev["eval"]["accuracy"] >= target and ev["step"] == chief["train"]["steps"]
assert reps["evaluator-0"]["report"]["accuracy"] >= target
for w in range(workers):
    assert reps[f"worker-{w}"]["result"]["train"]["samples"] > 0, w
PY
        pass "result.json: Succeeded, accuracy >= $target" ||
        fail "result.json: $(head -c 2000 "$J/result.json")"
    ls "$J"/export/*/model.safetensors >/dev/null 2>&1 && pass "model exported" ||
        fail "no export in $J/export"
    ls "$J"/checkpoints/ps-0/ckpt-*.safetensors >/dev/null 2>&1 &&
        pass "ps-0 checkpointed its partition" || fail "no partition checkpoint"
}
