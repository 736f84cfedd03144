#!/usr/bin/env bash
# tune_test.sh - `dtrain tune` end to end, real processes: a bad experiment refused with
# FILE:LINE before any job; a Katib Experiment (random, 4 trials, 2 in parallel) over a tiny
# iris TrainJob through the sweep's own server (labels on the jobs, trials printed as they end,
# the best trial's model in DIR/best, `dtrain tune status`); a `dtrain tune` killed with
# SIGKILL mid-experiment and started again, which runs no finished trial again and adopts the
# running ones; an ASHA search whose paused trial is promoted and resumes from its checkpoint
# (its steps continue); medianstop stopping a trial through the server, its checkpoint kept;
# Katib's StdOut collector on a python3 script's `accuracy=0.5` lines; the server's dashboard
# showing the experiment's trials and the objective's charts (headless Chromium).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export DTRAIN_HOME="$TMP/home"
unset DTRAIN_SERVER DTRAIN_SERVER_TOKEN
cd "$TMP"

# at_exit: no sweep server or job of this test outlives it
cleanup() {
    for f in "$TMP"/*/server/server.json; do
        [ -f "$f" ] || continue
        pid=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$f" 2>/dev/null)
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
    done
    for m in "$TMP"/*/server/jobs/*/master.json; do
        [ -f "$m" ] && "$DTRAIN" stop --now "$(dirname "$m")" >/dev/null 2>&1
    done
    [ -n "${TUNE_PID:-}" ] && kill -9 "$TUNE_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

# state FIELD-EXPRESSION: evaluate a python expression over state.json as s
state() { # DIR EXPR
    $PY - "$1/state.json" "$2" <<'PYEOF'
import json, sys
s = json.load(open(sys.argv[1]))
t = s["trials"]
print(eval(sys.argv[2]))
PYEOF
}

# iris_experiment NAME ALGORITHM MAX PARALLEL EXTRA_ALGORITHM_YAML
iris_experiment() {
    cat >"$1.yaml" <<YAML
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata:
  name: $1
spec:
  objective:
    type: maximize
    objectiveMetricName: accuracy
    additionalMetricNames: [loss]
  algorithm:
    algorithmName: $2
  parallelTrialCount: $4
  maxTrialCount: $3
  maxFailedTrialCount: 2
  parameters:
    - name: lr
      parameterType: double
      feasibleSpace: {min: "0.002", max: "0.05"}
    - name: units
      parameterType: int
      feasibleSpace: {min: "4", max: "24"}
  trialTemplate:
    trialParameters:
      - name: learningRate
        reference: lr
      - name: hidden
        reference: units
    trialSpec:
      apiVersion: dtrain/v1
      kind: TrainJob
      spec:
        seed: 3
        data:
          train: {format: csv, path: $SRC/examples/data/iris.data, label_column: -1, header: false}
          eval_fraction: 0.2
          normalize: standard
          shuffle: true
        model:
          input: [4]
          layers:
            - type: dense
              name: fc1
              units: \${trialParameters.hidden}
              activation: relu
            - {type: dense, name: logits, units: 3}
        loss: softmax_cross_entropy
        optimizer:
          type: adam
          learning_rate: \${trialParameters.learningRate}
        training:
          batch_size: 16
          epochs: 30
          threads: 1
YAML
}

# ---- a bad experiment: refused with FILE:LINE, nothing submitted ----
if section bad; then
    iris_experiment bad random 4 2
    sed -i 's/algorithmName: random/algorithmName: simulated-annealing/' bad.yaml
    line=$(grep -n 'simulated-annealing' bad.yaml | cut -d: -f1)
    expect_exit 2 "bad experiment" -- "$DTRAIN" tune bad.yaml --dir "$TMP/bad-dir" &&
        expect_err_has "a bad experiment names FILE:LINE" "bad.yaml:$line:"
    [ ! -e "$TMP/bad-dir/server" ] && [ ! -e "$TMP/bad-dir/state.json" ] &&
        pass "no server started and no trial recorded for a bad experiment" ||
        fail "bad experiment left $(ls -R "$TMP/bad-dir" 2>&1 | head -5)"
fi

# ---- random search, 4 trials, 2 in parallel, through the sweep's own server ----
if section random; then
    iris_experiment iris-random random 4 2
    if expect_exit 0 "random search" -- "$DTRAIN" tune iris-random.yaml --dir "$TMP/random" --seed 7; then
        pass "dtrain tune ran a random search to its end"
    fi
    cp "$TMP/out" "$TMP/random.out"
    n=$(grep -c '^\[[0-9:]*\] trial iris-random-00[0-3] Succeeded: lr=[0-9.e-]* units=[0-9]*  accuracy=[0-9.]*' "$TMP/random.out")
    [ "$n" = 4 ] && pass "each trial printed as it ended (name, parameters, objective, state)" ||
        fail "trial lines: $n of 4: $(cat "$TMP/random.out")"
    grep -q '^best trial iris-random-00[0-3]: lr=.* units=.*  accuracy=' "$TMP/random.out" &&
        pass "the best trial's parameters and objective printed at the end" || fail "no best line"
    [ "$(state "$TMP/random" 'len(t), [x["state"] for x in t].count("Succeeded"), s["status"]')" = "(4, 4, 'Succeeded')" ] &&
        pass "state.json: 4 trials Succeeded, experiment Succeeded" ||
        fail "state: $(state "$TMP/random" '[(x["name"], x["state"], x["message"]) for x in t]')"
    # Katib's default strategy when maximizing: max over the epochs' values and the result
    state "$TMP/random" 'all(x["objective"] == max([o["value"] for o in x["observations"]] + [json.load(open(x["jobDir"] + "/result.json"))["eval"]["accuracy"]]) and len(x["observations"]) == 30 and [o["resource"] for o in x["observations"]] == list(range(1, 31)) and "loss" in x["metrics"] for x in t)' | grep -q True &&
        pass "each trial's objective: the best of its 30 epochs' TensorBoard values and result.json's eval.accuracy" ||
        fail "objectives: $(state "$TMP/random" '[(x["objective"], len(x["observations"])) for x in t]')"
    # the labels: the server's journal/specs are the server's; the trial manifests are ours
    [ "$(ls "$TMP/random/trials" | wc -l)" = 4 ] && [ -f "$TMP/random/experiment.yaml" ] &&
        pass "EXPERIMENT_DIR has experiment.yaml and trials/<trial>.yaml" || fail "$(ls -R "$TMP/random")"
    grep -q 'katib.kubeflow.org/experiment' "$TMP/random/server/journal.jsonl" &&
        grep -q '"dtrain.io/trial": *"iris-random-003"' "$TMP/random/server/journal.jsonl" &&
        pass "the trials' jobs carry the experiment's labels" || fail "labels: $(head -c 800 "$TMP/random/server/journal.jsonl")"
    best=$(state "$TMP/random" 's["best"]["trial"]')
    [ -f "$TMP/random/best/model.safetensors" ] && [ -f "$TMP/random/best.json" ] &&
        grep -q "\"trial\": \"$best\"" "$TMP/random/best.json" &&
        pass "the best trial's exported model is in DIR/best/ and best.json names it" ||
        fail "best: $(ls "$TMP/random/best" 2>&1) $(cat "$TMP/random/best.json" 2>&1)"
    # the server it started is gone
    pid=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$TMP/random/server/server.json")
    ! kill -0 "$pid" 2>/dev/null && pass "the sweep's server stopped at the end" || fail "server $pid still runs"
    "$DTRAIN" tune status "$TMP/random" >"$TMP/status.out" 2>&1 &&
        [ "$(grep -c '^iris-random-00[0-3] *Succeeded' "$TMP/status.out")" = 4 ] &&
        grep -q "^best: $best" "$TMP/status.out" &&
        pass "dtrain tune status shows the trials table and the best" || fail "status: $(cat "$TMP/status.out")"
    "$DTRAIN" tune status "$TMP/random" --json | $PY -c 'import json,sys; s=json.load(sys.stdin); assert len(s["trials"]) == 4' &&
        pass "dtrain tune status --json is state.json" || fail "status --json"
fi

# ---- the server's dashboard: the experiment's trials table and charts (headless Chromium) ----
if section dashboard && [ -f "$TMP/random/state.json" ]; then
    JS="$SRC/tests/js"
    if [ ! -d "$JS/node_modules/playwright-core" ] || [ ! -x /usr/lib/chromium/chromium ]; then
        fail "playwright-core (tests/js/node_modules) or Debian's chromium is missing (scripts/setup.sh installs them)"
    else
        # the sweep's server again, on its dir: it still has the experiment the runner sent it
        "$DTRAIN" server --dir "$TMP/random/server" >"$TMP/dash-server.log" 2>&1 &
        DASH_PID=$!
        new_server() { [ "$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$TMP/random/server/server.json" 2>/dev/null)" = "$DASH_PID" ]; }
        if wait_for new_server; then
            url=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$TMP/random/server/server.json")
            tok=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$TMP/random/server/server.json")
            SHOT=${DT_TEST_OUTPUT_DIR:-$TMP}/tune_dashboard.png
            if (cd "$JS" && node tune_dashboard_check.mjs "$url" "$tok" iris-random "$SHOT") >"$TMP/browser.out" 2>&1; then
                while read -r line; do pass "dashboard: ${line#ok   }"; done < <(grep '^ok' "$TMP/browser.out")
            else
                fail "dashboard: $(cat "$TMP/browser.out")"
            fi
        else
            fail "the server did not start again on $TMP/random/server: $(cat "$TMP/dash-server.log")"
        fi
        kill "$DASH_PID" 2>/dev/null
        wait "$DASH_PID" 2>/dev/null
    fi
fi

# synthetic_experiment NAME ALGORITHM MAX PARALLEL EPOCHS_PARAM_YAML ALGORITHM_SETTINGS_YAML
# A learnable synthetic task whose epochs take about a second each: slow enough to be caught
# mid-trial. Under AddressSanitizer a step is some 4 times slower, so there an epoch has about a
# quarter of the samples (16000: 1800 steps of 8): the same second, and the run stays short.
SYN_SAMPLES=60000
ldd "$DTRAIN" 2>/dev/null | grep -q libasan && SYN_SAMPLES=16000
synthetic_experiment() {
    cat >"$1.yaml" <<YAML
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata:
  name: $1
spec:
  objective:
    type: maximize
    objectiveMetricName: eval/accuracy
  algorithm:
    algorithmName: $2
$6
  parallelTrialCount: $4
  maxTrialCount: $3
  parameters:
    - name: lr
      parameterType: categorical
      feasibleSpace: {list: ["0.01", "0.0000001"]}
    - name: epochs
      parameterType: int
      feasibleSpace: {min: "1", max: "$5"}
  trialTemplate:
    trialParameters:
      - {name: lr, reference: lr}
      - {name: epochs, reference: epochs}
    trialSpec:
      apiVersion: dtrain/v1
      kind: TrainJob
      spec:
        seed: 1
        data:
          train: {format: synthetic, samples: $SYN_SAMPLES, shape: [128], classes: 4}
          eval_fraction: 0.1
        model:
          input: [128]
          layers:
            - {type: dense, name: fc1, units: 1024, activation: relu}
            - {type: dense, name: logits, units: 4}
        loss: softmax_cross_entropy
        optimizer:
          type: sgd
          learning_rate: \${trialParameters.lr}
        training:
          batch_size: 8
          epochs: \${trialParameters.epochs}
          threads: 1
YAML
}

# ---- kill -9 mid-experiment, then the same command again ----
if section restart; then
    synthetic_experiment killed random 4 2 2 ""
    "$DTRAIN" tune killed.yaml --dir "$TMP/killed" --seed 3 >"$TMP/killed1.out" 2>&1 &
    TUNE_PID=$!
    one_done_one_running() {
        [ -f "$TMP/killed/state.json" ] &&
            [ "$(state "$TMP/killed" '[x["state"] for x in t].count("Succeeded") >= 1 and any(x["state"] == "Running" and x["jobDir"] for x in t)' 2>/dev/null)" = True ]
    }
    WAIT_POLLS=1200 wait_for one_done_one_running || fail "no trial finished while another ran: $(cat "$TMP/killed1.out")"
    kill -9 "$TUNE_PID"
    wait "$TUNE_PID" 2>/dev/null
    TUNE_PID=
    done_before=$(state "$TMP/killed" '" ".join(x["name"] + "@" + x.get("completionTime", "") for x in t if x["state"] == "Succeeded")')
    running_before=$(state "$TMP/killed" '" ".join(x["name"] for x in t if x["state"] == "Running")')
    if expect_exit 0 "restarted experiment" -- "$DTRAIN" tune killed.yaml --dir "$TMP/killed" --seed 99; then
        pass "the same command after kill -9 finished the experiment"
    fi
    cp "$TMP/out" "$TMP/killed2.out"
    grep -q 'continuing from' "$TMP/killed2.out" && pass "the restarted runner continued from state.json" ||
        fail "no 'continuing': $(cat "$TMP/killed2.out")"
    ok=1
    for d in $done_before; do
        name=${d%@*}
        grep -q "trial $name started" "$TMP/killed2.out" && ok=0
        [ "$(state "$TMP/killed" "[x['name'] + '@' + x.get('completionTime', '') for x in t if x['name'] == '$name'][0]")" = "$d" ] || ok=0
        [ "$(grep -c '"ev": *"start"' "$TMP/killed/server/jobs/$name/journal.jsonl")" = 1 ] || ok=0
    done
    [ $ok = 1 ] && pass "no finished trial ran again ($done_before)" || fail "a finished trial ran again: $(cat "$TMP/killed2.out")"
    ok=1
    for name in $running_before; do
        grep -q "trial $name: adopted its job" "$TMP/killed2.out" || ok=0
    done
    [ $ok = 1 ] && pass "trials whose jobs still ran were adopted ($running_before)" || fail "adoption: $(cat "$TMP/killed2.out")"
    [ "$(state "$TMP/killed" 'len(t), [x["state"] for x in t].count("Succeeded")')" = "(4, 4)" ] &&
        pass "4 trials in all, each Succeeded once" || fail "$(state "$TMP/killed" '[(x["name"], x["state"]) for x in t]')"
    [ "$(state "$TMP/killed" 's["seed"]')" = 3 ] &&
        pass "the continued experiment kept its seed (3, not the second command's 99)" ||
        fail "seed $(state "$TMP/killed" 's["seed"]')"
fi

# ---- ASHA: a paused trial promoted resumes from its checkpoint ----
if section asha; then
    synthetic_experiment ashaexp asha 4 1 3 "    algorithmSettings:
      - {name: resource_name, value: epochs}
      - {name: min_resource, value: \"1\"}
      - {name: reduction_factor, value: \"2\"}"
    if expect_exit 0 "asha" -- "$DTRAIN" tune ashaexp.yaml --dir "$TMP/asha" --seed 1; then
        pass "an ASHA search ran to its end"
    fi
    cp "$TMP/out" "$TMP/asha.out"
    promoted=$(grep -o 'trial ashaexp-[0-9]* promoted' "$TMP/asha.out" | awk '{print $2}' | head -1)
    if [ -n "$promoted" ] && grep -q "trial $promoted paused at epoch" "$TMP/asha.out"; then
        pass "trial $promoted was paused at a rung, then promoted"
        jd=$(state "$TMP/asha" "[x['jobDir'] for x in t if x['name'] == '$promoted'][0]")
        $PY - "$jd" "$SYN_SAMPLES" <<'PYEOF' && pass "the promoted trial resumed from its checkpoint: its steps continued (all epochs' steps, only the rest trained after the resume)" || fail "steps did not continue: $(cat "$jd/logs/worker-0.log")"
import json, re, sys
log = open(sys.argv[1] + "/logs/worker-0.log").read()
stopped = [int(x) for x in re.findall(r"stopped \(Terminated\) at step (\d+)", log)]
assert stopped and stopped[-1] > 0, log
assert log.count("attempt") >= 2, log
r = json.load(open(sys.argv[1] + "/result.json"))["replicas"]["worker-0"]["result"]["train"]
spe = int(sys.argv[2]) * 9 // 10 // 8  # the training samples (eval_fraction 0.1) per batch of 8
assert r["steps"] == 3 * spe, r
# the last run trained from the step it was stopped at, not from 0
assert r["samples"] == (r["steps"] - stopped[-1]) * 8, (r, stopped)
PYEOF
    else
        fail "no trial paused then promoted: $(cat "$TMP/asha.out")"
    fi
fi

# ---- medianstop: a trial below the median is stopped through the server, its checkpoint kept ----
if section medianstop; then
    synthetic_experiment medstop random 5 1 3 ""
    $PY - medstop.yaml <<'PYEOF'
import sys
p = sys.argv[1]
s = open(p).read()
s = s.replace("  parallelTrialCount: 1", """  earlyStopping:
    algorithmName: medianstop
    algorithmSettings:
      - {name: min_trials_required, value: "1"}
      - {name: start_step, value: "1"}
  parallelTrialCount: 1""")
s = s.replace("""    - name: epochs
      parameterType: int
      feasibleSpace: {min: "1", max: "3"}""", """    - name: epochs
      parameterType: discrete
      feasibleSpace: {list: ["3"]}""")
open(p, "w").write(s)
PYEOF
    # seed 5 draws lr 1e-7, 1e-7, 0.01, 1e-7, 0.01: the second trial is below the first's median
    if expect_exit 0 "medianstop" -- "$DTRAIN" tune medstop.yaml --dir "$TMP/medstop" --seed 5; then
        pass "a medianstop experiment ran to its end"
    fi
    cp "$TMP/out" "$TMP/medstop.out"
    stopped=$(state "$TMP/medstop" '" ".join(x["name"] for x in t if x["state"] == "EarlyStopped")')
    if [ -n "$stopped" ]; then
        ok=1
        for name in $stopped; do
            jd=$(state "$TMP/medstop" "[x['jobDir'] for x in t if x['name'] == '$name'][0]")
            grep -q "trial $name EarlyStopped: .*stopped early at epoch" "$TMP/medstop.out" || ok=0
            grep -q 'stopped (Terminated) at step [1-9]' "$jd/logs/worker-0.log" || ok=0
            ls "$jd"/replicas/worker-0/checkpoints/ckpt-*.safetensors >/dev/null 2>&1 || ok=0
            [ "$(state "$TMP/medstop" "[x['jobState'] for x in t if x['name'] == '$name'][0]")" = Stopped ] || ok=0
        done
        [ $ok = 1 ] && pass "trials below the median stopped early through the server, checkpoints kept ($stopped)" ||
            fail "early stop: $(cat "$TMP/medstop.out")"
    else
        fail "no trial stopped early: $(cat "$TMP/medstop.out")"
    fi
    [ "$(state "$TMP/medstop" 's["best"]["parameters"]["lr"]')" = 0.01 ] &&
        pass "the best trial is one that ran to its end" || fail "best: $(state "$TMP/medstop" 's["best"]')"
fi

# ---- Katib's StdOut collector: a python3 script printing accuracy=... ----
if section stdout; then
    cat >report.py <<'PY'
import sys
acc = float(sys.argv[1])
for epoch in (1, 2):
    print(f"epoch={epoch} accuracy={acc / 2 * epoch / 2:.4f} loss=0.1", flush=True)
print(f"accuracy={acc}")
PY
    cat >stdout.yaml <<YAML
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata:
  name: printer
spec:
  objective:
    type: maximize
    objectiveMetricName: accuracy
    metricStrategies:
      - {name: accuracy, value: latest}
  algorithm:
    algorithmName: grid
  parallelTrialCount: 2
  maxTrialCount: 2
  metricsCollectorSpec:
    collector: {kind: StdOut}
  parameters:
    - name: acc
      parameterType: discrete
      feasibleSpace: {list: ["0.5", "0.25"]}
  trialTemplate:
    primaryContainerName: tensorflow
    trialParameters:
      - {name: acc, reference: acc}
    trialSpec:
      apiVersion: kubeflow.org/v1
      kind: TFJob
      spec:
        tfReplicaSpecs:
          Worker:
            replicas: 1
            restartPolicy: Never
            template:
              spec:
                containers:
                  - name: tensorflow
                    image: python:3
                    command: ["$PY", "$TMP/report.py", "\${trialParameters.acc}"]
YAML
    if expect_exit 0 "stdout collector" -- "$DTRAIN" tune stdout.yaml --dir "$TMP/printer"; then
        pass "a StdOut experiment ran"
    fi
    cp "$TMP/out" "$TMP/printer.out"
    [ "$(state "$TMP/printer" 'sorted((x["parameters"]["acc"], x["objective"], len(x["observations"])) for x in t)')" = "[('0.25', 0.25, 3), ('0.5', 0.5, 3)]" ] &&
        pass "objectives from 'accuracy=' lines: 0.5 and 0.25, with the epochs' observations" ||
        fail "stdout objectives: $(state "$TMP/printer" '[(x["parameters"], x["objective"], x["observations"], x["message"]) for x in t]')"
    grep -q '^best trial printer-00[01]: acc=0.5  accuracy=0.5$' "$TMP/printer.out" &&
        pass "the best is the trial that printed accuracy=0.5" || fail "best: $(cat "$TMP/printer.out")"
fi

# ---- an experiment larger than the server keeps (1 MiB): its observations thinned there ----
if section big; then
    cat >many.py <<'PY'
import sys
for epoch in range(1, 12001):
    print(f"epoch={epoch} accuracy={epoch / 12000 * float(sys.argv[1]):.6f}")
PY
    sed -e 's/name: printer/name: many/' -e "s|$TMP/report.py|$TMP/many.py|" stdout.yaml >many.yaml
    if expect_exit 0 "big experiment" -- "$DTRAIN" tune many.yaml --dir "$TMP/many"; then
        $PY - "$TMP/many/state.json" "$TMP/many/server/experiments/many.json" <<'PYEOF' && pass "state.json keeps all 12000 observations a trial; the server's copy (under 1 MiB) at most 200, the last kept" || fail "big: $(cat "$TMP/err")"
import json, os, sys
s = json.load(open(sys.argv[1]))
assert [len(t["observations"]) for t in s["trials"]] == [12000, 12000], [len(t["observations"]) for t in s["trials"]]
assert os.path.getsize(sys.argv[2]) <= 1 << 20, os.path.getsize(sys.argv[2])
c = json.load(open(sys.argv[2]))
for t, u in zip(s["trials"], c["trials"]):
    assert 2 <= len(u["observations"]) <= 200, len(u["observations"])
    assert u["observations"][-1] == t["observations"][-1] and u["objective"] == t["objective"]
PYEOF
    fi
fi

finish
