#!/usr/bin/env bash
# Every tool in bin/: --help and --version exit 0; misuse (an unknown flag, a flag without
# its value, a bad number, a missing file, a bad endpoint) exits non-zero with one line on
# stderr that names the problem.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}
pass=0 fail=0
check() {  # name, condition-result
    if [[ $2 == 0 ]]; then pass=$((pass + 1)); echo "ok $1"; else fail=$((fail + 1)); echo "not ok $1"; fi
}
one_line_error() {  # tool, expected text, args...
    local tool=$1 want=$2; shift 2
    local err rc
    err=$("$BIN/$tool" "$@" 2>&1 </dev/null >/dev/null); rc=$?
    [[ $rc -ne 0 && $(printf '%s\n' "$err" | wc -l) -eq 1 && $err == *"$want"* ]]
    check "$tool $* -> one-line error ($err)" $?
}
for path in "$BIN"/di-*; do
    t=$(basename "$path")
    "$path" --help >/tmp/di-help.$$ 2>&1 && grep -q "usage: $t" /tmp/di-help.$$
    check "$t --help" $?
    [[ $("$path" --version 2>&1) == "$t "* ]]
    check "$t --version" $?
    one_line_error "$t" "unknown option --no-such-flag" --no-such-flag
done
one_line_error di-tokenize "needs a value" --tokenizer
one_line_error di-tokenize "bad value" --max-line-bytes lots
one_line_error di-tokenize "cannot load the tokenizer" --tokenizer /nonexistent/tokenizer.json
one_line_error di-tokenize "bad --out" --out "udp://x:1"
one_line_error di-detok "tcp endpoints need HOST:PORT" --in "tcp://localhost"
one_line_error di-detok "do not go together" --stream --ordered
one_line_error di-tokenize "cannot open --in" --in /nonexistent.jsonl
rm -f /tmp/di-help.$$
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
