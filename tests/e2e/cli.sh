#!/usr/bin/env bash
# Every tool in bin/: --help and --version exit 0; misuse (an unknown flag, a flag without
# its value, a bad number, a missing file, a bad endpoint) exits non-zero with one line on
# stderr that names the problem.
source "$(dirname "$0")/prelude.bash"
check() {  # name, condition-result
    if [[ $2 == 0 ]]; then ok; echo "ok $1"; else bad "$1"; fi
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
    "$path" --help >"$tmp/help" 2>&1 && grep -q "usage: $t" "$tmp/help"
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
finish
