#!/usr/bin/env bash
# di-mkmodel must still write, byte for byte, the checkpoints the committed goldens were made
# from (tests/data/golden/index.json records their sha256), and a bad option must fail cleanly.
source "$(dirname "$0")/prelude.bash"
rows=$(python3 -c '
import json
for c in json.load(open("tests/data/golden/index.json"))["configs"]:
    m = c["mkmodel"]
    for v, h in c["checkpoint_sha256"].items():
        print(c["config"], m["preset"], m["vocab"], m["seed"], v, h, c["token_map_sha256"])')
while read -r name preset vocab seed variant sha mapsha; do
    out="$tmp/$name-$variant"
    if ! "$BIN/di-mkmodel" --out "$out" --preset "$preset" --vocab "$vocab" --seed "$seed" --variant "$variant"; then
        bad "$name $variant: di-mkmodel failed"; continue
    fi
    got=$(sha256sum "$out/model.safetensors" | cut -d' ' -f1)
    [[ $got == "$sha" ]] && ok || bad "$name $variant: model.safetensors $got, goldens were made from $sha"
    got=$(sha256sum "$out/engram_token_map.u32" | cut -d' ' -f1)
    [[ $got == "$mapsha" ]] && ok || bad "$name $variant: engram_token_map.u32 differs"
done <<<"$rows"
[[ -n $rows ]] && ok || bad "no configurations in index.json"
refused "--variant must be fp8 or bf16" "$BIN/di-mkmodel" --out "$tmp/x" --variant fp16
refused "unknown preset" "$BIN/di-mkmodel" --out "$tmp/y" --preset z
finish
