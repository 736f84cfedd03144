#!/usr/bin/env bash
# dashboard_test.sh - the job's dashboard in a real browser: headless Chromium (Debian's),
# driven by playwright-core (tests/js), loads the page of a running job from the URL the
# master prints (token in the fragment) and checks the replica table against the status API,
# a loss chart and an eval chart with points, a line of a replica's log, the events time
# line, the shard progress, that the token stays out of the page, and saves a screenshot
# (build dir: dashboard.png). Also: the page and its assets need no token, the API still
# does, and other origins get no CORS grant.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export DTRAIN_HOME="$TMP/home"
cd "$TMP"
cleanup() { pkill -KILL -f "$TMP/" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
JS="$SRC/tests/js"
[ -d "$JS/node_modules/playwright-core" ] || { fail "tests/js/node_modules/playwright-core is missing (scripts/setup.sh installs it)"; finish; exit 1; }
[ -x /usr/lib/chromium/chromium ] || { fail "Debian's chromium is missing (scripts/setup.sh installs it)"; finish; exit 1; }

# worker-0 trains 2 shards through the Python client and says so in its log; everyone holds
# the job until $TMP/go appears
cat >"$TMP/replica.sh" <<SH
#!/usr/bin/env bash
if [ "\$DTRAIN_REPLICA" = worker-0 ]; then
    $PY - <<'PYEOF'
import sys
sys.path.insert(0, "$SRC/python")
from dtrain_client import build_data_shard_service
svc = build_data_shard_service(batch_size=10, num_epochs=1, dataset_size=100,
                               num_minibatches_per_shard=2, dataset_name="training")
for _ in range(2):
    shard = svc.fetch_shard()
    svc.report_batch_done(); svc.report_batch_done()
print("dashboard-test: 2 shards trained", flush=True)
PYEOF
fi
while [ ! -e "$TMP/go" ]; do sleep 0.05; done
SH
cat >"$TMP/dash.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: dash
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          containers:
            - {name: tensorflow, image: tensorflow/tensorflow:2.13.0, command: ["bash", "$TMP/replica.sh"]}
    Evaluator:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - {name: tensorflow, image: tensorflow/tensorflow:2.13.0, command: ["bash", "$TMP/replica.sh"]}
YAML
# attached, as a user runs it: the master prints the dashboard's address first
"$DTRAIN" run "$TMP/dash.yaml" --job-dir "$TMP/job" >"$TMP/run.out" 2>&1 &
RUN=$!
printed() { grep -q '^dashboard http://127.0.0.1:[0-9]*/#token=[0-9a-f]*$' "$TMP/run.out"; }
wait_for printed && pass "dtrain run prints the dashboard's address" || { fail "no dashboard line: $(head -c 400 "$TMP/run.out")"; finish; exit 1; }
DASH=$(sed -n 's/^dashboard //p' "$TMP/run.out" | head -1)
URL=${DASH%%/#*}
TOKEN=${DASH##*token=}
logged() { grep -q 'dashboard-test: 2 shards trained' "$TMP/job/logs/worker-0.log" 2>/dev/null; }
WAIT_POLLS=300 wait_for logged || fail "worker-0 did not train its shards"

# points for the charts: progress posts of both workers, reports of the evaluator
post() { curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d "$3" "$URL/v1/jobs/dash/replicas/$1/$2"; }
codes=""
for i in 1 2 3 4 5; do
    codes+=$(post worker-0 progress "{\"step\": $((i * 10)), \"epoch\": 1, \"loss\": 1.$((9 - i)), \"samples_per_sec\": 100, \"samples\": $((i * 10))}")
    codes+=$(post worker-1 progress "{\"step\": $((i * 10)), \"epoch\": 1, \"loss\": 2.$((9 - i)), \"samples_per_sec\": 90, \"samples\": $((i * 10))}")
    codes+=$(post evaluator-0 report "{\"step\": $((i * 10)), \"accuracy\": 0.$((4 + i)), \"loss\": 1.$((9 - i))}")
done
[ "$codes" = "$(printf '200%.0s' $(seq 15))" ] && pass "15 progress posts and reports taken" || fail "posts: $codes"

# the page and its assets are public; the API is not
for p in / /ui/app.js /ui/app.css /ui/chart.min.js; do
    code=$(curl -s -o /dev/null -w '%{http_code}' "$URL$p")
    [ "$code" = 200 ] || fail "GET $p: $code"
done
curl -s -D "$TMP/h" -o /dev/null "$URL/"
grep -qi "^Content-Security-Policy: default-src 'self'" "$TMP/h" && grep -qi '^Content-Type: text/html' "$TMP/h" &&
    pass "the page: public, HTML, a same-origin content security policy" || fail "page headers: $(cat "$TMP/h")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/jobs/dash/series")
[ "$code" = 401 ] && pass "the series route needs the token" || fail "series without token: $code"

# the browser
SHOT="$PWD/dashboard.png"
if (cd "$JS" && node dashboard_check.mjs "$DASH" "$URL/v1/jobs/dash" "$TOKEN" "$SHOT" 'dashboard-test: 2 shards trained') >"$TMP/browser.out" 2>&1; then
    :
else
    fail "the browser's checks (below)"
fi
cat "$TMP/browser.out"
PASSED=$((PASSED + $(grep -c '^ok ' "$TMP/browser.out")))
FAILED=$((FAILED + $(grep -c '^FAIL' "$TMP/browser.out")))
OUT=${DT_TEST_OUTPUT_DIR:-$SRC/build}
[ -f "$SHOT" ] && mkdir -p "$OUT" && cp "$SHOT" "$OUT/dashboard.png" && echo "screenshot: $OUT/dashboard.png"

touch "$TMP/go"
wait $RUN
grep -q '^job dash Succeeded' "$TMP/run.out" && pass "the job ends" || fail "the job: $(tail -5 "$TMP/run.out")"
finish
