#!/usr/bin/env python3
"""di-tokenize | di-detok reproduces every prompt exactly (raw prompts from the multilingual
corpus; chat requests come back as the official renderer's prompt), and the same two tools
as separate processes over tcp://127.0.0.1 give byte-identical output."""
import json
import os
import subprocess
import sys
import tempfile

from harness import ROOT, TOKENIZER_JSON, Suite, free_port, json_lines, pipe, tool

sys.path.insert(0, os.path.dirname(__file__))
from make_corpus import make_corpus  # noqa: E402

CHAT_CASES = os.path.join(ROOT, "tests", "data", "chat_cases.jsonl")


def corpus_lines():
    docs = [d for d in make_corpus(TOKENIZER_JSON, seed=7, target_bytes=400_000) if d.strip()]
    lines = [json.dumps({"id": f"doc-{i}", "prompt": d}, ensure_ascii=False).encode() for i, d in enumerate(docs)]
    return docs, b"\n".join(lines) + b"\n"


def test_raw_prompts(s, docs, data):
    out, errs, rcs = pipe([[tool("di-tokenize")], [tool("di-detok")]], data)
    answers = json_lines(out)
    wrong = [a["id"] for a, d in zip(answers, docs) if a.get("prompt") != d]
    s.check(len(answers) == len(docs) and not wrong and rcs == [0, 0],
            f"round trip of {len(docs)} corpus documents ({len(data)} bytes)",
            f"{len(answers)} answers, mismatches {wrong[:5]}, rcs {rcs}, {errs}")
    return out


def test_over_tcp(s, data, expected):
    port = free_port()
    with tempfile.TemporaryFile() as sink_out:  # a file, so the sink never blocks on its output
        sink = subprocess.Popen([tool("di-detok"), "--in", f"@tcp://:{port}"], stdout=sink_out,
                                stderr=subprocess.PIPE)
        source = subprocess.run([tool("di-tokenize"), "--out", f"tcp://127.0.0.1:{port}"], input=data,
                                capture_output=True, timeout=120)
        _, err = sink.communicate(timeout=120)
        sink_out.seek(0)
        out = sink_out.read()
    s.check(source.returncode == 0 and sink.returncode == 0 and out == expected,
            "the same over tcp://127.0.0.1, separate processes",
            f"rc {source.returncode}/{sink.returncode}, {len(out)} vs {len(expected)} bytes, {err[-500:]}")


def test_chat_round_trip(s):
    """Chat requests come back as recipe renders them (only those recipe accepts)."""
    try:
        from deepseek_recipe import ChatCompletionRequest, ConversionOptions, DeepseekV4Encoding, DeepseekV41Encoding
    except ImportError:
        s.skip("chat round trip", "deepseek_recipe not installed")
        return
    if not os.path.exists(CHAT_CASES):
        s.skip("chat round trip", "no tests/data/chat_cases.jsonl")
        return
    bodies, expected = [], []
    for line in open(CHAT_CASES, encoding="utf-8"):
        case = json.loads(line)
        body = case.get("body", case)
        if not isinstance(body, dict) or "messages" not in body:
            continue
        try:
            conv = ChatCompletionRequest(body).convert(ConversionOptions())
            enc = DeepseekV41Encoding() if body.get("model") == "DeepSeek-V4.1-Flash" else DeepseekV4Encoding()
            expected.append(enc.render_conversation(conv.conversation).prompt)
        except Exception:
            continue
        bodies.append(body)
    data = b"".join(json.dumps(dict(b, id=f"chat-{i}"), ensure_ascii=False).encode() + b"\n"
                    for i, b in enumerate(bodies))
    out, errs, rcs = pipe([[tool("di-tokenize")], [tool("di-detok")]], data)
    answers = json_lines(out)
    got = [a.get("prompt", a.get("error")) for a in answers]
    wrong = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    s.check(len(answers) == len(bodies) and not wrong and bodies,
            f"round trip of {len(bodies)} chat requests equals recipe's rendering",
            f"{len(answers)} answers; mismatches at {wrong[:5]}: {[got[i] for i in wrong[:1]]}")


if __name__ == "__main__":
    s = Suite()
    docs, data = corpus_lines()
    out = None
    try:
        out = test_raw_prompts(s, docs, data)
        test_over_tcp(s, data, out)
    except Exception as e:
        s.check(False, "raw round trip", repr(e))
    s.run(test_chat_round_trip)
    s.finish()
