#!/usr/bin/env python3
"""What constrained decoding costs inside di-decode: the grammar acceptance set (39 JSON schemas,
34 regexes of tests/data) as requests, --seeds each at temperature 1, prefilled once into a file;
then di-decode alone over those states (every state waiting, so batches fill), once as they are
and once with the constraints taken out of the same state frames. Reported from di-decode's
--stats: the grammar's time per constrained token (mask + accept, mean and max), the sampler's
time per token with and without masks, forward time per token, tokens/s.

    bench/grammar_decode_bench.py [--model DIR] [--seeds N] [--tokens N] [--max-batch N]"""
import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile

import msgpack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("BIN", "bin"))


def stats(text):
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"di-decode: stats: (\w+) ([0-9.]+)", text)}


def run(cmd, data=b""):
    p = subprocess.run(["bash", "-c", cmd], input=data, capture_output=True)
    if p.returncode:
        sys.exit(p.stderr.decode()[-2000:])
    return p


def requests(seeds, tokens):
    out = []
    for name, key in (("grammar_schemas.jsonl", "schema"), ("grammar_regexes.jsonl", "regex")):
        with open(os.path.join(ROOT, "tests", "data", name), encoding="utf-8") as f:
            for c in map(json.loads, f):
                fmt = ({"type": "json_schema", "json_schema": {"schema": json.loads(c[key])}} if key == "schema"
                       else {"type": "regex", "regex": c[key]})
                out += [{"id": f"{c['name']}:{s}", "prompt": "Answer:", "max_tokens": tokens, "seed": s,
                         "response_format": fmt} for s in range(seeds)]
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "data", "models", "tiny-v41"))
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=64)
    a = ap.parse_args()
    states = run(f"{BIN}/di-tokenize | {BIN}/di-grammar | {BIN}/di-prefill --model {a.model}",
                 requests(a.seeds, a.tokens)).stdout
    plain = []
    for f in msgpack.Unpacker(io.BytesIO(states), raw=False):
        f.pop("constraint", None)
        plain.append(msgpack.packb(f, use_bin_type=True))
    decode = f"{BIN}/di-decode --model {a.model} --stats --max-batch {a.max_batch}"
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, data in (("constrained", states), ("unconstrained", b"".join(plain))):
            path = os.path.join(tmp, label)
            with open(path, "wb") as f:
                f.write(data)
            res[label] = stats(run(f"{decode} < {path} > /dev/null").stderr.decode())
    c, u = res["constrained"], res["unconstrained"]
    n = c["decoded_tokens"]
    print(f"constrained: {n:.0f} tokens ({c['grammar_tokens']:.0f} through the grammar), mean batch {c['mean_batch']:.1f}, "
          f"{c['grammar_forced_ends']:.0f} EOS taken without a step")
    print(f"  grammar (mask + accept) per constrained token: {c['grammar_us_per_token']:.2f} us mean, "
          f"{c['grammar_max_us']:.1f} us max")
    print(f"  compiles {c['grammar_compiles']:.0f} in {c['grammar_compile_s'] * 1e3:.1f} ms, vocabulary {c['grammar_load_s'] * 1e3:.1f} ms")
    for label, s in res.items():
        t = s["decoded_tokens"]
        print(f"{label}: forward with sampling {s['forward_s'] / t * 1e6:.1f} us/token, "
              f"{s['decode_tokens_per_s']:.0f} tokens/s, {t:.0f} tokens")


if __name__ == "__main__":
    main()
