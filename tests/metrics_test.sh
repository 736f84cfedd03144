#!/usr/bin/env bash
# metrics_test.sh - the job master's GET /metrics, scraped while a real job runs: Prometheus'
# text format 0.0.4 (promtool check metrics, Debian's prometheus package), its content type,
# no token needed; the job's phase, each replica's state, a restart and its exit code, the
# shard service's progress, the evaluator's figures, the HTTP API's own requests; and the
# figures at the end.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export DTRAIN_HOME="$TMP/home"
cd "$TMP"
cleanup() { pkill -KILL -f "$TMP/" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
command -v promtool >/dev/null || { fail "promtool is missing (scripts/setup.sh installs prometheus)"; finish; exit 1; }

# worker-0 trains 3 shards of 20 records through the Python shard client, then holds the job
# until $TMP/go appears; worker-1 fails once (exit 3), is restarted, and waits too.
cat >"$TMP/worker.sh" <<SH
#!/usr/bin/env bash
if [ "\$DTRAIN_REPLICA" = worker-1 ]; then
    [ -e "$TMP/failed-once" ] || { touch "$TMP/failed-once"; exit 3; }
    while [ ! -e "$TMP/go" ]; do sleep 0.05; done
    exit 0
fi
exec $PY - <<'PYEOF'
import os, sys, time
sys.path.insert(0, "$SRC/python")
from dtrain_client import build_data_shard_service
svc = build_data_shard_service(batch_size=10, num_epochs=1, dataset_size=100,
                               num_minibatches_per_shard=2, dataset_name="training")
for _ in range(3):
    shard = svc.fetch_shard()
    svc.report_batch_done(); svc.report_batch_done()
while not os.path.exists("$TMP/go"):
    time.sleep(0.05)
while svc.fetch_shard() is not None:
    svc.report_batch_done(); svc.report_batch_done()
PYEOF
SH
cat >"$TMP/metrics-job.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: metrics-job
spec:
  runPolicy: {backoffLimit: 5}
  successPolicy: AllWorkers
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.13.0
              command: ["bash", "$TMP/worker.sh"]
YAML
"$DTRAIN" run "$TMP/metrics-job.yaml" --job-dir "$TMP/job" --detach >"$TMP/run.out" 2>&1 ||
    fail "run --detach: $(cat "$TMP/run.out")"
url() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["master"] or "")' "$TMP/job/status.json" 2>/dev/null; }
has_url() { [ -n "$(url)" ]; }
wait_for has_url
URL=$(url)
[ -n "$URL" ] || { fail "no master URL in status.json"; finish; exit 1; }

# scrape: GET /metrics into $TMP/m.txt (body) and $TMP/m.hdr (headers); no token
scrape() { curl -s -D "$TMP/m.hdr" -o "$TMP/m.txt" "$URL/metrics"; }
has() { scrape && grep -qF -- "$1" "$TMP/m.txt"; }
WAIT_POLLS=300
if wait_for has 'dtrain_dataset_samples_done_total{job="metrics-job",dataset="training"} 60' &&
    wait_for has 'dtrain_replica_restarts_total{job="metrics-job",replica="worker-1",type="worker"} 1' &&
    wait_for has 'dtrain_replica_state{job="metrics-job",replica="worker-1",type="worker",state="Running"} 1'; then
    pass "a running job's metrics show 3 shards done and worker-1's restart"
else
    fail "the metrics never showed the progress: $(grep -v '^#' "$TMP/m.txt" | grep -v http | head -40)"
fi
scrape
grep -qi '^Content-Type: text/plain; version=0.0.4; charset=utf-8' "$TMP/m.hdr" &&
    pass "Content-Type is Prometheus' 0.0.4 text" || fail "Content-Type: $(grep -i content-type "$TMP/m.hdr")"
if promtool check metrics <"$TMP/m.txt" >"$TMP/promtool.out" 2>&1; then pass "promtool check metrics: clean"
else fail "promtool: $(head -20 "$TMP/promtool.out")"; fi
$PY - "$TMP/m.txt" <<'PYEOF' && pass "the samples say what the job is doing" || fail "metrics content"
import re, sys
samples = {}
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip():
        continue
    name, value = line.rsplit(" ", 1)
    assert name not in samples, "twice: " + name
    samples[name] = float(value)
def get(s):
    assert s in samples, "missing: " + s + "\n" + "\n".join(k for k in samples if "http" not in k)
    return samples[s]
j = 'job="metrics-job"'
assert get('dtrain_job_phase{%s,phase="Running"}' % j) == 1
assert get('dtrain_job_phase{%s,phase="Succeeded"}' % j) == 0
assert get('dtrain_job_info{%s,kind="TFJob",namespace="default"}' % j) == 1
assert get('dtrain_replica_last_exit_code{%s,replica="worker-1",type="worker"}' % j) == 3
assert get('dtrain_replica_restarts_total{%s,replica="worker-0",type="worker"}' % j) == 0
assert get('dtrain_job_restarts_total{%s}' % j) == 1
d = j + ',dataset="training"'
assert get('dtrain_dataset_samples{%s}' % d) == 100
assert get('dtrain_dataset_shards{%s}' % d) == 5
assert get('dtrain_dataset_shards_done_total{%s}' % d) == 3
assert get('dtrain_dataset_replica_samples_done_total{%s,replica="worker-0"}' % d) == 60
assert get('dtrain_http_requests_total{%s,method="POST",route="/v1/jobs/:job/datasets/:dataset/fetch",code="200"}' % j) >= 3
assert get('dtrain_http_request_duration_seconds_count{%s,method="GET",route="/metrics"}' % j) >= 1
assert not any(k.startswith("dtrain_ring_generation") for k in samples)  # not an all-reduce job
PYEOF
# a bad token does not matter to /metrics, but does to the status route
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' "$URL/metrics")
[ "$code" = 200 ] && pass "/metrics needs no token" || fail "/metrics with a wrong token: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/jobs/metrics-job")
[ "$code" = 401 ] && pass "the status route still needs the token" || fail "status without a token: $code"

# progress: what a trainer posts shows in the status (with the job's rate and ETA) and metrics
TOKEN=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$TMP/job/master.json")
post() { curl -s -o "$TMP/post.out" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
             -H 'Content-Type: application/json' -d "$2" "$URL/v1/jobs/metrics-job/replicas/$1/progress"; }
code=$(post worker-0 '{"step": 120, "epoch": 1, "loss": 0.25, "samples_per_sec": 8, "samples": 60}')
[ "$code" = 200 ] && pass "a progress post is taken" || fail "progress post: $code $(cat "$TMP/post.out")"
code=$(post worker-0 '{"step": 121, "loss": "low"}')
[ "$code" = 400 ] && grep -q 'loss: expected a finite number' "$TMP/post.out" &&
    pass "a progress post with a string for a number is refused, naming it" || fail "bad progress: $code $(cat "$TMP/post.out")"
code=$(post worker-0 '{"step": -1}')
[ "$code" = 400 ] && pass "a negative step is refused" || fail "negative step: $code"
curl -s -H "Authorization: Bearer $TOKEN" "$URL/v1/jobs/metrics-job" >"$TMP/st.json"
$PY - "$TMP/st.json" <<'PYEOF' && pass "status: the replica's progress and the job's (40 of 100 samples left at 8/s: ETA 5 s)" || fail "status progress: $(head -c 600 "$TMP/st.json")"
import json, sys
s = json.load(open(sys.argv[1]))
w0 = [r for r in s["replicas"] if r["name"] == "worker-0"][0]
assert w0["progress"] == {"step": 120, "epoch": 1, "loss": 0.25, "samples_per_sec": 8, "samples": 60}, w0
p = s["progress"]
assert p["samplesDone"] == 60 and p["samplesTotal"] == 100 and p["fraction"] == 0.6, p
assert p["samplesPerSec"] == 8 and p["etaSeconds"] == 5 and p["epoch"] == 1 and p["epochs"] == 1, p
PYEOF
scrape
grep -qxF 'dtrain_train_loss{job="metrics-job",replica="worker-0"} 0.25' "$TMP/m.txt" &&
    grep -qxF 'dtrain_job_eta_seconds{job="metrics-job"} 5' "$TMP/m.txt" &&
    promtool check metrics <"$TMP/m.txt" >/dev/null 2>&1 &&
    pass "metrics: the trainer's loss and the job's ETA" || fail "progress metrics: $(grep -E 'dtrain_(train|job_)' "$TMP/m.txt")"
"$DTRAIN" status metrics-job >"$TMP/status.txt" 2>&1
grep -q 'progress 60.0%  epoch 1/1  samples 60 of 100  8 samples/s  ETA 5s' "$TMP/status.txt" &&
    grep -qE '^worker-0 +Running .* 120 +0.2500 +8$' "$TMP/status.txt" &&
    pass "dtrain status shows the progress line and the trainer's step, loss, samples/s" ||
    fail "dtrain status: $(cat "$TMP/status.txt")"

touch "$TMP/go"
WAIT_POLLS=300 wait_for test -f "$TMP/job/result.json" && pass "the job ended" || fail "the job did not end"
grep -q '"Succeeded"' "$TMP/job/result.json" && pass "Succeeded" || fail "result: $(head -c 400 "$TMP/job/result.json")"
finish
