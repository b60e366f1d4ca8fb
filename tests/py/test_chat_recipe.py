#!/usr/bin/env python3
"""The C chat renderer against the official one, deepseek-recipe.

Every body in tests/data/chat_cases.jsonl, plus a seeded batch of generated conversations, goes
through the test driver $BUILD/drivers/chat_render and through recipe's
ChatCompletionRequest.convert + DeepseekV41Encoding / DeepseekV4Encoding. Compared: accept or
reject, the prompt byte for byte, the special-token ranges, the derived options (thinking stage,
tool parsing, stop, temperature, top_p, max_tokens, seed, logprobs, output constraint) and the
token ids.

Token ids: the V4.1 template uses <｜System｜>, which the V4 tokenizer in $DI_DATA lacks (the
V4.1 tokenizer is not published here), so the ids are compared on that tokenizer with
<｜System｜> appended as one more added token: both encoders then run on the same vocabulary.
Without the tokenizer file the id comparison is skipped (and reported as skipped).

Case lines: {"name", "body", "refuse"?, "expect_error"?}. "refuse": the engine rejects on purpose
what recipe accepts (images: text-only engine); the error must say so. "expect_error": both must
reject it (keeps the error cases honest if recipe changes).
"""
import json
import os
import random
import subprocess
import tempfile

from deepseek_recipe import (ChatCompletionRequest, ConversionError, ConversionOptions, DeepseekV41Encoding,
                             DeepseekV4Encoding, ModelVersion, ThinkingInitialStage, Tokenizer)

from harness import BUILD, TOKENIZER_JSON, data_records, run_suite, tokenizer_with_v41_system

DRIVER = os.path.join(BUILD, "drivers", "chat_render")
# More conversations from other seeds: DI_CHAT_SEED=7 DI_CHAT_GENERATED=3000 tests/py/test_chat_recipe.py
SEED = int(os.environ.get("DI_CHAT_SEED", "20240601"))
N_GENERATED = int(os.environ.get("DI_CHAT_GENERATED", "400"))

STAGES = [(ThinkingInitialStage.ReasoningStart, "reasoning_start"),
          (ThinkingInitialStage.ReasoningContinuation, "reasoning_continuation"),
          (ThinkingInitialStage.ContentContinuation, "content_continuation")]


def stage_name(stage):
    return next((name for s, name in STAGES if stage == s), "none")

def byte_ranges(text, ranges):
    """recipe's special ranges are code point offsets; the driver's are byte offsets."""
    offsets = [0]
    for ch in text:
        offsets.append(offsets[-1] + len(ch.encode("utf-8")))
    return [[offsets[s], offsets[e]] for s, e in ranges]


def reference(body, tokenizer):
    try:
        conv = ChatCompletionRequest(body).convert(ConversionOptions())
    except (ConversionError, ValueError) as e:
        return {"ok": False, "error": str(e)}
    v4 = conv.model_version == ModelVersion.DeepseekV4Pro
    enc = DeepseekV4Encoding() if v4 else DeepseekV41Encoding()
    r = enc.render_conversation(conv.conversation)
    io, po = conv.inference_options, conv.parsing_options
    oc = io.output_constraint
    out = {
        "ok": True, "model": "v4" if v4 else "v41", "prompt": r.prompt,
        "special": byte_ranges(r.prompt, r.special_ranges),
        "thinking": conv.conversation.thinking_mode, "stage": stage_name(po.thinking_initial_stage),
        "tools": po.parse_tool_calls, "starts_in_tool_calls": po.starts_in_tool_calls,
        "parse_json_output": po.parse_json_output, "stop": list(po.stop_sequences),
        "temperature": io.temperature, "top_p": io.top_p, "max_tokens": io.max_tokens, "seed": io.seed,
        "logprobs": io.logprobs, "top_logprobs": io.top_logprobs, "stream": conv.stream,
        "constraint": {"kind": oc.kind, "text": oc.schema} if oc else None,
    }
    if tokenizer:
        out["ids"] = enc.with_tokenizer(tokenizer).encode(conv.conversation)
    return out


def compare(s, case, ours, ref):
    name = case["name"]
    if case.get("expect_error"):
        s.check(not ref["ok"] and not ours["ok"], name, f"expected both to reject; recipe ok={ref['ok']}, ours ok={ours['ok']}")
        return
    if case.get("refuse") and ref["ok"]:
        s.check(not ours["ok"] and "image input is not supported" in ours.get("error", ""), name,
                f"expected the image refusal, got {ours.get('error') or 'a prompt'}")
        return
    if not ref["ok"]:
        s.check(not ours["ok"], name, f"recipe rejects ({ref['error'][:200]}) but the C renderer accepts")
        return
    if not ours["ok"]:
        s.check(False, name, f"recipe accepts but the C renderer rejects: {ours['error']}")
        return
    for key in ref:
        if key == "ids" and "ids" not in ours:
            s.check(False, name, f"no ids: {ours.get('ids_error')}")
        elif ours.get(key) != ref[key]:
            a, b = ours.get(key), ref[key]
            if key == "prompt":
                i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
                a, b = a[max(0, i - 60):i + 60], b[max(0, i - 60):i + 60]
            s.check(False, name, f"{key}: ours {json.dumps(a, ensure_ascii=False)[:400]} != recipe "
                                 f"{json.dumps(b, ensure_ascii=False)[:400]}")
            return
    s.check(True, name, "")


# ---- generated conversations ---------------------------------------------------------------

TEXTS = ["Hello", "", "What is 2+2?", "  spaced  ", "line one\nline two\n\n", "Reply in JSON please",
         "日本語のテキスト", "emoji 😀👍🏽", "tabs\tand \\ backslashes \"quotes\"", "<｜User｜>", "<think>x</think>",
         "｜DSML｜ calls", "<｜end▁of▁sentence｜>", "<｜ref｜>cat<｜/ref｜><｜box｜>1,2<｜/box｜>",
         "<｜begin▁of▁sentence｜>", "<｜System｜>", "<｜image｜>", "<tool_result>x</tool_result>", "12345678901",
         "Ünïcödé ßtrings", "\u2028sep", "a\u0000b", "json", "x" * 300]
ARGS = ['{"city": "Paris"}', '{"n": 3, "f": 1.5, "b": true, "z": null}', '{}', 'not json', '[1, 2]',
        '{"nested": {"a": [1, {"b": "<｜User｜>"}], "e": 1e-7, "big": 1e100}}', '{"s": "line\\nbreak"}', '',
        '{"dup": 1, "dup": 2}', '{"u": "é😀", "k": "\\u0001"}']
PARAMS = [None, {"type": "object", "properties": {"city": {"type": "string", "description": "City"}},
                 "required": ["city"]},
          {"type": "object"}, {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0},
                                                              "tags": {"type": "array", "items": {"type": "string"}}}},
          {"type": "object", "properties": {"q": {"type": "string", "enum": ["a", "b"]}}, "additionalProperties": False}]


def gen_body(rng):
    pick = rng.choice
    body = {"model": pick(["DeepSeek-V4.1-Flash"] * 4 + ["DeepSeek-V4-Pro"]), "messages": []}
    if rng.random() < 0.6:
        body["thinking"] = {"type": pick(["enabled", "disabled", "adaptive"])}
    if rng.random() < 0.5:
        body["reasoning_effort"] = pick(["none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"])
    tools = []
    if rng.random() < 0.45:
        for i in range(rng.randint(1, 3)):
            fn = {"name": f"tool_{i}"}
            if rng.random() < 0.7:
                fn["description"] = pick(TEXTS)
            p = pick(PARAMS)
            if p is not None:
                fn["parameters"] = p
            tools.append({"type": "function", "function": fn})
        body["tools"] = tools
        if rng.random() < 0.4:
            body["tool_choice"] = pick(["auto", "none", "required", {"type": "function", "function": {"name": "tool_0"}}])
    msgs = body["messages"]
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": pick(TEXTS)})
    for turn in range(rng.randint(1, 4)):
        if rng.random() < 0.15:
            msgs.append({"role": pick(["system", "latest_reminder"]), "content": pick(TEXTS)})
        content = pick(TEXTS)
        if rng.random() < 0.2:
            content = [{"type": "text", "text": pick(TEXTS)} for _ in range(rng.randint(0, 3))]
        msgs.append({"role": "user", "content": content})
        if rng.random() < 0.2:
            msgs.append({"role": "user", "content": pick(TEXTS)})
        if rng.random() < 0.75:
            a = {"role": "assistant", "content": pick(TEXTS)}
            if rng.random() < 0.6:
                a["reasoning_content"] = pick(TEXTS)
            if tools and rng.random() < 0.5:
                ids = [f"call_{turn}_{k}" for k in range(rng.randint(1, 3))]
                a["tool_calls"] = [{"id": i, "type": "function",
                                    "function": {"name": pick(tools)["function"]["name"], "arguments": pick(ARGS)}}
                                   for i in ids]
                if rng.random() < 0.3:
                    a["content"] = None
                msgs.append(a)
                order = ids[:]
                rng.shuffle(order)
                for i in order:
                    msgs.append({"role": "tool", "tool_call_id": i, "content": pick(TEXTS)})
                if rng.random() < 0.5:
                    msgs.append({"role": "assistant", "content": pick(TEXTS), "reasoning_content": pick(TEXTS)})
            else:
                msgs.append(a)
    if rng.random() < 0.15:
        a = {"role": "assistant", "content": pick(TEXTS), "prefix": True}
        if rng.random() < 0.6:
            a["reasoning_content"] = pick(TEXTS)
        msgs.append(a)
    if rng.random() < 0.08 and len(msgs) > 1:
        del msgs[0]  # conversations may start anywhere, an assistant message included
    if rng.random() < 0.03:
        msgs[:] = [{"role": "system", "content": ""}] + ([msgs[-1]] if msgs[-1].get("prefix") else [])
    if rng.random() < 0.2:
        body["response_format"] = pick([{"type": "text"}, {"type": "json_object"}, {"type": "regex", "regex": "[a-z]+"},
                                        {"type": "json_schema", "json_schema": {"name": "r", "schema": pick(PARAMS[1:])}}])
    for key, values in [("temperature", [0, 0.3, 1.2, 2]), ("top_p", [0.1, 0.9, 0.97, 1]), ("max_tokens", [1, 512]),
                        ("seed", [0, 42]), ("stop", ["END", ["a", "\n\n"]]), ("stream", [True, False])]:
        if rng.random() < 0.15:
            body[key] = pick(values)
    return body


# Mutations that make a body invalid, or valid in an unusual way: both renderers must agree.
def _set(key, value):
    return lambda b: b.__setitem__(key, value)


def _msg(index, key, value):
    def apply(b):
        if b["messages"]:
            m = b["messages"][index % len(b["messages"])]
            if value is _DEL:
                m.pop(key, None)
            else:
                m[key] = value
    return apply


def _tool_fn(key, value):
    def apply(b):
        b.setdefault("tools", [{"type": "function", "function": {"name": "t"}}])
        b["tools"][0]["function"][key] = value
    return apply


_DEL = object()
MUTATIONS = [
    _set("temperature", "hot"), _set("temperature", 2.5), _set("temperature", -0.1), _set("top_p", 0), _set("top_p", 1.5),
    _set("top_p", None), _set("max_tokens", 0), _set("max_tokens", -1), _set("max_tokens", 393217), _set("max_tokens", 1.5),
    _set("max_tokens", 393216), _set("seed", -1), _set("seed", 2 ** 63 - 1), _set("seed", "7"), _set("n", 2), _set("n", 1),
    _set("logprobs", "yes"), _set("logprobs", True), _set("top_logprobs", 3), _set("stop", ""), _set("stop", [""]),
    _set("stop", ["s"] * 17), _set("stop", ["s"] * 16), _set("stop", [1]), _set("stop", 5), _set("stream", "yes"),
    _set("stream_options", {"include_usage": True}), _set("presence_penalty", 2.5), _set("frequency_penalty", "x"),
    _set("frequency_penalty", -2), _set("thinking", {"type": "auto"}), _set("thinking", "enabled"), _set("thinking", {}),
    _set("thinking", {"type": {"disabled": None}}), _set("thinking", {"type": "enabled", "budget_tokens": "x"}),
    _set("reasoning_effort", "bogus"), _set("reasoning_effort", {"max": None}), _set("reasoning_effort", 3),
    _set("model", "deepseek-chat"), _set("model", 5), _set("messages", []), _set("messages", "hi"), _set("messages", None),
    _set("parallel_tool_calls", "no"), _set("parallel_tool_calls", False), _set("user", 5), _set("tool_choice", "bogus"),
    _set("tool_choice", {"type": "function", "function": {"name": "nope"}}), _set("tool_choice", 3),
    _set("response_format", {"type": "json_object"}), _set("response_format", {"type": "grammar"}),
    _set("response_format", {"type": "json_schema", "json_schema": {"name": "x"}}), _set("response_format", "json"),
    _set("response_format", {"type": "regex", "regex": 5}), _set("response_format", {"type": "json_schema", "json_schema":
        {"name": "x", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}),
    _msg(0, "role", "developer"), _msg(0, "role", "function"), _msg(0, "content", None), _msg(0, "content", _DEL),
    _msg(0, "content", 5), _msg(-1, "content", [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]),
    _msg(-1, "content", [{"type": "input_audio"}]), _msg(-1, "content", [{"type": "text"}]), _msg(-1, "content", ["a"]),
    _msg(1, "prefix", True), _msg(-1, "prefix", True), _msg(-1, "prefix", "yes"), _msg(-1, "name", 5),
    _msg(-1, "name", "bob"), _msg(1, "tool_calls", []), _msg(1, "reasoning_content", 5),
    _msg(-1, "role", "tool"), _msg(-1, "tool_call_id", None),
    _tool_fn("name", "bad name"), _tool_fn("name", ""), _tool_fn("name", "x" * 129), _tool_fn("name", "x" * 128),
    _tool_fn("parameters", {"type": "string"}), _tool_fn("parameters", {}), _tool_fn("parameters", [1]),
    _tool_fn("parameters", {"type": "object", "properties": {"a": {"type": "strin"}}}),
    _tool_fn("parameters", {"type": "object", "required": ["a", "a"]}), _tool_fn("description", 5),
    _tool_fn("strict", True), _tool_fn("strict", "yes"),
    _tool_fn("parameters", {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "string"}}}),
    _tool_fn("parameters", {"type": "object", "properties": {"a": {"$ref": "#/$defs/B"}}}),
    _tool_fn("parameters", {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}),
    _tool_fn("parameters", {"type": "object", "properties": {"a": {"type": "integer", "minimum": -1.5e-7, "maximum": 1e16}}}),
    _set("tools", [{"type": "function", "function": {"name": "t"}}] * 2), _set("tools", "t"),
    _set("tools", [{"type": "web_search"}]), _set("tools", []),
]

# Strict schemas: recipe rewrites them; the prompt shows the result.
STRICT_SCHEMAS = [
    None, {"type": "object"}, {"type": "object", "properties": {"a": {"type": "string", "description": "d", "pattern": "^a",
                                                                        "format": "email", "enum": ["x"], "title": "t"}}},
    {"type": "object", "description": "top", "title": "T", "properties": {
        "n": {"type": "number", "default": 1.5, "minimum": 0, "maximum": 1e16, "multipleOf": 0.5, "enum": [1]},
        "i": {"type": "integer", "const": 3, "exclusiveMinimum": 0},
        "b": {"type": "boolean", "description": "flag", "default": True},
        "l": {"type": "array", "description": "list", "minItems": 1,
              "items": {"type": "object", "properties": {"q": {"type": ["string", "null"], "description": "q"}}}},
        "o": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"z": {"$ref": "#/$defs/Z", "description": "x"}}}],
              "description": "either"}},
     "$defs": {"Z": {"type": "string"}}, "required": ["o", "l", "b", "i", "n"]},
    {"type": "object", "properties": {"a": {"type": "object"}}},
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
    {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
    {"type": "object", "properties": {"a": {"type": "string", "format": "date"}}},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1.5}}},
    {"type": "object", "properties": {"a": {"enum": ["x"]}}}, {"type": "string"}, {},
    {"type": "object", "properties": {"a": {"type": ["object"]}}},
    {"type": "object", "properties": {"a": {"type": "array"}}},
]


# Random schemas from keywords and values that are sometimes right: the meta-schema checks
# must accept and reject the same ones.
SCHEMA_KEYS = ["type", "properties", "required", "items", "prefixItems", "enum", "const", "minimum", "exclusiveMinimum",
               "multipleOf", "minLength", "pattern", "format", "uniqueItems", "additionalProperties", "patternProperties",
               "propertyNames", "allOf", "anyOf", "oneOf", "not", "if", "$ref", "$defs", "definitions", "description",
               "default", "examples", "dependentRequired", "dependencies", "contains", "maxContains", "$anchor", "$id",
               "readOnly", "$schema", "minProperties", "nullable"]
SCHEMA_VALUES = [1, 0, -1, 1.5, 2.0, "string", "object", "x", "(", "^a$", True, False, None, [], [1], ["a"], ["a", "a"],
                 ["string", "null"], {}, {"type": "string"}, {"a": {"type": "string"}}, {"a": 5}, [{"type": "string"}],
                 "#/$defs/A", "#/nope", "#", "http://json-schema.org/draft-07/schema#", "bogus-uri", {"A": {"type": "string"}}]


def gen_schema(rng, depth=0):
    schema = {}
    for _ in range(rng.randint(0, 4)):
        key = rng.choice(SCHEMA_KEYS)
        schema[key] = gen_schema(rng, depth + 1) if depth < 2 and rng.random() < 0.3 else rng.choice(SCHEMA_VALUES)
    return schema


def test_against_recipe(s):
    if not os.access(DRIVER, os.X_OK):
        s.check(False, "driver", f"{DRIVER} not built")
        return
    cases = data_records("chat_cases.jsonl")
    rng = random.Random(SEED)
    cases += [{"name": f"generated-{i}", "body": gen_body(rng)} for i in range(N_GENERATED)]
    for i, mutate in enumerate(MUTATIONS):
        body = gen_body(rng)
        mutate(body)
        msgs = body["messages"] if isinstance(body.get("messages"), list) else []
        image = any(isinstance(m, dict) and isinstance(m.get("content"), list) and
                    any(isinstance(p, dict) and p.get("type") == "image_url" for p in m["content"]) for m in msgs)
        cases.append({"name": f"mutation-{i}", "body": body, "refuse": image})
    for i in range(100):
        schema = gen_schema(rng)
        schema["type"] = "object" if rng.random() < 0.8 else schema.get("type", "object")
        if rng.random() < 0.5:
            schema.setdefault("$defs", {"A": {"type": "string"}})
        base = {"model": "DeepSeek-V4.1-Flash", "messages": [{"role": "user", "content": "q"}], "thinking": {"type": "disabled"}}
        cases.append({"name": f"schema-tool-{i}", "body": dict(base, tools=[{"type": "function", "function": {
            "name": "f", "parameters": schema}}])})
        cases.append({"name": f"schema-format-{i}", "body": dict(base, response_format={"type": "json_schema", "json_schema": {
            "name": "s", "schema": schema}})})
    for i, schema in enumerate(STRICT_SCHEMAS):
        fn = {"name": "strict_tool", "strict": True}
        if schema is not None:
            fn["parameters"] = schema
        for thinking in ("enabled", "disabled"):
            cases.append({"name": f"strict-tool-{i}-{thinking}", "body": {
                "model": "DeepSeek-V4.1-Flash", "thinking": {"type": thinking}, "tools": [{"type": "function", "function": fn}],
                "messages": [{"role": "user", "content": "use the tool"}]}})
        if schema is not None:
            cases.append({"name": f"strict-format-{i}", "body": {
                "model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "answer"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "s", "strict": True, "schema": schema}}}})

    tmp = tempfile.TemporaryDirectory()
    tok_path, tokenizer = None, None
    if os.path.exists(TOKENIZER_JSON):
        tok_path = tokenizer_with_v41_system(tmp.name)
        tokenizer = Tokenizer.from_file(tok_path)
    else:
        s.skip("token ids", f"no tokenizer at {TOKENIZER_JSON}")

    lines = "".join(json.dumps(c["body"], ensure_ascii=False) + "\n" for c in cases)
    cmd = [DRIVER] + (["--tokenizer", tok_path] if tok_path else [])
    run = subprocess.run(cmd, input=lines.encode("utf-8"), capture_output=True)
    outs = [json.loads(line) for line in run.stdout.decode("utf-8").splitlines()]
    s.check(run.returncode == 0 and len(outs) == len(cases), "driver", f"exit {run.returncode}, {len(outs)} lines for "
                                                                       f"{len(cases)} cases: {run.stderr.decode()[-500:]}")
    for case, ours in zip(cases, outs):
        compare(s, case, ours, reference(case["body"], tokenizer))


if __name__ == "__main__":
    run_suite([test_against_recipe])
