#!/usr/bin/env bash
# compute-sanitizer (memcheck: out-of-bounds and misaligned accesses, bad frees, leaked device
# memory at exit) over the CUDA op tests. Skipped, visibly, without a GPU or the sanitizer.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
t="$BUILD/tests/test_backend_cuda"
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ ! -x $t || -z $cs ]] || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "skip: needs a GPU, compute-sanitizer and $t"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$cs" --tool memcheck --leak-check full --error-exitcode 99 "$t" >"$log" 2>&1
rc=$?
grep -E "ERROR SUMMARY|passed, " "$log"
if [[ $rc -eq 0 ]] && grep -q "ERROR SUMMARY: 0 errors" "$log" && grep -qE '^[0-9]+ passed, 0 failed' "$log"; then
    echo "1 passed, 0 failed"
else
    grep -E "^=========|FAIL" "$log" | head -n 60
    echo "0 passed, 1 failed"
    exit 1
fi
