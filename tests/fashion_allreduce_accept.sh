#!/usr/bin/env bash
# fashion_allreduce_accept.sh - examples/fashion_mnist_allreduce.yaml (2 workers in a ring,
# an evaluator) run by `dtrain run` succeeds and reaches the single-process target, eval
# accuracy >= 0.88, by the chief's final evaluation and by the evaluator's; both workers
# trained in one ring; the chief exported the model; rank 0 checkpointed.
source "$(dirname "$0")/lib.sh"
export DTRAIN_HOME="$TMP/home"
J="$TMP/job"
expect_exit 0 run -- "$DTRAIN" run "$SRC/examples/fashion_mnist_allreduce.yaml" --job-dir "$J" &&
    pass "dtrain run fashion_mnist_allreduce.yaml exits 0"
/usr/bin/python3 - "$J/result.json" <<'PY' && pass "result.json: Succeeded, accuracy >= 0.88" ||
import json, sys
r = json.load(open(sys.argv[1]))
reps = r["replicas"]
chief, w1 = reps["worker-0"]["result"], reps["worker-1"]["result"]
ev = reps["evaluator-0"]["result"]
print("status", r["status"], "chief eval", chief["eval"], "evaluator", ev["eval"], "step", ev["step"],
      "aggregate samples/s", chief.get("aggregate_samples_per_sec"), "ring", chief["ring"])
assert r["status"] == "Succeeded"
assert chief["role"] == "chief" and chief["eval"]["accuracy"] >= 0.88
assert ev["eval"]["accuracy"] >= 0.88 and ev["step"] == chief["train"]["steps"]
assert reps["evaluator-0"]["report"]["accuracy"] >= 0.88
assert w1["train"]["samples"] > 0 and chief["train"]["samples"] > 0
assert chief["train"]["samples"] + w1["train"]["samples"] == 60000 * 10
PY
    fail "result.json: $(head -c 2000 "$J/result.json")"
ls "$J"/export/*/model.safetensors >/dev/null 2>&1 && pass "model exported" || fail "no export"
ls "$J"/checkpoints/ckpt-*.safetensors >/dev/null 2>&1 && pass "rank 0 checkpointed" ||
    fail "no checkpoint"
finish
