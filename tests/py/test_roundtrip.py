#!/usr/bin/env python3
"""di-tokenize | di-detok reproduces every prompt exactly (raw prompts from the multilingual
corpus; chat requests come back as the official renderer's prompt), and the same two tools
as separate processes over tcp://127.0.0.1 give byte-identical output."""
import json
import os
import subprocess
import sys
import tempfile

from harness import ROOT, TOKENIZER_JSON, Suite, free_port, json_lines, pipe, tokenizer_with_v41_system, tool

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


def chat_bodies():
    bodies = []
    for line in open(CHAT_CASES, encoding="utf-8"):
        case = json.loads(line)
        body = case.get("body", case)
        if isinstance(body, dict) and "messages" in body:
            bodies.append(body)
    return bodies


def check_chat_template(s, name, template_model, tokenize_args):
    """Chat requests come back exactly as recipe renders them with the served template
    (only requests recipe accepts are compared; the others must be errors)."""
    from deepseek_recipe import ChatCompletionRequest, ConversionOptions, DeepseekV4Encoding, DeepseekV41Encoding
    encoding = DeepseekV41Encoding() if template_model == "DeepSeek-V4.1-Flash" else DeepseekV4Encoding()
    bodies, expected = chat_bodies(), []
    for body in bodies:
        if '"image_url"' in json.dumps(body) or '"file"' in json.dumps(body):  # refused on purpose: text only
            expected.append(None)
            continue
        try:
            conv = ChatCompletionRequest(dict(body, model=template_model)).convert(ConversionOptions())
            expected.append(encoding.render_conversation(conv.conversation).prompt)
        except Exception:
            expected.append(None)
    data = b"".join(json.dumps(dict(b, id=f"chat-{i}"), ensure_ascii=False).encode() + b"\n"
                    for i, b in enumerate(bodies))
    out, errs, rcs = pipe([[tool("di-tokenize"), *tokenize_args], [tool("di-detok"), *tokenize_args]], data)
    answers = json_lines(out)
    wrong = [i for i, (a, e) in enumerate(zip(answers, expected)) if a.get("prompt") != e and not (e is None and "error" in a)]
    compared = sum(e is not None for e in expected)
    s.check(len(answers) == len(bodies) and not wrong and compared > 50 and rcs == [0, 0],
            f"{name}: {compared} chat prompts come back as recipe renders them",
            f"{len(answers)} answers; mismatches at {wrong[:5]}: {[answers[i] for i in wrong[:1]]} {errs}")


def test_chat_round_trip(s):
    if not os.path.exists(CHAT_CASES):
        s.check(False, "chat round trip", "no tests/data/chat_cases.jsonl")
        return
    check_chat_template(s, "V4 template (the V4 tokenizer, --template auto)", "DeepSeek-V4-Pro", [])
    with tempfile.TemporaryDirectory() as d:
        path = tokenizer_with_v41_system(d)
        check_chat_template(s, "V4.1 template (a tokenizer with its markers)", "DeepSeek-V4.1-Flash", ["--tokenizer", path])


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
