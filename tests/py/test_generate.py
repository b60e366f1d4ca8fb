#!/usr/bin/env python3
"""The generating pipe di-tokenize | di-prefill | di-decode | di-detok on the default tiny model
(data/models/tiny-v41) with the real tokenizer, against the single-process reference loop
(tests/drivers/generate_ref.c: each request alone, prefill then one step at a time through the
same library):

  1. greedy: 50 concurrent requests of mixed lengths that cross the window (16) and the
     ratio-2 group boundaries give the reference's tokens, token for token;
  2. batch invariance: 65 requests (greedy and sampled: seeded or seeded by id, top-k, top-p,
     min-p) give the same tokens alone (reference), among 64 others, and in another arrival
     order with other batch and budget sizes;
  3. state frames from another model (di-mkmodel --seed 2), with truncated or corrupted state
     bytes, or cut short on a socket, get an error line each while the rest is served;
  5. the context rule (--context), and memory pressure (a pool smaller than the load);
  plus stop strings (decode stops where the sink cuts), misrouted frames, --device cuda."""
import json
import os
import random
import re
import subprocess
import tempfile

import msgpack
import zmq

from harness import BUILD, DATA, TOKENIZER_JSON, Suite, frames, free_port, json_lines, pipe, tool

MODEL = os.path.join(DATA, "models", "tiny-v41")
REF = os.path.join(BUILD, "drivers", "generate_ref")
VOCAB = 129280


def to_jsonl(reqs):
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in reqs)


def outputs(decode_out):
    """Per id: the tokens of its tokens frames, and its done or error frame."""
    res = {}
    for f in frames(decode_out):
        if f["type"] == "eos":
            continue
        r = res.setdefault(f["id"], {"tokens": [], "end": None, "meta_frames": 0})
        if f["type"] == "tokens":
            r["tokens"] += f["tokens"]
            r["meta_frames"] += "meta" in f
        elif f["type"] in ("done", "error"):
            r["end"] = f
    return res


def run_pipe(reqs, prefill=(), decode=(), model=MODEL):
    """The pipe up to di-decode, whose frames are kept, then di-detok on them."""
    out, errs, rcs = pipe([[tool("di-tokenize")], [tool("di-prefill"), "--model", model, *prefill],
                           [tool("di-decode"), "--model", model, *decode]], to_jsonl(reqs))
    lines, derrs, drcs = pipe([[tool("di-detok")]], out)
    return outputs(out), json_lines(lines), rcs + drcs, errs + derrs


def reference(reqs, context=0, model=MODEL):
    out, errs, rcs = pipe([[tool("di-tokenize")], [REF, model, str(context)]], to_jsonl(reqs))
    assert rcs == [0, 0], errs
    return {r["id"]: r for r in json_lines(out)}


def prompt_ids(rng, n, vocab=VOCAB):
    return [rng.randrange(vocab) for _ in range(n)]


def compare(ref, got):
    """Ids whose tokens or finish reason differ."""
    bad = []
    for rid, r in ref.items():
        g = got.get(rid)
        if not g or g["end"] is None or g["end"]["type"] != "done" or g["tokens"] != r["tokens"] or \
                g["end"]["finish_reason"] != r["finish_reason"]:
            bad.append(rid)
    return bad


def test_greedy_equals_reference(s):
    rng = random.Random(1)
    reqs = []
    for i in range(50):
        n = [1, 2, 3, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 70][i % 15] + (i // 15)
        req = {"id": f"g{i}", "prompt": prompt_ids(rng, n), "temperature": 0, "max_tokens": 1 + (i * 7) % 24}
        if i % 10 == 9:
            req = {"id": f"g{i}", "prompt": f"Request {i}: the quick brown fox " * (i % 4 + 1), "temperature": 0,
                   "max_tokens": 12}
        reqs.append(req)
    ref = reference(reqs)
    got, answers, rcs, errs = run_pipe(reqs, ["--token-budget", "96"], ["--max-batch", "16"])
    bad = compare(ref, got)
    lengths = sorted(len(r["tokens"]) for r in ref.values())
    s.check(rcs == [0, 0, 0, 0] and not bad and len(ref) == 50,
            f"greedy: 50 concurrent requests (prompts 1-72 tokens, {lengths[0]}-{lengths[-1]} output tokens) == reference loop",
            f"rcs {rcs}, differing {bad[:5]}: {[(ref[b]['tokens'], got.get(b, {}).get('tokens')) for b in bad[:2]]} {errs}")
    ok = len(answers) == 50 and all("text" in a and a["usage"]["completion_tokens"] == len(ref[a["id"]]["tokens"])
                                    for a in answers)
    ok = ok and all(g["meta_frames"] == 1 for g in got.values())
    s.check(ok, "di-detok answers each once, usage counts the tokens, meta rides the first frame", str(answers[:2]))


def sampled_requests():
    rng = random.Random(2)
    reqs = []
    for i in range(65):
        r = {"id": f"b{i}", "prompt": prompt_ids(rng, 1 + (i * 13) % 40, 512), "max_tokens": 2 + i % 8}
        if i % 4:
            r["temperature"] = 0.8
            if i % 4 == 1:
                r["seed"] = 1000 + i
            r.update([{}, {"top_k": 50}, {"top_p": 0.9}, {"min_p": 0.1}][(i // 4) % 4])
        else:
            r["temperature"] = 0
        reqs.append(r)
    return reqs


def test_batch_invariance(s):
    """On a 512-token vocabulary of the same architecture (a step costs a fifth): prompts of ids."""
    reqs = sampled_requests()
    with tempfile.TemporaryDirectory() as small:
        subprocess.run([tool("di-mkmodel"), "--out", small, "--vocab", "512"], check=True, capture_output=True)
        ref = reference(reqs, model=small)
        together, _, rcs1, _ = run_pipe(reqs, [], ["--max-batch", "64"], model=small)
        shuffled = list(reqs)
        random.Random(3).shuffle(shuffled)
        other, _, rcs2, _ = run_pipe(shuffled, ["--token-budget", "100"], ["--max-batch", "7"], model=small)
    bad1, bad2 = compare(ref, together), compare(ref, other)
    s.check(rcs1 == rcs2 == [0, 0, 0, 0] and not bad1 and not bad2,
            "65 requests, greedy and seeded sampling: alone == among 64 others == shuffled with batch 7, budget 100",
            f"rcs {rcs1} {rcs2}; differ among others {bad1[:5]}, shuffled {bad2[:5]}")
    sampled = [r for r in reqs if r.get("temperature")]
    distinct = len({tuple(ref[r["id"]]["tokens"]) for r in sampled})
    s.check(distinct > len(sampled) * 0.9, f"sampled outputs differ between requests ({distinct} distinct of {len(sampled)})")


def eos_frame(n):
    return {"v": 1, "type": "eos", "sender": "test@crafted", "origin": "test-origin", "announced": n, "served": n}


def pack(f):
    head = {"v": f["v"], "type": f["type"], "id": f["id"], "seq": f["seq"]}  # id first: readable in a cut frame
    head.update(f)
    return msgpack.packb(head, use_bin_type=True)


def state_frames(model, reqs):
    out, errs, rcs = pipe([[tool("di-tokenize")], [tool("di-prefill"), "--model", model]], to_jsonl(reqs))
    assert rcs == [0, 0], errs
    return [f for f in frames(out) if f["type"] == "state"]


def test_refused_states(s):
    with tempfile.TemporaryDirectory() as tmp:
        other = os.path.join(tmp, "other")
        subprocess.run([tool("di-mkmodel"), "--out", other, "--seed", "2"], check=True, capture_output=True)
        reqs = [{"id": f"r{i}", "prompt": f"state {i} " * (i + 2), "temperature": 0, "max_tokens": 4} for i in range(6)]
        good = state_frames(MODEL, reqs[:5])
        foreign = state_frames(other, reqs[5:])[0]
        foreign["seq"] = 5
        good[1]["state"] = good[1]["state"][: len(good[1]["state"]) // 2]
        corrupt = bytearray(good[2]["state"])
        corrupt[len(corrupt) // 2] ^= 0x10
        good[2]["state"] = bytes(corrupt)
        stream = b"".join(pack(f) for f in [foreign, good[0], good[1], good[2], good[3], good[4]])
        stream += msgpack.packb(eos_frame(6))
        out, errs, rcs = pipe([[tool("di-decode"), "--model", MODEL], [tool("di-detok")]], stream)
        by_id = {a["id"]: a for a in json_lines(out)}
        codes = {k: by_id[k].get("error", {}).get("code") for k in by_id}
        ok = rcs == [0, 0] and len(by_id) == 6 and all(codes[k] == "bad_state" for k in ("r1", "r2", "r5"))
        ok = ok and all("text" in by_id[k] for k in ("r0", "r3", "r4"))
        ok = ok and "another model" in by_id["r5"]["error"]["message"] and "truncated" in by_id["r1"]["error"]["message"]
        s.check(ok, "another model's state, truncated and corrupted states: an error line each, the others served",
                f"rcs {rcs}, {by_id}, {errs}")

        # over a socket a frame cut short is one bad frame: its request gets an error line, the worker goes on
        port = free_port()
        dec = subprocess.Popen([tool("di-decode"), "--model", MODEL, "--in", f"@tcp://:{port}"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.connect(f"tcp://127.0.0.1:{port}")
        for seq, f in enumerate((good[0], good[3], good[4])):
            f["seq"] = seq
        cut = pack(good[3])
        for msg in [pack(good[0]), cut[: len(cut) // 2], pack(good[4])]:
            push.send(msg)
        push.send(msgpack.packb({**eos_frame(3), "announced": 3, "served": 3, "origin": "o2"}))
        push.close(linger=5000)
        ctx.term()
        frames_out, derr = dec.communicate(timeout=60)
        lines, _, drc = pipe([[tool("di-detok")]], frames_out)
        by_id = {a["id"]: a for a in json_lines(lines)}
        ok = dec.returncode == 0 and drc == [0] and set(by_id) == {"r0", "r3", "r4"}
        ok = ok and by_id["r3"].get("error", {}).get("code") == "bad_frame" and "text" in by_id["r4"]
        s.check(ok, "a state frame cut short on a socket: an error line for it, the worker keeps serving",
                f"rc {dec.returncode} {drc}, {by_id}, {derr.decode()[-500:]}")


def test_context_rule(s):
    rng = random.Random(4)
    reqs = [{"id": "over", "prompt": prompt_ids(rng, 45), "max_tokens": 3},
            {"id": "at", "prompt": prompt_ids(rng, 40), "max_tokens": 3},
            {"id": "one", "prompt": prompt_ids(rng, 39), "max_tokens": 3, "temperature": 0},
            {"id": "ten", "prompt": prompt_ids(rng, 30), "max_tokens": 20, "temperature": 0},
            {"id": "fits", "prompt": prompt_ids(rng, 20), "max_tokens": 5, "temperature": 0}]
    got, answers, rcs, errs = run_pipe(reqs, ["--context", "40"], ["--context", "40"])
    by_id = {a["id"]: a for a in answers}
    usage = {k: by_id[k].get("usage", {}) for k in by_id}
    ok = rcs == [0, 0, 0, 0] and len(by_id) == 5
    ok = ok and by_id["over"]["error"]["code"] == "context_length" and by_id["at"]["error"]["code"] == "context_length"
    ok = ok and by_id["one"]["finish_reason"] == "length" and usage["one"]["completion_tokens"] == 1
    ok = ok and by_id["ten"]["finish_reason"] == "length" and usage["ten"]["completion_tokens"] == 10
    ok = ok and usage["fits"]["completion_tokens"] == 5
    ref = reference(reqs, 40)
    ok = ok and not compare({k: ref[k] for k in ("one", "ten", "fits")}, got)
    s.check(ok, "context 40: prompts of 45 and 40 tokens refused (context_length), output stops with 'length' at 40",
            f"rcs {rcs}, {by_id}, {errs}")


def test_memory_pressure(s):
    rng = random.Random(5)
    reqs = [{"id": f"m{i}", "prompt": prompt_ids(rng, 10 + i % 7), "max_tokens": 8, "temperature": 0} for i in range(20)]
    big, _, rcs1, errs1 = run_pipe(reqs, [], ["--pool-tokens", "100000", "--stats"])
    small, answers, rcs2, errs = run_pipe(reqs, [], ["--pool-tokens", "60", "--stats"])
    peak = int(re.search(r"peak_pool_tokens (\d+)", errs[2]).group(1))
    batch = int(re.search(r"peak_batch (\d+)", errs[2]).group(1))
    same = all(small[k]["tokens"] == big[k]["tokens"] and small[k]["end"]["type"] == "done" for k in big)
    s.check(rcs1 == rcs2 == [0, 0, 0, 0] and len(answers) == 20 and same and peak <= 60 and batch <= 3,
            f"a pool of 60 tokens for 20 requests of ~22: queued (peak {peak} tokens, batch {batch}), all answered, same tokens",
            f"rcs {rcs1} {rcs2}, {len(answers)} answers, same {same}")
    # the paged state: a finished sequence's pages serve the next, so three at a time carve less
    pages = [int(re.search(r"state_page_bytes (\d+)", e[2]).group(1)) for e in (errs1, errs)]
    s.check(0 < pages[1] < pages[0], f"state pages: {pages[1]} bytes for 3 sequences at a time, {pages[0]} for all 20 at once",
            f"{pages}")


def test_stop_string(s):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(TOKENIZER_JSON)
    req = {"id": "st", "prompt": "Once upon a time", "temperature": 0, "max_tokens": 24}
    free_run = reference([req])["st"]["tokens"]
    text = tok.decode(free_run, skip_special_tokens=False)
    words = [w for w in re.findall(r"[A-Za-z]{3,}", text)]
    stop = words[len(words) // 2] if words else text[len(text) // 2:len(text) // 2 + 2]
    # the first prefix of the free run whose text holds the stop string: decode must end there
    k = next(i for i in range(1, len(free_run) + 1) if stop in tok.decode(free_run[:i], skip_special_tokens=False))
    got, answers, rcs, errs = run_pipe([dict(req, stop=[stop])])
    a = answers[0] if answers else {}
    ok = rcs == [0, 0, 0, 0] and got["st"]["tokens"] == free_run[:k] and a.get("finish_reason") == "stop"
    ok = ok and a.get("text") == text[:text.index(stop)] and k < len(free_run)
    s.check(ok, f"stop string '{stop}': decode stops after {k} of {len(free_run)} tokens, the text ends before it",
            f"rcs {rcs}, got {len(got['st']['tokens'])} tokens, {a}")


def test_misrouted_and_device(s):
    out, errs, rcs = pipe([[tool("di-tokenize")], [tool("di-decode"), "--model", MODEL], [tool("di-detok")]],
                          to_jsonl([{"id": "x", "prompt": "hi"}]))
    a = json_lines(out)
    s.check(rcs == [0, 0, 0] and len(a) == 1 and a[0]["error"]["code"] == "misrouted",
            "a request frame reaching di-decode: a 'misrouted' error line", f"{rcs} {a}")
    for t in ("di-prefill", "di-decode"):
        p = subprocess.run([tool(t), "--model", MODEL, "--device", "cuda:99"], capture_output=True, text=True)
        s.check(p.returncode != 0 and "--device cuda:99: " in p.stderr and "CUDA" in p.stderr and p.stderr.count("\n") == 1,
                f"{t} --device cuda:99 (no such GPU) is refused in one line", p.stderr)


if __name__ == "__main__":
    s = Suite()
    if not (os.path.exists(os.path.join(MODEL, "model.safetensors")) and os.path.exists(TOKENIZER_JSON)
            and os.path.exists(REF)):
        s.skip("generation", "needs make, make data and the generate_ref driver")
    else:
        for t in (test_greedy_equals_reference, test_batch_invariance, test_refused_states, test_context_rule,
                  test_memory_pressure, test_stop_string, test_misrouted_and_device):
            s.run(t)
    s.finish()
