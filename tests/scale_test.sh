#!/usr/bin/env bash
# scale_test.sh - `dtrain scale` and POST /v1/jobs/:job/scale with a real master and real
# processes: a TFJob (chief + 1 worker running shell loops that write their TF_CONFIG) is
# scaled to 3 (the new workers' TF_CONFIG lists 3 workers, with new ports), then to 1 (workers
# 1-2 stopped, their data shard re-queued, the job keeps running), bad requests are refused
# with clear errors, the master is SIGKILLed and resumed with the count kept, and the job
# succeeds when the chief exits 0. Also: a finished job answers 409, a PyTorchJob 400, and a
# parameter_server TrainJob's plan (built-in roles, ExitCode for every type).
source "$(dirname "$0")/lib.sh"
export DTRAIN_HOME="$TMP/home"
STATE="$TMP/state"
mkdir -p "$STATE"
cd "$TMP"
# Every replica process of these tests runs $W (its path is on their command lines).
W="$TMP/scale-replica.sh"
cleanup() { pkill -KILL -f "$W" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

# The replica: records its TF_CONFIG, then loops. The chief exits 0 once $STATE/chief-go
# exists; a worker runs until stopped (noting SIGTERM in $STATE/NAME.stopped); with
# IGNORE_TERM set it ignores SIGTERM (the master must SIGKILL it).
cat >"$W" <<'EOF'
#!/usr/bin/env bash
if [ -n "${IGNORE_TERM:-}" ] || [ -e "$STATE/ignore-term" ]; then trap '' TERM
else trap 'echo "$$" >>"$STATE/$DTRAIN_REPLICA.stopped"; exit 143' TERM; fi
printf '%s\n' "$TF_CONFIG" >"$STATE/$DTRAIN_REPLICA.tf.tmp"
mv "$STATE/$DTRAIN_REPLICA.tf.tmp" "$STATE/$DTRAIN_REPLICA.tf"
echo "$DTRAIN_REPLICA $$" >>"$STATE/ran"
while :; do
    case "$DTRAIN_REPLICA" in chief-*) [ -e "$STATE/chief-go" ] && exit 0 ;; esac
    sleep 0.05
done
EOF

# replica TYPE COUNT [EXTRA_ENV_YAML]: one entry of tfReplicaSpecs running $W.
replica() {
    cat <<EOF
    $1:
      replicas: $2
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.13.0
              command: ["bash", "$W"]
              env:
                - {name: STATE, value: "$STATE"}
${3:-}
EOF
}

# api NAME METHOD ROUTE [BODY]: a request to job NAME's master with its token; the body of
# the answer in $TMP/api.out, the HTTP status printed.
api() {
    local mj="runs/$1/master.json"
    local url token
    url=$(grep -o '"url": "[^"]*"' "$mj" | sed 's/.*: "//; s/"$//')
    token=$(grep -o '"token": "[^"]*"' "$mj" | sed 's/.*: "//; s/"$//')
    curl -s -o "$TMP/api.out" -w '%{http_code}' -X "$2" -H "Authorization: Bearer $token" \
        -H 'Content-Type: application/json' ${4:+--data "$4"} "$url$3"
}

# expect_api NAME STATUS TEXT METHOD ROUTE BODY: the answer has STATUS and contains TEXT.
expect_api() {
    local name=$1 want=$2 text=$3; shift 3
    local got
    got=$(api sc "$@")
    if [ "$got" = "$want" ] && grep -qF -- "$text" "$TMP/api.out"; then pass "$name"
    else fail "$name: HTTP $got, want $want with '$text': $(cat "$TMP/api.out")"; fi
}

# workers_in FILE: the number of addresses in the worker list of the TF_CONFIG in FILE.
workers_in() {
    /usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["cluster"].get("worker", [])))' "$1"
}
status_has() { "$DTRAIN" status sc --json 2>/dev/null | grep -qF -- "$1"; }
replica_gone() { ! "$DTRAIN" status sc --json 2>/dev/null | grep -qF "\"name\": \"$1\""; }
no_replica_left() { ! pgrep -f "$W" >/dev/null; }
mpid_of() { grep -o '"pid": [0-9]*' "runs/$1/master.json" | grep -o '[0-9]*'; }

# ---- a parameter_server TrainJob: built-in roles, every type restarts by ExitCode ----
cat >tj.yaml <<EOF
apiVersion: dtrain/v1
kind: TrainJob
metadata: {name: tj}
spec:
  data: {train: {format: synthetic, samples: 64, shape: [4], classes: 2}}
  model: {layers: [{type: dense, units: 2}]}
  optimizer: {type: sgd}
  replicas: {chief: 1, ps: 2, worker: 2, evaluator: 1}
  parameterServer: {sync: true, minibatchesPerShard: 4}
EOF
expect_exit 0 "trainjob plan" -- "$DTRAIN" plan tj.yaml
grep -q "strategy parameter_server" "$TMP/out" && pass "trainjob plan: strategy parameter_server" ||
    fail "trainjob plan: $(head -3 "$TMP/out")"
[ "$(grep -c 'restartPolicy: ExitCode' "$TMP/out")" -eq 6 ] &&
    pass "trainjob plan: ps, chief, workers and evaluator restart by ExitCode" ||
    fail "trainjob plan: $(grep restartPolicy "$TMP/out")"
grep -q "command: (dtrain's built-in ps role)" "$TMP/out" && pass "trainjob plan: built-in ps role" ||
    fail "trainjob plan: $(grep command "$TMP/out")"
sed -i 's/  parameterServer: {sync: true, minibatchesPerShard: 4}/  parameterServer: {sync: true, batches: 4}/' tj.yaml
expect_exit 2 "trainjob: unknown parameterServer key" -- "$DTRAIN" plan tj.yaml
expect_err_has "trainjob: unknown parameterServer key names file, line and field" \
    "tj.yaml:9: spec.parameterServer.batches: unknown key 'batches'"

# ---- the job: chief + 1 worker, elasticPolicy.minReplicas 1 ----
{
    printf 'apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: sc\nspec:\n'
    printf '  elasticPolicy: {minReplicas: 1}\n  tfReplicaSpecs:\n'
    replica Chief 1
    replica Worker 1
} >sc.yaml
expect_exit 0 "sc: detach" -- "$DTRAIN" run sc.yaml --detach --stop-grace 2 ||
    fail "sc: $(cat "$TMP/out" "$TMP/err")"
wait_for test -s "$STATE/worker-0.tf" && wait_for test -s "$STATE/chief-0.tf" ||
    fail "sc: replicas did not start: $(cat runs/sc/master.log)"
[ "$(workers_in "$STATE/worker-0.tf")" = 1 ] && pass "sc: worker-0 starts with 1 worker in TF_CONFIG" ||
    fail "sc: worker-0 TF_CONFIG: $(cat "$STATE/worker-0.tf")"
status_has '"workers": 1' && pass "sc: status says 1 worker" || fail "sc: status: $("$DTRAIN" status sc --json)"

# A dataset whose first shard worker-2 will hold when it is scaled away.
code=$(api sc POST /v1/jobs/sc/datasets '{"name": "d", "dataset_size": 64, "batch_size": 4, "num_epochs": 1, "num_minibatches_per_shard": 2}')
[ "$code" = 200 ] && pass "sc: dataset registered" || fail "sc: dataset: $code $(cat "$TMP/api.out")"

# ---- scale up to 3 ----
expect_exit 0 "scale to 3" -- "$DTRAIN" scale sc --workers 3 &&
    grep -q "job sc: 3 workers" "$TMP/out" && grep -q "added: worker-1 worker-2" "$TMP/out" &&
    pass "scale to 3: says what it added" || fail "scale to 3: $(cat "$TMP/out" "$TMP/err")"
wait_for test -s "$STATE/worker-2.tf" && wait_for test -s "$STATE/worker-1.tf" ||
    fail "scale to 3: new workers did not start: $(tail -5 runs/sc/master.log)"
for w in worker-1 worker-2; do
    [ "$(workers_in "$STATE/$w.tf")" = 3 ] && grep -qF "\"task\":{\"type\":\"worker\",\"index\":${w#worker-}}" "$STATE/$w.tf" &&
        pass "scale to 3: $w starts with 3 workers in TF_CONFIG" || fail "scale to 3: $w TF_CONFIG: $(cat "$STATE/$w.tf")"
done
ports=$(/usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["cluster"]; a=c["worker"]+c["chief"]; print(len(a), len(set(a)))' "$STATE/worker-2.tf")
[ "$ports" = "4 4" ] && pass "scale to 3: every address distinct" || fail "scale to 3: addresses: $(cat "$STATE/worker-2.tf")"
status_has '"workers": 3' && pass "scale to 3: status says 3 workers" || fail "scale to 3: status"
expect_exit 0 "status text" -- "$DTRAIN" status sc
grep -q "workers 3" "$TMP/out" && grep -q "worker-2 *Running" "$TMP/out" &&
    pass "status: shows 3 workers and worker-2 Running" || fail "status: $(cat "$TMP/out")"
code=$(api sc POST /v1/jobs/sc/datasets/d/fetch '{"replica": "worker-2"}')
[ "$code" = 200 ] && grep -q '"status": *"shard"' "$TMP/api.out" && pass "sc: worker-2 holds a shard" ||
    fail "sc: fetch: $code $(cat "$TMP/api.out")"

# ---- bad requests ----
expect_api "scale: negative refused" 400 "workers: expected an integer in 0..1024" \
    POST /v1/jobs/sc/scale '{"workers": -1}'
expect_api "scale: below minReplicas refused" 400 "workers: 0 is below elasticPolicy.minReplicas 1" \
    POST /v1/jobs/sc/scale '{"workers": 0}'
expect_api "scale: unknown field refused" 400 "replicas: unknown field" \
    POST /v1/jobs/sc/scale '{"workers": 2, "replicas": 2}'
expect_api "scale: not a number refused" 400 "workers: expected an integer" \
    POST /v1/jobs/sc/scale '{"workers": "two"}'
expect_api "scale: missing count refused" 400 "workers: expected an integer" \
    POST /v1/jobs/sc/scale '{}'
expect_api "scale: another job's name" 404 "no job 'other' here" \
    POST /v1/jobs/other/scale '{"workers": 2}'
expect_exit 2 "scale: CLI negative" -- "$DTRAIN" scale sc --workers -1
expect_err_has "scale: CLI says what --workers takes" "--workers: expected an integer in 0..1024, got '-1'"
expect_exit 2 "scale: CLI without --workers" -- "$DTRAIN" scale sc
expect_err_has "scale: CLI says --workers is missing" "missing --workers N"
expect_exit 1 "scale: CLI below minReplicas" -- "$DTRAIN" scale sc --workers 0
expect_err_has "scale: CLI relays the master's reason" "below elasticPolicy.minReplicas 1"
expect_exit 1 "scale: unknown job" -- "$DTRAIN" scale no-such-job --workers 2
expect_err_has "scale: unknown job says so" "no such job"
status_has '"workers": 3' && pass "bad requests changed nothing" || fail "bad requests: status changed"

# ---- scale down to 1: workers 1 and 2 stopped, the job runs on ----
expect_exit 0 "scale to 1" -- "$DTRAIN" scale sc --workers 1 &&
    grep -q "removed: worker-2 worker-1\|removed: worker-1 worker-2" "$TMP/out" &&
    pass "scale to 1: says what it removed" || fail "scale to 1: $(cat "$TMP/out" "$TMP/err")"
wait_for test -s "$STATE/worker-1.stopped" && wait_for test -s "$STATE/worker-2.stopped" &&
    pass "scale to 1: workers 1 and 2 got SIGTERM" || fail "scale to 1: not stopped: $(ls "$STATE")"
wait_for replica_gone worker-2 && wait_for replica_gone worker-1 &&
    pass "scale to 1: removed workers left the replica table" ||
    fail "scale to 1: $("$DTRAIN" status sc)"
status_has '"phase": "Running"' && status_has '"workers": 1' && status_has '"name": "worker-0"' &&
    pass "scale to 1: the job keeps running with worker-0" || fail "scale to 1: $("$DTRAIN" status sc)"
grep '"ev":"exit"' runs/sc/journal.jsonl | grep '"worker-2"' | grep -q '"state":"Removed"' &&
    pass "scale to 1: the removal is journaled" || fail "scale to 1: journal: $(grep exit runs/sc/journal.jsonl)"
code=$(api sc GET /v1/jobs/sc/datasets)
grep -q '"requeued": *1' "$TMP/api.out" && pass "scale to 1: worker-2's shard was re-queued" ||
    fail "scale to 1: datasets: $code $(cat "$TMP/api.out")"
pgrep -f "$W" >/dev/null && [ "$(grep -c . "$STATE/ran")" -eq 4 ] &&
    pass "scale to 1: nothing restarted" || fail "scale to 1: ran: $(cat "$STATE/ran")"

# ---- up to 2 again, then the master is SIGKILLed and resumed: the count is kept ----
rm -f "$STATE/worker-1.tf"
expect_exit 0 "scale to 2" -- "$DTRAIN" scale sc --workers 2 && grep -q "added: worker-1" "$TMP/out" &&
    pass "scale to 2: worker-1 added again" || fail "scale to 2: $(cat "$TMP/out" "$TMP/err")"
wait_for test -s "$STATE/worker-1.tf" || fail "scale to 2: worker-1 did not start"
[ "$(workers_in "$STATE/worker-1.tf")" = 2 ] && pass "scale to 2: its TF_CONFIG lists 2 workers" ||
    fail "scale to 2: $(cat "$STATE/worker-1.tf")"
mpid=$(mpid_of sc)
kill -KILL "$mpid"
wait_for sh -c "! kill -0 $mpid 2>/dev/null"
# A long stop grace: the stubborn worker-1 below must still be Removing when the test looks
# (and this master is killed before it would SIGKILL it).
expect_exit 0 "resume: detached" -- "$DTRAIN" run --resume runs/sc --detach --stop-grace 60 ||
    fail "resume: $(tail -5 runs/sc/master.log)"
grep -q "worker-1 still runs (pid [0-9]*): adopted" runs/sc/master.log && pass "resume: worker-1 adopted" ||
    fail "resume: $(tail -8 runs/sc/master.log)"
status_has '"workers": 2' && status_has '"name": "worker-1"' && ! status_has '"name": "worker-2"' &&
    pass "resume: the master keeps 2 workers" || fail "resume: $("$DTRAIN" status sc)"
[ "$(grep -c . "$STATE/ran")" -eq 5 ] && pass "resume: nothing relaunched" || fail "resume: ran: $(cat "$STATE/ran")"
# The resumed master scales too.
expect_exit 0 "resumed: scale to 1" -- "$DTRAIN" scale sc --workers 1
wait_for replica_gone worker-1 && pass "resumed: worker-1 removed" || fail "resumed: $("$DTRAIN" status sc)"

# A master killed while a scaled-away worker (one that ignores SIGTERM) is still being
# stopped: the resumed master goes on stopping it, and the count stays.
rm -f "$STATE/worker-1.tf"
touch "$STATE/ignore-term"
expect_exit 0 "scale to 2 (stubborn worker-1)" -- "$DTRAIN" scale sc --workers 2
wait_for test -s "$STATE/worker-1.tf" || fail "stubborn: worker-1 did not start"
rm -f "$STATE/ignore-term"
expect_exit 0 "scale to 1 (stubborn worker-1)" -- "$DTRAIN" scale sc --workers 1
status_has '"state": "Removing"' && pass "stubborn: worker-1 shows Removing" ||
    fail "stubborn: $("$DTRAIN" status sc --json)"
mpid=$(mpid_of sc)
kill -KILL "$mpid"
wait_for sh -c "! kill -0 $mpid 2>/dev/null"
pgrep -f "$W" >/dev/null || fail "stubborn: replicas died with the master"
expect_exit 0 "stubborn: resume" -- "$DTRAIN" run --resume runs/sc --detach --stop-grace 1 ||
    fail "stubborn: resume: $(tail -5 runs/sc/master.log)"
wait_for replica_gone worker-1 && pass "stubborn: the resumed master finished removing worker-1" ||
    fail "stubborn: $("$DTRAIN" status sc)"
status_has '"workers": 1' && status_has '"phase": "Running"' && pass "stubborn: 1 worker, still running" ||
    fail "stubborn: $("$DTRAIN" status sc)"
grep '"ev":"exit"' runs/sc/journal.jsonl | grep '"worker-1"' | tail -1 | grep -q '"code":137,"state":"Removed"' &&
    pass "stubborn: worker-1 was killed and journaled Removed" ||
    fail "stubborn: journal: $(grep '"worker-1"' runs/sc/journal.jsonl | tail -3)"

# ---- the chief succeeds: the job succeeds, worker-0 is stopped (cleanPodPolicy Running) ----
touch "$STATE/chief-go"
wait_for grep -q '"status": "Succeeded"' runs/sc/result.json 2>/dev/null &&
    pass "sc: succeeded when the chief exited 0" || fail "sc: $(tail -5 runs/sc/master.log)"
grep -q '"workers": 1' runs/sc/result.json && pass "sc: result.json has the worker count" ||
    fail "sc: result: $(cat runs/sc/result.json)"
grep -A2 '"worker-0": {' runs/sc/result.json | grep -q '"state": "Stopped"' &&
    pass "sc: worker-0 stopped by cleanPodPolicy" || fail "sc: $(cat runs/sc/result.json)"
wait_for no_replica_left && pass "sc: no replica left" || fail "sc: left: $(pgrep -af "$W")"
expect_exit 1 "scale: a job that is not running" -- "$DTRAIN" scale sc --workers 2
expect_err_has "scale: says the job is not running" "job sc is not running (phase Succeeded)"

# ---- a finished job whose master still cleans up answers 409 ----
rm -f "$STATE"/*
{
    printf 'apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: fin\nspec:\n  tfReplicaSpecs:\n'
    replica Chief 1
    replica Worker 1 '                - {name: IGNORE_TERM, value: "1"}'
} >fin.yaml
expect_exit 0 "fin: detach" -- "$DTRAIN" run fin.yaml --detach --stop-grace 10
wait_for test -s "$STATE/worker-0.tf" || fail "fin: worker-0 did not start"
touch "$STATE/chief-go"
wait_for grep -q '"phase": "Succeeded"' runs/fin/status.json || fail "fin: did not finish: $(tail -5 runs/fin/master.log)"
expect_exit 1 "scale: a finished job" -- "$DTRAIN" scale fin --workers 2
expect_err_has "scale: a finished job is refused" "job 'fin' has finished (Succeeded): it cannot be scaled"
code=$(api fin POST /v1/jobs/fin/scale '{"workers": 2}')
[ "$code" = 409 ] && pass "scale: a finished job answers 409" || fail "scale fin: $code $(cat "$TMP/api.out")"
expect_exit 0 "fin: stop" -- "$DTRAIN" stop fin

# ---- a PyTorchJob cannot be scaled ----
rm -f "$STATE"/*
{
    printf 'apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pt\nspec:\n  pytorchReplicaSpecs:\n'
    replica Master 1 | sed 's/name: tensorflow/name: pytorch/'
    replica Worker 1 | sed 's/name: tensorflow/name: pytorch/'
} >pt.yaml
expect_exit 0 "pt: detach" -- "$DTRAIN" run pt.yaml --detach --stop-grace 2
expect_exit 1 "scale: a PyTorchJob" -- "$DTRAIN" scale pt --workers 2
expect_err_has "scale: a PyTorchJob is refused, saying why" "a PyTorchJob cannot be scaled: its replicas were told WORLD_SIZE and RANK"
code=$(api pt POST /v1/jobs/pt/scale '{"workers": 2}')
[ "$code" = 400 ] && pass "scale: a PyTorchJob answers 400" || fail "scale pt: $code $(cat "$TMP/api.out")"
expect_exit 0 "pt: stop" -- "$DTRAIN" stop pt

expect_exit 0 "scale --help" -- "$DTRAIN" scale --help
grep -q "Usage: dtrain scale JOB|DIR --workers N" "$TMP/out" && pass "scale --help" || fail "scale --help: $(cat "$TMP/out")"
wait_for no_replica_left && pass "no replica left" || fail "left: $(pgrep -af "$W")"

finish
