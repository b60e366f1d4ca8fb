#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz/fuzz_*.c) for a bounded time from its seed corpus
# (tests/fuzz/corpus/<target>/, if any). A crash, leak or sanitizer report fails the target.
# DI_FUZZ_SECONDS sets the time per target (default 20).
set -u
cd "$(dirname "$0")/../.."
seconds=${DI_FUZZ_SECONDS:-20}
if ! command -v clang >/dev/null; then
    echo "clang not found: cannot build fuzzers"
    echo "0 passed, 1 failed"
    exit 1
fi
make -s fuzz >/dev/null || { echo "building the fuzzers failed"; echo "0 passed, 1 failed"; exit 1; }
pass=0 fail=0
for bin in build-fuzz/fuzz_*; do
    name=$(basename "$bin")
    work=$(mktemp -d)
    seeds=tests/fuzz/corpus/$name
    [[ -d $seeds ]] && cp -r "$seeds/." "$work/" 2>/dev/null
    if "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$work/" "$work" >"$work/log" 2>&1; then
        runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$work/log" | grep -oE '[0-9]+$')
        echo "ok $name ($runs runs in ${seconds}s, no finding)"
        pass=$((pass + 1))
    else
        echo "not ok $name"
        grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==|#[0-9]+ ' "$work/log" | head -n 30
        tail -n 5 "$work/log"
        for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
            [[ -f $a ]] && echo "input (base64): $(head -c 3000 "$a" | base64 -w0)"
        done
        fail=$((fail + 1))
    fi
    rm -rf "$work"
done
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
