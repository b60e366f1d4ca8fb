# Sourced first by the e2e tests (not a test itself: tests/run runs tests/e2e/*.sh). From the
# repository root, with $BIN the tools and $tmp a folder removed at exit: ok and bad count
# checks (bad says what failed), refused checks that a command fails with a given message,
# and finish prints the "N passed, N failed" line tests/run sums and sets the exit status.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${BIN:-bin}
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

refused() { # expected message (a grep pattern), command...
    local want=$1; shift
    if "$@" 2>"$tmp/err" >/dev/null; then bad "accepted: $*"
    elif grep -q -- "$want" "$tmp/err"; then ok; else bad "unclear error for $*: $(cat "$tmp/err")"; fi
}

finish() {
    echo "$pass passed, $fail failed"
    [[ $fail -eq 0 ]]
}
