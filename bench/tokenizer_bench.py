#!/usr/bin/env python3
"""Tokenizer throughput, HF tokenizers against ours, on one core and the same corpus.

    make BUILD=build build/bench/tokenizer_bench && python3 bench/tokenizer_bench.py [--bytes N] [--repeat N]

Both run pinned to the same CPU, one thread each (RAYON_NUM_THREADS=1, one encode call per
document, no batching), over tests/py/make_corpus.py's corpus; each reports the best of
--repeat passes (both keep a word cache that the first pass fills). Modes:
  added  HF Tokenizer.encode(doc, add_special_tokens=False) / tokenizer_encode_with_added
  plain  HF with the added vocabulary removed / tokenizer_encode (prompt encoding)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py"))
import make_corpus  # noqa: E402
import tokenizers  # noqa: E402


def hf_mbps(tok, docs, nbytes, repeat):
    best = 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        for d in docs:
            tok.encode(d, add_special_tokens=False)
        best = max(best, nbytes / 1e6 / (time.perf_counter() - start))
    return best


def c_mbps(binary, corpus, tokenizer_json, added, repeat):
    cmd = [binary, "--repeat", str(repeat)] + (["--added"] if added else []) + [corpus]
    env = dict(os.environ, DI_TOKENIZER=tokenizer_json)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout.split()
    return float(out[out.index("MB/s", out.index("best_of")) + 1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--cpu", type=int, default=0)
    a = ap.parse_args()
    root = os.path.join(HERE, "..")
    tokenizer_json = os.path.join(os.environ.get("DI_DATA", os.path.join(root, "data")), "tokenizer", "tokenizer.json")
    binary = os.path.join(os.environ.get("BUILD", os.path.join(root, "build")), "bench", "tokenizer_bench")
    os.sched_setaffinity(0, {a.cpu})  # the C program inherits it

    docs = make_corpus.make_corpus(tokenizer_json, a.seed, a.bytes)
    nbytes = sum(len(d.encode()) for d in docs)
    hf_added = tokenizers.Tokenizer.from_file(tokenizer_json)
    spec = json.load(open(tokenizer_json, encoding="utf-8"))
    spec["added_tokens"] = []
    hf_plain = tokenizers.Tokenizer.from_str(json.dumps(spec))

    with tempfile.NamedTemporaryFile(suffix=".corpus") as f:
        make_corpus.write_records(docs, f.name)
        print(f"corpus: {len(docs)} documents, {nbytes} bytes (seed {a.seed}); cpu {a.cpu}; best of {a.repeat}")
        print(f"tokenizers {tokenizers.__version__}")
        for mode, hf in (("added", hf_added), ("plain", hf_plain)):
            hf_speed = hf_mbps(hf, docs, nbytes, a.repeat)
            c_speed = c_mbps(binary, f.name, tokenizer_json, mode == "added", a.repeat)
            print(f"{mode:5}  HF {hf_speed:7.2f} MB/s   C {c_speed:7.2f} MB/s   ratio {c_speed / hf_speed:5.1f}x")


if __name__ == "__main__":
    main()
