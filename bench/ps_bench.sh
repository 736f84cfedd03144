#!/usr/bin/env bash
# ps_bench.sh - issues 5, 6 and 20's throughput benchmark: the aggregate training throughput
# (samples/s) of dtrain's parameter-server job (2 workers + 1 PS, asynchronous) and of its
# all-reduce job (2 workers in a ring, batch 64 each) training the
# Fashion-MNIST MLP of examples/fashion_mnist_mlp.yaml (784-256-128-10, relu, Adam lr 1e-3,
# batch 64, one thread per process) against
#   (a) two independent `dtrain train` runs at the same time, one thread each: the bound
#       with no communication at all (aggregate = the sum of both runs' samples_per_sec);
#   (b) PyTorch DistributedDataParallel, gloo backend, 2 processes of one thread each
#       (bench/torch_ddp.py; aggregate over both processes, barrier to barrier).
# Targets (issue 20's, above issues 5 and 6's 0.60 and 0.80): ps/independent >= 0.85,
# ps/ddp >= 3; allreduce/independent >= 0.85, allreduce/ddp >= 5. The PS job also runs with parameterServer.sharedMemory: false (its
# tensors over loopback TCP) to show what the shared-memory lane gives, and so does the
# all-reduce job with allreduce.sharedMemory: false (its ring over loopback TCP).
#
#   bash bench/ps_bench.sh [options]
#     --coretype-auto   run everything with OPENBLAS_CORETYPE unset (OpenBLAS picks its
#                       kernels); default: the environment's OPENBLAS_CORETYPE, else Haswell
#     --epochs E        every dtrain run and job trains E epochs (default 1; a job's start - the
#                       ring's formation, the first shards - weighs on a 1-epoch run of ~1 s),
#                       and the DDP peer times E x 1000 steps
#     --steps N         the independent runs stop after N steps (--max-steps) instead of one
#                       epoch; also the DDP peer's timed steps per process (default 1000)
#     --ps-timeout S    give the PS job at most S seconds (default 600), then stop it
#     --rounds R        R rounds (default 1) of: the independent pair, the PS job, the
#                       all-reduce job, one after another; each ratio is then the median of
#                       the rounds' own ratios (a job against the pair of its round: this
#                       machine's speed drifts by 5-10% over a minute). DDP and the TCP jobs
#                       run once
#     --no-build        do not (re)build build/ first
#     --keep            keep the temporary directory (specs, job dirs, logs) and print it
#   DTRAIN=PATH picks the dtrain binary (default ./build/dtrain).
#
# The PS job is `dtrain run JOB.yaml --job-dir DIR` (a TrainJob with replicas {worker: 2,
# ps: 1}, one epoch); its figure is the sum of the workers' samples_per_sec in
# DIR/result.json (replicas.worker-*.result), else their samples / the job's wall seconds.
# If the job cannot run (yet), the script says so and goes on. build/ps_roundtrip (the data
# plane's round-trip benchmark) is run too when it exists, and build/core_link (what moving
# data between two CPUs costs on this machine) first.
set -euo pipefail
cd "$(dirname "$0")/.."

coretype_auto=0 steps="" epochs=1 ps_timeout=600 build=1 keep=0 rounds=1
while [ $# -gt 0 ]; do
    case "$1" in
        --coretype-auto) coretype_auto=1 ;;
        --steps) steps=${2:?--steps needs a value}; shift ;;
        --epochs) epochs=${2:?--epochs needs a value}; shift ;;
        --ps-timeout) ps_timeout=${2:?--ps-timeout needs a value}; shift ;;
        --rounds) rounds=${2:?--rounds needs a value}; shift ;;
        --no-build) build=0 ;;
        --keep) keep=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "ps_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$epochs" in ''|*[!0-9]*|0) echo "ps_bench.sh: --epochs: expected a positive integer, got '$epochs'" >&2; exit 2 ;; esac
case "$steps" in ''|*[!0-9]*) [ -z "$steps" ] || { echo "ps_bench.sh: --steps: expected a positive integer, got '$steps'" >&2; exit 2; } ;; esac
case "$rounds" in ''|*[!0-9]*|0) echo "ps_bench.sh: --rounds: expected a positive integer, got '$rounds'" >&2; exit 2 ;; esac
case "$ps_timeout" in ''|*[!0-9]*) echo "ps_bench.sh: --ps-timeout: expected seconds, got '$ps_timeout'" >&2; exit 2 ;; esac

if [ "$coretype_auto" = 1 ]; then
    unset OPENBLAS_CORETYPE
else
    export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
fi
PY=/usr/bin/python3
BIN=${DTRAIN:-./build/dtrain}   # DTRAIN=path: benchmark another build
[ "$build" = 0 ] || bash scripts/setup.sh release >/dev/null
[ -x "$BIN" ] || { echo "ps_bench.sh: $BIN not found (build first, or drop --no-build)" >&2; exit 1; }

TMP=$(mktemp -d /tmp/dtrain-psbench-XXXXXX)
export DTRAIN_HOME=$TMP/home   # keep the benchmark's jobs out of the user's `dtrain list`
cleanup() { if [ "$keep" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi; }
trap cleanup EXIT

json_get() { # FILE EXPR -> the value of EXPR (python, over the parsed file as r), or ""
    "$PY" - "$1" "$2" <<'EOF' 2>/dev/null || true
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    v = eval(sys.argv[2], {"r": r})
    if v is not None:
        print(v)
except Exception:
    pass
EOF
}

# The training spec: the example with one thread and --epochs epochs (default 1).
sed -e 's/^\(    threads:\).*/\1 1/' -e "s/^\\(    epochs:\\).*/\\1 $epochs/" \
    examples/fashion_mnist_mlp.yaml >"$TMP/single.yaml"
grep -q '^    threads: 1$' "$TMP/single.yaml" && grep -q "^    epochs: $epochs\$" "$TMP/single.yaml" || {
    echo "ps_bench.sh: examples/fashion_mnist_mlp.yaml no longer has training.threads/epochs where expected" >&2
    exit 1; }
# The PS job: the same spec as a TrainJob with 2 workers and 1 PS (asynchronous, the default).
sed -e 's/^\(  name:\).*/\1 fashion-mnist-mlp-ps/' "$TMP/single.yaml" >"$TMP/ps_job.yaml"
cat >>"$TMP/ps_job.yaml" <<'YAML'
  replicas: {worker: 2, ps: 1}
  strategy: parameter_server
YAML
# The PS job with its tensors over loopback TCP instead of the shared-memory lane.
sed -e 's/^\(  name:\).*/\1 fashion-mnist-mlp-ps-tcp/' "$TMP/ps_job.yaml" >"$TMP/ps_tcp_job.yaml"
echo '  parameterServer: {sharedMemory: false}' >>"$TMP/ps_tcp_job.yaml"
# The all-reduce job: the same spec, 2 workers in a ring (globalBatch scale: 64 per worker).
sed -e 's/^\(  name:\).*/\1 fashion-mnist-mlp-allreduce/' "$TMP/single.yaml" >"$TMP/allreduce_job.yaml"
cat >>"$TMP/allreduce_job.yaml" <<'YAML'
  replicas: {worker: 2}
  strategy: allreduce
  allreduce: {minibatchesPerShard: 16}
YAML
# The all-reduce job with its ring over loopback TCP instead of the shared-memory lane.
sed -e 's/^\(  name:\).*/\1 fashion-mnist-mlp-allreduce-tcp/' \
    -e 's/minibatchesPerShard: 16}/minibatchesPerShard: 16, sharedMemory: false}/' \
    "$TMP/allreduce_job.yaml" >"$TMP/allreduce_tcp_job.yaml"

echo "== ps_bench: Fashion-MNIST MLP 784-256-128-10, Adam lr 1e-3, batch 64, 1 thread per process =="
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset: OpenBLAS picks)}"
echo "dtrain: $("$BIN" version 2>&1 | tr '\n' ' ')"
cpu_model=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
echo "cores: $(nproc); cpu: ${cpu_model:-$(uname -m)}"
# what moving data between two CPUs costs here (bench/core_link.c): the jobs pay it, the
# independent runs do not
if [ -x build/core_link ] && [ "$(nproc)" -ge 2 ]; then
    timeout 120 build/core_link 2>&1 | sed 's/^/  /' || echo "  core_link failed (exit $?)"
fi

# (a) two independent single-process runs at the same time: run_indep sets $indep (empty when
# a run failed)
if [ -n "$steps" ]; then len=(--max-steps "$steps"); what="$steps steps"; else len=(); what="$epochs epoch(s)"; fi
run_indep() {
    echo "== (a) 2 independent dtrain train runs at once, threads 1, $what each =="
    local pids=() i r indep_ok=1
    indep=0
    for i in 0 1; do
        rm -rf "$TMP/single$i"
        "$BIN" train "$TMP/single.yaml" --job-dir "$TMP/single$i" --no-progress "${len[@]}" \
            >"$TMP/single$i.out" 2>"$TMP/single$i.err" &
        pids+=($!)
    done
    for i in 0 1; do
        if ! wait "${pids[$i]}"; then
            indep_ok=0
            echo "  run $i failed: $(tail -3 "$TMP/single$i.err" | tr '\n' ' ')"
            continue
        fi
        r=$(json_get "$TMP/single$i/result.json" 'r["train"]["samples_per_sec"]')
        [ -n "$r" ] || { indep_ok=0; echo "  run $i: no samples_per_sec in its result.json"; continue; }
        printf '  run %d: %8.0f samples/s (%s)\n' "$i" "$r" "$(json_get "$TMP/single$i/result.json" \
            '"%s steps, %s" % (r["train"]["steps"], "eval accuracy %s" % r["eval"]["accuracy"] if r["status"] == "Succeeded" else r["status"])')"
        indep=$(awk -v a="$indep" -v b="$r" 'BEGIN { print a + b }')
    done
    if [ "$indep_ok" = 1 ]; then printf 'independent_samples_per_sec %.1f\n' "$indep"; else indep=""; fi
}

# (b) PyTorch DDP, gloo, 2 processes
echo "== (b) PyTorch DDP, gloo, 2 processes x 1 thread, ${steps:-$((epochs * 1000))} steps each =="
ddp=""
if "$PY" bench/torch_ddp.py --steps "${steps:-$((epochs * 1000))}" >"$TMP/ddp.out" 2>"$TMP/ddp.err"; then
    ddp=$(sed -n 's/^ddp_gloo_samples_per_sec //p' "$TMP/ddp.out")
    grep -v '^ddp_gloo' "$TMP/ddp.out" | sed 's/^/  /'
    echo "ddp_gloo_samples_per_sec $ddp"
else
    echo "  DDP peer failed: $(tail -3 "$TMP/ddp.err" | tr '\n' ' ')"
fi

# run_job LABEL SPEC: run a dtrain TrainJob (--epochs epochs) and set $job_rate to its aggregate
# samples/s (the sum of the workers' samples_per_sec), empty when it could not run.
run_job() {
    local label=$1 spec=$2 job=$TMP/job-$1 rc t0 t1 sum samples wall
    job_rate=""
    rm -rf "$job"
    t0=$EPOCHREALTIME
    set +e
    timeout --signal=TERM --kill-after=30 "$ps_timeout" \
        "$BIN" run "$spec" --job-dir "$job" --stop-grace 2 >"$TMP/$label.out" 2>"$TMP/$label.err"
    rc=$?
    set -e
    t1=$EPOCHREALTIME
    if [ "$rc" = 0 ] && [ -f "$job/result.json" ]; then
        # prints a line per worker, then "TOTAL <sum of samples_per_sec> <samples> <wall seconds>"
        "$PY" - "$job/result.json" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
            >"$TMP/$label.figures" 2>&1 <<'EOF' || true
import json, sys
r = json.load(open(sys.argv[1]))
rate = samples = 0
for name, rep in sorted(r.get("replicas", {}).items()):
    if not name.startswith("worker-"):
        continue
    res = rep.get("result") or {}
    t = res.get("train") or res   # dtrain train's result.json has them under "train"
    sps, n = float(t.get("samples_per_sec") or 0), int(t.get("samples") or 0)
    acc = (res.get("eval") or {}).get("accuracy")
    print("  %s: %.0f samples/s, %d samples%s" % (name, sps, n, "" if acc is None else ", eval accuracy %s" % acc))
    rate, samples = rate + sps, samples + n
wall = float(r.get("wall_seconds") or sys.argv[2])
print("  total %d samples in %.2f s of job wall time: %.1f samples/s" % (samples, wall, samples / wall if wall > 0 else 0))
print("TOTAL %r %d %r" % (rate, samples, wall))
EOF
        grep -v '^TOTAL' "$TMP/$label.figures" || true
        read -r _ sum samples wall < <(grep '^TOTAL' "$TMP/$label.figures") || true
        if awk -v s="${sum:-0}" 'BEGIN { exit !(s > 0) }'; then
            job_rate=$sum
        elif awk -v s="${samples:-0}" -v w="${wall:-0}" 'BEGIN { exit !(s > 0 && w > 0) }'; then
            job_rate=$(awk -v s="$samples" -v w="$wall" 'BEGIN { print s / w }')
        fi
    fi
    if [ -n "$job_rate" ]; then
        printf '%s_samples_per_sec %.1f\n' "$label" "$job_rate"
    else
        echo "dtrain $label job: could not run (exit $rc: $(tail -2 "$TMP/$label.err" | tr '\n' ' '))"
    fi
}

# median LIST...: the middle value (the mean of the middle two for an even count), or ""
median() {
    [ $# -gt 0 ] || return 0
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# The rounds: the pair, the PS job, the all-reduce job; each job's ratio against its round's pair.
indeps=() pss=() ars=() ps_ratios=() ar_ratios=()
for ((round = 1; round <= rounds; round++)); do
    [ "$rounds" = 1 ] || echo "== round $round of $rounds =="
    run_indep
    [ -z "$indep" ] || indeps+=("$indep")
    echo "== dtrain PS job: 2 workers + 1 PS (async), threads 1, $epochs epoch(s) =="
    run_job ps "$TMP/ps_job.yaml"
    if [ -n "$job_rate" ]; then
        pss+=("$job_rate")
        [ -z "$indep" ] || ps_ratios+=("$(awk -v p="$job_rate" -v i="$indep" 'BEGIN { print p / i }')")
    fi
    echo "== dtrain all-reduce job: 2 workers in a ring, batch 64 each, threads 1, $epochs epoch(s) =="
    run_job allreduce "$TMP/allreduce_job.yaml"
    if [ -n "$job_rate" ]; then
        ars+=("$job_rate")
        [ -z "$indep" ] || ar_ratios+=("$(awk -v p="$job_rate" -v i="$indep" 'BEGIN { print p / i }')")
    fi
done
indep=$(median "${indeps[@]}") ps=$(median "${pss[@]}") ar=$(median "${ars[@]}")
echo "== dtrain PS job over TCP (parameterServer.sharedMemory: false), otherwise the same =="
run_job ps_tcp "$TMP/ps_tcp_job.yaml"
ps_tcp=$job_rate
echo "== dtrain all-reduce job over TCP (allreduce.sharedMemory: false), otherwise the same =="
run_job allreduce_tcp "$TMP/allreduce_tcp_job.yaml"
ar_tcp=$job_rate

# the data plane's round trip
if [ -x build/ps_roundtrip ]; then
    echo "== build/ps_roundtrip =="
    timeout 300 build/ps_roundtrip 2>&1 | sed 's/^/  /' || echo "  ps_roundtrip failed (exit $?)"
fi

medians=""
[ "$rounds" = 1 ] || medians=", medians of $rounds rounds"
echo "== summary (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-unset}$medians) =="
fmt() { if [ -n "$1" ]; then printf '%.1f' "$1"; else printf 'n/a'; fi; }
printf '  independent x2      %10s samples/s\n' "$(fmt "$indep")"
printf '  pytorch ddp         %10s samples/s\n' "$(fmt "$ddp")"
printf '  dtrain ps job       %10s samples/s\n' "$(fmt "$ps")"
printf '  dtrain ps job, TCP  %10s samples/s\n' "$(fmt "$ps_tcp")"
printf '  dtrain allreduce    %10s samples/s\n' "$(fmt "$ar")"
printf '  dtrain allreduce,TCP%10s samples/s\n' "$(fmt "$ar_tcp")"
# each_round LIST...: "; rounds: a b c" when there was more than one
each_round() { [ $# -le 1 ] || printf '; rounds: %s' "$(printf '%.2f ' "$@" | sed 's/ $//')"; }
if [ ${#ps_ratios[@]} -gt 0 ]; then
    awk -v r="$(median "${ps_ratios[@]}")" -v e="$(each_round "${ps_ratios[@]}")" 'BEGIN { printf "  RESULT ratio ps/independent = %.2f (target >= 0.85: %s%s)\n", r, (r >= 0.85 ? "met" : "NOT met"), e }'
fi
if [ -n "$ps" ] && [ -n "$ddp" ]; then
    awk -v p="$ps" -v d="$ddp" 'BEGIN { r = p / d; printf "  RESULT ratio ps/ddp = %.2f (target >= 3: %s)\n", r, (r >= 3 ? "met" : "NOT met") }'
fi
if [ -n "$ps_tcp" ] && [ -n "$indep" ]; then
    awk -v p="$ps_tcp" -v i="$indep" -v s="${ps:-0}" 'BEGIN { printf "  (over TCP: ps/independent = %.2f; the shared-memory lane gives %.2fx)\n", p / i, s / p }'
fi
if [ ${#ar_ratios[@]} -gt 0 ]; then
    awk -v r="$(median "${ar_ratios[@]}")" -v e="$(each_round "${ar_ratios[@]}")" 'BEGIN { printf "  RESULT ratio allreduce/independent = %.2f (target >= 0.85: %s%s)\n", r, (r >= 0.85 ? "met" : "NOT met"), e }'
fi
if [ -n "$ar_tcp" ] && [ -n "$indep" ]; then
    awk -v p="$ar_tcp" -v i="$indep" -v s="${ar:-0}" 'BEGIN { printf "  (over TCP: allreduce/independent = %.2f; the shared-memory lane gives %.2fx)\n", p / i, s / p }'
fi
if [ -n "$ar" ] && [ -n "$ddp" ]; then
    awk -v p="$ar" -v d="$ddp" 'BEGIN { r = p / d; printf "  RESULT ratio allreduce/ddp = %.2f (target >= 5: %s)\n", r, (r >= 5 ? "met" : "NOT met") }'
fi
if [ -n "$indep" ] && [ -n "$ddp" ]; then
    awk -v i="$indep" -v d="$ddp" 'BEGIN { printf "  (independent/ddp = %.2f: the most a PS job could reach against DDP here)\n", i / d }'
fi
