#!/usr/bin/env bash
# run_test.sh - `dtrain run` and the master with real processes: every restart policy,
# backoff exhaustion, the deadline, both success policies, elasticPolicy (a lost worker, too
# many lost, a master resumed after a loss), cleanPodPolicy, a replica killed
# by SIGKILL, SIGINT to `dtrain run`, a master killed and resumed, and the CLI around it
# (status, logs, list, stop). Replicas are tests/data/run/replica.sh.
source "$(dirname "$0")/lib.sh"
REPLICA="$SRC/tests/data/run/replica.sh"
export DTRAIN_HOME="$TMP/home"
STATE="$TMP/state"
mkdir -p "$STATE"
cd "$TMP"
# Every replica process of these tests has $REPLICA on its command line.
cleanup() { pkill -KILL -f "$REPLICA" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

# replica_spec TYPE COUNT POLICY ARGS...: one entry of tfReplicaSpecs.
replica_spec() {
    local type=$1 count=$2 policy=$3; shift 3
    local args=""
    for a in "$@"; do args="$args, \"$a\""; done
    cat <<EOF
    $type:
      replicas: $count
      restartPolicy: $policy
      template:
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.13.0
              command: ["bash", "$REPLICA"]
              args: [${args#, }]
              env:
                - {name: STATE, value: "$STATE"}
EOF
}

# job NAME RUNPOLICY_YAML REPLICA_SPECS...: write NAME.yaml (a kubeflow.org/v1 TFJob).
job() {
    local name=$1 run_policy=$2; shift 2
    {
        printf 'apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: %s\nspec:\n' "$name"
        [ -n "$run_policy" ] && printf '  runPolicy: %s\n' "$run_policy"
        printf '  tfReplicaSpecs:\n'
        for r in "$@"; do printf '%s\n' "$r"; done
    } >"$name.yaml"
}

# run_job NAME: run it attached; exit code in $rc, result in runs/NAME/result.json.
run_job() {
    rm -f "$STATE"/*
    "$DTRAIN" run "$1.yaml" --stop-grace 2 >"$TMP/out" 2>"$TMP/err"
    rc=$?
    R="runs/$1/result.json"
}

result_has() { # NAME TEXT...: result.json contains every TEXT
    local name=$1; shift
    for t in "$@"; do
        if ! grep -qF -- "$t" "$R"; then
            fail "$name: result.json lacks '$t': $(tr -d '\n' <"$R" | head -c 1500) / $(tail -c 600 "$TMP/err")"
            return 1
        fi
    done
    pass "$name"
}

no_replicas_left() {
    if pgrep -f "$REPLICA" >/dev/null; then
        fail "$1: replica processes left: $(pgrep -af "$REPLICA" | head -3)"
        pkill -KILL -f "$REPLICA"
    else
        pass "$1: no replica process left"
    fi
}

# ran_at_least N: N replicas have started (each appends a line to $STATE/ran).
ran_at_least() { [ "$(cat "$STATE/ran" 2>/dev/null | wc -l)" -ge "$1" ]; }

# ---- success, with every replica type; cleanPodPolicy Running stops the PS ----
# The chief ends the job once all 5 replicas have started (not after a fixed time: on a
# loaded machine the PS or the evaluator may start later than that).
job ok "" "$(replica_spec Chief 1 Never wait-ran 5)" "$(replica_spec Worker 2 Never exit 0)" \
    "$(replica_spec PS 1 Never sleep 60)" "$(replica_spec Evaluator 1 Never sleep 60)"
run_job ok
[ $rc -eq 0 ] && pass "ok: exit 0" || fail "ok: exit $rc: $(tail -5 "$TMP/err")"
result_has "ok: succeeded, PS and evaluator stopped by cleanPodPolicy Running" \
    '"status": "Succeeded"' '"reason": "Succeeded"' '"ps-0": {' \
    '"Chief": {' '"Evaluator": {'
grep -A2 '"ps-0": {' "$R" | grep -q '"state": "Stopped"' && pass "ok: ps-0 Stopped" ||
    fail "ok: ps-0 not Stopped: $(grep -A3 '"ps-0"' "$R")"
[ "$(wc -l <"$STATE/ran")" -eq 5 ] && pass "ok: 5 replicas ran and checked their env" ||
    fail "ok: ran: $(cat "$STATE/ran")"
grep -q '"type": "Succeeded"' runs/ok/status.json && pass "ok: status.json has Succeeded" ||
    fail "ok: status.json: $(head -c 800 runs/ok/status.json)"
grep -q 'chief-0 pid' runs/ok/logs/chief-0.log && pass "ok: chief log written" ||
    fail "ok: chief log: $(cat runs/ok/logs/chief-0.log)"
no_replicas_left ok

# ---- Never: a failure fails the job ----
job never "" "$(replica_spec Worker 2 Never attempts 3)"
run_job never
[ $rc -eq 1 ] && pass "never: exit 1" || fail "never: exit $rc"
result_has "never: failed, naming the replica and code" '"status": "Failed"' \
    'exited with code 3' 'restartPolicy Never'

# ---- OnFailure: restarted until it succeeds ----
job onfail "" "$(replica_spec Worker 1 OnFailure attempts 3 4 0)"
run_job onfail
[ $rc -eq 0 ] && pass "onfailure: exit 0" || fail "onfailure: exit $rc: $(tail -3 "$TMP/err")"
result_has "onfailure: succeeded after 2 restarts" '"status": "Succeeded"' '"restarts": 2'
[ "$(grep -c 'attempt . started' runs/onfail/logs/worker-0.log)" -eq 3 ] &&
    pass "onfailure: log has 3 attempts" || fail "onfailure: log: $(cat runs/onfail/logs/worker-0.log)"

# ---- ExitCode: 1-127 permanent, >= 128 retryable (SIGKILL = 137) ----
job exitcode "" "$(replica_spec Worker 1 ExitCode attempts kill 0)"
run_job exitcode
[ $rc -eq 0 ] && pass "exitcode: killed by SIGKILL is retried" || fail "exitcode: exit $rc: $(tail -3 "$TMP/err")"
result_has "exitcode: one restart" '"restarts": 1'
job exitcode2 "" "$(replica_spec Worker 1 ExitCode attempts 2 0)"
run_job exitcode2
[ $rc -eq 1 ] && pass "exitcode: code 2 is permanent" || fail "exitcode2: exit $rc"
result_has "exitcode: failed without restart" '"status": "Failed"' '"restarts": 0'

# ---- Always: restarted even after exit 0; backoffLimit bounds it ----
job always "{backoffLimit: 2}" "$(replica_spec Worker 1 Always exit 0)"
run_job always
[ $rc -eq 1 ] && pass "always: ends by backoff limit" || fail "always: exit $rc"
result_has "always: BackoffLimitExceeded after 2 restarts" '"reason": "BackoffLimitExceeded"' \
    '"restarts": 2'
[ "$(wc -l <"$STATE/ran")" -eq 3 ] && pass "always: ran 3 times" || fail "always: ran $(wc -l <"$STATE/ran")"

# ---- backoffLimit with OnFailure ----
job backoff "{backoffLimit: 1}" "$(replica_spec Worker 1 OnFailure exit 5)"
run_job backoff
result_has "backoff: OnFailure stops at the limit" '"status": "Failed"' \
    '"reason": "BackoffLimitExceeded"' 'reached the specified backoff limit'

# ---- activeDeadlineSeconds ----
job deadline "{activeDeadlineSeconds: 1}" "$(replica_spec Worker 1 Never sleep 60)"
start=$(date +%s)
run_job deadline
took=$(($(date +%s) - start))
# well before the replica's 60 s: the deadline ended it (a bound against a hang, not a timing)
[ $rc -eq 1 ] && [ $took -lt 30 ] && pass "deadline: failed in ${took}s" || fail "deadline: exit $rc in ${took}s"
result_has "deadline: DeadlineExceeded" '"reason": "DeadlineExceeded"'
no_replicas_left deadline

# ---- success policies without a chief: worker-0 exits at once, worker-1 later ----
# replica_sh TYPE COUNT POLICY SHELL: a replica spec whose command is bash -c SHELL.
replica_sh() {
    replica_spec "$1" "$2" "$3" | sed "s|command: \[\"bash\", \"$REPLICA\"\]|command: [\"bash\", \"-c\", \"$4\"]|; s|args: \[\]|args: []|"
}
w1='if [ \$DTRAIN_REPLICA = worker-0 ]; then exit 0; fi; exec bash '"$REPLICA"' sleep'
job sp-default "" "$(replica_sh Worker 2 Never "$w1 60")"
run_job sp-default
[ $rc -eq 0 ] && pass "successPolicy default: worker-0 decides" || fail "sp-default: exit $rc: $(tail -3 "$TMP/err")"
grep -A2 '"worker-1": {' "$R" | grep -q '"state": "Stopped"' && pass "sp-default: worker-1 stopped" ||
    fail "sp-default: worker-1: $(grep -A3 '"worker-1"' "$R")"
job sp-all "" "$(replica_sh Worker 2 Never "$w1 1")"
sed -i 's/^spec:/spec:\n  successPolicy: AllWorkers/' sp-all.yaml
run_job sp-all
[ $rc -eq 0 ] && pass "successPolicy AllWorkers: exit 0" || fail "sp-all: exit $rc $(tail -3 "$TMP/err")"
grep -A2 '"worker-1": {' "$R" | grep -q '"state": "Succeeded"' && pass "sp-all: waited for worker-1" ||
    fail "sp-all: worker-1: $(grep -A3 '"worker-1"' "$R")"

# ---- elasticPolicy: losing a worker is not fatal while minReplicas are left ----
# elastic NAME SHELL: 3 workers, restartPolicy Never, elasticPolicy {minReplicas: 2}.
elastic() {
    job "$1" "" "$(replica_sh Worker 3 Never "$2")"
    sed -i 's/^spec:/spec:\n  elasticPolicy: {minReplicas: 2}/' "$1.yaml"
}
elastic elastic-ok 'case \$DTRAIN_REPLICA in worker-1) c=1;; *) c=0;; esac; exec bash '"$REPLICA"' exit \$c'
run_job elastic-ok
[ $rc -eq 0 ] && pass "elastic: worker-1 lost, the job succeeds" || fail "elastic-ok: exit $rc: $(tail -5 "$TMP/err")"
result_has "elastic: Succeeded" '"status": "Succeeded"' '"reason": "Succeeded"'
grep -A2 '"worker-1": {' "$R" | grep -q '"state": "Failed"' && pass "elastic: worker-1 Failed" ||
    fail "elastic-ok: worker-1: $(grep -A3 '"worker-1"' "$R")"
grep -qF "worker-1 failed for good (exit 1, restartPolicy Never); 2 of 3 workers remain, elasticPolicy.minReplicas 2" "$TMP/err" &&
    pass "elastic: the master says so" || fail "elastic-ok: output: $(tail -8 "$TMP/err")"
grep '"ev":"exit"' runs/elastic-ok/journal.jsonl | grep '"worker-1"' | grep -q '"state":"Failed"' &&
    pass "elastic: the loss is journaled" || fail "elastic-ok: journal: $(grep exit runs/elastic-ok/journal.jsonl)"
elastic elastic-fail 'case \$DTRAIN_REPLICA in worker-2) exec bash '"$REPLICA"' sleep 60;; esac; exec bash '"$REPLICA"' exit 1'
run_job elastic-fail
[ $rc -eq 1 ] && pass "elastic: two of three lost fails the job" || fail "elastic-fail: exit $rc: $(tail -5 "$TMP/err")"
result_has "elastic: Failed, naming minReplicas" '"status": "Failed"' \
    '1 of 3 workers remain, fewer than elasticPolicy.minReplicas 2'
no_replicas_left elastic-fail
# A worker whose restart would pass backoffLimit is lost too.
job elastic-backoff "{backoffLimit: 0}" "$(replica_sh Worker 2 OnFailure 'case \$DTRAIN_REPLICA in worker-1) c=3;; *) c=0;; esac; exec bash '"$REPLICA"' exit \$c')"
sed -i 's/^spec:/spec:\n  elasticPolicy: {minReplicas: 1}/' elastic-backoff.yaml
run_job elastic-backoff
[ $rc -eq 0 ] && pass "elastic: a worker lost to backoffLimit, the job succeeds" ||
    fail "elastic-backoff: exit $rc: $(tail -5 "$TMP/err")"
grep -qF "worker-1 failed for good (exit 3, backoffLimit 0 reached); 1 of 2 workers remain, elasticPolicy.minReplicas 1" "$TMP/err" &&
    pass "elastic-backoff: the master says why" || fail "elastic-backoff: output: $(tail -8 "$TMP/err")"
# A master resumed after a worker was lost goes on with the others.
elastic elastic-resume 'case \$DTRAIN_REPLICA in worker-1) exec bash '"$REPLICA"' exit 1;; esac; exec bash '"$REPLICA"' wait-file '"$STATE/go"
rm -f "$STATE"/*
expect_exit 0 "elastic-resume: detach" -- "$DTRAIN" run elastic-resume.yaml --detach
lost() { grep '"ev":"exit"' runs/elastic-resume/journal.jsonl | grep -q '"worker-1"'; }
wait_for lost && wait_for ran_at_least 3 || fail "elastic-resume: worker-1 was not lost: $(cat runs/elastic-resume/master.log)"
mpid=$(grep -o '"pid": [0-9]*' runs/elastic-resume/master.json | grep -o '[0-9]*')
kill -KILL "$mpid"
wait_for sh -c "! kill -0 $mpid 2>/dev/null"
"$DTRAIN" run --resume runs/elastic-resume >"$TMP/out" 2>"$TMP/err" &
runpid=$!
wait_for grep -q "adopted" "$TMP/err" || fail "elastic-resume: $(cat "$TMP/err")"
touch "$STATE/go"
wait $runpid
rc=$?
[ $rc -eq 0 ] && pass "elastic-resume: the resumed master does not fail the job for worker-1" ||
    fail "elastic-resume: exit $rc: $(tail -5 "$TMP/err")"
R=runs/elastic-resume/result.json
result_has "elastic-resume: Succeeded" '"status": "Succeeded"'
# A master that died after journaling the last exit but before acting on it: the resumed
# master replays the states and takes the same decision.
for c in "elastic-ok Succeeded" "elastic-fail Failed"; do
    set -- $c
    grep -v '"ev":"finish"' "runs/$1/journal.jsonl" >"$TMP/j" && cp "$TMP/j" "runs/$1/journal.jsonl"
    rm -f "runs/$1/result.json"
    timeout 20 "$DTRAIN" run --resume "runs/$1" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    R="runs/$1/result.json"
    [ -f "$R" ] && result_has "$1: cut journal, resumed: $2 again" "\"status\": \"$2\"" ||
        fail "$1: cut journal, resumed: exit $rc: $(tail -3 "$TMP/err")"
done
grep -qF "elasticPolicy.minReplicas 2" runs/elastic-fail/result.json && pass "elastic-fail: resumed, names minReplicas" ||
    fail "elastic-fail: resumed: $(cat runs/elastic-fail/result.json)"
# A bad minReplicas is a spec error: exit 2, file, line and field.
elastic elastic-bad 'exit 0'
sed -i 's/minReplicas: 2/minReplicas: 4/' elastic-bad.yaml
expect_exit 2 "elastic-bad" -- "$DTRAIN" run elastic-bad.yaml
expect_err_has "elastic-bad: names file, line and field" \
    "elastic-bad.yaml:6: spec.elasticPolicy.minReplicas: 4 is more than the job's 3 Worker replicas"

# ---- cleanPodPolicy None leaves the PS running ----
job cleannone "{cleanPodPolicy: None}" "$(replica_spec Worker 1 Never exit 0)" \
    "$(replica_spec PS 1 Never sleep 60)"
run_job cleannone
# wait_for: the job may end before the PS's process has exec'd its command
[ $rc -eq 0 ] && wait_for pgrep -f "$REPLICA sleep 60" >/dev/null && pass "cleanPodPolicy None: PS still runs" ||
    fail "cleannone: exit $rc, PS running: $(pgrep -af "$REPLICA" | head -2)"
pkill -KILL -f "$REPLICA"

# ---- a replica killed by SIGKILL is restarted (OnFailure); the CLI around a live job ----
job killed "" "$(replica_spec Worker 1 OnFailure wait-file "$STATE/go")"
rm -f "$STATE"/*
expect_exit 0 "killed: detach" -- "$DTRAIN" run killed.yaml --detach && pass "killed: started detached"
grep -q "started in the background" "$TMP/out" && pass "killed: detach says so" || fail "killed: out: $(cat "$TMP/out")"
wait_for test -s "$STATE/ran" || fail "killed: worker never ran"
first=$(awk '{print $2}' "$STATE/ran" | head -1)
kill -KILL "$first"
wait_for grep -q '"attempt": 2' runs/killed/status.json && pass "killed: relaunched after SIGKILL" ||
    fail "killed: status: $(head -c 1500 runs/killed/status.json)"
expect_exit 0 "status" -- "$DTRAIN" status killed && grep -q "worker-0 *Running" "$TMP/out" &&
    pass "status: shows worker-0 Running" || fail "status: $(cat "$TMP/out" "$TMP/err")"
expect_exit 0 "status --json" -- "$DTRAIN" status killed --json &&
    grep -q '"exitCode": 137' "$TMP/out" && grep -q '"phase": "Running"' "$TMP/out" &&
    pass "status --json: exit code of the killed attempt" || fail "status --json: $(cat "$TMP/out")"
expect_exit 0 "list" -- "$DTRAIN" list && grep -q "^killed .*Running" "$TMP/out" &&
    pass "list: shows the job" || fail "list: $(cat "$TMP/out")"
expect_exit 0 "logs" -- "$DTRAIN" logs killed worker-0 && grep -q "attempt 2 started" "$TMP/out" &&
    pass "logs: both attempts" || fail "logs: $(cat "$TMP/out" "$TMP/err")"
# The API wants the token: a raw request without it is refused.
url=$(grep -o '"url": "[^"]*"' runs/killed/master.json | sed 's/.*"http:\/\/\([^"]*\)"/\1/')
host=${url%:*}
port=${url#*:}
exec 3<>"/dev/tcp/$host/$port"
printf 'GET /v1/jobs/killed HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
resp=$(cat <&3)
exec 3<&-
case "$resp" in "HTTP/1.1 401"*) pass "api: 401 without the token" ;; *) fail "api: $resp" ;; esac
touch "$STATE/go"
wait_for grep -q '"phase": "Succeeded"' runs/killed/status.json && pass "killed: then succeeded" ||
    fail "killed: $(head -c 1500 runs/killed/status.json)"
grep -q '"restarts": 1' runs/killed/result.json && pass "killed: one restart" || fail "killed: $(cat runs/killed/result.json)"

# ---- dtrain stop ----
job stopme "" "$(replica_spec Worker 2 Never sleep 60)"
rm -f "$STATE"/*
expect_exit 0 "stop: detach" -- "$DTRAIN" run stopme.yaml --detach
wait_for grep -q "worker-1" "$STATE/ran" 2>/dev/null
expect_exit 0 "stop" -- "$DTRAIN" stop stopme && grep -q "Failed" "$TMP/out" && pass "stop: job stopped" ||
    fail "stop: $(cat "$TMP/out" "$TMP/err")"
grep -q '"status": "Stopped"' runs/stopme/result.json && pass "stop: result Stopped" || fail "stop: $(cat runs/stopme/result.json)"
no_replicas_left stop

# ---- SIGINT to an attached `dtrain run` stops the job cleanly ----
job sigint "" "$(replica_spec Worker 2 Never sleep 60)" "$(replica_spec PS 1 Never sleep 60)"
rm -f "$STATE"/*
"$DTRAIN" run sigint.yaml >"$TMP/out" 2>"$TMP/err" &
runpid=$!
wait_for ran_at_least 3 || fail "sigint: replicas did not start"
kill -INT $runpid
wait $runpid
rc=$?
[ $rc -eq 1 ] && pass "sigint: exit 1" || fail "sigint: exit $rc"
grep -q '"status": "Stopped"' runs/sigint/result.json && pass "sigint: result Stopped" ||
    fail "sigint: $(cat runs/sigint/result.json)"
no_replicas_left sigint

# ---- the master killed by SIGKILL and resumed: healthy replicas keep running ----
job resume "" "$(replica_spec Worker 2 Never wait-file "$STATE/go")"
rm -f "$STATE"/*
expect_exit 0 "resume: detach" -- "$DTRAIN" run resume.yaml --detach
wait_for ran_at_least 2 || fail "resume: replicas did not start"
mpid=$(grep -o '"pid": [0-9]*' runs/resume/master.json | grep -o '[0-9]*')
kill -KILL "$mpid"
wait_for sh -c "! kill -0 $mpid 2>/dev/null"
pgrep -f "$REPLICA wait-file" >/dev/null && pass "resume: replicas outlive the master" ||
    fail "resume: replicas died with the master"
"$DTRAIN" run --resume runs/resume >"$TMP/out" 2>"$TMP/err" &
runpid=$!
wait_for grep -q "adopted" "$TMP/err" || fail "resume: $(cat "$TMP/err")"
touch "$STATE/go"
wait $runpid
rc=$?
[ $rc -eq 0 ] && pass "resume: job succeeded" || fail "resume: exit $rc: $(tail -5 "$TMP/err")"
result_has "resume: nothing restarted" '"status": "Succeeded"' '"restarts": 0'
[ "$(wc -l <"$STATE/ran")" -eq 2 ] && pass "resume: each replica ran once" || fail "resume: ran $(cat "$STATE/ran")"
expect_exit 1 "resume twice: a finished job" -- "$DTRAIN" run resume.yaml --job-dir runs/resume
expect_err_has "rerun refuses a used job dir" "holds a job already"

# ---- what a replica leaves behind in its process group ends with it ----
job leftover "" "$(replica_sh Worker 1 Never "sleep 301 \& exit 0")"
run_job leftover
[ $rc -eq 0 ] && pass "leftover: job succeeded" || fail "leftover: exit $rc: $(tail -3 "$TMP/err")"
wait_for sh -c '! pgrep -f "[s]leep 301" >/dev/null' && pass "leftover: background child stopped" ||
    { fail "leftover: 'sleep 301' survived"; pkill -f "sleep 301"; }

# ---- SIGCHLD ignored by whoever started dtrain does not blind the master ----
job sigign "" "$(replica_spec Worker 1 Never exit 0)"
rm -f "$STATE"/*
timeout 20 bash -c 'trap "" CHLD; exec "$0" run sigign.yaml' "$DTRAIN" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 0 ] && pass "sigchld ignored: the job still completes" || fail "sigign: exit $rc: $(tail -3 "$TMP/err")"

# ---- a torn journal line (a master killed mid-write) survives two resumes ----
job torn "" "$(replica_spec Worker 2 Never wait-file "$STATE/go")"
rm -f "$STATE"/*
expect_exit 0 "torn: detach" -- "$DTRAIN" run torn.yaml --detach
wait_for ran_at_least 2 || fail "torn: replicas did not start"
mpid=$(grep -o '"pid": [0-9]*' runs/torn/master.json | grep -o '[0-9]*')
kill -KILL "$mpid"
wait_for sh -c "! kill -0 $mpid 2>/dev/null"
printf '{"ev":"exit","repl' >>runs/torn/journal.jsonl
expect_exit 0 "torn: resume detached" -- "$DTRAIN" run --resume runs/torn --detach
mpid=$(grep -o '"pid": [0-9]*' runs/torn/master.json | grep -o '[0-9]*')
kill -KILL "$mpid"
wait_for sh -c "! kill -0 $mpid 2>/dev/null"
touch "$STATE/go"
expect_exit 0 "torn: second resume" -- "$DTRAIN" run --resume runs/torn &&
    pass "torn: resumed twice, job succeeded" || fail "torn: $(tail -3 "$TMP/err")"

# ---- a journal line no master wrote: the resume refuses it, naming the line and the field ----
cp -r runs/torn runs/badj
sed -i '0,/"ev":"launch"/s/"attempt":1,/"attempt":"1",/' runs/badj/journal.jsonl
expect_exit 1 "bad journal: refused" -- "$DTRAIN" run --resume runs/badj &&
    expect_err_has "bad journal: the line, the event and the field named" \
        "badj/journal.jsonl:3: event 'launch': field 'attempt': expected an integer"

# ---- a TrainJob: dtrain's built-in role trains the model in its replica ----
cat >train1.yaml <<EOF
apiVersion: dtrain/v1
kind: TrainJob
metadata: {name: train1}
spec:
  seed: 3
  data:
    train: {format: synthetic, samples: 256, shape: [8], classes: 4}
  model:
    layers:
      - {type: dense, units: 16, activation: relu}
      - {type: dense, units: 4}
  optimizer: {type: sgd, learning_rate: 0.1}
  training: {batch_size: 32, epochs: 1, threads: 1}
  replicas: {worker: 1}
EOF
run_job train1
[ $rc -eq 0 ] && pass "trainjob: exit 0" || fail "trainjob: exit $rc: $(tail -5 "$TMP/err"; cat runs/train1/logs/worker-0.log)"
result_has "trainjob: the replica's training result is in result.json" '"status": "Succeeded"' \
    '"result": {' '"accuracy":'
[ -n "$(ls runs/train1/replicas/worker-0/checkpoints/ 2>/dev/null)" ] && pass "trainjob: checkpoints in the replica's dir" ||
    fail "trainjob: no checkpoints: $(ls -R runs/train1 | head -20)"
sed 's/name: train1/name: train2/; s/replicas: {worker: 1}/replicas: {worker: 2}/' train1.yaml >train2.yaml
# Several allreduce replicas each run `dtrain role` and form rings through the master's
# rendezvous (src/master/rendezvous_job_test.c runs such a job with stand-in roles).
expect_exit 0 "trainjob: several allreduce replicas plan" -- "$DTRAIN" plan train2.yaml
grep -q "strategy allreduce" "$TMP/out" && [ "$(grep -c "built-in worker role" "$TMP/out")" -eq 2 ] &&
    pass "trainjob: two allreduce workers, each a built-in role" || fail "trainjob plan: $(head -20 "$TMP/out")"

# ---- what cannot run locally, and bad command lines ----
cat >nocmd.yaml <<EOF
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: nocmd}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.13.0
EOF
expect_exit 2 "no command" -- "$DTRAIN" run nocmd.yaml
expect_err_has "no command: names the field" "command"
expect_exit 2 "run: missing spec" -- "$DTRAIN" run
expect_exit 2 "run: unknown option" -- "$DTRAIN" run x.yaml --bogus
expect_exit 2 "resume: not a job dir" -- "$DTRAIN" run --resume "$TMP"
expect_exit 1 "status: unknown job" -- "$DTRAIN" status no-such-job
expect_err_has "status: says no such job" "no such job"
expect_exit 1 "logs: unknown replica" -- "$DTRAIN" logs ok worker-9
no_replicas_left all

finish
