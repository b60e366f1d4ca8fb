#!/usr/bin/env python3
"""The pipeline contract at its two ends: every non-blank input line of di-tokenize yields
exactly one output line of di-detok, whatever the line holds, and the rest of the input is
processed normally."""
from harness import json_lines, pipe, run_suite, tool

GOOD = b'{"id":"good-%d","prompt":"Hello %d, world"}'


def run(lines_bytes, *tokenize_args):
    out, errs, rcs = pipe([[tool("di-tokenize"), *tokenize_args], [tool("di-detok")]], lines_bytes)
    return json_lines(out), errs, rcs


def nonblank(data):
    return [l for l in data.split(b"\n") if l.strip()]


def contract(s, name, bad_line, expect_in_message, *args):
    """good line, the bad line, good line: three answers, the middle one an error."""
    data = (GOOD % (1, 1)) + b"\n" + bad_line + b"\n" + (GOOD % (2, 2)) + b"\n"
    answers, errs, rcs = run(data, *args)
    ok = len(answers) == 3 and rcs == [0, 0]
    ok = ok and answers[0].get("prompt") == "Hello 1, world" and answers[2].get("prompt") == "Hello 2, world"
    err = answers[1].get("error", {}) if len(answers) == 3 else {}
    ok = ok and expect_in_message in err.get("message", "")
    s.check(ok, name, f"answers={answers} rcs={rcs} stderr={errs}")


def test_malformed_lines(s):
    contract(s, "malformed JSON", b'{"id": "x", "prompt": ', "invalid JSON")
    contract(s, "not an object", b'[1, 2, 3]', "must be a JSON object")
    contract(s, "no prompt or messages", b'{"id": "x"}', "needs \"prompt\"")
    contract(s, "prompt of wrong type", b'{"id": "x", "prompt": 5}', "\"prompt\" must be")
    contract(s, "messages of wrong type", b'{"id": "x", "messages": "hi"}', "")
    contract(s, "temperature of wrong type", b'{"id": "x", "prompt": "a", "temperature": "hot"}', "temperature")
    contract(s, "id of wrong type", b'{"id": [1], "prompt": "a"}', "\"id\" must be a string")
    contract(s, "token id out of range", b'{"id": "x", "prompt": [1, 999999999]}', "not a token id")
    contract(s, "invalid UTF-8", b'{"id": "x", "prompt": "caf\xe9"}', "invalid JSON")
    contract(s, "NUL byte in the line", b'{"id": "x", "prompt": "a\x00b"}', "NUL")
    contract(s, "deeply nested", b'{"id": "x", "prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}", "invalid JSON")
    contract(s, "huge line over the limit", b'{"id": "x", "prompt": "' + b"a" * 5000 + b'"}', "max-line-bytes",
             "--max-line-bytes", "1000")
    contract(s, "empty prompt", b'{"id": "x", "prompt": ""}', "empty")
    contract(s, "image input refused", b'{"id":"x","messages":[{"role":"user","content":[{"type":"image_url",'
             b'"image_url":{"url":"data:image/png;base64,AAAA"}}]}]}', "")
    contract(s, "unknown response_format", b'{"id":"x","prompt":"a","response_format":{"type":"xml"}}',
             "response_format")


def test_duplicate_ids(s):
    data = b'{"id":"same","prompt":"one"}\n{"id":"same","prompt":"two"}\n{"id":"other","prompt":"three"}\n'
    answers, _, rcs = run(data)
    ok = len(answers) == 3 and answers[0].get("prompt") == "one" and "duplicate id" in answers[1]["error"]["message"]
    s.check(ok and answers[2].get("prompt") == "three" and rcs == [0, 0], "duplicate ids", answers)


def test_blank_lines_and_no_final_newline(s):
    data = b'\n   \n{"id":"a","prompt":"x"}\r\n\t\n{"id":"b","prompt":"y"}'
    answers, _, rcs = run(data)
    s.check([a.get("id") for a in answers] == ["a", "b"] and rcs == [0, 0], "blank lines skipped, last line without newline",
            answers)


def test_huge_line_default_limit(s):
    big = b'{"id":"big","prompt":"' + b"x " * (9 << 20) + b'"}'   # 18 MiB > the default 16 MiB
    answers, _, rcs = run(big + b"\n" + GOOD % (1, 1) + b"\n")
    ok = len(answers) == 2 and "max-line-bytes" in answers[0]["error"]["message"]
    s.check(ok and answers[1]["id"] == "good-1" and rcs == [0, 0], "an 18 MiB line is one error", str(answers)[:500])


def test_many_mixed_lines(s):
    """Every kind of line, shuffled among good ones: N non-blank lines in, N answers out, ids in order."""
    bad = [b"{", b"null", b'{"prompt": 3}', b'{"id":"z","messages":[{"role":"wizard","content":"x"}]}',
           b'\xff\xfe', b'{"custom_id":"b","url":"/v1/embeddings","body":{}}', b'{"id":"q","prompt":"a","top_p":7}']
    lines = []
    for i in range(300):
        lines.append(GOOD % (i, i) if i % 3 else bad[i // 3 % len(bad)])
    data = b"\n".join(lines) + b"\n"
    answers, _, rcs = run(data)
    ok = len(answers) == len(nonblank(data)) and rcs == [0, 0]
    good = [a for a in answers if "prompt" in a]
    ok = ok and [a["id"] for a in good] == [f"good-{i}" for i in range(300) if i % 3]
    s.check(ok, "300 mixed lines, one answer each, in order", f"{len(answers)} answers, rcs={rcs}")


def test_batch_shapes(s):
    data = (b'{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"model":"DeepSeek-V4-Pro",'
            b'"messages":[{"role":"user","content":"hi"}]}}\n'
            b'{"custom_id":"r2","method":"POST","url":"/v1/chat/completions","body":{"messages":"broken"}}\n'
            b'{"custom_id":"r3","method":"POST","url":"/v1/completions","body":{"prompt":"plain"}}\n')
    answers, _, rcs = run(data)
    ok = len(answers) == 3 and answers[0]["id"] == "r1" and "<｜User｜>hi" in answers[0]["prompt"]
    ok = ok and answers[1].get("custom_id") == "r2" and answers[1].get("response") is None and answers[1]["error"]
    ok = ok and answers[2]["prompt"] == "plain"
    s.check(ok and rcs == [0, 0], "batch lines: chat, broken body, completions", answers)


if __name__ == "__main__":
    run_suite([test_malformed_lines, test_duplicate_ids, test_blank_lines_and_no_final_newline,
               test_huge_line_default_limit, test_many_mixed_lines, test_batch_shapes])
