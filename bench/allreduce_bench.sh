#!/usr/bin/env bash
# allreduce_bench.sh - issue 6's all-reduce benchmark: dtrain's ring all-reduce against its
# peers, all in the same run, for 1 KB, 1 MB, 16 MB and 64 MB of float32 with 2 and 4
# processes on loopback:
#   dtrain    build/allreduce_bench --ranks P --bytes LIST (skipped, saying so, if absent):
#             neighbours on this host pass the data through shared memory (docs/WIRE.md)
#   dtrain-tcp the same with --no-shm: every byte over loopback TCP, as between hosts (the
#             lane all-reduce had before the shared-memory lane)
#   mpi-tcp   Open MPI's MPI_Allreduce over TCP: mpirun --mca pml ob1 --mca btl tcp,self
#             --mca btl_tcp_if_include lo  build/mpi_allreduce --label tcp
#   mpi-sm    the same over shared memory (--mca btl vader,self, or sm,self on Open MPI
#             versions that have sm): the ceiling to approach, no target
#   gloo      PyTorch's torch.distributed all_reduce, gloo backend (bench/gloo_allreduce.py)
# Every program prints `NAME ranks=P bytes=B avg_us=U busbw_GBps=G` per size (time = the
# largest mean over the ranks; busbw = B * 2(P-1)/P / time). The whole set runs --rounds
# times (interleaved, so a busy machine hurts every contender alike) and the table keeps
# each contender's best round. Targets (bus bandwidth): dtrain/mpi-tcp >= 1.0 and
# dtrain/gloo >= 2.0.
#
#   bash bench/allreduce_bench.sh [options]
#     --ranks "2 4"     process counts (default "2 4")
#     --bytes LIST      sizes (default 1K,1M,16M,64M; suffixes K, M, G)
#     --rounds N        run the whole set N times, keep each figure's best (default 3)
#     --min-time S      the MPI and gloo peers time each size for >= S seconds (default 0.5)
#     --tcp-if IFACE    the interface Open MPI's TCP BTL uses (default lo)
#     --bf16            also run dtrain-bf16: the ring with wire_dtype bfloat16 (allreduce.wireDtype:
#                       the values narrowed between members, summed in float32); its busbw counts
#                       the float32 bytes reduced, so it shows the gain, not the bytes moved
#     --no-build        do not (re)build build/ first
#     --keep            keep the temporary directory (raw outputs, logs) and print it
#   ALLREDUCE_BENCH=PATH picks dtrain's benchmark binary (default ./build/allreduce_bench);
#   MPIRUN_ARGS="..." adds arguments to every mpirun (e.g. "--bind-to none").
# Open MPI is installed with apt-get (openmpi-bin, libopenmpi-dev) if mpirun is missing;
# OPENBLAS_CORETYPE is left as the caller set it; torch runs with OMP_NUM_THREADS=1.
set -euo pipefail
cd "$(dirname "$0")/.."

ranks_list="2 4" bytes=1K,1M,16M,64M rounds=3 min_time=0.5 tcp_if=lo build=1 keep=0 bf16=0
while [ $# -gt 0 ]; do
    case "$1" in
        --ranks) ranks_list=${2:?--ranks needs a value}; shift ;;
        --bytes) bytes=${2:?--bytes needs a value}; shift ;;
        --rounds) rounds=${2:?--rounds needs a value}; shift ;;
        --min-time) min_time=${2:?--min-time needs a value}; shift ;;
        --tcp-if) tcp_if=${2:?--tcp-if needs a value}; shift ;;
        --bf16) bf16=1 ;;
        --no-build) build=0 ;;
        --keep) keep=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "allreduce_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
for p in $ranks_list; do
    case "$p" in ''|*[!0-9]*|0|1) echo "allreduce_bench.sh: --ranks: expected process counts >= 2, got '$p'" >&2; exit 2 ;; esac
done
case "$rounds" in ''|*[!0-9]*|0) echo "allreduce_bench.sh: --rounds: expected a positive integer, got '$rounds'" >&2; exit 2 ;; esac
[[ "$bytes" =~ ^[0-9]+[KMGkmg]?(,[0-9]+[KMGkmg]?)*$ ]] || {
    echo "allreduce_bench.sh: --bytes: expected a comma-separated list like 1K,1M,16M,64M, got '$bytes'" >&2; exit 2; }
[[ "$min_time" =~ ^[0-9]+([.][0-9]+)?$ ]] || {
    echo "allreduce_bench.sh: --min-time: expected seconds, got '$min_time'" >&2; exit 2; }

PY=/usr/bin/python3
DTB=${ALLREDUCE_BENCH:-./build/allreduce_bench}
MPIB=./build/mpi_allreduce
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi

[ "$build" = 0 ] || bash scripts/setup.sh release >/dev/null

# Open MPI: install it if missing, build the peer with mpicc if CMake did not.
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
    echo "allreduce_bench.sh: installing openmpi-bin libopenmpi-dev" >&2
    { $SUDO apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null; } ||
        echo "allreduce_bench.sh: could not install Open MPI; its figures will be missing" >&2
fi
if [ ! -x "$MPIB" ] && command -v mpicc >/dev/null; then
    mkdir -p build
    mpicc -std=c11 -O3 -Wall -Wextra -o "$MPIB" bench/mpi_allreduce.c -lm ||
        echo "allreduce_bench.sh: mpicc could not build $MPIB" >&2
fi
mpi_ok=0
if command -v mpirun >/dev/null && [ -x "$MPIB" ]; then mpi_ok=1; fi
MPIRUN=(mpirun)
sm_btl=""
if [ "$mpi_ok" = 1 ]; then
    if mpirun --version 2>&1 | grep -qi 'open mpi'; then
        # Open MPI refuses root unless told; these are its documented switches.
        [ "$(id -u)" -ne 0 ] || MPIRUN+=(--allow-run-as-root)
        if ompi_info 2>/dev/null | grep -q 'MCA btl: vader'; then sm_btl=vader
        elif ompi_info 2>/dev/null | grep -q 'MCA btl: sm'; then sm_btl=sm; fi
    else
        echo "allreduce_bench.sh: mpirun is not Open MPI's ($(mpirun --version 2>&1 | head -1)); skipping the MPI peers" >&2
        mpi_ok=0
    fi
fi
# shellcheck disable=SC2206
[ -z "${MPIRUN_ARGS:-}" ] || MPIRUN+=($MPIRUN_ARGS)

TMP=$(mktemp -d /tmp/dtrain-arbench-XXXXXX)
cleanup() { if [ "$keep" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi; }
trap cleanup EXIT
RES=$TMP/results   # every NAME ranks=P bytes=B avg_us=U busbw_GBps=G line of every round

ncores=$(nproc)
echo "== allreduce_bench: float32 sum, sizes $bytes, ranks $ranks_list, $rounds round(s), best kept =="
echo "cores: $ncores; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}; load: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$mpi_ok" = 1 ]; then
    echo "mpi: $(mpirun --version 2>&1 | head -1); tcp over $tcp_if; shared memory btl: ${sm_btl:-none}"
else
    echo "mpi: not available (mpirun or $MPIB missing): no mpi-tcp/mpi-sm figures"
fi
echo "torch: $("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
[ -x "$DTB" ] || echo "dtrain: $DTB does not exist (yet): skipping dtrain's figures"

run() { # NAME TIMEOUT CMD... : run one contender, keep its result lines, report failures
    local name=$1 limit=$2; shift 2
    local out=$TMP/$name.r$round.p$P.out err=$TMP/$name.r$round.p$P.err rc=0
    timeout --signal=TERM --kill-after=10 "$limit" "$@" >"$out" 2>"$err" || rc=$?
    grep -E '^[a-z-]+ ranks=[0-9]+ bytes=[0-9]+ avg_us=[0-9.]+ busbw_GBps=[0-9.]+' "$out" |
        tee -a "$RES" | sed 's/^/  /' || true
    [ "$rc" = 0 ] || echo "  $name ranks=$P failed (exit $rc): $(tail -3 "$err" | tr '\n' ' ')"
}

for round in $(seq "$rounds"); do
    for P in $ranks_list; do
        echo "== round $round/$rounds, $P ranks =="
        [ ! -x "$DTB" ] || run dtrain 900 "$DTB" --ranks "$P" --bytes "$bytes"
        [ ! -x "$DTB" ] || run dtrain-tcp 900 "$DTB" --ranks "$P" --bytes "$bytes" --no-shm
        [ ! -x "$DTB" ] || [ "$bf16" = 0 ] ||
            run dtrain-bf16 900 "$DTB" --ranks "$P" --bytes "$bytes" --bf16
        if [ "$mpi_ok" = 1 ]; then
            over=()
            [ "$P" -le "$ncores" ] || over=(--oversubscribe)
            run mpi-tcp 900 "${MPIRUN[@]}" -n "$P" "${over[@]}" --mca pml ob1 \
                --mca btl tcp,self --mca btl_tcp_if_include "$tcp_if" --mca oob_tcp_if_include "$tcp_if" \
                "$MPIB" --label tcp --bytes "$bytes" --min-time "$min_time"
            [ -z "$sm_btl" ] || run mpi-sm 900 "${MPIRUN[@]}" -n "$P" "${over[@]}" --mca pml ob1 \
                --mca btl "$sm_btl,self" "$MPIB" --label sm --bytes "$bytes" --min-time "$min_time"
        fi
        OMP_NUM_THREADS=1 run gloo 900 "$PY" bench/gloo_allreduce.py --ranks "$P" \
            --bytes "$bytes" --min-time "$min_time"
    done
done

echo "== best of $rounds round(s): avg_us / busbw GB/s; ratios are dtrain's busbw over the peer's =="
"$PY" - "$RES" "$bytes" "$ranks_list" <<'EOF'
import re, sys
res, sizes_arg, ranks_arg = sys.argv[1], sys.argv[2], sys.argv[3]
best = {}
for line in open(res):
    m = re.match(r"(\S+) ranks=(\d+) bytes=(\d+) avg_us=([0-9.]+) busbw_GBps=([0-9.]+)", line)
    if not m:
        continue
    key = (m.group(1), int(m.group(2)), int(m.group(3)))
    us, bw = float(m.group(4)), float(m.group(5))
    if key not in best or us < best[key][0]:
        best[key] = (us, bw)

def nbytes(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(s[:-1] if mul > 1 else s) * mul

def label(b):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= m and b % m == 0:
            return "%d%s" % (b // m, unit)
    return str(b)

names = ["dtrain", "dtrain-tcp", "dtrain-bf16", "mpi-tcp", "mpi-sm", "gloo"]
hdr = "%-5s %2s" % ("size", "P") + "".join(" | %-19s" % n for n in names) + " | %-16s | %-16s" % (
    "dtrain/mpi-tcp", "dtrain/gloo") + " | %-12s" % "dtrain/mpi-sm"
print(hdr)
print("-" * len(hdr))
verdicts, all_met, complete = [], True, True
for p in (int(x) for x in ranks_arg.split()):
    for b in (nbytes(x) for x in sizes_arg.split(",")):
        row = "%-5s %2d" % (label(b), p)
        for n in names:
            v = best.get((n, p, b))
            row += " | %-19s" % ("%10.1f %8.4f" % v if v else "n/a")
        d = best.get(("dtrain", p, b))
        for peer, target in (("mpi-tcp", 1.0), ("gloo", 2.0)):
            v = best.get((peer, p, b))
            if d and v and d[0] > 0:
                r = v[0] / d[0]   # the busbw ratio: same bytes and P, so the inverse time ratio
                ok = r >= target
                all_met &= ok
                row += " | %5.2f %-10s" % (r, "met" if ok else "NOT met")
                verdicts.append("  RESULT %s %dB P=%d dtrain/%s busbw = %.2f (target >= %.1f: %s)"
                                % (label(b), b, p, peer, r, target, "met" if ok else "NOT met"))
            else:
                complete = False
                row += " | %-16s" % "n/a"
        v = best.get(("mpi-sm", p, b))  # the shared-memory ceiling: reported, no target
        row += " | %-12s" % ("%5.2f" % (v[0] / d[0]) if d and v and d[0] > 0 else "n/a")
        print(row)
print("\n".join(verdicts))
if not verdicts:
    print("  RESULT no ratios (dtrain's or the peers' figures are missing)")
elif complete:
    print("  RESULT %s" % ("all targets met" if all_met else "NOT all targets met"))
else:
    print("  RESULT some figures are missing; of those measured, targets %s"
          % ("all met" if all_met else "NOT all met"))
EOF
