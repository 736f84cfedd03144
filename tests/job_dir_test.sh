#!/usr/bin/env bash
# job_dir_test.sh - where `dtrain run` may start a job (docs/JOBS.md, "The job directory"):
# a new, empty or own job dir is used; a directory of the user's files or another job's dir
# is refused, attached or detached, with nothing in it changed; a second job of a running
# job's name is refused and the first stays listed; of two detached starts on one new dir
# the loser says why, and only that. Real masters and replicas
# (tests/data/run/replica.sh).
source "$(dirname "$0")/lib.sh"
REPLICA="$SRC/tests/data/run/replica.sh"
export DTRAIN_HOME="$TMP/home"
STATE="$TMP/state"
mkdir -p "$STATE"
cd "$TMP"
cleanup() { pkill -KILL -f "$REPLICA" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

# job NAME ACTION ARGS...: write NAME.yaml, a TFJob of one worker running replica.sh.
job() {
    local name=$1; shift
    local args=""
    for a in "$@"; do args="$args, \"$a\""; done
    cat >"$name.yaml" <<EOF
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: $name
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: tensorflow
              image: x:1
              command: ["bash", "$REPLICA"]
              args: [${args#, }]
              env:
                - {name: STATE, value: "$STATE"}
EOF
}

# snapshot DIR: every file's name and checksum, sorted.
snapshot() { (cd "$1" && find . -print0 | sort -z | xargs -0 -r sh -c 'for f; do if [ -f "$f" ]; then md5sum "$f"; else echo "$f"; fi; done' _); }

job alpha exit 0
job beta exit 0

# ---- a project directory of the user's own files: refused, untouched ----
mkdir -p proj/data
printf 'my own spec\n' >proj/spec.yaml
printf '{"mine": 1}\n' >proj/result.json
printf '{"mine": 2}\n' >proj/status.json
printf '1,2\n' >proj/data/a.csv
before=$(snapshot proj)
expect_exit 1 "project dir: refused" -- "$DTRAIN" run alpha.yaml --job-dir proj &&
    expect_err_has "project dir: the dir and what it holds" \
        "proj is not empty and not a job dir (it holds data, result.json, spec.yaml and 1 more)"
[ "$(snapshot proj)" = "$before" ] && pass "project dir: nothing changed" ||
    fail "project dir changed: $(snapshot proj)"
expect_exit 1 "project dir detached: refused" -- "$DTRAIN" run alpha.yaml --job-dir proj --detach &&
    expect_err_has "project dir detached: why" "proj is not empty and not a job dir"
[ "$(snapshot proj)" = "$before" ] && pass "project dir detached: nothing changed (no master.log)" ||
    fail "project dir changed by --detach: $(snapshot proj)"
[ -z "$(ls "$STATE")" ] && pass "project dir: no replica ran" || fail "a replica ran: $(ls "$STATE")"

# ---- a file is no job dir ----
printf 'x\n' >afile
expect_exit 1 "a file: refused" -- "$DTRAIN" run alpha.yaml --job-dir afile &&
    expect_err_has "a file: named" "afile cannot be a job dir"

# ---- new and empty dirs are used ----
expect_exit 0 "new dir: runs" -- "$DTRAIN" run alpha.yaml --job-dir new/alpha &&
    grep -q '"status": "Succeeded"' new/alpha/result.json && pass "new dir: job succeeded"
mkdir -p empty/checkpoints # an empty subdirectory (a mount point made ready) is nothing
expect_exit 0 "empty dir: runs" -- "$DTRAIN" run beta.yaml --job-dir empty &&
    grep -q '"status": "Succeeded"' empty/result.json && pass "empty dir: job succeeded"

# ---- another job's dir: refused, untouched ----
before=$(snapshot new/alpha)
expect_exit 1 "another job's dir: refused" -- "$DTRAIN" run beta.yaml --job-dir new/alpha &&
    expect_err_has "another job's dir: named" "new/alpha is the job dir of another job (alpha), not of beta"
[ "$(snapshot new/alpha)" = "$before" ] && pass "another job's dir: nothing changed" ||
    fail "another job's dir changed"
# the same job's finished dir: resume it, not start it again (as before)
expect_exit 1 "own finished dir: refused" -- "$DTRAIN" run alpha.yaml --job-dir new/alpha &&
    expect_err_has "own finished dir: resume it" "holds a job already: resume it"

# ---- a start that failed before its journal (the job server's launch.log, a master.log):
# the job dir of this job, used again ----
mkdir -p failed/logs
printf 'launch\n' >failed/launch.log
printf 'an earlier start\n' >failed/master.log
expect_exit 0 "own job dir of a failed start: runs" -- "$DTRAIN" run alpha.yaml --job-dir failed --detach &&
    pass "own job dir of a failed start: started"
wait_for test -f failed/result.json && grep -q '"status": "Succeeded"' failed/result.json &&
    pass "own job dir of a failed start: job succeeded" || fail "failed/: $(cat failed/master.log)"

# ---- a second job of a running job's name, in another dir: refused; the first stays ----
job gamma exit 0
mv gamma.yaml gamma-quick.yaml # the second job: the same name, a worker that ends at once
job gamma wait-file "$STATE/go-gamma"
expect_exit 0 "same name: the first starts" -- "$DTRAIN" run gamma.yaml --job-dir g1 --detach
first=$(cd g1 && pwd -P)
expect_exit 1 "same name: the second is refused" -- "$DTRAIN" run gamma-quick.yaml --job-dir g2 &&
    expect_err_has "same name: the first's dir named" "a job named gamma is running in $first"
expect_exit 1 "same name detached: refused" -- "$DTRAIN" run gamma-quick.yaml --job-dir g3 --detach &&
    expect_err_has "same name detached: why" "a job named gamma is running in $first"
"$DTRAIN" list >"$TMP/list" 2>&1
grep -q "$first" "$TMP/list" && pass "same name: list shows the first" || fail "list: $(cat "$TMP/list")"
expect_exit 0 "same name: status of the first" -- "$DTRAIN" status gamma &&
    grep -q "Running" "$TMP/out" && pass "same name: status reaches the first"
ls g2/logs/*.log >/dev/null 2>&1 && fail "same name: a replica of the second was started" ||
    pass "same name: nothing of the second started"
touch "$STATE/go-gamma"
wait_for grep -qs '"status": "Succeeded"' g1/result.json && pass "same name: the first succeeds" ||
    fail "g1: $(cat g1/master.log)"
mpid=$(grep -o '"pid": [0-9]*' g1/master.json | grep -o '[0-9]*')
wait_for sh -c "! kill -0 $mpid 2>/dev/null" || fail "g1's master (pid $mpid) did not end"
# once the first's master has ended, the name may be used again (the dir of the refused one too)
expect_exit 0 "same name, the first ended: runs" -- "$DTRAIN" run gamma-quick.yaml --job-dir g2 &&
    pass "same name, the first ended: the second ran"
# ---- a job dir whose path leaves no room for a job's files (~4090 bytes, made through
# relative components): refused as too long, attached, detached and resumed, with nothing
# made anywhere (a cut path would name another dir) ----
mkdir long && cd long
deep=""
while [ ${#deep} -lt 3880 ]; do deep="$deep$(printf 'd%.0s' $(seq 199))/"; done
deep="$deep$(printf 'e%.0s' $(seq $((4090 - ${#deep}))))"
mkdir -p "$deep"
before=$(find "$TMP" -path "$TMP/state" -prune -o -print | sort)
for how in attached detached resumed; do
    case $how in
    attached) args=("$TMP/alpha.yaml" --job-dir "$deep") ;;
    detached) args=("$TMP/alpha.yaml" --job-dir "$deep" --detach) ;;
    resumed) args=(--resume "$deep") ;;
    esac
    expect_exit 2 "job dir too long, $how: refused" -- "$DTRAIN" run "${args[@]}" &&
        expect_err_has "job dir too long, $how: says so" "path too long"
done
[ "$(find "$TMP" -path "$TMP/state" -prune -o -print | sort)" = "$before" ] &&
    pass "job dir too long: nothing made anywhere" ||
    fail "job dir too long: made $(diff <(echo "$before") <(find "$TMP" -path "$TMP/state" -prune -o -print | sort) | head -5)"
cd "$TMP"
# ---- two detached starts on one new dir at once: one master; the loser says why (its own
# reason, not a line of the winner's), over several rounds since which one wins varies ----
# (the winner's job waits for a file: a job that ended at once would leave the loser a dir
# that holds a finished job, which is refused with another reason, rightly)
for i in 1 2 3 4 5; do
    job "race$i" wait-file "$STATE/go-race$i"
    ("$DTRAIN" run "race$i.yaml" --job-dir "r$i" --detach >"$TMP/o1" 2>"$TMP/e1"; echo $? >"$TMP/rc1") &
    ("$DTRAIN" run "race$i.yaml" --job-dir "r$i" --detach >"$TMP/o2" 2>"$TMP/e2"; echo $? >"$TMP/rc2") &
    wait
    rcs="$(cat "$TMP/rc1") $(cat "$TMP/rc2")"
    case "$rcs" in
    "0 1") lose=2 ;;
    "1 0") lose=1 ;;
    *) fail "race $i: exit codes $rcs, want one 0 and one 1: $(cat "$TMP/e1" "$TMP/e2")"; continue ;;
    esac
    wpid=$(grep -o '"pid": [0-9]*' "r$i/master.json" | grep -o '[0-9]*')
    # the winner's pid, unless the loser came while it had the lock but not yet its pid in it
    want="dtrain run: $(cd "r$i" && pwd -P): a master (pid $wpid) is already running this job"
    alt="dtrain run: $(cd "r$i" && pwd -P): another master is already running this job (it has just started)"
    got=$(cat "$TMP/e$lose")
    if { [ "$got" = "$want" ] || [ "$got" = "$alt" ]; } && [ ! -s "$TMP/o$lose" ]; then
        pass "race $i: the loser says why, and only that"
    else
        fail "race $i: loser's stdout '$(cat "$TMP/o$lose")', stderr '$(cat "$TMP/e$lose")', want '$want'"
    fi
    touch "$STATE/go-race$i"
    wait_for grep -qs '"status": "Succeeded"' "r$i/result.json" || fail "race $i: the winner's job did not end"
done
finish
