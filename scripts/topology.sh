#!/usr/bin/env bash
# The distributed layout from one command, on this machine:
#
#   di-tokenize -> di-prefill -> WORKERS x di-decode (PUSH/PULL load balancing) -> di-detok
#
# every stage its own process and every hop ZeroMQ over tcp loopback, exactly as it would be
# spread over nodes (run each line below on its node with 127.0.0.1 replaced by host names; the
# stage many peers talk to binds, the others connect). JSONL results on stdout, one line per
# request; the exit status is di-detok's (non-zero when a request got no answer from the model,
# e.g. a worker died: those requests are answered with error lines after IDLE_TIMEOUT seconds).
#
#   scripts/topology.sh [requests.jsonl]       (default examples/requests.jsonl)
#
# Environment: BIN (bin), MODEL (data/models/tiny-v41), WORKERS (2), PORT (first of WORKERS + 2
# consecutive ports, default 5550), THREADS (CPU threads per model process, default 1: they
# share this machine), IDLE_TIMEOUT (default 10), LOGS (a directory that receives each process's
# stderr with --stats, and "name pid" lines in LOGS/pids; default: a temporary one, removed).
set -euo pipefail
cd "$(dirname "$0")/.."
input=${1:-examples/requests.jsonl}
BIN=${BIN:-bin} MODEL=${MODEL:-data/models/tiny-v41} WORKERS=${WORKERS:-2} PORT=${PORT:-5550}
THREADS=${THREADS:-1} IDLE_TIMEOUT=${IDLE_TIMEOUT:-10}
if [[ -z ${LOGS:-} ]]; then
    LOGS=$(mktemp -d)
    trap 'rm -rf "$LOGS"' EXIT
fi
mkdir -p "$LOGS"
: >"$LOGS/pids"
pids=()
started() {  # name pid
    echo "$1 $2" >>"$LOGS/pids"
    pids+=("$2")
}
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap 'stop_all; exit 130' INT TERM

prefill_port=$PORT sink_port=$((PORT + 1))
model=(--model "$MODEL" --threads "$THREADS" --stats)

"$BIN/di-detok" --in "@tcp://:$sink_port" --idle-timeout "$IDLE_TIMEOUT" --stats 2>"$LOGS/di-detok.log" &
detok=$!
started di-detok "$detok"
workers=()
for ((w = 1; w <= WORKERS; w++)); do
    port=$((PORT + 1 + w))
    "$BIN/di-decode" "${model[@]}" --in "@tcp://:$port" --out "tcp://127.0.0.1:$sink_port" \
        2>"$LOGS/di-decode.$w.log" &
    started "di-decode.$w" $!
    workers+=("tcp://127.0.0.1:$port")
done
"$BIN/di-prefill" "${model[@]}" --in "@tcp://:$prefill_port" --out "$(IFS=,; echo "${workers[*]}")" \
    --out-peers "$WORKERS" 2>"$LOGS/di-prefill.log" &
started di-prefill $!
"$BIN/di-tokenize" --out "tcp://127.0.0.1:$prefill_port" --stats <"$input" 2>"$LOGS/di-tokenize.log" &
started di-tokenize $!

status=0
wait "$detok" || status=$?
for ((i = 0; i < 300; i++)); do  # the others end once their end-of-stream is taken; 30 s at most
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
done
stop_all
exit "$status"
