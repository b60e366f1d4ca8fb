#!/usr/bin/env python3
"""CPU throughput of the generating pipe, di-tokenize | di-prefill | di-decode | di-detok --trace:
prefill and decode tokens/s as the stages report them (--stats: model time only, excluding
waits), each stage run alone (all its input waiting) and in the whole pipe; the state bytes
per prompt token; and where a request's time goes in the whole pipe, read from the frame
traces (per-stage hops, averaged over requests).

    bench/pipeline_bench.py [--model DIR] [--requests N] [--prompt N] [--tokens N]
                            [--max-batch N] [--token-budget N] [--threads N] [--no-pipe]

Prompts are random token ids; every request is greedy with max_tokens = --tokens."""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("BIN", "bin"))


def stat(text, stage, key):
    m = re.search(rf"{stage}: stats: {key} ([0-9.]+)", text)
    return float(m.group(1)) if m else float("nan")


def run(cmd, data):
    p = subprocess.run(["bash", "-c", cmd], input=data, capture_output=True)
    if p.returncode:
        sys.exit(p.stderr.decode()[-2000:])
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "data", "models", "tiny-v41"))
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--token-budget", type=int, default=512)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--no-pipe", action="store_true", help="only the stages alone")
    a = ap.parse_args()
    vocab = json.load(open(os.path.join(a.model, "config.json")))["text_config"]["vocab_size"]
    rng = random.Random(1)
    lines = "".join(json.dumps({"id": f"r{i}", "prompt": [rng.randrange(vocab) for _ in range(a.prompt)],
                                "max_tokens": a.tokens, "temperature": 0}) + "\n" for i in range(a.requests))
    threads = " ".join(["--threads", str(a.threads)] if a.threads else [])
    prefill = f"{BIN}/di-prefill --model {a.model} --stats --token-budget {a.token_budget} {threads}"
    decode = f"{BIN}/di-decode --model {a.model} --stats --max-batch {a.max_batch} {threads}"
    # throughput: each model stage alone (decode starts with every state waiting, so batches fill)
    states = run(f"{BIN}/di-tokenize | {prefill}", lines.encode())
    with tempfile.NamedTemporaryFile() as f:  # a file: every state is there when decode reads
        f.write(states.stdout)
        f.flush()
        answers = run(f"{decode} < {f.name} | {BIN}/di-detok", b"")
    err = states.stderr.decode() + answers.stderr.decode()
    print(f"model {os.path.basename(a.model.rstrip('/'))}: {a.requests} requests x {a.prompt} prompt tokens, "
          f"{a.tokens} output tokens each; token budget {a.token_budget}, max batch {a.max_batch}")
    print(f"  prefill alone: {stat(err, 'di-prefill', 'prefill_tokens_per_s'):.0f} tokens/s "
          f"({stat(err, 'di-prefill', 'forward_calls'):.0f} forward calls), state "
          f"{stat(err, 'di-prefill', 'state_bytes_per_prompt_token'):.1f} bytes per prompt token, "
          f"serialize {stat(err, 'di-prefill', 'serialize_s') * 1e3 / a.requests:.2f} ms per request")
    print(f"  decode alone:  {stat(err, 'di-decode', 'decode_tokens_per_s'):.0f} tokens/s, mean batch "
          f"{stat(err, 'di-decode', 'mean_batch'):.1f}, {stat(err, 'di-decode', 'decode_steps'):.0f} steps")
    if a.no_pipe:
        return
    # the whole pipe at once: where a request's time goes
    pipe = run(f"{BIN}/di-tokenize | {prefill} | {decode} | {BIN}/di-detok --trace", lines.encode())
    err = pipe.stderr.decode()
    out = [json.loads(l) for l in pipe.stdout.decode().splitlines() if l]
    print(f"  whole pipe: prefill {stat(err, 'di-prefill', 'prefill_tokens_per_s'):.0f} tokens/s, decode "
          f"{stat(err, 'di-decode', 'decode_tokens_per_s'):.0f} tokens/s at mean batch {stat(err, 'di-decode', 'mean_batch'):.1f}, "
          f"wall {stat(err, 'di-decode', 'wall_s'):.2f} s")
    # per-stage split: time inside each stage (out - in) and between stages (next in - previous out)
    parts = {}
    for o in out:
        hops = o["trace"]
        for h in hops:
            parts.setdefault(h[0], []).append((h[2] - h[1]) / 1e3)
        for prev, nxt in zip(hops, hops[1:]):
            parts.setdefault(f"{prev[0]} -> {nxt[0]}", []).append((nxt[1] - prev[2]) / 1e3)
        parts.setdefault("total", []).append((hops[-1][2] - hops[0][1]) / 1e3)
    total = sum(parts["total"]) / len(parts["total"])
    print("  per-request time split from the traces (mean ms, share of the total):")
    for k, v in parts.items():
        m = sum(v) / len(v)
        print(f"    {k:28s} {m:9.1f} ms  {100 * m / total:5.1f}%")


if __name__ == "__main__":
    main()
