#!/usr/bin/env python3
"""Constrained decoding through the real pipe, di-tokenize | di-grammar | di-prefill | di-decode
| di-detok, on the tiny default model (random weights) at temperature 1 (issue 6, acceptance 1
and 3). di-decode's frames are kept (the token ids) and given to di-detok as they are.

  1. Every constraint of the grammar acceptance set (tests/data/grammar_schemas.jsonl: 39 JSON
     schemas; grammar_regexes.jsonl: 34 regexes) and of grammar_pipe_bounded.jsonl (28 schemas,
     10 regexes whose strings, numbers and repetitions are bounded) with several seeds: an
     output that finishes ("stop") validates, jsonschema (draft 2020-12, formats checked) for
     schemas and PCRE2 full match for regexes. A random model seldom ends an unbounded
     structure by itself (a string closes only when one of the few tokens holding a fitting
     quote comes up; EOS is one token among the thousands allowed after a digit), so outputs
     also reach max_tokens: those end with "length", and must be a prefix of a valid output:
     every token allowed in turn when replayed through the compiled grammar, and for regexes a
     PCRE2 partial match. The counts are printed; at least 30 schemas and 30 regexes must
     finish every output (the bounded set makes sure of that).
  2. Thinking (chats with thinking enabled): the reasoning is free, the answer after </think>
     validates. The tiny model would practically never write </think> (one token in 129,280),
     so this part runs on a copy of it in which one embedding dimension is a constant that only
     </think>'s head row reads: </think> gets a probability of about 0.1 at every step, the
     other tokens' logits do not see that dimension.
  3. Batching changes nothing: a subset alone (max-batch 1, budget 16) and with logprobs (no
     shortcut to EOS: it is drawn from a step) gives the same tokens; requests without
     di-grammar (no hash) give the same tokens too.
  4. Bad constraints (invalid, unsupported, pathological) get an error line each and the other
     requests' outputs do not change; a hash from another tokenizer or build is refused by
     di-prefill and by di-decode (bad_constraint); stop token ids fire only where the output is
     complete.

Seeds per constraint: DI_GRAMMAR_SEEDS (default 2); output budget DI_GRAMMAR_MAX_TOKENS
(default 40, thinking 24 more); thinking: every second constraint with one seed, or every
constraint with DI_GRAMMAR_THINK_SEEDS seeds when that is set. More for a manual run."""
import json
import os
import shutil
import struct
import tempfile
from collections import Counter

import numpy as np
from jsonschema import Draft202012Validator, FormatChecker
from tokenizers import Tokenizer

from grammar_driver import GrammarDriver
from harness import DATA, TOKENIZER_JSON, data_records, frame_bytes, frames, json_lines, pipe, run_suite, tool
from test_grammar_stage import BAD

MODEL = os.path.join(DATA, "models", "tiny-v41")
SEEDS = int(os.environ.get("DI_GRAMMAR_SEEDS", "2"))
THINK_SEEDS = int(os.environ.get("DI_GRAMMAR_THINK_SEEDS", "1"))
THINK_STRIDE = 1 if "DI_GRAMMAR_THINK_SEEDS" in os.environ else 2
MAX_TOKENS = int(os.environ.get("DI_GRAMMAR_MAX_TOKENS", "40"))
THINK_END = "</think>"


def load(name, key):
    return [(c["name"], c[key]) for c in data_records(name) if key in c]


BOUNDED = "grammar_pipe_bounded.jsonl"
SCHEMAS = load("grammar_schemas.jsonl", "schema") + load(BOUNDED, "schema")
REGEXES = load("grammar_regexes.jsonl", "regex") + load(BOUNDED, "regex")


def response_format(kind, value):
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "x", "schema": json.loads(value)}}
    return {"type": "regex", "regex": value}


def plain(kind, name, value, seed, **extra):
    r = {"id": f"{kind}:{name}:{seed}", "prompt": "Answer:", "max_tokens": MAX_TOKENS, "temperature": 1, "seed": seed,
         "response_format": response_format(kind, value)}
    r.update(extra)
    return r


def chat(kind, name, value, seed):
    return {"id": f"{kind}:{name}:{seed}", "messages": [{"role": "user", "content": "Reply in JSON or as asked."}],
            "thinking": {"type": "enabled"}, "max_tokens": MAX_TOKENS + 24, "temperature": 1, "seed": seed,
            "response_format": response_format(kind, value)}


def all_requests(seeds, make=plain, stride=1):
    return [make(kind, name, value, seed) for kind, cases in (("json_schema", SCHEMAS), ("regex", REGEXES))
            for name, value in cases[::stride] for seed in seeds]


def to_jsonl(reqs):
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in reqs)


def run(reqs=None, model=MODEL, prefill=(), decode=(), grammar=True, front=None):
    """The pipe up to di-decode, then di-detok on its frames: {id: {"tokens", "line"}} and the exit
    codes. front: request frames to start from instead of di-tokenize (| di-grammar) on reqs."""
    stages = [[tool("di-prefill"), "--model", model, *prefill], [tool("di-decode"), "--model", model, *decode]]
    if front is None:
        stages = [[tool("di-tokenize")]] + ([[tool("di-grammar")]] if grammar else []) + stages
    out, errs, rcs = pipe(stages, front if front is not None else to_jsonl(reqs), timeout=600)
    lines, derrs, drcs = pipe([[tool("di-detok")]], out)
    res = {}
    for f in frames(out):
        if f["type"] == "tokens":
            res.setdefault(f["id"], {"tokens": []})["tokens"] += f["tokens"]
    for line in json_lines(lines):
        res.setdefault(line["id"], {"tokens": []})["line"] = line
    return res, rcs + drcs, errs + derrs


def validator(schema_text):
    return Draft202012Validator(json.loads(schema_text), format_checker=FormatChecker())


def valid_answer(d, kind, value, text):
    if kind == "regex":
        return d.match("regex", value, [text])["pcre2"][0]
    try:
        return validator(value).is_valid(json.loads(text))
    except ValueError:
        return False


def check_outputs(s, d, res, reqs, label, thinking=False):
    """Per constraint: finished answers validate, length outputs are prefixes of valid ones.
    Returns (complete constraints, length outputs, outputs) per kind."""
    by_case = {}
    for r in reqs:
        kind, name, _ = r["id"].split(":")
        by_case.setdefault((kind, name), []).append(r["id"])
    summary = {k: Counter() for k in ("json_schema", "regex")}
    for (kind, name), ids in by_case.items():
        value = dict(SCHEMAS if kind == "json_schema" else REGEXES)[name]
        got = [res.get(i, {}) for i in ids]
        lines = [g.get("line", {}) for g in got]
        if not s.check(all("finish_reason" in ln for ln in lines), f"{label} {kind} {name}: every request answered",
                       [ln for ln in lines if "finish_reason" not in ln][:2]):
            continue
        rep = d.replay(kind, value, [g["tokens"] for g in got], thinking)
        bad, prefixes = [], 0
        for k, ln in enumerate(lines):
            text = ln["text"]
            if ln["finish_reason"] == "stop":
                ok = rep["complete"][k] and rep["answers"][k] == text and valid_answer(d, kind, value, text)
            else:
                ok = ln["finish_reason"] == "length" and rep["accepted"][k] and not rep["complete"][k] or \
                    ln["finish_reason"] == "length" and rep["complete"][k] and valid_answer(d, kind, value, text)
                ok = ok and (kind != "regex" or rep["pcre2_partial"][k])
                prefixes += 1
            if thinking:
                ok = ok and THINK_END not in ln.get("reasoning_content", "") and THINK_END not in text
            if not ok:
                bad.append((ln, rep["accepted"][k], rep["complete"][k]))
        summary[kind]["outputs"] += len(lines)
        summary[kind]["length"] += prefixes
        summary[kind]["complete_constraints"] += prefixes == 0
        s.check(not bad, f"{label} {kind} {name}: {len(lines) - prefixes} finished outputs validate, "
                f"{prefixes} at max_tokens are prefixes of valid ones", bad[:2])
    return summary


def report(label, summary):
    for kind, c in summary.items():
        print(f"# {label} {kind}: {c['outputs']} outputs, {c['outputs'] - c['length']} finished and valid, "
              f"{c['length']} at max_tokens (valid prefixes); constraints with every output finished: "
              f"{c['complete_constraints']}")


FREE = [{"id": f"free:{i}", "prompt": "Plain text.", "max_tokens": 8, "seed": i} for i in range(2)]


def test_acceptance_set(s, d, ctx):
    reqs = all_requests(range(1, SEEDS + 1))
    res, rcs, errs = run(reqs + FREE)
    s.check(rcs == [0] * 5, "the pipe exits 0", (rcs, errs))
    s.check(all(len(res[f["id"]]["tokens"]) == 8 for f in FREE), "unconstrained requests in the batch: served as usual")
    summary = check_outputs(s, d, res, reqs, "plain")
    report(f"plain, {SEEDS} seeds, max_tokens {MAX_TOKENS}:", summary)
    s.check(summary["json_schema"]["complete_constraints"] >= 30 and summary["regex"]["complete_constraints"] >= 30,
            "at least 30 schemas and 30 regexes finish every output", summary)
    ctx["plain"] = (reqs, res)


def think_model(directory):
    """A copy of the tiny model where </think> is likely at every step (see the docstring)."""
    with open(os.path.join(DATA, "tokenizer", "tokenizer.json"), encoding="utf-8") as f:
        think_end = next(t["id"] for t in json.load(f)["added_tokens"] if t["content"] == THINK_END)
    src = os.path.join(MODEL, "model.safetensors")
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header, base = json.loads(f.read(n)), 8 + n
    shutil.copy(os.path.join(MODEL, "config.json"), directory)
    dst = os.path.join(directory, "model.safetensors")
    shutil.copy(src, dst)

    def tensor(f, name):
        meta = header[name]
        assert meta["dtype"] == "BF16", meta
        a, b = meta["data_offsets"]
        f.seek(base + a)
        raw = np.frombuffer(f.read(b - a), dtype=np.uint16).astype(np.uint32) << 16
        return raw.view(np.float32).reshape(meta["shape"]).copy(), base + a

    with open(dst, "r+b") as f:
        embed, at_e = tensor(f, "embed.weight")
        head, at_h = tensor(f, "head.weight")
        dim = embed.shape[1]
        embed[:, 0] = 2 * embed.std() * np.sqrt(dim)  # dimension 0 dominates the residual stream
        head[:, 0] = 0
        head[think_end, :] = 0
        head[think_end, 0] = 1.6  # about e^10 against the vocabulary's e^12
        for x, at in ((embed, at_e), (head, at_h)):
            f.seek(at)
            f.write(((x.view(np.uint32) + 0x8000) >> 16).astype(np.uint16).tobytes())
    return directory


def test_thinking(s, d, ctx):
    reqs = all_requests(range(101, 101 + THINK_SEEDS), chat, THINK_STRIDE)
    with tempfile.TemporaryDirectory() as tmp:
        res, rcs, errs = run(reqs, model=think_model(tmp))
    s.check(rcs == [0] * 5, "thinking: the pipe exits 0", (rcs, errs))
    summary = check_outputs(s, d, res, reqs, "thinking", thinking=True)
    report(f"thinking, {THINK_SEEDS} seeds, max_tokens {MAX_TOKENS + 24}:", summary)
    lines = [r["line"] for r in res.values() if "line" in r]
    reasoned = [ln for ln in lines if ln.get("reasoning_content")]
    s.check(len(reasoned) >= len(lines) // 2, "thinking: most outputs reason first", (len(reasoned), len(lines)))
    # free: the reasoning is not held to the constraint (digits-only regexes reason in words)
    free = [ln for ln in reasoned if ln["id"].startswith("regex:") and not valid_answer(
        d, "regex", dict(REGEXES)[ln["id"].split(":")[1]], ln["reasoning_content"])]
    s.check(len(free) >= 3, "thinking: reasoning breaks the answer's constraint (it is free)", len(free))


def tokens_of(res):
    return {i: r["tokens"] for i, r in res.items()}


def test_invariance(s, d, ctx):
    reqs, res = ctx["plain"]
    subset = reqs[::8]
    alone, rcs1, _ = run(subset, prefill=["--token-budget", "16"], decode=["--max-batch", "3"])
    with_lp, rcs2, _ = run([dict(r, logprobs=True) for r in subset[:12]])
    no_grammar, rcs3, _ = run(subset[:12], grammar=False)
    want = tokens_of({r["id"]: res[r["id"]] for r in subset})
    s.check(rcs1 == rcs2 == [0] * 5 and rcs3 == [0] * 4, "exit status 0", (rcs1, rcs2, rcs3))
    s.check(tokens_of(alone) == want, f"{len(subset)} constrained requests in batches of 3 (budget 16) == in a full batch")
    s.check(len(with_lp) == 12 and all(with_lp[i]["tokens"] == want[i] for i in with_lp),
            "with logprobs (EOS drawn from a step) == without")
    s.check(len(no_grammar) == 12 and all(no_grammar[i]["tokens"] == want[i] for i in no_grammar),
            "without di-grammar (constraint neither canonical nor hashed) == with it")


def bad_requests():
    """The stage test's bad constraints that a request line can carry (schemas that are JSON objects)."""
    out = []
    for i, (kind, value) in enumerate(BAD):
        if kind == "regex":
            out.append({"id": f"bad{i}", "prompt": "Answer:", "max_tokens": 8, "response_format": {"type": "regex", "regex": value}})
            continue
        try:
            schema = json.loads(value)
        except ValueError:
            continue
        if isinstance(schema, dict):
            out.append({"id": f"bad{i}", "prompt": "Answer:", "max_tokens": 8,
                        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    return out


def test_bad_constraints(s, d, ctx):
    reqs, res = ctx["plain"]
    good = reqs[::16] + FREE
    bad = bad_requests()
    mixed = [x for pair in zip(good, bad) for x in pair] + good[len(bad):] + bad[len(good):]
    got, rcs, errs = run(mixed)
    s.check(rcs == [0] * 5, "bad constraints: the pipe exits 0", (rcs, errs))
    errors = [got.get(b["id"], {}).get("line", {}).get("error", {}) for b in bad]
    s.check(len(bad) >= 15 and all(e.get("code") == "bad_constraint" and e.get("stage") == "di-grammar" for e in errors),
            f"{len(bad)} bad constraints: an error line each (bad_constraint, from di-grammar)", errors)
    want = tokens_of({r["id"]: res[r["id"]] for r in good})
    s.check(all(got[i]["tokens"] == t for i, t in want.items()), "the other requests' outputs do not change (constrained or not)")
    # without di-grammar the sampling stage refuses them itself
    raw, rcs, errs = run(bad[:6] + good[:2], grammar=False)
    codes = [raw[b["id"]]["line"].get("error", {}) for b in bad[:6]]
    s.check(all(c.get("code") == "bad_constraint" and c.get("stage") == "di-prefill" for c in codes) and
            all("error" not in raw[g["id"]]["line"] for g in good[:2]), "without di-grammar: di-prefill refuses them", codes)


def test_hash_mismatch(s, d, ctx):
    reqs = [plain("regex", "digits", "[0-9]{3}", 1), plain("regex", "digits", "[0-9]{3}", 2)]
    data, _, _ = pipe([[tool("di-tokenize")], [tool("di-grammar")]], to_jsonl(reqs))
    fs = frames(data)
    fs[0]["constraint"]["hash"] ^= 1
    got, _, errs = run(front=frame_bytes(fs))
    e = got["regex:digits:1"]["line"].get("error", {})
    s.check(e.get("code") == "bad_constraint" and e.get("stage") == "di-prefill" and "another tokenizer or build" in
            e.get("message", "") and got["regex:digits:2"]["line"].get("finish_reason") == "stop",
            "a hash from another tokenizer or build: di-prefill refuses that request", (got, errs))
    states, _, _ = pipe([[tool("di-tokenize")], [tool("di-grammar")], [tool("di-prefill"), "--model", MODEL]], to_jsonl(reqs))
    fs = frames(states)
    fs[1]["constraint"]["hash"] ^= 1 << 40
    out, _, _ = pipe([[tool("di-decode"), "--model", MODEL]], frame_bytes(fs))
    errors = [f for f in frames(out) if f["type"] == "error"]
    s.check(len(errors) == 1 and errors[0]["id"] == "regex:digits:2" and errors[0]["code"] == "bad_constraint",
            "and di-decode too", errors)


def test_stop_ids(s, d, ctx):
    tok = Tokenizer.from_file(TOKENIZER_JSON)
    digits = [tok.token_to_id(str(i)) for i in range(10)]
    reqs = [plain("regex", "three", "[0-9]-[0-9]-[0-9]", seed, stop_token_ids=digits) for seed in range(1, 25)]
    reqs += [plain("regex", "csv", "[a-z]{1,3}(,[a-z]{1,3}){2}", seed, stop_token_ids=[tok.token_to_id(",")])
             for seed in range(1, 7)]
    got, rcs, _ = run(reqs)
    lines = {r["id"]: got[r["id"]]["line"] for r in reqs}
    ok = all(ln.get("finish_reason") == "stop" and d.match("regex", r["response_format"]["regex"], [ln["text"]])["pcre2"][0]
             for r, ln in zip(reqs, lines.values()))
    three = [got[r["id"]]["tokens"] for r in reqs[:24]]
    ended = sum(t[-1] in digits for t in three)
    inside = sum(any(x in digits for x in t[:-1]) for t in three)
    s.check(ok and ended and inside, f"stop token ids end an output only where it is complete: {ended} of 24 ended by "
            f"one, {inside} took one as text before; a stop id the grammar needs is text", lines)


if __name__ == "__main__":
    with GrammarDriver() as d:
        run_suite([test_acceptance_set, test_thinking, test_invariance, test_bad_constraints, test_hash_mismatch,
                   test_stop_ids], d, {})
