#!/usr/bin/env bash
# tensorboard_test.sh - `dtrain train` writes TensorBoard event files that TensorBoard can read:
# every record's checksums and every Event decoded by tests/tools/tfevents.py (the protobuf
# library against TensorFlow's field numbers); the scalars a user looks for, steps that never
# go backwards, also across a stop and a resume (SessionLog START); the final eval accuracy the
# same as result.json's; training.logdir; a corrupt record noticed.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
READ="$PY $SRC/tests/tools/tfevents.py"

# check NAME JOB_DIR|LOGDIR PYTHON: read the runs train and eval under $2 into t, e (the
# reader's output per run) and r (JOB_DIR/result.json, when there is one); run the asserts.
check() {
    local name=$1 base=$2 asserts=$3 result=${4:-}
    if ! $READ "$base/train" "$base/eval" >"$TMP/runs.json" 2>"$TMP/read.err"; then
        fail "$name: the reader refused the files: $(cat "$TMP/read.err")"
        return
    fi
    if $PY - "$TMP/runs.json" "$result" "$asserts" <<'PYEOF' 2>"$TMP/check.err"; then pass "$name"; else fail "$name: $(tail -3 "$TMP/check.err")"; fi
import json, struct, sys
runs = json.load(open(sys.argv[1]))
t, e = runs["train"], runs["eval"]
r = json.load(open(sys.argv[2])) if sys.argv[2] else None
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
def steps(tag, run):
    return [p[0] for p in run["scalars"][tag]]
exec(sys.argv[3])
PYEOF
}

# ---- a run: the scalars, their steps, the final accuracy ----
expect_exit 0 iris -- "$DTRAIN" train "$SRC/examples/iris.yaml" --job-dir "$TMP/iris" --no-progress
check "train run: loss, learning_rate, samples_per_sec, step_time_ms every 10 steps; eval run: accuracy and loss per epoch" "$TMP/iris/tensorboard" '
for tag in ("loss", "learning_rate", "samples_per_sec", "step_time_ms"):
    assert steps(tag, t) == list(range(10, 801, 10)), (tag, steps(tag, t)[:5])
assert all(p[1] > 0 for p in t["scalars"]["samples_per_sec"])
assert abs(t["scalars"]["learning_rate"][0][1] - 0.01) < 1e-7
assert steps("accuracy", e) == list(range(8, 801, 8)), steps("accuracy", e)[:5]
assert t["files"] == e["files"] == 1 and t["starts"] == e["starts"] == []
' "$TMP/iris/result.json"
check "the final eval accuracy and loss in the events are result.json's" "$TMP/iris/tensorboard" '
assert e["scalars"]["accuracy"][-1] == [r["train"]["steps"], f32(r["eval"]["accuracy"])], (e["scalars"]["accuracy"][-1], r["eval"])
assert abs(e["scalars"]["loss"][-1][1] - r["eval"]["loss"]) < 1e-6
' "$TMP/iris/result.json"

# ---- a stop and a resume: a second file that says START at the step it continues from ----
expect_exit 0 stop -- "$DTRAIN" train "$SRC/examples/iris.yaml" --job-dir "$TMP/res" --no-progress --max-steps 252
expect_exit 0 resume -- "$DTRAIN" train "$SRC/examples/iris.yaml" --job-dir "$TMP/res" --no-progress
check "stopped at 252 and resumed: START at 252, steps never backwards, the same points as one run" "$TMP/res/tensorboard" '
assert t["files"] == 2 and t["starts"] == [252] and e["starts"] == [252], (t["files"], t["starts"])
assert steps("loss", t) == list(range(10, 801, 10))
assert steps("accuracy", e) == list(range(8, 801, 8))
assert e["scalars"]["accuracy"][-1][1] == f32(r["eval"]["accuracy"])
' "$TMP/res/result.json"

# ---- training.logdir ----
sed 's|^    threads: 1 .*|    threads: 1\n    logdir: '"$TMP"'/logs/iris|; s|path: data/iris.data|path: '"$SRC"'/examples/data/iris.data|' \
    "$SRC/examples/iris.yaml" >"$TMP/iris-logdir.yaml"
expect_exit 0 logdir -- "$DTRAIN" train "$TMP/iris-logdir.yaml" --job-dir "$TMP/ld" --epochs 2 --no-progress
[ ! -e "$TMP/ld/tensorboard" ] && pass "training.logdir: nothing under the job dir" || fail "training.logdir: the job dir has tensorboard/"
check "training.logdir: the runs are under it" "$TMP/logs/iris" '
assert steps("accuracy", e) == [8, 16]
'
sed 's|^    logdir: .*|    logdir: ""|' "$TMP/iris-logdir.yaml" >"$TMP/bad-logdir.yaml"
expect_exit 2 "empty logdir" -- "$DTRAIN" train "$TMP/bad-logdir.yaml" --job-dir "$TMP/bad"
expect_err_has "an empty training.logdir is refused, naming its line" "bad-logdir.yaml:36: spec.training.logdir"

sed 's|^    logdir: .*|    tensorboard: false|' "$TMP/iris-logdir.yaml" >"$TMP/no-tb.yaml"
expect_exit 0 "tensorboard false" -- "$DTRAIN" train "$TMP/no-tb.yaml" --job-dir "$TMP/notb" --epochs 2 --no-progress
[ ! -e "$TMP/notb/tensorboard" ] && pass "training.tensorboard: false writes no event file" || fail "tensorboard false: $(find "$TMP/notb/tensorboard")"

# ---- jobs: the chief (PS) or rank 0 (all-reduce) writes train, the evaluator eval ----
for job in ps allreduce; do
    if [ $job = ps ]; then
        # the chief as the only trainer: the shard service hands shards to whoever asks
        # first, and beside a worker the chief may train too few steps to write 10 points
        sed 's|path: data/iris.data|path: '"$SRC"'/examples/data/iris.data|; /^    worker: 1/d' "$SRC/examples/iris_ps.yaml" >"$TMP/iris-$job.yaml"
    else
        sed 's|path: data/iris.data|path: '"$SRC"'/examples/data/iris.data|; /^    chief: 1/d; /^    ps: 1/d; s/^    worker: 1/    worker: 2/;
             s/^  strategy: parameter_server/  strategy: allreduce/; s/^  parameterServer:/  allreduce:/; s/^  name: iris-ps/  name: iris-ar/' \
            "$SRC/examples/iris_ps.yaml" >"$TMP/iris-$job.yaml"
    fi
    expect_exit 0 "$job job" -- "$DTRAIN" run "$TMP/iris-$job.yaml" --job-dir "$TMP/job-$job"
    check "$job job: train points in step order; eval per checkpoint, its last the evaluator's final figure" "$TMP/job-$job/tensorboard" '
s = steps("loss", t)
assert len(s) >= 10 and s == sorted(set(s)), s[:20]
assert "job-allreduce" in sys.argv[2] or s == list(range(10, 801, 10)), s[:20]  # PS: the chief alone passes every 10th step
assert all(p[1] > 0 for p in t["scalars"]["samples_per_sec"])
ev = json.load(open(sys.argv[2].replace("result.json", "replicas/evaluator-0/result.json")))
assert e["scalars"]["accuracy"][-1] == [ev["step"], f32(ev["eval"]["accuracy"])], (e["scalars"]["accuracy"][-1], ev["step"], ev["eval"])
assert steps("accuracy", e) == sorted(set(steps("accuracy", e)))
' "$TMP/job-$job/result.json"
done

# without an evaluator the chief's final evaluation is the eval run's point
sed '/^    evaluator: 1/d' "$TMP/iris-ps.yaml" >"$TMP/iris-noeval.yaml"
expect_exit 0 "ps job without an evaluator" -- "$DTRAIN" run "$TMP/iris-noeval.yaml" --job-dir "$TMP/job-noeval"
check "no evaluator: the chief's final eval accuracy is the eval run's one point" "$TMP/job-noeval/tensorboard" '
ch = json.load(open(sys.argv[2].replace("result.json", "replicas/chief-0/result.json")))
assert e["scalars"]["accuracy"] == [[ch["train"]["steps"], f32(ch["eval"]["accuracy"])]], (e["scalars"]["accuracy"], ch["train"]["steps"], ch["eval"])
' "$TMP/job-noeval/result.json"

# ---- the reader is not fooled: one byte changed in a payload ----
mkdir -p "$TMP/corrupt/train" "$TMP/corrupt/eval"
f=$(ls "$TMP/iris/tensorboard/train/"*tfevents*)
cp "$f" "$TMP/corrupt/train/"; cp "$TMP/iris/tensorboard/eval/"*tfevents* "$TMP/corrupt/eval/"
g=$(ls "$TMP/corrupt/train/"*tfevents*)
printf '\x55' | dd of="$g" bs=1 seek=200 conv=notrunc 2>/dev/null
if $READ "$TMP/corrupt/train" >/dev/null 2>"$TMP/read.err"; then fail "a corrupt record was read"
else grep -q "checksum is wrong" "$TMP/read.err" && pass "a corrupt record is refused: $(cat "$TMP/read.err")" || fail "corrupt: $(cat "$TMP/read.err")"; fi
finish
