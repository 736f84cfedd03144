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

touch "$TMP/go"
WAIT_POLLS=300 wait_for test -f "$TMP/job/result.json" && pass "the job ended" || fail "the job did not end"
grep -q '"Succeeded"' "$TMP/job/result.json" && pass "Succeeded" || fail "result: $(head -c 400 "$TMP/job/result.json")"
finish
