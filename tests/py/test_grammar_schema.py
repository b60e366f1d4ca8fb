#!/usr/bin/env python3
"""JSON-schema constraints against the reference validator (jsonschema, draft 2020-12, with
format checking). For each schema of tests/data/grammar_schemas.jsonl:

  - generation: outputs made through the token masks with the real V4 vocabulary (random
    allowed tokens by seed, as the model loop will do it) all finish, parse, and validate;
  - exactness: hand-written valid instances, written compactly or with the spaced separators
    the whitespace policy allows, in the schema's property order, are accepted; invalid ones
    are refused; and whatever the grammar accepts, jsonschema accepts too.

Then the same with thinking on (free reasoning, then a valid answer), and json_object."""
import json

from jsonschema import Draft202012Validator, FormatChecker

from grammar_driver import GrammarDriver
from harness import data_records, run_suite

SEEDS = list(range(1, 7))
# (name, schema text, valid instances, invalid instances): the acceptance set, which
# bench/grammar_bench.c times too.
CASES = [(c["name"], c["schema"], c["valid"], c["invalid"]) for c in data_records("grammar_schemas.jsonl")]


def dumps(x, spaced):
    return json.dumps(x, ensure_ascii=False, separators=(", ", ": ") if spaced else (",", ":"))


def validator(schema):
    return Draft202012Validator(schema, format_checker=FormatChecker())


def test_cases(s, d):
    for name, text, valid, invalid in CASES:
        v = validator(json.loads(text))
        for x in valid:
            assert v.is_valid(x), (name, x)  # the test data itself
        for x in invalid:
            assert not v.is_valid(x), (name, x)
        c = d.compile("json_schema", text)
        if not s.check("error" not in c, f"{name}: compiles", c.get("error")):
            continue
        inputs = [dumps(x, False) for x in valid] + [dumps(x, True) for x in valid] + [dumps(x, False) for x in invalid]
        res = d.match("json_schema", text, inputs)["results"]
        n = len(valid)
        s.check(all(res[:2 * n]), f"{name}: valid instances accepted",
                [i for i, r in zip(inputs[:2 * n], res) if not r])
        s.check(not any(res[2 * n:]), f"{name}: invalid instances refused",
                [i for i, r in zip(inputs[2 * n:], res[2 * n:]) if r])
        unsound = [i for i, r in zip(inputs, res) if r and not v.is_valid(json.loads(i))]
        s.check(not unsound, f"{name}: everything accepted validates", unsound)
        g = d.gen("json_schema", text, SEEDS)
        bad = []
        for out, fin in zip(g["outputs"], g["finished"]):
            try:
                ok = fin and v.is_valid(json.loads(out))
            except ValueError:
                ok = False
            if not ok:
                bad.append(out)
        s.check(not bad, f"{name}: {len(SEEDS)} generated outputs validate", bad[:3])
        again = d.match("json_schema", text, g["outputs"])["results"]
        s.check(all(again), f"{name}: generated outputs match the grammar")


def test_thinking(s, d):
    for name, text, _, _ in CASES[:3] + CASES[20:22]:
        g = d.gen("json_schema", text, SEEDS[:3], thinking=True, think_tokens=10)
        v = validator(json.loads(text))
        ok = all(f and v.is_valid(json.loads(o)) for o, f in zip(g["outputs"], g["finished"]))
        free = all(r for r in g["reasoning"]) and all("</think>" not in r for r in g["reasoning"])
        s.check(ok and free, f"{name}: thinking: free reasoning, then a valid answer", g)


def test_json_object(s, d):
    g = d.gen("json_object", None, list(range(1, 21)))
    bad = [o for o, f in zip(g["outputs"], g["finished"]) if not (f and isinstance(json.loads(o), dict))]
    s.check(not bad, "json_object: 20 generated outputs are JSON objects", bad[:3])
    res = d.match("json_object", None, ['{}', '{"a":[1,{"b":null}], "c": "d"}', '[]', '{"a":1,}', ' {}', '{"a":01}'])["results"]
    s.check(res == [True, True, False, False, False, False], "json_object: accepts objects only", res)


if __name__ == "__main__":
    with GrammarDriver() as d:
        run_suite([test_cases, test_thinking, test_json_object], d)
