#!/usr/bin/env python3
"""di-grammar on frames (crafted here with msgpack, and from di-tokenize): a valid constraint
goes on in canonical form with the hash the grammar compiler gives it; a bad one (invalid
regex or schema, unsupported keyword, huge or pathological pattern) becomes that request's
error frame, code bad_constraint, and nothing else changes; frames without a constraint and
every other frame type pass through with the stage's trace hop; repeated constraints are
compiled once; the end of stream is accounted for."""
import functools
import json
import subprocess

from grammar_driver import GrammarDriver
from harness import crafted_frame, frame_bytes, frames, pipe, run_suite, tool

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
          "required": ["name"]}

BAD = [
    ("regex", "(ab"),
    ("regex", "a{3,2}"),
    ("regex", "(?=lookahead)x"),
    ("regex", "x" * 20000),
    ("regex", "(a|b)*a(a|b){40}"),
    ("regex", "((a{1000}){1000}){1000}"),
    ("regex", "(" * 100 + "a" + ")" * 100),
    ("json_schema", "{not json"),
    ("json_schema", "[1, 2]"),
    ("json_schema", json.dumps({"type": "object", "not": {}})),
    ("json_schema", json.dumps({"type": "strin"})),
    ("json_schema", json.dumps({"type": "string", "pattern": "(unclosed"})),
    ("json_schema", json.dumps({"type": "string", "minLength": 100000})),
    ("json_schema", json.dumps({"$ref": "#/$defs/missing"})),
    ("json_schema", json.dumps({"$ref": "https://example.com/schema.json"})),
    ("json_schema", json.dumps({"oneOf": [{"type": "integer"}, {"type": "number"}]})),
    ("json_schema", json.dumps({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})),
    ("json_schema", json.dumps({"type": "integer", "minimum": 5, "maximum": 3})),
    ("json_schema", '{"items":' * 150 + "{}" + "}" * 150),
    ("json_schema", json.dumps({"type": "object", "properties": {"a": {"type": "string", "pattern": "(x|y)*x(x|y){40}"}}})),
]


frame = functools.partial(crafted_frame, "fake-tokenize")


def request(seq, constraint=None, **extra):
    fields = {"prompt": [1, 2, 3], "params": {"max_tokens": 8}, "meta": {"shape": "prompt"}}
    if constraint:
        kind, value = constraint
        fields["constraint"] = {"type": kind} if value is None else {"type": kind, "value": value}
    fields.update(extra)
    return frame("request", seq, **fields)


def eos(n):
    return frame("eos", 0, sender="fake-tokenize@test", origin="fake-origin", announced=n, served=n)


def run(data, *args):
    p = subprocess.run([tool("di-grammar"), *args], input=data, capture_output=True, timeout=120)
    return frames(p.stdout), p.returncode, p.stderr.decode()


def test_valid_and_passthrough(s, d):
    spaced = json.dumps(SCHEMA)  # with spaces: di-grammar makes it canonical
    data = (request(0, ("json_schema", spaced)) + request(1) + request(2, ("regex", "[a-z]+")) +
            request(3, ("json_object", None)) +
            frame("tokens", 4, tokens=[5, 6]) + frame("done", 4, finish_reason="stop", usage={"prompt_tokens": 1, "completion_tokens": 2}) +
            frame("error", 5, stage="x", code="bad_request", message="m") + eos(6))
    out, rc, err = run(data)
    s.check(rc == 0, "exit status 0", err)
    frames = {f.get("id"): f for f in out if f["type"] != "eos"}
    f0, f1, f2, f3 = frames["r0"], frames["r1"], frames["r2"], frames["r3"]
    canonical = json.dumps(SCHEMA, separators=(",", ":"))
    s.check(f0["constraint"]["value"] == canonical, "schema canonical (compact, key order kept)", f0["constraint"])
    want = int(d.compile("json_schema", canonical)["hash"], 16)
    s.check(f0["constraint"]["hash"] == want, "hash is the compiler's grammar key", (f0["constraint"], want))
    s.check(f2["constraint"] == {"type": "regex", "value": "[a-z]+", "hash": int(d.compile("regex", "[a-z]+")["hash"], 16)},
            "regex: value as given, hash", f2["constraint"])
    s.check(set(f3["constraint"]) == {"type", "hash"}, "json_object: type and hash", f3["constraint"])
    s.check("constraint" not in f1 and f1["prompt"] == [1, 2, 3] and f1["params"] == {"max_tokens": 8}, "no constraint: unchanged", f1)
    s.check(all(f["trace"][-1][0] == "di-grammar" and f["trace"][0][0] == "fake-tokenize" for f in frames.values()),
            "every frame gets the trace hop")
    kinds = sorted(f["type"] for f in out)
    s.check(kinds == ["done", "eos", "error", "request", "request", "request", "request", "tokens"], "every frame type forwarded", kinds)
    e = [f for f in out if f["type"] == "eos"][0]
    s.check(e["announced"] == 6 and e["served"] == 6 and e["sender"].startswith("di-grammar@"), "eos ledger", e)
    again, rc, err = run(frame_bytes(out))
    same = [f.get("constraint") for f in again if f["type"] == "request"] == [f.get("constraint") for f in out if f["type"] == "request"]
    s.check(rc == 0 and same, "a second di-grammar reads the hash and changes nothing", err)


def test_bad_constraints(s, d):
    data = request(0, ("regex", "ok+"))
    for i, c in enumerate(BAD):
        data += request(i + 1, c)
    data += request(len(BAD) + 1, ("json_schema", json.dumps(SCHEMA))) + eos(len(BAD) + 2)
    out, rc, err = run(data)
    s.check(rc == 0, "exit status 0 with bad constraints", err)
    by_id = {f["id"]: f for f in out if f["type"] != "eos"}
    s.check(len(by_id) == len(BAD) + 2, "one frame per request", len(by_id))
    for i, (kind, value) in enumerate(BAD):
        f = by_id.get(f"r{i + 1}", {})
        ok = f.get("type") == "error" and f.get("code") == "bad_constraint" and f.get("stage") == "di-grammar" and f.get("message")
        s.check(ok and f.get("meta", {}).get("shape") == "prompt", f"bad {kind} {value[:40]!r}: error frame",
                f.get("message", f))
        r = d.compile(kind, value)
        s.check("error" in r, f"bad {kind} {value[:40]!r}: the compiler refuses it too", r)
    s.check(by_id["r0"]["type"] == "request" and by_id[f"r{len(BAD) + 1}"]["type"] == "request", "the others continue")
    e = [f for f in out if f["type"] == "eos"][0]
    s.check(e["served"] == len(BAD) + 2, "served counts the error frames", e)


def test_cache_and_stats(s, d):
    data = b"".join(request(i, ("json_schema", json.dumps(SCHEMA)) if i % 2 else ("regex", "(")) for i in range(10)) + eos(10)
    out, rc, err = run(data, "--stats")
    stats = dict(line.split(": stats: ")[1].split(" ", 1) for line in err.splitlines() if ": stats: " in line)
    s.check(stats.get("compiles") == "2" and stats.get("cache_hits") == "8" and stats.get("refused") == "5",
            "each distinct constraint compiled once (errors too)", stats)


def test_bad_frames(s, d):
    data = (request(0, ("regex", "x")) + frame("request", 1, prompt=[1], constraint={"type": "yaml", "value": "x"}) +
            frame("request", 2, prompt=[1], constraint={"type": "regex", "value": "x", "hash": "not a number"}) + eos(3))
    out, rc, err = run(data)
    by_id = {f.get("id"): f for f in out if f["type"] != "eos"}
    s.check(by_id["r1"]["type"] == "error" and by_id["r1"]["code"] == "bad_frame", "unknown constraint type: bad_frame", by_id["r1"])
    s.check(by_id["r2"]["type"] == "error" and by_id["r2"]["code"] == "bad_frame", "ill-typed hash: bad_frame", by_id["r2"])
    s.check(by_id["r0"]["type"] == "request", "the good one passes")


def test_pipeline(s, d):
    lines = [
        {"id": "a", "prompt": "Name a color.", "response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
        {"id": "b", "prompt": "Count.", "response_format": {"type": "regex", "regex": "[0-9]+"}},
        {"id": "c", "prompt": "Bad.", "response_format": {"type": "regex", "regex": "[0-9"}},
        {"id": "d", "prompt": "Plain."},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    out, errs, rcs = pipe([[tool("di-tokenize")], [tool("di-grammar")], [tool("di-detok")]], data)
    res = {r["id"]: r for r in map(json.loads, out.decode().splitlines())}
    s.check(rcs == [0, 0, 0], "di-tokenize | di-grammar | di-detok exits 0", (rcs, errs))
    s.check(res["c"].get("error", {}).get("code") == "bad_constraint", "the bad regex is that request's error line", res["c"])
    s.check(all("error" not in res[k] for k in "abd"), "the others are unaffected", res)


if __name__ == "__main__":
    with GrammarDriver() as d:
        run_suite([test_valid_and_passthrough, test_bad_constraints, test_cache_and_stats, test_bad_frames,
                   test_pipeline], d)
