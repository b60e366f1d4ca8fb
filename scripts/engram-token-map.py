#!/usr/bin/env python3
"""Writes the Engram compressed token map of a tokenizer (MODEL_V41.md §5.2) as
vocab little-endian uint32 ids: every token id decoded alone (special tokens kept), keyed by
its raw token string if the text holds U+FFFD, else by the text after NFKC, NFD, strip accents,
lowercase, whitespace runs to one space, a lone space protected, strip; ids renumbered in
first-seen order. The same construction as transformers' build_compressed_token_map, with HF
tokenizers' own normalizers (set-up time only; the engine reads the file).

usage: engram-token-map.py TOKENIZER_JSON OUT [--expect N]   (N: distinct ids required)"""
import argparse
import struct
import sys

from tokenizers import Regex, Tokenizer, normalizers


def token_map(tok):
    sentinel = "\ue000"
    norm = normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "), normalizers.Replace(Regex(r"^ $"), sentinel),
        normalizers.Strip(), normalizers.Replace(sentinel, " "),
    ])
    keys, out = {}, []
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([i], skip_special_tokens=False)
        key = tok.id_to_token(i) if "\ufffd" in text else (norm.normalize_str(text) or text)
        out.append(keys.setdefault(key, len(keys)))
    return out, len(keys)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer")
    ap.add_argument("out")
    ap.add_argument("--expect", type=int, default=None)
    a = ap.parse_args()
    ids, distinct = token_map(Tokenizer.from_file(a.tokenizer))
    if a.expect is not None and distinct != a.expect:
        sys.exit(f"engram-token-map: {distinct} distinct keys, expected {a.expect}: not the tokenizer the model was trained with")
    with open(a.out, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}I", *ids))
    print(f"engram-token-map: {len(ids)} tokens -> {distinct} compressed ids in {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
