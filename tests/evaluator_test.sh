#!/usr/bin/env bash
# evaluator_test.sh - the evaluator role (`dtrain role` as evaluator-0) on real checkpoints
# that `dtrain train` writes: it evaluates each new one into its result.json, and an
# evaluator restarted (its replica restarted by the master) goes on with its history: the
# count of evaluations does not start again from zero, and the checkpoint it last evaluated
# is not evaluated again.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
cd "$TMP"
cleanup() { [ -n "${epid:-}" ] && kill -KILL "$epid" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

cat >ev.yaml <<YAML
apiVersion: dtrain/v1
kind: TrainJob
metadata: {name: ev}
spec:
  replicas: {chief: 1, ps: 1, evaluator: 1}
  seed: 7
  data:
    train: {format: synthetic, samples: 2048, shape: [16], classes: 4}
    eval_fraction: 0.25
  model:
    layers:
      - {type: dense, name: fc1, units: 16, activation: relu}
      - {type: dense, name: logits, units: 4}
  loss: softmax_cross_entropy
  optimizer: {type: sgd, learning_rate: 0.1}
  training: {batch_size: 32, epochs: 1, threads: 1, checkpoint: {every_steps: 20, keep: 1}}
YAML
export TF_CONFIG='{"cluster": {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:3"], "evaluator": ["127.0.0.1:2"]}, "task": {"type": "evaluator", "index": 0}}'
RES=job/replicas/evaluator-0/result.json
# steps: the steps of the evaluations in result.json, space-separated
steps() { $PY -c 'import json,sys; print(" ".join(str(e["step"]) for e in json.load(open(sys.argv[1]))["evaluations"]))' "$RES" 2>/dev/null; }
has_step() { [[ " $(steps) " == *" $1 "* ]]; }
evaluator() { # start the evaluator in the background: its pid in $epid
    "$DTRAIN" role "$TMP/ev.yaml" --job-dir "$TMP/job" >>"$TMP/ev.log" 2>&1 &
    epid=$!
}
stop_evaluator() { kill -TERM "$epid"; wait "$epid"; epid=; }

expect_exit 0 "train to step 20" -- "$DTRAIN" train ev.yaml --job-dir job --max-steps 20 --no-progress
evaluator
wait_for has_step 20 && pass "the evaluator evaluated step 20" || fail "no evaluation: $(cat ev.log)"
stop_evaluator
# training goes on to step 40 (ckpt-20 rotated away: keep 1) while no evaluator runs
expect_exit 0 "train to step 40" -- "$DTRAIN" train ev.yaml --job-dir job --max-steps 40 --no-progress
[ ! -e job/checkpoints/ckpt-20.safetensors ] && pass "ckpt-20 rotated away" || fail "ckpt-20 kept: $(ls job/checkpoints)"
evaluator
wait_for has_step 40 && pass "the restarted evaluator evaluated step 40" || fail "no evaluation of 40: $(cat ev.log)"
stop_evaluator
[ "$(steps)" = "20 40" ] && pass "its history goes on: evaluations of steps 20 and 40" ||
    fail "evaluations after a restart: '$(steps)', want '20 40'"
# restarted again with no new checkpoint: it says it goes on from both
evaluator
wait_for grep -q "going on from 2 evaluations" ev.log && pass "the count carries over a restart" ||
    fail "ev.log: $(cat ev.log)"
stop_evaluator
grep -q "stopped after 2 evaluations" ev.log && pass "stopped with the count it had" ||
    fail "ev.log: $(cat ev.log)"
finish
