#!/usr/bin/env bash
# netns_bench.sh - issue 20's links that are not loopback: the all-reduce and PS jobs of the
# Fashion-MNIST MLP (784-256-128-10, batch 64 a worker, 1 thread a process, 1 epoch) with
# every replica on its own simulated host (`dtrain run --netns`: network namespaces on a
# bridge, each link limited with `tc ... tbf` in both directions), against what the link
# allows for the model's gradient:
#   all-reduce, N workers in a ring: a step moves 2 (N-1)/N x G bytes each way on every
#     member's link, so the link allows RATE / (2 (N-1)/N x G) steps/s, x 64 N samples;
#   PS, 1 PS + N-1 workers (asynchronous): each worker step pushes G and pulls G through the
#     PS's link, which allows RATE / G worker steps/s, x 64 samples.
# G is the model's 235,146 float32 parameters (940,584 bytes; framing is not counted).
# On the 1gbit link the PS job also runs with parameterServer.wireDtype: bfloat16 (row
# ps-bf16): a step's push and the values that come back each carry G/2, so the link allows
# RATE / (G/2) worker steps/s; and the all-reduce job with allreduce.wireDtype: bfloat16
# (row allreduce-bf16): the ring moves 2 (N-1)/N x G/2 bytes a step, so the link allows
# twice the float32 ring's steps. Every row also prints the job's final eval accuracy (the
# chief's, in result.json), to compare bf16 with float32 from the same run. The PS jobs
# run with parameterServer.sharedMemory: false and the all-reduce job with
# allreduce.sharedMemory: false (the shared-memory lanes would take the tensors past the
# links: the namespaces share one kernel). On this 2-core machine the
# processes also share the CPU: the no-communication bound (N independent single-thread
# runs at once) is printed beside the link's, and the lower of the two is the one to meet.
#
#   bash bench/netns_bench.sh [--rates "1gbit 10gbit"] [--hosts "2 4"]
#                             [--kinds "allreduce allreduce-bf16 ps ps-bf16"] [--keep]
# (--kinds: the jobs to run, default all; the -bf16 kinds run on the 1gbit link only)
# Needs root (ip netns, tc). DTRAIN=PATH picks the binary (default ./build/dtrain).
set -euo pipefail
cd "$(dirname "$0")/.."
rates="1gbit 10gbit" hosts_list="2 4" kinds_list="allreduce allreduce-bf16 ps ps-bf16" keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --rates) rates=${2:?}; shift ;;
        --hosts) hosts_list=${2:?}; shift ;;
        --kinds) kinds_list=${2:?}; shift ;;
        --keep) keep=1 ;;
        *) echo "usage: $0 [--rates \"1gbit 10gbit\"] [--hosts \"2 4\"] [--kinds \"allreduce allreduce-bf16 ps ps-bf16\"] [--keep]" >&2; exit 2 ;;
    esac
    shift
done
BIN=${DTRAIN:-./build/dtrain}
PY=/usr/bin/python3
G_BYTES=940584
TMP=$(mktemp -d /tmp/dtrain-netnsbench-XXXXXX)
export DTRAIN_HOME=$TMP/home
BR=dtnb$$ NET=10.80.$(($$ % 250)) MAXH=0
teardown() {
    for i in $(seq 0 $((MAXH - 1))); do ip netns del "nb$i-$$" 2>/dev/null || true; done
    ip link del "$BR" 2>/dev/null || true
    MAXH=0
}
trap 'teardown; [ $keep = 1 ] && echo "kept $TMP" || rm -rf "$TMP"' EXIT

# hosts N RATE: N namespaces nb0..nbN-1 at NET.1.. on the bridge at NET.254, every veth
# limited to RATE each way (tbf on the bridge side shapes what goes to the host, inside the
# namespace what leaves it)
hosts() {
    local n=$1 rate=$2 burst
    teardown
    case "$rate" in *gbit) burst=$(( ${rate%gbit} * 1024 ))kb ;; *) burst=256kb ;; esac
    ip link add "$BR" type bridge && ip addr add "$NET.254/24" dev "$BR" && ip link set "$BR" up
    for i in $(seq 0 $((n - 1))); do
        ip netns add "nb$i-$$"
        ip link add "vb$i-$$" type veth peer name eth0 netns "nb$i-$$"
        ip link set "vb$i-$$" master "$BR" && ip link set "vb$i-$$" up
        ip -n "nb$i-$$" addr add "$NET.$((i + 1))/24" dev eth0
        ip -n "nb$i-$$" link set eth0 up && ip -n "nb$i-$$" link set lo up
        tc qdisc add dev "vb$i-$$" root tbf rate "$rate" burst "$burst" latency 50ms
        tc -n "nb$i-$$" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
    done
    MAXH=$n
}

netns_arg() {
    local n=$1 s=""
    for i in $(seq 0 $((n - 1))); do s="$s${s:+,}nb$i-$$=$NET.$((i + 1))"; done
    echo "$s"
}

# spec NAME KIND N: the example with one thread and one epoch, as an all-reduce job of N
# workers or a PS job of 1 PS + N-1 workers
spec() {
    sed -e 's/^\(    threads:\).*/\1 1/' -e 's/^\(    epochs:\).*/\1 1/' \
        -e "s/^\(  name:\).*/\1 $1/" examples/fashion_mnist_mlp.yaml >"$TMP/$1.yaml"
    case "$2" in
    allreduce)
        printf '  replicas: {worker: %d}\n  strategy: allreduce\n  allreduce: {minibatchesPerShard: 16, sharedMemory: false}\n' "$3" ;;
    allreduce-bf16)
        printf '  replicas: {worker: %d}\n  strategy: allreduce\n  allreduce: {minibatchesPerShard: 16, sharedMemory: false, wireDtype: bfloat16}\n' "$3" ;;
    ps)
        printf '  replicas: {worker: %d, ps: 1}\n  strategy: parameter_server\n  parameterServer: {sharedMemory: false}\n' $(($3 - 1)) ;;
    ps-bf16)
        printf '  replicas: {worker: %d, ps: 1}\n  strategy: parameter_server\n  parameterServer: {sharedMemory: false, wireDtype: bfloat16}\n' $(($3 - 1)) ;;
    esac >>"$TMP/$1.yaml"
}

# job NAME N: run it across N hosts; print the workers' aggregate samples/s and the final
# eval accuracy (the chief's: worker-0 when there is no chief; "-" when none reported)
job() {
    local dir="$TMP/$1"
    "$BIN" run "$TMP/$1.yaml" --job-dir "$dir" --bind "$NET.254" --netns "$(netns_arg "$2")" \
        >"$TMP/$1.out" 2>&1 || { echo "FAILED: $(tail -3 "$TMP/$1.out")" >&2; echo "0 -"; return; }
    "$PY" - "$dir/result.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
res = lambda n: (r["replicas"].get(n) or {}).get("result") or {}
sps = sum(float((res(n).get("train") or {}).get("samples_per_sec") or 0)
          for n in r["replicas"] if n.startswith("worker-"))
acc = (res("chief-0").get("eval") or res("worker-0").get("eval") or {}).get("accuracy")
print(sps, "-" if acc is None else "%.4f" % acc)
EOF
}

bits() { # "1gbit" -> bits/s
    case "$1" in *gbit) echo $(( ${1%gbit} * 1000000000 )) ;; *mbit) echo $(( ${1%mbit} * 1000000 )) ;; esac
}

echo "== netns_bench: Fashion-MNIST MLP, G = $G_BYTES bytes of gradient, batch 64 a worker =="
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); cores: $(nproc); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}"
# the no-communication bound: N independent single-thread runs at once (1000 steps each)
sed -e 's/^\(    threads:\).*/\1 1/' examples/fashion_mnist_mlp.yaml >"$TMP/single.yaml"
declare -A nocomm
for n in $hosts_list; do
    pids=()
    for i in $(seq 1 "$n"); do
        "$BIN" train "$TMP/single.yaml" --job-dir "$TMP/single$n-$i" --max-steps 1000 --no-progress >/dev/null 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    # the sum of the runs' own rates (data loading left out, as the jobs' figures leave it
    # out): the higher, stricter bound
    nocomm[$n]=$(cat "$TMP"/single$n-*/result.json | grep -o '"samples_per_sec": *[0-9.e+]*' |
        awk -F': *' '{ s += $2 } END { printf "%.0f", s }')
done
printf '%-7s %-6s %-14s %12s %14s %12s %10s %9s\n' rate hosts job samples/s link_bound nocomm_bound ratio accuracy
for rate in $rates; do
    for n in $hosts_list; do
        hosts "$n" "$rate"
        bps=$(bits "$rate")
        for kind in $kinds_list; do
            case "$kind" in *-bf16) [ "$rate" = 1gbit ] || continue ;; esac
            name="$kind-$n-$rate"
            spec "$name" "$kind" "$n"
            read -r got acc < <(job "$name" "$n")
            if [ "$kind" = allreduce ] || [ "$kind" = allreduce-bf16 ]; then
                g=$G_BYTES
                [ "$kind" != allreduce-bf16 ] || g=$((G_BYTES / 2))
                bound=$(awk -v r="$bps" -v g="$g" -v n="$n" 'BEGIN { printf "%.0f", r / 8 / (2 * (n - 1) / n * g) * 64 * n }')
                nc=${nocomm[$n]}
            else
                g=$G_BYTES
                [ "$kind" != ps-bf16 ] || g=$((G_BYTES / 2))
                bound=$(awk -v r="$bps" -v g="$g" 'BEGIN { printf "%.0f", r / 8 / g * 64 }')
                nc=$(awk -v a="${nocomm[$n]}" -v n="$n" 'BEGIN { printf "%.0f", a * (n - 1) / n }')
            fi
            lower=$(awk -v a="$bound" -v b="$nc" 'BEGIN { print (a < b ? a : b) }')
            printf '%-7s %-6s %-14s %12.0f %14s %12s %10.2f %9s\n' "$rate" "$n" "$kind" "$got" "$bound" "$nc" \
                "$(awk -v a="$got" -v b="$lower" 'BEGIN { print (b > 0 ? a / b : 0) }')" "$acc"
        done
    done
done
echo "(ratio: samples/s over the lower of the link's bound and the no-communication bound;"
echo " accuracy: the job's final eval accuracy, to compare each -bf16 row with its float32 one from this run)"
