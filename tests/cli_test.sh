#!/usr/bin/env bash
# cli_test.sh - the dtrain command line: help, version, usage errors, malformed specs and
# data, a real training run, and exact resume from a checkpoint.
source "$(dirname "$0")/lib.sh"

expect_exit 0 help -- "$DTRAIN" help && grep -q "train" "$TMP/out" && pass "help lists commands"
expect_exit 0 train-help -- "$DTRAIN" train --help && grep -q -- "--job-dir" "$TMP/out" && pass "train --help"
expect_exit 0 help-train -- "$DTRAIN" help train && grep -q -- "--epochs" "$TMP/out" && pass "help train"
expect_exit 0 version -- "$DTRAIN" version && grep -q "^dtrain [0-9]" "$TMP/out" && pass "version"
expect_exit 2 no-args -- "$DTRAIN" && pass "no arguments: exit 2"
expect_exit 2 unknown-cmd -- "$DTRAIN" frobnicate && expect_err_has "unknown command named" "frobnicate"
expect_exit 2 unknown-opt -- "$DTRAIN" train --bogus x.yaml && expect_err_has "unknown option named" "--bogus"
expect_exit 2 bad-epochs -- "$DTRAIN" train --epochs zero x.yaml && expect_err_has "bad --epochs named" "--epochs"
expect_exit 2 no-spec -- "$DTRAIN" train && expect_err_has "missing spec" "missing SPEC.yaml"
expect_exit 1 missing-spec-file -- "$DTRAIN" train "$TMP/nope.yaml" && expect_err_has "missing spec file named" "nope.yaml"

# A small spec on synthetic data, with dropout so that resume must restore the RNG too.
cat >"$TMP/syn.yaml" <<YAML
apiVersion: dtrain/v1
kind: TrainJob
metadata:
  name: synthetic-small
spec:
  seed: 7
  data:
    train: {format: synthetic, samples: 600, shape: [8, 8, 1], classes: 4}
    eval_fraction: 0.25
  model:
    layers:
      - {type: conv2d, filters: 4, kernel_size: 3, padding: same, activation: relu}
      - {type: maxpool2d, pool_size: 2}
      - {type: flatten}
      - {type: dense, units: 16, activation: tanh}
      - {type: dropout, rate: 0.3}
      - {type: dense, units: 4}
  optimizer: {type: adam, learning_rate: 0.01, schedule: {type: cosine}}
  training: {batch_size: 32, epochs: 3, threads: 2}
YAML

# Malformed specs: exit 2, one message naming file, line and field.
printf 'apiVersion: dtrain/v1\nkind: TrainJob\nmetadata: {name: x}\nspec:\n  bogus: 1\n' >"$TMP/unknown.yaml"
expect_exit 2 unknown-key -- "$DTRAIN" train "$TMP/unknown.yaml" && expect_err_has "unknown key: file, line, field" "unknown.yaml:5: spec.bogus"
sed 's/units: 16/units: sixteen/' "$TMP/syn.yaml" >"$TMP/wrongtype.yaml"
expect_exit 2 wrong-type -- "$DTRAIN" train "$TMP/wrongtype.yaml" && expect_err_has "wrong type: file, line, field" "wrongtype.yaml:15: spec.model.layers[3].units"
sed '/optimizer:/d' "$TMP/syn.yaml" >"$TMP/missing.yaml"
expect_exit 2 missing-field -- "$DTRAIN" train "$TMP/missing.yaml" && expect_err_has "missing field named" "spec.optimizer"
sed 's/kernel_size: 3, padding: same/kernel_size: 9, padding: valid/' "$TMP/syn.yaml" >"$TMP/shape.yaml"
expect_exit 2 impossible-shape -- "$DTRAIN" train "$TMP/shape.yaml" --job-dir "$TMP/shape" && expect_err_has "impossible shape: file, line, layer" "shape.yaml:12: spec.model.layers[0]"
sed 's/units: 4}/units: 3}/' "$TMP/syn.yaml" >"$TMP/classes.yaml"
expect_exit 2 too-few-outputs -- "$DTRAIN" train "$TMP/classes.yaml" --job-dir "$TMP/classes" && expect_err_has "outputs vs classes" "4 classes"

# Malformed data: exit 1, the message names the file.
printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x1c\x00\x00\x00\x1c\x01\x02' >"$TMP/trunc-images"
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x01\x02' >"$TMP/labels"
cat >"$TMP/badidx.yaml" <<YAML
apiVersion: dtrain/v1
kind: TrainJob
metadata: {name: bad-idx}
spec:
  data:
    train: {format: idx, images: $TMP/trunc-images, labels: $TMP/labels}
  model: {layers: [{type: flatten}, {type: dense, units: 10}]}
  optimizer: {type: sgd}
YAML
expect_exit 1 truncated-idx -- "$DTRAIN" train "$TMP/badidx.yaml" --job-dir "$TMP/badidx" && expect_err_has "truncated IDX named" "trunc-images"
grep -q '"status": "Failed"' "$TMP/badidx/result.json" 2>/dev/null && pass "failed run writes result.json" || fail "no Failed result.json"

# A real run: result.json carries the contract's fields.
expect_exit 0 train-synthetic -- "$DTRAIN" train "$TMP/syn.yaml" --job-dir "$TMP/full" --loss-log "$TMP/full.loss"
R="$TMP/full/result.json"
if grep -q '"status": "Succeeded"' "$R" && [ -n "$(json_num "$R" accuracy)" ] && [ -n "$(json_num "$R" samples_per_sec)" ] \
   && [ -n "$(json_num "$R" wall_seconds)" ] && [ "$(json_num "$R" steps)" = 45 ] && [ "$(json_num "$R" samples)" = 1350 ]; then
    pass "result.json has status, eval, train figures"
else
    fail "result.json: $(cat "$R")"
fi
ls "$TMP/full/checkpoints/"ckpt-*.safetensors >/dev/null 2>&1 && pass "checkpoints written" || fail "no checkpoints"
[ -f "$TMP/full/spec.yaml" ] && pass "spec as run kept" || fail "no spec.yaml in job dir"
# Learning happens (on iris, which is learnable in seconds): the mean loss of the last 10
# steps is far below that of the first 10.
expect_exit 0 train-iris -- "$DTRAIN" train "$SRC/examples/iris.yaml" --job-dir "$TMP/iris" --epochs 20 --loss-log "$TMP/iris.loss"
read -r first last < <(awk 'NR <= 10 { a += $2 } { l[NR] = $2 } END { for (i = NR - 9; i <= NR; i++) b += l[i]; print a / 10, b / 10 }' "$TMP/iris.loss")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a * 0.5) }' && pass "loss falls ($first -> $last)" || fail "loss did not fall: $first -> $last"

# Exact resume: stop at step 23 (mid-epoch 2), rerun in the same job dir; the two halves of
# the loss curve must equal the uninterrupted run's, digit for digit.
expect_exit 0 train-part1 -- "$DTRAIN" train "$TMP/syn.yaml" --job-dir "$TMP/resume" --max-steps 23 --loss-log "$TMP/part1.loss"
grep -q '"status": "Stopped"' "$TMP/resume/result.json" && pass "max-steps stops with status Stopped" || fail "no Stopped status"
expect_exit 0 train-part2 -- "$DTRAIN" train "$TMP/syn.yaml" --job-dir "$TMP/resume" --loss-log "$TMP/part2.loss"
grep -q "resuming from" "$TMP/err" && pass "second run resumes" || fail "second run did not resume: $(head -c 300 "$TMP/err")"
cat "$TMP/part1.loss" "$TMP/part2.loss" >"$TMP/resumed.loss"
if cmp -s "$TMP/full.loss" "$TMP/resumed.loss"; then pass "resumed loss curve equals the uninterrupted one"
else fail "loss curves differ: $(diff "$TMP/full.loss" "$TMP/resumed.loss" | head -5)"; fi
a1=$(json_num "$TMP/full/result.json" accuracy); a2=$(json_num "$TMP/resume/result.json" accuracy)
[ "$a1" = "$a2" ] && pass "same final eval accuracy ($a1)" || fail "accuracy $a1 vs $a2"

# A different seed in a job dir with checkpoints is refused rather than mixed.
expect_exit 1 seed-mismatch -- "$DTRAIN" train "$TMP/syn.yaml" --job-dir "$TMP/resume" --seed 8 && expect_err_has "seed mismatch explained" "seed 7"

finish
