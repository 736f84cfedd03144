#!/usr/bin/env bash
# iris_ps_accept.sh - examples/iris_ps.yaml (seed 002's iris job: chief, 1 worker, 1 PS,
# an evaluator) run by `dtrain run` on the local backend succeeds and reaches
# eval accuracy >= 0.95 in result.json, by the chief's final evaluation and by the
# evaluator's; the chief exported the model and the PS checkpointed its partition.
source "$(dirname "$0")/lib.sh"
export DTRAIN_HOME="$TMP/home"
J="$TMP/job"
expect_exit 0 run -- "$DTRAIN" run "$SRC/examples/iris_ps.yaml" --job-dir "$J" &&
    pass "dtrain run iris_ps.yaml exits 0"
/usr/bin/python3 - "$J/result.json" <<'PY' && pass "result.json: Succeeded, accuracy >= 0.95" || fail "result.json: $(head -c 2000 "$J/result.json")"
import json, sys
r = json.load(open(sys.argv[1]))
reps = r["replicas"]
chief = reps["chief-0"]["result"]
ev = reps["evaluator-0"]["result"]
print("status", r["status"], "chief eval", chief["eval"], "evaluator", ev["eval"], "step", ev["step"],
      "aggregate samples/s", chief.get("aggregate_samples_per_sec"))
assert r["status"] == "Succeeded"
assert chief["eval"]["accuracy"] >= 0.95
assert ev["eval"]["accuracy"] >= 0.95 and ev["step"] == chief["train"]["steps"]
assert reps["evaluator-0"]["report"]["accuracy"] >= 0.95
for w in ("worker-0",):
    assert reps[w]["result"]["train"]["samples"] > 0, w
PY
ls "$J"/export/*/model.safetensors >/dev/null 2>&1 && pass "model exported" || fail "no export in $J/export"
ls "$J"/checkpoints/ps-0/ckpt-*.safetensors >/dev/null 2>&1 && pass "ps-0 checkpointed its partition" ||
    fail "no partition checkpoint"
finish
