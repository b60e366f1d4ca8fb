#!/usr/bin/env bash
# One call on the GPU machine with binaries built elsewhere (make BUILD=build-cuda
# BIN=bin-cuda, then scripts/cuda-runtime-libs.sh): the GPU tests (op tests, whole model vs CPU
# and goldens, compute-sanitizer, the pipe) and the benchmark, each log kept in $OUT.
#   scripts/cuda-device.sh tests              the GPU tests
#   scripts/cuda-device.sh bench ARGS...      build-cuda/bench/cuda_bench ARGS
#   scripts/cuda-device.sh all ARGS...        both
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build-cuda} BIN=${BIN:-bin-cuda} OUT=${OUT:-gpu-logs}
mkdir -p "$OUT"
# the tools' Debian libraries travel in $BUILD/rt; cuBLAS comes from the machine's toolkit or PyTorch's wheels
extra=$(ls -d /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | tr '\n' ':')
rt=$BUILD/rt; [[ $rt == /* ]] || rt=$PWD/$rt
export LD_LIBRARY_PATH="$rt:$extra${LD_LIBRARY_PATH:-}"
what=${1:-all}
shift || true
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv; uname -r; } \
    >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
if [[ $what == tests || $what == all ]]; then
    [[ -f data/models/tiny-v41/model.safetensors ]] || "$BIN/di-mkmodel" --out data/models/tiny-v41 >/dev/null
    for t in "$BUILD"/tests/test_backend_cuda "$BUILD"/tests/test_forward_cuda; do
        start=$SECONDS
        "$t" >"$OUT/$(basename "$t").log" 2>&1
        echo "$(basename "$t"): $(tail -n 1 "$OUT/$(basename "$t").log") ($((SECONDS - start))s)"
        grep -E "FAIL|not ok|worst|greedy|seed" "$OUT/$(basename "$t").log" | head -n 40
    done
    for t in tests/e2e/cuda_*.sh; do
        start=$SECONDS
        bash "$t" >"$OUT/$(basename "$t" .sh).log" 2>&1
        echo "$(basename "$t"): $(tail -n 1 "$OUT/$(basename "$t" .sh).log") ($((SECONDS - start))s)"
        tail -n 12 "$OUT/$(basename "$t" .sh).log"
    done
fi
if [[ $what == bench || $what == all ]]; then
    start=$SECONDS
    "$BUILD/bench/cuda_bench" "$@" 2>&1 | tee "$OUT/bench.log" | tail -n 80
    echo "bench: $((SECONDS - start))s"
fi
