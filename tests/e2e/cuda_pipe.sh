#!/usr/bin/env bash
# The whole pipe on the GPU gives the CPU pipe's greedy text: di-tokenize | di-prefill |
# di-decode | di-detok on the default tiny model, --device cuda:0 against --device cpu.
# Skipped, visibly, without a GPU, the tiny model or the tokenizer data.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}
MODEL=${MODEL:-data/models/tiny-v41}
DATA=${DI_DATA:-data}
if [[ ! -f $MODEL/model.safetensors || ! -f $DATA/tokenizer/tokenizer.json ]] || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "skip: needs a GPU, make (the tiny model) and make data (the tokenizer)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/in.jsonl" <<'JSONL'
{"id": "a", "prompt": "The quick brown fox jumps over the lazy dog.", "max_tokens": 32, "temperature": 0}
{"id": "b", "prompt": "Once upon a time", "max_tokens": 48, "temperature": 0}
{"id": "c", "messages": [{"role": "user", "content": "What is the capital of France?"}], "thinking": {"type": "disabled"}, "max_tokens": 40, "temperature": 0}
{"id": "d", "prompt": [0, 5, 17, 300, 4000, 12, 9], "max_tokens": 64, "temperature": 0}
{"id": "e", "prompt": "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30", "max_tokens": 40, "temperature": 0}
JSONL
run() { # device -> output file
    "$BIN/di-tokenize" <"$tmp/in.jsonl" | "$BIN/di-prefill" --model "$MODEL" --device "$1" |
        "$BIN/di-decode" --model "$MODEL" --device "$1" | "$BIN/di-detok" --ordered >"$2"
}
run cpu "$tmp/cpu.jsonl" || { echo "FAIL: the CPU pipe"; echo "0 passed, 1 failed"; exit 1; }
run cuda:0 "$tmp/gpu.jsonl" || { echo "FAIL: the GPU pipe"; echo "0 passed, 1 failed"; exit 1; }
python3 - "$tmp/cpu.jsonl" "$tmp/gpu.jsonl" <<'PY'
import json, sys
cpu = [json.loads(l) for l in open(sys.argv[1])]
gpu = [json.loads(l) for l in open(sys.argv[2])]
same = sum(1 for a, b in zip(cpu, gpu) if a.get("text") == b.get("text") and "error" not in b)
print(f"greedy text identical for {same} of {len(cpu)} requests (GPU pipe vs CPU pipe)")
for a, b in zip(cpu, gpu):
    if a.get("text") != b.get("text"):
        print("  differs:", a.get("id"), repr(a.get("text"))[:120], "|", repr(b.get("text"))[:120])
ok = len(cpu) == len(gpu) == 5 and same == len(cpu)
print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
sys.exit(0 if ok else 1)
PY
