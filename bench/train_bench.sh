#!/usr/bin/env bash
# train_bench.sh - training throughput of dtrain vs PyTorch in one run, same model, batch
# size, optimizer (Adam) and data (Fashion-MNIST), on this machine's cores.
#
#   bash bench/train_bench.sh [mlp|cnn|all] [steps]
#
# PyTorch (Debian's python3-torch, /usr/bin/python3) is run in every setting of torch threads x
# OpenBLAS threads in {1,2} x flush-denormal off/on, and its best is the reference. dtrain's
# own GEMM-only ceiling (build/gemm_ceiling, the same run) gives the fraction of it reached.
# Steps: a full epoch of the MLP is 938; Adam's moments reach denormal values after about a
# thousand steps, so runs shorter than that miss what the rest of a real run costs. Both sides run
# once with OPENBLAS_CORETYPE=Haswell (AVX2 kernels, this machine's default setting) and once
# with the kernels OpenBLAS picks itself. Prints samples/s and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
steps=${2:-400}
bash scripts/setup.sh release >/dev/null
dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed" || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-numpy >/dev/null; }
TMP=$(mktemp -d /tmp/dtrain-bench-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
ncpu=$(nproc)

core_env() { # coretype -> env(1) arguments: set it, or unset what the environment set
    if [ -n "$1" ]; then echo "OPENBLAS_CORETYPE=$1"; else echo "-u OPENBLAS_CORETYPE"; fi
}

dtrain_rate() { # model coretype -> samples/s of dtrain over `steps` steps of batch 64
    local model=$1 core=$2 spec="examples/fashion_mnist_$1.yaml"
    rm -rf "$TMP/job"
    env $(core_env "$core") ./build/dtrain train "$spec" --job-dir "$TMP/job" \
        --threads "$ncpu" --max-steps "$steps" --no-progress >/dev/null
    grep -o '"samples_per_sec": *[0-9.e+]*' "$TMP/job/result.json" | sed 's/.*: *//'
}

torch_best() { # model coretype -> "best_rate setting"
    local model=$1 core=$2 best=0 setting=""
    for tt in 1 2; do
        for bt in 1 2; do
            for fd in "" --flush-denormal; do
                local r
                r=$(env $(core_env "$core") OPENBLAS_NUM_THREADS=$bt /usr/bin/python3 \
                    bench/torch_train.py --model "$model" --threads "$tt" --steps "$steps" $fd \
                    2>/dev/null | sed 's/.*"samples_per_sec": \([0-9.]*\).*/\1/')
                echo "    pytorch $model torch_threads=$tt openblas_threads=$bt ${fd:-(denormals kept)}: $(printf '%.0f' "$r") samples/s" >&2
                if awk -v a="$r" -v b="$best" 'BEGIN { exit !(a > b) }'; then
                    best=$r
                    setting="torch=$tt,openblas=$bt${fd:+,flush-denormal}"
                fi
            done
        done
    done
    echo "$best $setting"
}

for model in mlp cnn; do
    [ "$which" = all ] || [ "$which" = "$model" ] || continue
    for core in Haswell ""; do
        label=${core:-auto}
        echo "== $model, batch 64, $steps steps, OPENBLAS_CORETYPE=${core:-(unset: OpenBLAS picks)} =="
        d=$(dtrain_rate "$model" "$core")
        read -r t setting < <(torch_best "$model" "$core")
        ceil=$(env $(core_env "$core") ./build/gemm_ceiling "$model" "$ncpu" |
            grep -o '"ceiling_samples_per_sec": *[0-9.e+]*' | sed 's/.*: *//')
        printf '  dtrain  %8.0f samples/s (%d threads)\n' "$d" "$ncpu"
        printf '  pytorch %8.0f samples/s (best: %s)\n' "$t" "$setting"
        printf '  GEMM-only ceiling %8.0f samples/s (%d threads)\n' "$ceil" "$ncpu"
        awk -v d="$d" -v t="$t" -v g="$ceil" -v m="$model" -v c="$label" \
            'BEGIN { printf "  RESULT %s %s ratio dtrain/pytorch = %.2f, fraction of the GEMM-only ceiling = %.2f\n", m, c, d / t, d / g }'
    done
done
