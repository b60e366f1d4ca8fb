#!/usr/bin/env python3
"""The C tokenizer against HF tokenizers (and deepseek-recipe's prompt encoding) on a
generated corpus of over 1 MB, plus every code point whose Unicode class PCRE2 and HF's
regex engine disagree on, and every code point of the BMP.

Runs $BUILD/drivers/tokenize_dump (BUILD defaults to "build"); the tokenizer is
$DI_DATA/tokenizer/tokenizer.json (DI_DATA defaults to "data").
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import make_corpus  # noqa: E402
import tokenizers  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
DRIVER = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "drivers", "tokenize_dump")
DATA = os.environ.get("DI_DATA", "data")
TOKENIZER_JSON = os.path.join(DATA if os.path.isabs(DATA) else os.path.join(ROOT, DATA), "tokenizer", "tokenizer.json")

passed = failed = 0


def case(fn):
    global passed, failed
    try:
        fn()
        passed += 1
        print(f"ok {fn.__name__}")
    except Exception:
        failed += 1
        print(f"not ok {fn.__name__}")
        traceback.print_exc(limit=3)
    sys.stdout.flush()
    return fn


def run_driver(mode, payload):
    with tempfile.NamedTemporaryFile() as f:
        f.write(payload)
        f.flush()
        r = subprocess.run([DRIVER, mode, f.name], capture_output=True, env=dict(os.environ, DI_DATA=os.path.dirname(os.path.dirname(TOKENIZER_JSON))))
    if r.returncode:
        raise AssertionError(f"{DRIVER} {mode} failed: {r.stderr.decode(errors='replace')}")
    return r.stdout


def records(docs):
    return b"".join(b"%d\n" % len(d.encode()) + d.encode() for d in docs)


def c_encode(docs, mode):
    lines = run_driver(mode, records(docs)).decode().split("\n")
    return [None if line == "error" else [int(x) for x in line.split()] for line in lines[: len(docs)]]


def c_decode(id_lists):
    out = run_driver("decode", "".join(" ".join(map(str, ids)) + "\n" for ids in id_lists).encode())
    docs, pos = [], 0
    while pos < len(out):
        nl = out.index(b"\n", pos)
        head = out[pos:nl]
        if head == b"error":
            docs.append(None)
            pos = nl + 1
            continue
        n = int(head)
        docs.append(out[nl + 1 : nl + 1 + n])
        pos = nl + 1 + n
    return docs


def compare(name, docs, got, want):
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    for i in bad[:3]:
        g, w = got[i] or [], want[i]
        k = next((k for k in range(min(len(g), len(w))) if g[k] != w[k]), min(len(g), len(w)))
        print(f"  {name}: document {i} differs at token {k}: got {g[max(0, k - 3):k + 4]} want {w[max(0, k - 3):k + 4]}"
              f" near {HF.decode(w[max(0, k - 3):k + 4])!r}")
    assert len(got) == len(want), f"{name}: {len(got)} results for {len(want)} documents"
    assert not bad, f"{name}: {len(bad)} of {len(docs)} documents differ"


HF = tokenizers.Tokenizer.from_file(TOKENIZER_JSON)
_spec = json.load(open(TOKENIZER_JSON, encoding="utf-8"))
_spec["added_tokens"] = []
HF_PLAIN = tokenizers.Tokenizer.from_str(json.dumps(_spec))  # the added vocabulary disabled

CORPUS = make_corpus.make_corpus(TOKENIZER_JSON, seed=20240601, target_bytes=1_100_000)


def widened_ranges():
    """The code points lib/tokenizer_unicode.c adds to PCRE2's classes."""
    with open(os.path.join(ROOT, "lib", "tokenizer_unicode.c"), encoding="utf-8") as f:
        return [(int(a, 16), int(b, 16)) for a, b in re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+)\}", f.read())]


r = random.Random(7)
CODE_POINT_DOCS = make_corpus.every_code_point_docs(
    [(0, 0xFFFF)] + widened_ranges() + [(cp, cp) for cp in (r.randint(0x10000, 0x10FFFF) for _ in range(20000))])
stats = {"documents": 0, "bytes": 0}


def check_both_modes(name, docs):
    compare(f"{name} plain", docs, c_encode(docs, "encode"), [e.ids for e in HF_PLAIN.encode_batch(docs, add_special_tokens=False)])
    compare(f"{name} added", docs, c_encode(docs, "encode-added"), [e.ids for e in HF.encode_batch(docs, add_special_tokens=False)])
    stats["documents"] += len(docs)
    stats["bytes"] += sum(len(d.encode()) for d in docs)


@case
def test_corpus_matches_hf():
    check_both_modes("corpus", CORPUS)


@case
def test_code_points_match_hf():
    check_both_modes("code points", CODE_POINT_DOCS)


@case
def test_decode_encode_round_trip():
    docs = CORPUS + CODE_POINT_DOCS[::8]
    for mode in ("encode", "encode-added"):
        back = c_decode(c_encode(docs, mode))
        bad = [i for i, d in enumerate(docs) if back[i] != d.encode()]
        assert not bad, f"{mode}: {len(bad)} documents do not round-trip, first {bad[:5]}"


@case
def test_decode_every_id_matches_hf():
    ids = list(range(HF.get_vocab_size()))
    ours = c_decode([[i] for i in ids])
    bad = [i for i in ids if ours[i] is None or ours[i].decode("utf-8", errors="replace") != HF.decode([i], skip_special_tokens=False)]
    assert not bad, f"{len(bad)} ids decode differently, first {bad[:5]}"
    assert c_decode([[HF.get_vocab_size()]]) == [None], "an id past the vocabulary is refused"


@case
def test_invalid_utf8_refused():
    raw = b"3\nab\xff" + b"2\n\xc0\x80" + b"3\n\xed\xa0\x80" + b"2\nok"
    ok = " ".join(map(str, HF.encode("ok", add_special_tokens=False).ids))
    for mode in ("encode", "encode-added"):
        lines = run_driver(mode, raw).decode().split("\n")
        assert lines[:4] == ["error", "error", "error", ok], lines[:4]


def prompt_pieces(encoding, conv):
    """The rendered prompt as (is_special, text) pieces."""
    rendered = encoding.render_conversation(conv)
    prompt, pieces, pos = rendered.prompt, [], 0
    for start, end in rendered.special_ranges:  # code point offsets
        pieces += [(False, prompt[pos:start]), (True, prompt[start:end])]
        pos = end
    return pieces + [(False, prompt[pos:])]


@case
def test_prompt_encoding_matches_deepseek_recipe():
    """deepseek-recipe's prompt encoding: the special ranges of the rendered prompt are their
    tokens, the text between them is plain text (tokenizer_encode). V4.1 renders system
    messages and thinking mode with a <｜System｜> token that this tokenizer.json lacks (the
    recipe itself fails to encode those), so they are checked with the V4 encoding."""
    from deepseek_recipe import (AssistantMessage, Conversation, DeepseekV4Encoding, DeepseekV41Encoding,
                                 SystemMessage, Tokenizer, UserMessage)
    recipe_tok = Tokenizer.from_file(TOKENIZER_JSON)
    v41, v4 = DeepseekV41Encoding().with_tokenizer(recipe_tok), DeepseekV4Encoding().with_tokenizer(recipe_tok)
    texts = ["Hi <think> and </think> also <｜User｜> and <｜Assistant｜>",
             "<｜begin▁of▁sentence｜>x<｜end▁of▁sentence｜>y <｜image2｜> ｜DSML｜ <|EOT|>",
             "<think>", "   <｜User｜>\n\n"] + CORPUS[20:80]
    cases = []  # (name, pieces, recipe ids)
    for i, text in enumerate(texts):
        history = [AssistantMessage("ok </think>", reasoning_content="r <｜User｜>"), UserMessage(text[::-1])] if i % 2 else []
        for encoding, messages, thinking in (
                (v41, [UserMessage(text)] + history, False),
                (v4, [SystemMessage("be brief <think>"), UserMessage(text)] + history, bool(i % 3))):
            conv = Conversation(messages, thinking_mode=thinking)
            cases.append((f"{type(encoding).__name__} message {i}", prompt_pieces(encoding, conv),
                          encoding.encode(conv)))
    all_pieces = [text for _, pieces, _ in cases for _, text in pieces]
    plain, added = c_encode(all_pieces, "encode"), c_encode(all_pieces, "encode-added")
    k = 0
    for name, pieces, want in cases:
        ours = []
        for special, text in pieces:
            assert not special or len(added[k]) == 1, f"{name}: special range {text!r} is one token"
            ours += added[k] if special else plain[k]
            k += 1
        assert ours == want, f"{name}: ours {ours[:12]}... recipe {want[:12]}..."


print(f"compared {stats['documents']} documents, {stats['bytes']} bytes, with HF tokenizers {tokenizers.__version__} in both modes")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
