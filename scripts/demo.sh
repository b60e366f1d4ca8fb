#!/usr/bin/env bash
# The README's main job: sample requests through the whole pipeline on the default tiny model
# (data/models/tiny-v41, built by make), results as JSON lines in input order. The tiny model
# has random weights, so the text it generates is gibberish; the point is the pipe.
set -euo pipefail
cd "$(dirname "$0")/.."
input=${1:-examples/requests.jsonl}
bin=${BIN:-bin}
model=${MODEL:-data/models/tiny-v41}
"$bin"/di-tokenize < "$input" | "$bin"/di-grammar | "$bin"/di-prefill --model "$model" |
    "$bin"/di-decode --model "$model" | "$bin"/di-detok --ordered
