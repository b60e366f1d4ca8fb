"""The sink library against deepseek-recipe, the reference serving code.

Each case is model output written as text, turned into token ids by the HF tokenizer (so
</think> and the DSML markers become the ids the model emits), split into chunks, and fed
both to recipe's StreamProcessor (ChatCompletion generator, accumulated) and to our C library
through build/drivers/detok_parse. Content, reasoning_content, tool calls (name, arguments;
call ids are ignored) and finish_reason must be equal. The parsing options come from recipe's
own conversion of a Chat Completions request, and are handed to the C side as frame meta the
way di-tokenize derives them.

Where we differ from recipe on purpose, the oracle is recipe fed the text instead of ids:
  - an incomplete character at the very end of the output: recipe's decoder drops it; we
    write U+FFFD, as HF tokenizers' decode of the same ids does;
  - JSON mode: recipe writes one space per stream segment of text around the JSON, so the
    count depends on how the backend chunked its output; we write one space per run, which is
    what recipe does when the text arrives in one piece;
  - the end-of-sentence token: the backend strips it before recipe sees it; we drop it.
Prompt-shaped requests (raw completions) have no recipe counterpart; their stop strings are
checked against a direct Python statement of the rule.
"""
import json
import os
import random
import subprocess

from deepseek_recipe import (ChatCompletionRequest, ChatCompletionResponse, ConversionOptions, InferenceChunk,
                             InferenceFinishReason, StreamProcessor, Tokenizer)
import tokenizers

from harness import BUILD, Suite
from harness import TOKENIZER_JSON as TOKENIZER

DRIVER = os.path.join(BUILD, "drivers", "detok_parse")

D = "｜DSML｜"
EOS = 1
FINISH = {"stop": InferenceFinishReason.Stop, "length": InferenceFinishReason.Length}
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
         for n in ("get_weather", "search", "f")]


def calls(*invokes, v4=False):
    block, p = ("tool_calls", "") if v4 else (" calls", " ")
    return f"<{D}{block}>\n" + "".join(invokes) + f"</{D}{block}>"


def invoke(name, *params, v4=False):
    p = "" if v4 else " "
    body = "".join(f'<{D}{p}parameter name="{k}" string="{s}">{v}</{D}{p}parameter>\n' for k, v, s in params)
    return f'<{D}{p}invoke name="{name}">\n{body}</{D}{p}invoke>\n'


class Case:
    def __init__(self, name, text=None, *, ids=None, thinking=True, tools=False, json_format=False, stop=None,
                 prefix=None, tool_choice=None, finish="stop", eos=False, oracle_text=False, shape="chat", seed=0):
        self.name, self.text, self.finish, self.shape = name, text, finish, shape
        self.thinking, self.tools, self.json_format, self.stop = thinking, tools, json_format, stop
        self.prefix, self.tool_choice, self.eos, self.seed = prefix, tool_choice, eos, seed
        self.given_ids = ids
        self.oracle_text = oracle_text or json_format

    def body(self):
        messages = [{"role": "user", "content": "hi, answer in json if asked"}]
        if self.prefix is not None:
            messages.append(dict(role="assistant", prefix=True, **self.prefix))
        b = {"model": "DeepSeek-V4.1-Flash", "messages": messages}
        if not self.thinking:
            b["thinking"] = {"type": "disabled"}
        if self.tools:
            b["tools"] = TOOLS
        if self.tool_choice:
            b["tool_choice"] = self.tool_choice
        if self.json_format:
            b["response_format"] = {"type": "json_object"}
        if self.stop is not None:
            b["stop"] = self.stop
        return b


def chunked(ids, seed):
    """Splits ids into chunks of 1..4 tokens, the way decode steps would deliver them."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(ids):
        n = rng.randint(1, 4)
        out.append(ids[i:i + n])
        i += n
    return out


def meta_from_parsing_options(po):
    stage = str(po.thinking_initial_stage)
    return {
        "shape": "chat",
        "thinking": stage in ("ThinkingInitialStage.ReasoningStart", "ThinkingInitialStage.ReasoningContinuation"),
        "continuation": stage in ("ThinkingInitialStage.ReasoningContinuation",
                                  "ThinkingInitialStage.ContentContinuation"),
        "tools": po.parse_tool_calls,
        "in_tool_calls": po.starts_in_tool_calls,
        "json": po.parse_json_output,
        "stop": list(po.stop_sequences),
    }


def recipe_answer(rtok, case, chunks, text):
    conv = ChatCompletionRequest(case.body()).convert(ConversionOptions())
    gen = ChatCompletionRequest.chunk_generator(conv, "id", "model")
    sp = StreamProcessor(gen, conv.parsing_options, rtok)
    inputs = [InferenceChunk.text(text, 1)] if case.oracle_text else [InferenceChunk.tokens(c) for c in chunks]
    out = []
    for chunk in inputs + [InferenceChunk.finish(FINISH[case.finish])]:
        if sp.finished:
            break
        out += sp.push(chunk)
    if not sp.finished:
        out += sp.finish()
    sp.close()
    resp = ChatCompletionResponse("id", "model", 0, 0, 0)
    for c in out:
        resp.accumulate(c)
    choice = json.loads(resp.to_json())["choices"][0]
    m = choice["message"]
    return {
        "content": m.get("content") or "",
        "reasoning_content": m.get("reasoning_content") or "",
        "tool_calls": [[t["function"]["name"], t["function"]["arguments"]] for t in m.get("tool_calls") or []],
        "finish_reason": choice["finish_reason"],
    }, meta_from_parsing_options(conv.parsing_options)


def plain_answer(text, stop):
    """Raw completions: the text ends before the first stop string to complete."""
    for end in range(1, len(text) + 1):
        for s in stop:
            if s and text[:end].endswith(s):
                return {"text": text[:end - len(s)], "finish_reason": "stop"}
    return None


def ours(final, shape):
    if shape == "batch":
        body = final["response"]["body"]
        m, fr = body["choices"][0]["message"], body["choices"][0]["finish_reason"]
        content = m["content"]
    else:
        m, fr, content = final, final["finish_reason"], final["text"]
    return {
        "content": content,
        "reasoning_content": m.get("reasoning_content", ""),
        "tool_calls": [[t["function"]["name"], t["function"]["arguments"]] for t in m.get("tool_calls", [])],
        "finish_reason": fr,
    }, m


def check_deltas(result, got_msg):
    """Concatenated deltas give the final values; a call's first delta carries id and name."""
    acc = {"content": "", "reasoning_content": ""}
    calls_seen = {}
    for d in result["deltas"]:
        delta = d["delta"]
        for k in ("content", "reasoning_content"):
            acc[k] += delta.get(k, "")
        for tc in delta.get("tool_calls", []):
            i = tc["index"]
            if i not in calls_seen:
                if "id" not in tc or tc.get("type") != "function" or "name" not in tc["function"]:
                    return f"first delta of call {i} lacks id/type/name: {tc}"
                calls_seen[i] = [tc["id"], tc["function"]["name"], ""]
            calls_seen[i][2] += tc["function"].get("arguments", "")
    want_content = got_msg.get("text", got_msg.get("content"))
    if acc["content"] != want_content or acc["reasoning_content"] != got_msg.get("reasoning_content", ""):
        return f"deltas {acc} do not add up to the final line"
    final_calls = [[t["id"], t["function"]["name"], t["function"]["arguments"]] for t in got_msg.get("tool_calls", [])]
    if [calls_seen[i] for i in sorted(calls_seen)] != final_calls:
        return f"tool-call deltas {calls_seen} do not add up to {final_calls}"
    ids = [c[0] for c in final_calls]
    if len(set(ids)) != len(ids) or any(not i.startswith("call_") for i in ids):
        return f"bad tool call ids {ids}"
    return None


def build_cases():
    cases = []
    add = cases.append
    W = invoke("get_weather", ("city", "Paris", "true"), ("days", "3", "false"))
    S = invoke("search", ("query", 'say "hi"\\n\tnow\nnext line', "true"))
    # Thinking mode, no tools.
    add(Case("think_basic", "\n\nLet me think about it.\n\n</think>\n\nThe answer is 42."))
    add(Case("think_unicode", "思考一下：😀 👩‍💻 é\n</think>答案是「四十二」。🎉"))
    add(Case("think_no_end_length", "I keep thinking and thinking", finish="length"))
    add(Case("think_empty_reasoning", "</think>Answer only."))
    add(Case("think_two_ends", "r</think>a</think>b"))
    add(Case("think_literal_think_tag", "I see <think> in text</think>ok"))
    add(Case("think_trailing_newlines", "r</think>answer\n\n\n"))
    add(Case("think_newlines_everywhere", "\n\n\nr1\n\nr2\n\n\n</think>\n\n\na1\n\na2\n"))
    add(Case("think_stop_in_answer_only", "STOP in reasoning</think>answer STOP tail", stop=["STOP"]))
    add(Case("think_stop_spanning_tokens", "r</think>alpha beta gamma delta", stop=["a gam"]))
    add(Case("think_stop_overlap_first_wins", "r</think>xabcdx", stop=["bc", "abcd"]))
    add(Case("think_stop_overlap_tie_list_order", "r</think>xabcdx", stop=["abc", "bc"]))
    add(Case("think_stop_unicode", "r</think>第一句。第二句。", stop=["。"]))
    add(Case("think_stop_at_answer_start", "r</think>STOP", stop="STOP"))
    add(Case("think_stop_newline", "r</think>line one\n\nline two", stop=["\n\n"]))
    add(Case("think_stop_unmatched", "r</think>no stop here", stop=["zzz", "qq"]))
    # Thinking off, no tools.
    add(Case("plain_leading_newlines", "\n\n\nHello there", thinking=False))
    add(Case("plain_stray_think_end", "Hello </think> world", thinking=False))
    add(Case("plain_think_tag_is_text", "<think>not reasoning</think>x", thinking=False))
    add(Case("plain_dsml_without_tools", "x " + calls(W), thinking=False))
    add(Case("plain_length", "a long answer cut short", thinking=False, finish="length"))
    add(Case("plain_special_tokens_kept", "a<｜User｜>b<｜Assistant｜>c", thinking=False))
    add(Case("plain_code", "```python\nprint('hi')\n```\n", thinking=False))
    # Tools, thinking off.
    add(Case("tools_single_call", calls(invoke("get_weather", ("city", "Paris", "true"))), thinking=False, tools=True))
    add(Case("tools_two_calls_nested_json", calls(W, invoke("search", ("filters", '{"lang": ["en", "fr"], "n": {"max": 5}}', "false"), ("query", "café ☕", "true"))), thinking=False, tools=True))
    add(Case("tools_no_params", calls(invoke("f")), thinking=False, tools=True))
    add(Case("tools_text_before_and_after", "Checking now.\n\n" + calls(W) + "\n\nDone, thanks!", thinking=False, tools=True))
    add(Case("tools_escapes", calls(S), thinking=False, tools=True))
    add(Case("tools_control_chars", calls(invoke("f", ("s", "a\x01b\x08c\x0cd\x1fe\x7f/", "true"))), thinking=False, tools=True))
    add(Case("tools_v4_tags", calls(invoke("f", ("a", "1", "false"), v4=True), v4=True), thinking=False, tools=True))
    add(Case("tools_scalars", calls(invoke("f", ("n", "-1.5e3", "false"), ("b", "true", "false"), ("z", "null", "false"), ("l", "[1, [2, {}]]", "false"))), thinking=False, tools=True))
    add(Case("tools_missing_string_attr", f'<{D} calls>\n<{D} invoke name="f">\n<{D} parameter name="a">v</{D} parameter>\n</{D} invoke>\n</{D} calls>', thinking=False, tools=True))
    add(Case("tools_bad_string_attr", f'<{D} calls>\n<{D} invoke name="f">\n<{D} parameter name="a" string="maybe">v</{D} parameter>\n</{D} invoke>\n</{D} calls>', thinking=False, tools=True))
    add(Case("tools_param_name_with_space", calls(invoke("f", ("shipping address", "1 rue", "true"))), thinking=False, tools=True))
    add(Case("tools_empty_name", calls(invoke("")), thinking=False, tools=True))
    add(Case("tools_block_not_closed", calls(W)[:-len(f"</{D} calls>")], thinking=False, tools=True))
    add(Case("tools_garbage_in_block", f"<{D} calls>\nsome junk\n</{D} calls>", thinking=False, tools=True))
    add(Case("tools_dsml_other_tag", f"Use <{D} foo> here", thinking=False, tools=True))
    add(Case("tools_newlines_before_block", "Hi\n \n\n" + calls(W), thinking=False, tools=True))
    add(Case("tools_stop_before_block", "Answer STOP " + calls(W), thinking=False, tools=True, stop=["STOP"]))
    add(Case("tools_stop_inside_args", calls(invoke("f", ("s", "has STOP inside", "true"))), thinking=False, tools=True, stop=["STOP"]))
    add(Case("tools_invalid_json_value", calls(invoke("f", ("a", "{oops", "false"))), thinking=False, tools=True))
    add(Case("tools_length_after_block", calls(W), thinking=False, tools=True, finish="length"))
    full = calls(W, S)
    for k, frac in enumerate((0.1, 0.2, 0.3, 0.45, 0.55, 0.62, 0.7, 0.8, 0.9, 0.97)):
        add(Case(f"tools_truncated_{k}", "Sure.\n" + full[:int(len(full) * frac)], thinking=False, tools=True, finish="length"))
    # Tools and thinking.
    add(Case("think_tools", "Need weather.\n</think>\n\n" + calls(W, S), tools=True))
    add(Case("think_tools_from_reasoning", "Need weather right away\n\n" + calls(W), tools=True))
    add(Case("think_tools_answer_and_call", "r</think>Let me check.\n" + calls(W) + "trailing", tools=True))
    add(Case("think_tools_truncated_in_reasoning", "still thinking <" + D, tools=True, finish="length"))
    # JSON mode.
    add(Case("json_fenced", 'Here:\n```json\n{"a": [1, 2], "b": "x"}\n```\nThanks', thinking=False, json_format=True))
    add(Case("json_raw_object", 'Sure {"k": {"n": 1}} done', thinking=False, json_format=True))
    add(Case("json_array", '[1, 2, 3]', thinking=False, json_format=True))
    add(Case("json_stop", '{"a": 1, "b": 2}', thinking=False, json_format=True, stop=[", "]))
    add(Case("json_with_tools", '```\n{"a": 1}\n```\n' + calls(invoke("f")), thinking=False, json_format=True, tools=True))
    add(Case("json_thinking", 'think</think>\n{"x": true}', json_format=True))
    # Prefix continuation and output inside the tool-call block.
    add(Case("continue_reasoning", "\n\nmore thought\n</think>\n\nanswer", prefix={"content": "", "reasoning_content": "hmm"}))
    add(Case("continue_content", "\n\nmore answer", prefix={"content": "Hello", "reasoning_content": "hmm"}))
    add(Case("continue_nonthinking", "\n\nmore", thinking=False, prefix={"content": "Hello"}))
    add(Case("tool_choice_required", invoke("get_weather", ("city", "Oslo", "true")) + f"</{D} calls>", thinking=False, tools=True, tool_choice="required"))
    # Decoding.
    add(Case("eos_dropped", "r</think>done", eos=True))
    add(Case("emoji_split_bytes", None, ids="byte:" + "r</think>ok 😀!", thinking=True))
    add(Case("invalid_byte_mid", None, ids=[67, "0xff", 68], thinking=False))
    add(Case("truncated_mid_char", None, ids="cut:" + "r</think>ok ", thinking=True, finish="length", oracle_text=True))
    add(Case("truncated_mid_char_in_args", None, ids="cut:" + calls(invoke("f", ("s", "日本", "true")))[:-40], thinking=False, tools=True, finish="length", oracle_text=True))
    # Batch shape: same answer inside the OpenAI batch line.
    add(Case("batch_tools", "r</think>" + calls(W), tools=True, shape="batch"))
    add(Case("batch_plain", "hello", thinking=False, shape="batch", finish="length"))
    # Random mixtures of markup fragments.
    frags = ["\n", "\n\n", "</think>", "<think>", f"<{D}", f"</{D}", f"<{D} calls>", f"</{D} calls>", 'invoke name="',
             '"', ">", "parameter name=", " ", 'string="true">', 'string="false">', "hello", "日本", "😀", "\\", "{",
             "STOP", "ST", "```json\n", W, S, f"<{D} invoke name=\"get\">\n", f"</{D} parameter>\n"]
    rng = random.Random(41)
    for k in range(24):
        text = "".join(rng.choice(frags) for _ in range(rng.randint(3, 20)))
        add(Case(f"random_{k}", text, thinking=rng.random() < 0.5, tools=rng.random() < 0.7,
                 stop=["STOP"] if rng.random() < 0.4 else None, finish=rng.choice(["stop", "length"]), seed=k))
    return cases


def byte_ids(hf, data):
    """One token per byte: the byte-level alphabet's single-character tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [hf.token_to_id(chr(table[b])) for b in data]


def case_ids(hf, case):
    if case.given_ids is None:
        ids = hf.encode(case.text, add_special_tokens=False).ids
    elif isinstance(case.given_ids, str) and case.given_ids.startswith("byte:"):
        text = case.given_ids[5:]
        ids = hf.encode(text[:-3], add_special_tokens=False).ids + byte_ids(hf, text[-3:].encode())
    elif isinstance(case.given_ids, str) and case.given_ids.startswith("cut:"):
        # The output ends inside a character: two of the three bytes of 日.
        ids = hf.encode(case.given_ids[4:], add_special_tokens=False).ids + byte_ids(hf, "日".encode()[:2])
    else:
        ids = [byte_ids(hf, bytes([int(x, 16)]))[0] if isinstance(x, str) else x for x in case.given_ids]
    return ids


def test_against_recipe(s):
    hf = tokenizers.Tokenizer.from_file(TOKENIZER)
    rtok = Tokenizer.from_file(TOKENIZER)
    cases = build_cases()
    inputs, expected = [], []
    for i, case in enumerate(cases):
        ids = case_ids(hf, case)
        text = hf.decode(ids, skip_special_tokens=False)
        chunks = chunked(ids, case.seed * 7 + i)
        want, meta = recipe_answer(rtok, case, chunks, text)
        meta["shape"] = case.shape
        if case.shape == "batch":
            meta["custom_id"] = f"custom-{i}"
        feed = chunks + [[EOS]] if case.eos else chunks
        inputs.append({"id": f"req-{i}", "meta": meta, "chunks": feed, "finish_reason": case.finish,
                       "prompt_tokens": 11, "completion_tokens": len(ids)})
        expected.append(want)
    # Raw completions: stop strings on plain text, markup untouched.
    plain_texts = [("prompt_stop", "one two STOP three", ["STOP"]), ("prompt_markup_kept", "\n\nr</think>" + calls(invoke("f")), []),
                   ("prompt_stop_overlap", "xabcdx", ["bc", "abcd"]), ("prompt_stop_unicode", "今日本日", ["日本"]),
                   ("prompt_no_stop", "plain text", ["zz"])]
    for name, text, stop in plain_texts:
        ids = hf.encode(text, add_special_tokens=False).ids
        inputs.append({"id": name, "meta": {"shape": "prompt", "stop": stop}, "chunks": chunked(ids, 3),
                       "finish_reason": "length", "prompt_tokens": 5, "completion_tokens": len(ids)})
        expected.append(plain_answer(text, stop) or {"text": text, "finish_reason": "length"})
    cases += [Case(name, shape="prompt") for name, _, _ in plain_texts]
    # A token id outside the vocabulary fails the request.
    inputs.append({"id": "bad_id", "meta": {"shape": "chat"}, "chunks": [[67], [99999999]], "finish_reason": "stop"})
    expected.append(None)
    cases.append(Case("bad_token_id", shape="error"))

    proc = subprocess.run([DRIVER, TOKENIZER], input="".join(json.dumps(x) + "\n" for x in inputs),
                          capture_output=True, text=True)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    if proc.returncode != 0 or len(results) != len(inputs):
        s.check(False, "driver", f"exit {proc.returncode}: {proc.stderr.strip()[:500]}")
        return

    for case, inp, want, res in zip(cases, inputs, expected, results):
        problem = None
        if case.shape == "error":
            err = res.get("error", {}).get("error", {})
            if err.get("code") != "bad_token" or "99999999" not in err.get("message", ""):
                problem = f"expected a bad_token error, got {res}"
        elif case.shape == "prompt":
            final = res["final"]
            got = {"text": final["text"], "finish_reason": final["finish_reason"]}
            if got != want:
                problem = f"got {got}, want {want}"
            elif final["usage"] != {"prompt_tokens": 5, "completion_tokens": inp["completion_tokens"],
                                    "total_tokens": 5 + inp["completion_tokens"]}:
                problem = f"usage {final['usage']}"
        else:
            got, msg = ours(res["final"], case.shape)
            if got != want:
                problem = f"got {got}\n    want {want}"
            elif ("reasoning_content" in msg) != inp["meta"]["thinking"]:
                problem = "reasoning_content present iff thinking"
            elif case.shape == "batch":
                line = res["final"]
                body = line["response"]["body"]
                if (line["id"] != f"batch_req_{inp['id']}" or line["custom_id"] != inp["meta"]["custom_id"]
                        or line["error"] is not None or line["response"]["status_code"] != 200
                        or body["object"] != "chat.completion" or msg["role"] != "assistant"
                        or body["usage"]["total_tokens"] != 11 + inp["completion_tokens"]):
                    problem = f"batch line shape: {line}"
            else:
                problem = check_deltas(res, res["final"])
        s.check(not problem, case.name, f"{problem}\n    text={case.text!r}")


def main():
    s = Suite()
    missing = [p for p in (TOKENIZER, DRIVER) if not os.path.exists(p)]
    if missing:
        s.skip("response_recipe", f"{missing[0]} missing")
    else:
        s.run(test_against_recipe)
    s.finish()


if __name__ == "__main__":
    main()
