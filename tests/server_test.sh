#!/usr/bin/env bash
# server_test.sh - the job server (dtrain server, docs/SERVER.md) with real masters and jobs:
#   submit     a TrainJob manifest through `dtrain submit --server`; status, logs, list
#              through the server; 409 for a name taken; 400 naming FILE:LINE for a bad
#              manifest; 401 without the token (healthz needs none)
#   seed       the seed's submissions: POST /v1/jobs {"strategy": ...} and GET /create (the
#              seed's client, against a --no-auth server; img NAME_pod finds NAME), and
#              `dtrain submit --strategy parameterserver -- COMMAND`: each replica of a tiny
#              python3 exec.py sees NUM_WORKERS and TF_CONFIG
#   queue      --cpus 2: jobs asking for cpus (resources.requests.cpu) wait whole, are
#              admitted by priority then submit order (strict: a waiting head blocks), and a
#              job larger than the capacity runs alone; stop of a queued job; /metrics;
#              dtrain scale --server changes a job's workers and its demand; a master that
#              does not answer (SIGSTOP) is a 504 from the proxy, the server answering on
#   suspend    a training TrainJob suspended (its trainer checkpoints, capacity freed) and
#              resumed: it continues from the saved step, not from 0
#   restart    kill -9 the server while a job runs and two wait; the job ends while it is
#              down; a restarted server finds it finished and starts the queued ones in order;
#              a job's master killed under a running server is replaced (dtrain run --resume);
#              a journal line naming no job ('../../evil') is skipped; a master killed 4
#              times: the job Failed after 3 new ones
#   dashboard  the server's page in headless Chromium (tests/js/server_dashboard_check.mjs):
#              every job with state, position and reason, the capacity used and free, and a
#              job's own page through the server (build dir: server_dashboard.png)
# Sections via ONLY="submit seed queue suspend restart dashboard"; KEEP=1 keeps $TMP.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export DTRAIN_HOME="$TMP/home"
unset DTRAIN_SERVER DTRAIN_SERVER_TOKEN
cd "$TMP"
SPID=""
HUNG=""
cleanup() {
    [ -n "$HUNG" ] && kill -CONT "$HUNG" 2>/dev/null
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null
    touch "$TMP"/gate-{a,b,c,d,e,f,g,h,g1,g2,g3,g4,g5,da,db,sc} 2>/dev/null
    for d in "$DTRAIN_HOME"/server/jobs/* "$TMP"/seedsrv/jobs/*; do
        [ -f "$d/master.json" ] && "$DTRAIN" stop "$d" --now >/dev/null 2>&1
    done
    [ -n "${KEEP:-}" ] && echo "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT
cp "$SRC/examples/data/iris.data" iris.data

# start_server ARGS...: a server in the background (pid $SPID), once its server.json is there.
start_server() {
    local dir=$DTRAIN_HOME/server
    for ((k = 1; k <= $#; k++)); do [ "${!k}" = --dir ] && { k=$((k + 1)); dir=${!k}; }; done
    rm -f "$dir/server.json"
    "$DTRAIN" server "$@" >>"$TMP/server.log" 2>&1 &
    SPID=$!
    wait_for test -s "$dir/server.json" || { fail "server did not start: $(tail -5 "$TMP/server.log")"; return 1; }
    URL=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$dir/server.json")
    TOKEN=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$dir/server.json")
}
stop_server() { kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; SPID=""; }

# api METHOD PATH [BODY]: curl the server with its token; the body in $TMP/api, the code echoed.
api() {
    curl -s -o "$TMP/api" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $TOKEN" \
        ${3:+--data-binary "$3"} "$URL$2"
}
# state JOB: the job's state on the server.
state() {
    api GET "/v1/jobs/$1" >/dev/null
    $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["server"]["state"])' "$TMP/api" 2>/dev/null
}
is_state() { [ "$(state "$1")" = "$2" ]; }
# field JOB PYEXPR: a Python expression over s (the job summary) printed.
field() {
    api GET "/v1/jobs/$1" >/dev/null
    $PY -c 'import json,sys; s=json.load(open(sys.argv[1]))["server"]; print(eval(sys.argv[2]))' "$TMP/api" "$2"
}
queue() { api GET /v1/server >/dev/null; $PY -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["queue"]))' "$TMP/api"; }

# iris NAME EPOCHS [SPEC_LINES]: a TrainJob on iris (one replica unless SPEC_LINES says).
iris() {
    cat >"$1.yaml" <<YAML
apiVersion: dtrain/v1
kind: TrainJob
metadata:
  name: $1
  labels: {team: iris}
spec:
${3:-}
  seed: 3
  data:
    train: {format: csv, path: iris.data, label_column: -1, header: false}
    eval_fraction: 0.2
    normalize: standard
  model:
    input: [4]
    layers:
      - {type: dense, name: fc1, units: 16, activation: relu}
      - {type: dense, name: logits, units: 3}
  loss: softmax_cross_entropy
  optimizer: {type: adam, learning_rate: 0.01}
  training: {batch_size: 16, epochs: $2, threads: 1}
YAML
}

# gated NAME CPUS: a TFJob of one worker asking for CPUS that runs until $TMP/gate-NAME exists.
gated() {
    cat >"$1.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: $1}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: tensorflow
              image: none
              command: [$PY, -c, "import os, time\nwhile not os.path.exists('$TMP/gate-$1'): time.sleep(0.05)"]
              resources: {requests: {cpu: "$2", memory: 64Mi}}
YAML
}

start_server --cpus 2 || exit 1

if section submit; then
    code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/jobs")
    [ "$code" = 401 ] && pass "submit: 401 without the token" || fail "submit: GET /v1/jobs without token: $code"
    expect_exit 1 "submit: a second server" -- "$DTRAIN" server
    expect_err_has "submit: one server per dir" "a server (pid $SPID) already runs in this dir"
    code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/healthz")
    [ "$code" = 200 ] && pass "submit: healthz needs no token" || fail "submit: healthz: $code"
    iris small 3
    # the token from $DTRAIN_HOME/server/server.json: no --token needed
    expect_exit 0 "submit: manifest" -- "$DTRAIN" submit --server "$URL" small.yaml --label run=one &&
        grep -q "job small submitted" "$TMP/out" && pass "submit: manifest accepted"
    wait_for is_state small Succeeded && pass "submit: the job ran and succeeded" ||
        fail "submit: small is $(state small): $(cat "$TMP/api")"
    [ "$(field small 's["labels"]["team"] + s["labels"]["run"]')" = irisone ] &&
        pass "submit: labels of the manifest and of the command line" || fail "submit: labels: $(cat "$TMP/api")"
    expect_exit 0 "submit: status --server" -- "$DTRAIN" status --server "$URL" small &&
        grep -q "phase Succeeded" "$TMP/out" && grep -q "worker-0" "$TMP/out" &&
        pass "submit: dtrain status through the server"
    DTRAIN_SERVER=$URL expect_exit 0 "submit: logs" -- "$DTRAIN" logs small worker-0 &&
        grep -q "eval accuracy" "$TMP/out" && pass "submit: dtrain logs through the server (DTRAIN_SERVER)"
    expect_exit 0 "submit: list" -- "$DTRAIN" list --server "$URL" --selector team=iris &&
        grep -q "^small .*Succeeded" "$TMP/out" && pass "submit: dtrain list through the server"
    expect_exit 1 "submit: duplicate" -- "$DTRAIN" submit --server "$URL" small.yaml
    expect_err_has "submit: 409 for a name taken" "already"
    code=$(api POST /v1/jobs "$(cat small.yaml)")
    [ "$code" = 409 ] && pass "submit: POST of the same name is 409" || fail "submit: duplicate POST: $code"
    iris bad 3
    sed -i 's/epochs: 3/epochs: three/' bad.yaml
    line=$(grep -n 'epochs: three' bad.yaml | cut -d: -f1)
    expect_exit 2 "submit: bad manifest" -- "$DTRAIN" submit --server "$URL" bad.yaml
    expect_err_has "submit: a bad manifest names FILE:LINE" "$TMP/bad.yaml:$line: spec.training.epochs"
    code=$(api POST /v1/jobs "$(cat bad.yaml)")
    [ "$code" = 400 ] && grep -q "request.yaml:$line: spec.training.epochs" "$TMP/api" && pass "submit: POST of a bad manifest: 400 with FILE:LINE" ||
        fail "submit: bad POST: $code $(cat "$TMP/api")"
    code=$(api GET /v1/jobs/small/result)
    [ "$code" = 200 ] && grep -q '"Succeeded"' "$TMP/api" && pass "submit: GET .../result" || fail "submit: result: $code"
    code=$(api PUT /v1/experiments/sweep '{"name": "sweep", "trials": [{"name": "sweep-000", "state": "Succeeded"}]}')
    [ "$code" = 200 ] && [ "$(api GET /v1/experiments/sweep)" = 200 ] && grep -q '"sweep-000"' "$TMP/api" &&
        [ "$(api GET /v1/experiments)" = 200 ] && grep -q '"sweep-000"' "$TMP/api" &&
        [ "$(api PUT /v1/experiments/sweep '[1]')" = 400 ] && [ "$(api GET /v1/experiments/none)" = 404 ] &&
        pass "submit: experiments stored, listed and read back" || fail "submit: experiments: $code $(cat "$TMP/api")"
    code=$(api DELETE /v1/jobs/small)
    [ "$code" = 200 ] && [ ! -d "$DTRAIN_HOME/server/jobs/small" ] && pass "submit: DELETE forgets a finished job" ||
        fail "submit: delete: $code $(cat "$TMP/api")"
fi

# exec.py of the seed's images: prints what it was told.
mkdir -p "$DTRAIN_HOME/server/images/simple" "$TMP/seedsrv/images/allreduce"
cat >"$DTRAIN_HOME/server/images/simple/exec.py" <<'PYEOF'
import hashlib, json, os, time
tf = json.loads(os.environ.get("TF_CONFIG", "{}"))
cluster = tf["cluster"]
print("NUM_WORKERS=%s TASK=%s/%s WORKERS=%d PS=%d CWD=%s" % (
    os.environ.get("NUM_WORKERS"), tf["task"]["type"], tf["task"]["index"],
    len(cluster.get("worker", [])), len(cluster.get("ps", [])), os.path.basename(os.getcwd())), flush=True)
# The job ends with worker-0 (the others are stopped then): every replica has said its line
# before any ends (a barrier of files named by this job's cluster).
key = hashlib.md5(json.dumps(cluster, sort_keys=True).encode()).hexdigest()
open("%s-%s-%s" % (key, tf["task"]["type"], tf["task"]["index"]), "w").close()
while not all(os.path.exists("%s-%s-%d" % (key, t, i)) for t in cluster for i in range(len(cluster[t]))):
    time.sleep(0.05)
PYEOF
cp "$DTRAIN_HOME/server/images/simple/exec.py" "$TMP/seedsrv/images/allreduce/exec.py"

if section seed; then
    code=$(api POST /v1/jobs '{"strategy": "AllReduce", "workers": 2, "ps": 0, "image": "simple", "task": "seedjson"}')
    [ "$code" = 201 ] && pass "seed: JSON submission" || fail "seed: JSON: $code $(cat "$TMP/api")"
    wait_for is_state seedjson Succeeded || fail "seed: seedjson is $(state seedjson)"
    for w in 0 1; do
        "$DTRAIN" logs --server "$URL" seedjson "worker-$w" >"$TMP/out" 2>&1
        grep -q "NUM_WORKERS=2 TASK=worker/$w WORKERS=2 PS=0 CWD=simple" "$TMP/out" &&
            pass "seed: worker-$w sees NUM_WORKERS and TF_CONFIG" || fail "seed: worker-$w log: $(cat "$TMP/out")"
    done
    expect_exit 0 "seed: submit --strategy" -- "$DTRAIN" submit --server "$URL" --strategy parameterserver \
        --workers 1 --ps 1 --task seedps --image "$DTRAIN_HOME/server/images/simple" -- "$PY" exec.py
    wait_for is_state seedps Succeeded || fail "seed: seedps is $(state seedps)"
    "$DTRAIN" logs --server "$URL" seedps ps-0 >"$TMP/out" 2>&1
    grep -q "NUM_WORKERS=1 TASK=ps/0 WORKERS=1 PS=1" "$TMP/out" && pass "seed: ParameterServer: ps-0 sees both" ||
        fail "seed: ps-0 log: $(cat "$TMP/out")"
    code=$(api POST /v1/jobs '{"strategy": "Ring", "workers": 2, "image": "simple", "task": "x"}')
    [ "$code" = 400 ] && grep -q "strategy" "$TMP/api" && pass "seed: an unknown strategy is 400" || fail "seed: Ring: $code"
    code=$(api POST /v1/jobs '{"strategy": "AllReduce", "workers": 2, "image": "nosuch", "task": "x"}')
    [ "$code" = 400 ] && grep -q "image 'nosuch': no directory nosuch_pod or nosuch" "$TMP/api" &&
        pass "seed: an image not found is 400" || fail "seed: nosuch: $code $(cat "$TMP/api")"
    # The seed's client: GET /create, no token, image name with _pod appended.
    SURL=$URL STOKEN=$TOKEN
    stop_server
    start_server --dir "$TMP/seedsrv" --no-auth || exit 1
    code=$(curl -s -o "$TMP/api" -w '%{http_code}' "$URL/create?strategy=AllReduce&n_worker=2&n_ps=0&img=allreduce_pod&name=seedget")
    [ "$code" = 201 ] && pass "seed: GET /create without a token (--no-auth)" || fail "seed: create: $code $(cat "$TMP/api")"
    wait_for is_state seedget Succeeded || fail "seed: seedget is $(state seedget)"
    "$DTRAIN" logs --server "$URL" seedget worker-1 >"$TMP/out" 2>&1
    grep -q "NUM_WORKERS=2 TASK=worker/1 WORKERS=2 PS=0 CWD=allreduce" "$TMP/out" &&
        pass "seed: GET /create's workers see NUM_WORKERS and TF_CONFIG" || fail "seed: seedget log: $(cat "$TMP/out")"
    stop_server
    start_server --cpus 2 || exit 1
fi

if section queue; then
    for j in a:2 b:1 c:1 d:1 e:3 f:1; do gated "${j%%:*}" "${j##*:}"; done
    "$DTRAIN" submit --server "$URL" a.yaml >/dev/null
    wait_for is_state a Running || fail "queue: a is $(state a)"
    "$DTRAIN" submit --server "$URL" b.yaml >/dev/null
    "$DTRAIN" submit --server "$URL" c.yaml --priority 5 >"$TMP/out"
    grep -q "position 1" "$TMP/out" && pass "queue: a higher priority goes first" || fail "queue: c: $(cat "$TMP/out")"
    "$DTRAIN" submit --server "$URL" d.yaml >/dev/null
    "$DTRAIN" submit --server "$URL" e.yaml >/dev/null
    [ "$(queue)" = "c b d e" ] && pass "queue: order by priority, then submit order" || fail "queue: $(queue)"
    [ "$(field c 's["reason"]')" = WaitingForCapacity ] && [ "$(field b 's["message"]')" = "behind c in the queue (position 2)" ] &&
        [ "$(field d 's["position"]')" = 3 ] && pass "queue: position and reason" || fail "queue: c/b/d: $(cat "$TMP/api")"
    curl -s "$URL/metrics" >"$TMP/metrics"
    grep -q '^dtrain_server_queue_length 4$' "$TMP/metrics" && grep -q '^dtrain_server_used{resource="cpu"} 2$' "$TMP/metrics" &&
        pass "queue: /metrics: queue length and cpus used" || fail "queue: metrics: $(grep dtrain_server "$TMP/metrics")"
    if command -v promtool >/dev/null; then
        promtool check metrics <"$TMP/metrics" >"$TMP/err" 2>&1 && pass "queue: promtool accepts /metrics" || fail "queue: promtool: $(cat "$TMP/err")"
    fi
    "$DTRAIN" list --server "$URL" >"$TMP/out"
    grep -q "^d .*Queued .* 3 " "$TMP/out" && pass "queue: dtrain list shows positions" || fail "queue: list: $(cat "$TMP/out")"
    touch gate-a
    wait_for is_state b Running && is_state c Running && pass "queue: a ended: c and b admitted together (1 + 1 cpus)" ||
        fail "queue: after a: b $(state b), c $(state c)"
    is_state d Queued && pass "queue: d waits (no cpu free)" || fail "queue: d is $(state d)"
    touch gate-b gate-c
    wait_for is_state d Running || fail "queue: d is $(state d)"
    [ "$(field e 's["reason"]')" = LargerThanCapacity ] && pass "queue: e (3 cpus of 2) waits to run alone" ||
        fail "queue: e: $(cat "$TMP/api")"
    touch gate-d
    wait_for is_state e Running && pass "queue: e runs alone" || fail "queue: e is $(state e)"
    "$DTRAIN" submit --server "$URL" f.yaml >/dev/null
    sleep_until_settled() { is_state f Queued; }
    wait_for sleep_until_settled && pass "queue: nothing runs beside a job larger than the capacity" || fail "queue: f is $(state f)"
    touch gate-e
    wait_for is_state f Running || fail "queue: f is $(state f)"
    touch gate-f
    wait_for is_state f Succeeded || fail "queue: f is $(state f)"
    order=$($PY -c '
import json, sys
print(" ".join(e["name"] for e in map(json.loads, open(sys.argv[1])) if e["ev"] == "start" and e["name"] in "abcdef"))' \
        "$DTRAIN_HOME/server/journal.jsonl")
    [ "$order" = "a c b d e f" ] && pass "queue: started in priority/FIFO order" || fail "queue: start order $order"
    # stop: a queued job at once, a running one through its master
    gated g 2
    gated h 1
    "$DTRAIN" submit --server "$URL" g.yaml >/dev/null
    "$DTRAIN" submit --server "$URL" h.yaml >/dev/null
    wait_for is_state g Running
    expect_exit 0 "queue: stop queued" -- "$DTRAIN" stop --server "$URL" h
    is_state h Stopped && pass "queue: a queued job stops at once" || fail "queue: h is $(state h)"
    expect_exit 0 "queue: stop running" -- "$DTRAIN" stop --server "$URL" g
    is_state g Stopped && grep -q "job g: Stopped" "$TMP/out" && pass "queue: dtrain stop --server stops a running job" ||
        fail "queue: g is $(state g): $(cat "$TMP/out")"
fi

if section queue; then
    # scale through the server: the master adds a worker, the server counts its share
    gated sc 1
    "$DTRAIN" submit --server "$URL" sc.yaml >/dev/null
    wait_for is_state sc Running || fail "scale: sc is $(state sc)"
    has_master() { api GET /v1/jobs/sc >/dev/null; grep -q '"master"' "$TMP/api"; }
    wait_for has_master
    expect_exit 0 "scale: up" -- "$DTRAIN" scale --server "$URL" sc --workers 2 &&
        grep -q "job sc: 2 workers" "$TMP/out" && [ "$(field sc 's["demand"]["cpus"]')" = 2.0 ] &&
        pass "scale: dtrain scale --server adds a worker, and its cpu to the job's demand" ||
        fail "scale: $(cat "$TMP/out") $(cat "$TMP/api")"
    expect_exit 0 "scale: down" -- "$DTRAIN" scale --server "$URL" sc --workers 1 &&
        [ "$(field sc 's["demand"]["cpus"]')" = 1.0 ] && pass "scale: and a scale-down takes it away" ||
        fail "scale: down: $(cat "$TMP/api")"
    # a master that does not answer (SIGSTOP): the proxy gives up with a 504 naming it, the
    # job's status comes from its job dir, and the server goes on answering
    HUNG=$(head -1 "$DTRAIN_HOME/server/jobs/sc/master.lock")
    kill -STOP "$HUNG"
    code=$(api GET /v1/jobs/sc/replicas)
    [ "$code" = 504 ] && grep -q "job sc: its master (http://.*) did not answer within" "$TMP/api" &&
        pass "proxy: a hung master is a 504 naming it" || fail "proxy: hung master: $code $(cat "$TMP/api")"
    [ "$(api GET /v1/jobs/sc)" = 200 ] && is_state sc Running && [ "$(api GET /v1/server)" = 200 ] &&
        pass "proxy: the job's status and the server still answer" || fail "proxy: status: $(cat "$TMP/api")"
    kill -CONT "$HUNG"
    HUNG=""
    [ "$(api GET /v1/jobs/sc/replicas)" = 200 ] && pass "proxy: answered again once the master is back" ||
        fail "proxy: after SIGCONT: $(cat "$TMP/api")"
    touch gate-sc
    wait_for is_state sc Succeeded || fail "scale: sc is $(state sc)"
fi

if section suspend; then
    # a PS job (chief and PS: 2 cpus): its chief checkpoints at SIGTERM, its PS saves
    iris long 1000000 "  replicas: {chief: 1, ps: 1}
  strategy: parameter_server"
    "$DTRAIN" submit --server "$URL" long.yaml >/dev/null
    # progress: the trainer's step, posted every 2 s
    step() {
        "$DTRAIN" status --server "$URL" long --json 2>/dev/null |
            $PY -c 'import json,sys; r=[r for r in json.load(sys.stdin)["replicas"] if r["name"]=="chief-0"][0]; print(int(r.get("progress",{}).get("step",0)))' 2>/dev/null
    }
    stepped() { s=$(step); [ -n "$s" ] && [ "$s" -gt "${1:-0}" ]; }
    WAIT_POLLS=600 wait_for stepped 0 || fail "suspend: long made no progress"
    expect_exit 0 "suspend" -- "$DTRAIN" suspend --server "$URL" long
    grep -q "job long: Suspended" "$TMP/out" && pass "suspend: suspended" || fail "suspend: $(cat "$TMP/out") $(state long)"
    api GET /v1/server >/dev/null
    $PY -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["used"]["cpus"] == 0, s' "$TMP/api" &&
        pass "suspend: its capacity is free" || fail "suspend: $(cat "$TMP/api")"
    expect_exit 0 "resume" -- "$DTRAIN" resume --server "$URL" long
    wait_for is_state long Running || fail "suspend: long is $(state long) after resume"
    resumed() { "$DTRAIN" logs --server "$URL" long chief-0 2>/dev/null | grep -o 'resuming from .*(step [0-9]*' | tail -1 | grep -o '[0-9]*$'; }
    from=""
    got_from() { from=$(resumed); [ -n "$from" ]; }
    WAIT_POLLS=600 wait_for got_from
    [ -n "$from" ] && [ "$from" -gt 0 ] && pass "suspend: resumed from step $from (not 0)" ||
        fail "suspend: no resume from a saved step: $(tail -5 "$DTRAIN_HOME/server/jobs/long/logs/chief-0.log")"
    WAIT_POLLS=600 wait_for stepped "$from" && pass "suspend: training goes on past step $from" ||
        fail "suspend: no progress after the resume"
    expect_exit 0 "suspend: stop" -- "$DTRAIN" stop --server "$URL" long
fi

if section restart; then
    for j in g1:2 g2:1 g3:1; do gated "${j%%:*}" "${j##*:}"; done
    "$DTRAIN" submit --server "$URL" g1.yaml >/dev/null
    wait_for is_state g1 Running || fail "restart: g1 is $(state g1)"
    "$DTRAIN" submit --server "$URL" g2.yaml >/dev/null
    "$DTRAIN" submit --server "$URL" g3.yaml --priority 1 >/dev/null
    kill -9 "$SPID"
    wait "$SPID" 2>/dev/null
    SPID=""
    start_server --cpus 2 || exit 1
    is_state g1 Running && pass "restart: a running job is Running after kill -9 and restart" || fail "restart: g1 is $(state g1)"
    [ "$(queue)" = "g3 g2" ] && pass "restart: the queue kept its order" || fail "restart: queue $(queue)"
    kill -9 "$SPID"
    wait "$SPID" 2>/dev/null
    SPID=""
    touch gate-g1 # g1 ends while no server watches it
    wait_for test -s "$DTRAIN_HOME/server/jobs/g1/result.json" || fail "restart: g1's master did not end"
    # a journal line naming no job (its dirs would be outside DIR) is skipped by the replay
    echo '{"ev": "submit", "name": "../../evil", "time": 1, "seq": 99, "demand": {"cpus": -5}}' \
        >>"$DTRAIN_HOME/server/journal.jsonl"
    start_server --cpus 2 || exit 1
    grep -q "journal: an event for '../../evil' skipped (not a job name)" "$TMP/server.log" &&
        [ "$(api GET /v1/jobs)" = 200 ] && ! grep -q evil "$TMP/api" &&
        pass "restart: replay skips an event whose name is not a job name" ||
        fail "restart: evil journal line: $(tail -3 "$TMP/server.log") $(cat "$TMP/api")"
    wait_for is_state g1 Succeeded && pass "restart: a job that ended while the server was down is found Succeeded" ||
        fail "restart: g1 is $(state g1)"
    wait_for is_state g2 Running && wait_for is_state g3 Running && pass "restart: the queued jobs start" ||
        fail "restart: g2 $(state g2), g3 $(state g3)"
    touch gate-g2 gate-g3
    wait_for is_state g2 Succeeded && wait_for is_state g3 Succeeded && pass "restart: and are watched to their end" ||
        fail "restart: g2 $(state g2), g3 $(state g3)"
    # a master killed under a running server: the job is resumed by a new master
    gated g4 1
    "$DTRAIN" submit --server "$URL" g4.yaml >/dev/null
    lock=$DTRAIN_HOME/server/jobs/g4/master.lock
    master_pid() { [ -s "$lock" ] && head -1 "$lock"; }
    # killed once its replica runs (not while its master launches it: a master killed between
    # journaling a launch and letting the replica go leaves its successor a replica that
    # never ran, and the job fails)
    # runs JOB: its master answers and its worker-0 runs
    runs() {
        api GET "/v1/jobs/$1" >/dev/null
        $PY -c 'import json,sys; s=json.load(open(sys.argv[1])); assert "master" in s and [r for r in s["replicas"] if r["name"] == "worker-0" and r["state"] == "Running"]' "$TMP/api" 2>/dev/null
    }
    wait_for master_pid >/dev/null && wait_for runs g4 || fail "restart: g4 is $(state g4): $(cat "$TMP/api")"
    old=$(master_pid)
    kill -9 "$old"
    new_master() { p=$(master_pid); [ -n "$p" ] && [ "$p" != "$old" ] && kill -0 "$p" 2>/dev/null; }
    wait_for new_master && grep -q "job g4: its master is gone without a result" "$TMP/server.log" &&
        pass "restart: a killed master is replaced (dtrain run --resume)" || fail "restart: g4's master not resumed: $(tail -3 "$TMP/server.log")"
    touch gate-g4
    wait_for is_state g4 Succeeded && pass "restart: the resumed job ends Succeeded" || fail "restart: g4 is $(state g4)"
    # a master that keeps dying without a result is started again 3 times, not forever
    gated g5 1
    "$DTRAIN" submit --server "$URL" g5.yaml >/dev/null
    lock=$DTRAIN_HOME/server/jobs/g5/master.lock
    old=""
    for k in 1 2 3 4; do
        new_g5() { p=$(master_pid); [ -n "$p" ] && [ "$p" != "$old" ] && runs g5; }
        wait_for new_g5 || { fail "restart: g5's master $k did not run: $(state g5)"; break; }
        old=$(master_pid)
        kill -9 "$old"
    done
    wait_for is_state g5 Failed && field g5 's["message"]' | grep -q "its master ended without a result 4 times" &&
        pass "restart: a master killed 4 times: the job Failed after 3 new ones" ||
        fail "restart: g5 is $(state g5): $(cat "$TMP/api")"
    touch gate-g5
    order=$($PY -c '
import json, sys
print(" ".join(e["name"] for e in map(json.loads, open(sys.argv[1])) if e["ev"] == "start" and e["name"] in ("g1", "g2", "g3")))' \
        "$DTRAIN_HOME/server/journal.jsonl")
    [ "$order" = "g1 g3 g2" ] && pass "restart: started in order, none twice ($order)" || fail "restart: start order $order"
fi

if section dashboard; then
    JS="$SRC/tests/js"
    if [ ! -d "$JS/node_modules/playwright-core" ] || [ ! -x /usr/lib/chromium/chromium ]; then
        fail "dashboard: playwright-core (tests/js) or Debian's chromium is missing (scripts/setup.sh installs them)"
    else
        gated da 2
        gated db 1
        "$DTRAIN" submit --server "$URL" da.yaml >/dev/null
        "$DTRAIN" submit --server "$URL" db.yaml >/dev/null
        wait_for is_state da Running || fail "dashboard: da is $(state da)"
        SHOT="$TMP/server_dashboard.png"
        (cd "$JS" && node server_dashboard_check.mjs "$URL/#token=$TOKEN" "$URL" "$TOKEN" "$SHOT" da) >"$TMP/browser.out" 2>&1 ||
            fail "dashboard: the browser's checks (below)"
        cat "$TMP/browser.out"
        PASSED=$((PASSED + $(grep -c '^ok ' "$TMP/browser.out")))
        FAILED=$((FAILED + $(grep -c '^FAIL' "$TMP/browser.out")))
        OUT=${DT_TEST_OUTPUT_DIR:-$SRC/build}
        [ -f "$SHOT" ] && mkdir -p "$OUT" && cp "$SHOT" "$OUT/server_dashboard.png" && echo "screenshot: $OUT/server_dashboard.png"
        touch gate-da gate-db
        wait_for is_state db Succeeded || fail "dashboard: db is $(state db)"
    fi
fi

# A sanitizer build's reports (the server's at its exit: leaks) go to the servers' and the
# masters' logs, not to a command's exit status.
stop_server
san=$(grep -l "ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:" "$TMP/server.log" \
    "$DTRAIN_HOME"/server/jobs/*/master.log "$TMP"/seedsrv/jobs/*/master.log 2>/dev/null)
[ -z "$san" ] && pass "no sanitizer reports in the servers' and masters' logs" ||
    fail "sanitizer reports in: $san: $(grep -h -A8 "ERROR: \|runtime error:" $san | head -40)"

finish
