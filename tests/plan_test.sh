#!/usr/bin/env bash
# plan_test.sh - `dtrain plan`: each replica's command and environment (TF_CONFIG exact) in
# text and JSON, both address forms, and the exit codes of bad arguments and bad specs.
source "$(dirname "$0")/lib.sh"
J="$SRC/tests/data/jobs"

# has NAME TEXT: the last command's stdout contains TEXT.
has() {
    if grep -qF -- "$2" "$TMP/out"; then pass "$1"; else fail "$1: stdout lacks '$2': $(head -c 600 "$TMP/out")"; fi
}
# lacks NAME TEXT: it does not.
lacks() {
    if grep -qF -- "$2" "$TMP/out"; then fail "$1: stdout has '$2'"; else pass "$1"; fi
}

expect_exit 0 help -- "$DTRAIN" help && grep -q "plan" "$TMP/out" && pass "help lists plan"
expect_exit 0 plan-help -- "$DTRAIN" plan --help && grep -q -- "--backend" "$TMP/out" && pass "plan --help"

# Local form, text: placeholders 2222 + position in start order (chief, ps, worker, evaluator).
expect_exit 0 plan-local -- "$DTRAIN" plan "$J/tfjob_v1.yaml"
has "local TF_CONFIG of worker-1" 'TF_CONFIG={"cluster":{"chief":["127.0.0.1:2222"],"evaluator":["127.0.0.1:2227"],"ps":["127.0.0.1:2223","127.0.0.1:2224"],"worker":["127.0.0.1:2225","127.0.0.1:2226"]},"task":{"type":"worker","index":1},"environment":"cloud"}'
[ "$(grep -E '^[a-z]+-[0-9]+$' "$TMP/out" | tr '\n' ' ')" = "chief-0 ps-0 ps-1 worker-0 worker-1 evaluator-0 " ] \
    && pass "six replicas, chief ps worker evaluator" || fail "replica order: $(grep -E '^[a-z]+-[0-9]+$' "$TMP/out" | tr '\n' ' ')"
has "command line" "  command: python /var/tf_dist_mnist/dist_mnist.py --train_steps 1000 --sync_replicas=true"
has "container env kept" "    LOG_LEVEL=debug"
has "replica name" "    DTRAIN_REPLICA=evaluator-0"
has "placeholders noted" "placeholders"
lacks "the container's TF_CONFIG is replaced" "overridden by dtrain"

# Kubernetes form, JSON: exactly one line, one object.
expect_exit 0 plan-json -- "$DTRAIN" plan "$J/tfjob_v1.yaml" --backend kubernetes --json
[ "$(wc -l <"$TMP/out")" -eq 1 ] && pass "json: one line" || fail "json: $(wc -l <"$TMP/out") lines"
grep -q '^{"job": "dist-mnist", "kind": "TFJob", "backend": "kubernetes", "replicas": \[{"name": "chief-0", "type": "chief", "index": 0, "command": \["python", ' "$TMP/out" \
    && pass "json: object shape" || fail "json shape: $(head -c 300 "$TMP/out")"
[ "$(tail -c 3 "$TMP/out")" = "]}" ] && pass "json: ends the object" || fail "json end: $(tail -c 20 "$TMP/out")"
has "json: worker-1 exact TF_CONFIG" '{"name": "worker-1", "type": "worker", "index": 1, "command": ["python", "/var/tf_dist_mnist/dist_mnist.py", "--train_steps", "1000"], "env": {"LOG_LEVEL": "debug", "TF_CONFIG": "{\"cluster\":{\"chief\":[\"dist-mnist-chief-0.kubeflow.svc:2222\"],\"evaluator\":[\"dist-mnist-evaluator-0.kubeflow.svc:2222\"],\"ps\":[\"dist-mnist-ps-0.kubeflow.svc:2222\",\"dist-mnist-ps-1.kubeflow.svc:2222\"],\"worker\":[\"dist-mnist-worker-0.kubeflow.svc:2223\",\"dist-mnist-worker-1.kubeflow.svc:2223\"]},\"task\":{\"type\":\"worker\",\"index\":1},\"environment\":\"cloud\"}", "DTRAIN_REPLICA": "worker-1"}}'
[ "$(grep -o '"name": "[a-z]*-[0-9]"' "$TMP/out" | wc -l)" -eq 6 ] && pass "json: six replicas" || fail "json: replica count"

expect_exit 0 plan-namespace -- "$DTRAIN" plan "$J/tfjob_v1_early.yaml" --backend kubernetes --namespace team-a --cluster-domain cluster.local
has "namespace and cluster domain" 'TF_CONFIG={"cluster":{"master":["early-v1-master-0.team-a.svc.cluster.local:2222"],"worker":["early-v1-worker-0.team-a.svc.cluster.local:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}'

# PyTorchJob: the operator's variables, no TF_CONFIG.
expect_exit 0 plan-pytorch -- "$DTRAIN" plan "$J/pytorchjob.yaml" --backend kubernetes
has "MASTER_ADDR" "    MASTER_ADDR=pytorch-dist-mnist-master-0"
has "MASTER_PORT" "    MASTER_PORT=29500"
has "WORLD_SIZE" "    WORLD_SIZE=4"
has "RANK of worker-2" "$(printf '    RANK=3\n    DTRAIN_REPLICA=worker-2')"
lacks "no TF_CONFIG for PyTorch" "TF_CONFIG"

# TrainJob: built-in roles, command null in JSON.
expect_exit 0 plan-trainjob -- "$DTRAIN" plan "$J/trainjob.yaml" --json
has "trainjob: command null" '{"name": "ps-0", "type": "ps", "index": 0, "command": null, "env": {"TF_CONFIG": '
expect_exit 0 plan-trainjob-text -- "$DTRAIN" plan "$J/trainjob.yaml"
has "trainjob: strategy" "strategy parameter_server"
has "trainjob: built-in role" "command: (dtrain's built-in worker role)"

# One replica: no TF_CONFIG. A multi-document file: the TFJob in it.
expect_exit 0 plan-single -- "$DTRAIN" plan "$J/single.yaml"
lacks "single replica: no TF_CONFIG" "TF_CONFIG"
has "single replica: env" "    A=3"
expect_exit 0 plan-multidoc -- "$DTRAIN" plan "$J/multidoc.yaml" --json
has "multidoc: the TFJob" '"job": "multi-doc"'

# Command line errors: exit 2.
expect_exit 2 unknown-option -- "$DTRAIN" plan --bogus "$J/single.yaml" && expect_err_has "unknown option named" "unknown option '--bogus'"
expect_exit 2 bad-backend -- "$DTRAIN" plan --backend docker "$J/single.yaml" && expect_err_has "bad backend" "--backend: expected local or kubernetes, got 'docker'"
expect_exit 2 namespace-local -- "$DTRAIN" plan --namespace x "$J/single.yaml" && expect_err_has "namespace needs kubernetes" "need --backend kubernetes"
expect_exit 2 bad-namespace -- "$DTRAIN" plan --backend kubernetes --namespace Bad_NS "$J/single.yaml" && expect_err_has "bad namespace" "'Bad_NS' is not a DNS label"
expect_exit 2 bad-domain -- "$DTRAIN" plan --backend kubernetes --cluster-domain 'a b' "$J/tfjob_v1.yaml" && expect_err_has "bad cluster domain" "cluster domain 'a b'"
expect_exit 2 no-file -- "$DTRAIN" plan && expect_err_has "missing job" "missing JOB.yaml"
expect_exit 2 two-files -- "$DTRAIN" plan "$J/single.yaml" "$J/single.yaml" && expect_err_has "two jobs" "expected one JOB.yaml, got 2"
expect_exit 1 missing-file -- "$DTRAIN" plan "$TMP/nope.yaml" && expect_err_has "missing file named" "nope.yaml: cannot open"

# Malformed specs: exit 2, the message names file, line and field.
sed 's/^    Worker:/    Wrker:/' "$J/tfjob_v1.yaml" >"$TMP/typo.yaml"
expect_exit 2 unknown-type -- "$DTRAIN" plan "$TMP/typo.yaml" \
    && expect_err_has "unknown replica type: file, line, field" "typo.yaml:69: spec.tfReplicaSpecs.Wrker: unknown replica type 'Wrker' (allowed: Chief, Master, Worker, PS, Evaluator)"
sed 's/replicas: 2$/replicas: -2/' "$J/tfjob_v1alpha2.yaml" >"$TMP/neg.yaml"
expect_exit 2 negative-replicas -- "$DTRAIN" plan "$TMP/neg.yaml" \
    && expect_err_has "negative replicas: file, line, field" "neg.yaml:20: spec.tfReplicaSpecs.Worker.replicas: expected a non-negative integer, got '-2'"
cat "$J/tfjob_v1_early.yaml" "$J/tfjob_v1_early.yaml" | sed '29s/^/---\n/' >"$TMP/two.yaml"
expect_exit 2 two-jobs -- "$DTRAIN" plan "$TMP/two.yaml" && expect_err_has "second job named" "two.yaml:32: kind: a second job (TFJob)"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n' >"$TMP/nojob.yaml"
expect_exit 2 no-job -- "$DTRAIN" plan "$TMP/nojob.yaml" && expect_err_has "no job" "nojob.yaml:1: no job in this file"

# A container without a command cannot run locally; in Kubernetes form it can be shown.
sed '/eval.py/d' "$J/tfjob_v1.yaml" >"$TMP/nocmd.yaml"
expect_exit 2 local-needs-command -- "$DTRAIN" plan "$TMP/nocmd.yaml" \
    && expect_err_has "no command: file, line, field" "nocmd.yaml:96: spec.tfReplicaSpecs.Evaluator.template.spec.containers[0].command: required to run locally"
expect_exit 0 kubernetes-no-command -- "$DTRAIN" plan "$TMP/nocmd.yaml" --backend kubernetes && has "entrypoint shown" "command: (none: the image's entrypoint)"

finish
