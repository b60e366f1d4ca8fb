#!/usr/bin/env python3
"""Regex constraints against PCRE2 (full match, UTF, $ only at the very end). For each regex
of tests/data/grammar_regexes.jsonl:

  - the listed strings that must (not) match do (not), for the grammar and for PCRE2 alike;
  - outputs made through the token masks with the real V4 vocabulary (random allowed tokens
    by seed, as the model loop will do it) all finish and are PCRE2 full matches;
  - with thinking on, the reasoning is free and the answer still matches;
  - a regex whose token masks would take too long to prepare is refused with a reason (the
    masks walk the vocabulary once per automaton state: 32,768 states of printable ASCII
    walked for ~18 s before the bound), and one of the same shape on a few letters is not."""
from grammar_driver import GrammarDriver
from harness import data_records, run_suite

SEEDS = list(range(1, 7))


def load_cases():
    return [(c["name"], c["regex"], c["match"], c["nomatch"]) for c in data_records("grammar_regexes.jsonl")]


def test_cases(s, d):
    for name, rx, yes, no in load_cases():
        r = d.match("regex", rx, yes + no)
        if not s.check("error" not in r, f"{name}: compiles", r.get("error")):
            continue
        want = [True] * len(yes) + [False] * len(no)
        s.check(r["pcre2"] == want, f"{name}: the listed strings are what PCRE2 says", r["pcre2"])
        s.check(r["results"] == want, f"{name}: the grammar agrees", list(zip(yes + no, r["results"])))
        g = d.gen("regex", rx, SEEDS)
        bad = [o for o, f, p in zip(g["outputs"], g["finished"], g["pcre2"]) if not (f and p)]
        s.check(not bad, f"{name}: {len(SEEDS)} generated outputs are PCRE2 full matches", bad[:3])


def test_thinking(s, d):
    for name, rx, _, _ in load_cases()[:4]:
        g = d.gen("regex", rx, SEEDS[:3], thinking=True)
        ok = all(f and p for f, p in zip(g["finished"], g["pcre2"])) and all(g["reasoning"])
        s.check(ok, f"{name}: thinking: free reasoning, then a matching answer", g)


def test_mask_work_bound(s, d):
    r = d.gen("regex", "[ -~]*a[ -~]{14}", SEEDS[:1])
    s.check("too costly" in r.get("error", ""), "every printable character 14 times after an a: refused", r)
    r = d.gen("regex", "[ab]*a[ab]{14}", SEEDS[:1])
    s.check("error" not in r and all(r["finished"]), "the same shape on two letters: compiles and generates", r)


if __name__ == "__main__":
    with GrammarDriver() as d:
        run_suite([test_cases, test_thinking, test_mask_work_bound], d)
