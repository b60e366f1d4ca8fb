#!/usr/bin/env bash
# The README's main job: sample requests through the pipeline, results as JSON lines.
# (di-prefill and di-decode join the pipe as they land; today the ends of the pipe run,
# so each request comes back as the exact prompt text the model would see.)
set -euo pipefail
cd "$(dirname "$0")/.."
input=${1:-examples/requests.jsonl}
"${BIN:-bin}"/di-tokenize < "$input" | "${BIN:-bin}"/di-detok --ordered
