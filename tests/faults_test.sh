#!/usr/bin/env bash
# faults_test.sh - a job that can never succeed ends at once with its reason, and says where
# the spec is wrong (issue 14's first fault). Real masters, real role processes.
#   never      data that is missing, a directory, /dev/zero, /dev/null, or a model input that
#              does not match it: `dtrain run` (attached and detached) refuses before
#              creating anything, naming the spec's file and line
#   permanent  the data turns bad while the job runs and a role restarts into it: the role
#              exits 2 (no restart can mend it), the default ExitCode policy fails the job
#              instead of restarting it forever, and the role's reason is in the status
#   ckptfull   the checkpoints' disk fills up: the chief says why its checkpoint failed and
#              tries again with backoff, training on, and is not restarted; once there is
#              room the next checkpoint is written (needs root: a small tmpfs)
# Sections via ONLY="never permanent ckptfull"; KEEP=1 keeps $TMP.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export DTRAIN_HOME="$TMP/home"
cd "$TMP"
cleanup() {
    stop_jobs
    umount -l "$TMP/job-ckpt/checkpoints" 2>/dev/null
    [ -n "${KEEP:-}" ] && echo "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT
cp "$SRC/examples/data/iris.data" iris.data

# spec NAME DATA_PATH INPUT EPOCHS: an iris PS job (chief, worker, ps) reading DATA_PATH.
spec() {
    cat >"$1.yaml" <<YAML
apiVersion: dtrain/v1
kind: TrainJob
metadata: {name: $1}
spec:
  replicas: {chief: 1, worker: 1, ps: 1}
  strategy: parameter_server
  seed: 3
  data:
    train:
      format: csv
      path: $2
    eval_fraction: 0.2
  model:
    input: [$3]
    layers:
      - {type: dense, name: fc1, units: 8, activation: relu}
      - {type: dense, name: logits, units: 3}
  loss: softmax_cross_entropy
  optimizer: {type: adam, learning_rate: 0.01}
  training: {batch_size: 16, epochs: $4, threads: 1, checkpoint: {every_steps: 20, keep: 2}}
YAML
}

if section never; then
    mkdir -p adir
    for c in "missing:$TMP/no-such.csv:4:No such file or directory" \
             "dir:$TMP/adir:4:a directory, not a regular file" \
             "zero:/dev/zero:4:a character device, not a regular file" \
             "null:/dev/null:4:a character device, not a regular file" \
             "shape:$TMP/iris.data:5:spec.model.input: [5] does not match the data's samples [4]"; do
        IFS=: read -r name path input want <<<"$c"
        spec "never-$name" "$path" "$input" 5
        # the data source's line (train:), or model.input's
        line=$(grep -n "$( [ "$name" = shape ] && echo 'input:' || echo 'train:')" "never-$name.yaml" | cut -d: -f1)
        for mode in attached detached; do
            extra=(); [ $mode = detached ] && extra=(--detach)
            expect_exit 1 "never $name $mode" -- "$DTRAIN" run "never-$name.yaml" --job-dir "job-never-$name" "${extra[@]}" &&
                expect_err_has "never: $name ($mode) refused: $want" "never-$name.yaml:$line: "
            grep -qF -- "$want" "$TMP/err" || fail "never: $name ($mode): stderr lacks '$want': $(head -c 300 "$TMP/err")"
            [ $mode = attached ] && { [ -e "job-never-$name" ] && fail "never: $name: a job dir was made" ||
                pass "never: $name: nothing was created"; }
            rm -rf "job-never-$name"
        done
    done
fi

if section permanent; then
    spec perm "$TMP/iris.data" 4 100000
    expect_exit 0 perm-start -- "$DTRAIN" run perm.yaml --job-dir job-perm --detach
    # two epoch turns seen here (a trainer may get no shard of some epoch: no fixed epoch number)
    training() { [ "$(grep -c "done here" job-perm/logs/worker-0.log 2>/dev/null)" -ge 2 ]; }
    WAIT_POLLS=600 wait_for training || fail "permanent: worker-0 is not training: $(tail -3 job-perm/logs/worker-0.log)"
    # The data turns into a directory; worker-0 is killed (a lost node) and comes back to it.
    mv iris.data iris.moved && mkdir iris.data
    p=$($PY -c 'import json,sys
for r in json.load(open(sys.argv[1]))["replicas"]:
    if r["name"] == "worker-0" and r["pid"]: print(r["pid"])' job-perm/status.json)
    c=$([ -n "$p" ] && pgrep -P "$p" | head -1)
    [ -n "${c:-}" ] && kill -KILL "$c" && pass "permanent: worker-0 killed; its data is now a directory" ||
        fail "permanent: worker-0 has no process"
    t0=$(date +%s.%N)
    done_job() { [ -f job-perm/result.json ]; }
    WAIT_POLLS=600 wait_for done_job && pass "permanent: the job ended" || fail "permanent: the job did not end"
    t1=$(date +%s.%N)
    echo "     (ended $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s after the kill)"
    check_result perm '
assert r["status"] == "Failed", r["status"]
w = reps["worker-0"]
assert w["restarts"] == 1, w   # the kill, then a failure no restart can mend
conds = {c["type"]: c for c in json.load(open(sys.argv[1].replace("result.json", "status.json")))["conditions"]}
msg = conds["Failed"]["message"]
assert "worker-0 exited with code 2, restartPolicy ExitCode" in msg, msg
assert "a directory, not a regular file" in msg, msg' &&
        pass "permanent: restarted once, then the job failed with the role's reason in its status" ||
        fail "permanent: $(grep -h '"message"' job-perm/status.json | tail -2)"
    rmdir iris.data && mv iris.moved iris.data
fi
if section ckptfull; then
    spec ckpt "$TMP/iris.data" 4 100000
    mkdir -p job-ckpt/checkpoints
    if mount -t tmpfs -o size=1m tmpfs job-ckpt/checkpoints; then
        expect_exit 0 ckpt-start -- "$DTRAIN" run ckpt.yaml --job-dir job-ckpt --detach
        log=job-ckpt/logs/chief-0.log
        written() { ls job-ckpt/checkpoints/ckpt-*.safetensors >/dev/null 2>&1; }
        WAIT_POLLS=600 wait_for written || fail "ckptfull: no checkpoint: $(tail -3 $log)"
        # The disk is full. Each poll tops the filler up: a checkpoint that was being
        # written while it filled, and the old one its rotation then deletes, leave room
        # that the next checkpoint would take forever after (seen on a fast machine).
        fill() { head -c 2m /dev/zero >>job-ckpt/checkpoints/filler 2>/dev/null; true; }
        failed() { fill; grep -q "checkpoint at step [0-9]* failed: .*No space left on device.*training goes on" $log; }
        WAIT_POLLS=600 wait_for failed && pass "ckptfull: the chief says its checkpoint failed, and why" ||
            fail "ckptfull: $(tail -3 $log)"
        rm -f job-ckpt/checkpoints/filler
        again() { awk '/checkpoint at step [0-9]+ failed/ { f = 1 } f && /checkpoint at step [0-9]+ written/ { w = 1 } END { exit !w }' $log; }
        WAIT_POLLS=1200 wait_for again && pass "ckptfull: with room again, the next try wrote it" ||
            fail "ckptfull: $(tail -3 $log)"
        [ "$(grep -c -- '--- dtrain: chief-0 attempt' $log)" -eq 1 ] &&
            pass "ckptfull: the chief was never restarted" || fail "ckptfull: $(grep -- '--- dtrain' $log)"
        expect_exit 0 ckpt-stop -- "$DTRAIN" stop job-ckpt
        umount job-ckpt/checkpoints || umount -l job-ckpt/checkpoints
    else
        fail "ckptfull: cannot mount a tmpfs (root?)"
    fi
fi
finish
