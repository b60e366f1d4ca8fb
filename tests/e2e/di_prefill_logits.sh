#!/usr/bin/env bash
# di-prefill --logits: its JSON agrees with the committed HF goldens (top-1 and logit values at
# every position of a golden sequence), the table and --text work on the default model, and
# misuse fails with a clear message.
source "$(dirname "$0")/prelude.bash"

"$BIN/di-mkmodel" --out "$tmp/a" --preset a --vocab 512 --seed 7 || bad "di-mkmodel"
ids=$(python3 -c 'import json; c = json.load(open("tests/data/golden/index.json"))["configs"][0]; print(",".join(map(str, c["sequences"]["repeat"])))')
if "$BIN/di-prefill" --model "$tmp/a" --logits --ids "$ids" --qat off --position all --top-k 3 --json >"$tmp/out.json"; then
    python3 - "$tmp/out.json" <<'PY' && ok || bad "JSON logits differ from the goldens"
import json, sys
import numpy as np
out = json.load(open(sys.argv[1]))
g = np.fromfile("tests/data/golden/tiny-a.qat_off.repeat.logits.f32", "<f4").reshape(97, 512)
assert len(out["positions"]) == 97 and out["qat"] is False and out["replay"] is None
for p in out["positions"]:
    row = g[p["position"]]
    top = p["top"]
    assert [t["id"] for t in top][0] == int(row.argmax()), p["position"]
    for t in top:
        assert abs(t["logit"] - row[t["id"]]) <= 1e-4 * np.abs(row).max(), (p["position"], t)
    probs = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
    assert abs(top[0]["prob"] - probs[top[0]["id"]]) < 1e-5
PY
else bad "di-prefill --json failed"; fi

"$BIN/di-prefill" --model "$tmp/a" --logits --ids 5,6,7 --top-k 4 >"$tmp/table" && grep -q "^position 2, token 7" "$tmp/table" &&
    [[ $(grep -cE '^ +[0-9]+ +[0-9]+ +-?[0-9.]+ +[0-9.]+' "$tmp/table") -eq 4 ]] && ok || bad "table: $(cat "$tmp/table")"
"$BIN/di-prefill" --model "$tmp/a" --logits --ids 5,6,7 --replay 2 --json >"$tmp/r.json" &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["replay"] == 2 and len(d["positions"]) == 1' "$tmp/r.json" && ok || bad "--replay"

# the default model with the real tokenizer (needs `make` and `make data`)
if [[ -f data/models/tiny-v41/model.safetensors && -f data/tokenizer/engram_token_map.u32 ]]; then
    "$BIN/di-prefill" --logits --text "Hello, world" --top-k 2 --json >"$tmp/t.json" &&
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["positions"][0]["text"] == " world" and len(d["positions"][0]["top"]) == 2' "$tmp/t.json" &&
        ok || bad "--text on the default model: $(cat "$tmp/t.json")"
else
    echo "skip: default model or token map missing (make; make data)"
fi

refused "is not a token id" "$BIN/di-prefill" --model "$tmp/a" --logits --ids 1,x
refused "outside the vocabulary" "$BIN/di-prefill" --model "$tmp/a" --logits --ids 1,512
refused "exactly one of --ids or --text" "$BIN/di-prefill" --model "$tmp/a" --logits --ids 1 --text hi
refused "go with --logits" "$BIN/di-prefill" --model "$tmp/a" --ids 1
refused "device cuda:99: .*CUDA" "$BIN/di-prefill" --model "$tmp/a" --device cuda:99 --logits --ids 1
refused "No such file" "$BIN/di-prefill" --model "$tmp/none" --logits --ids 1
"$BIN/di-prefill" --help | grep -q "state frame" && ok || bad "--help does not describe the frame mode"
finish
