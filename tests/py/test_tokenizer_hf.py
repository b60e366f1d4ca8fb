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
import tempfile

import tokenizers

import make_corpus
from harness import BUILD, ROOT, TOKENIZER_JSON, Suite

DRIVER = os.path.join(BUILD, "drivers", "tokenize_dump")
S = Suite()


def run_driver(mode, payload, tokenizer_json=TOKENIZER_JSON):
    with tempfile.NamedTemporaryFile() as f:
        f.write(payload)
        f.flush()
        data = os.path.dirname(os.path.dirname(tokenizer_json))  # the driver reads $DI_DATA/tokenizer/tokenizer.json
        r = subprocess.run([DRIVER, mode, f.name], capture_output=True, env=dict(os.environ, DI_DATA=data))
    if r.returncode:
        raise AssertionError(f"{DRIVER} {mode} failed: {r.stderr.decode(errors='replace')}")
    return r.stdout


def records(docs):
    return b"".join(b"%d\n" % len(d.encode()) + d.encode() for d in docs)


def c_encode(docs, mode, tokenizer_json=TOKENIZER_JSON):
    lines = run_driver(mode, records(docs), tokenizer_json).decode().split("\n")
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


def compare(name, docs, got, want, hf=None):
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    for i in bad[:3]:
        g, w, hf = got[i] or [], want[i], hf or HF
        k = next((k for k in range(min(len(g), len(w))) if g[k] != w[k]), min(len(g), len(w)))
        print(f"  {name}: document {i} differs at token {k}: got {g[max(0, k - 3):k + 4]} want {w[max(0, k - 3):k + 4]}"
              f" near {hf.decode(w[max(0, k - 3):k + 4])!r}")
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


@S.case
def test_corpus_matches_hf():
    check_both_modes("corpus", CORPUS)


@S.case
def test_code_points_match_hf():
    check_both_modes("code points", CODE_POINT_DOCS)


@S.case
def test_decode_encode_round_trip():
    docs = CORPUS + CODE_POINT_DOCS[::8]
    for mode in ("encode", "encode-added"):
        back = c_decode(c_encode(docs, mode))
        bad = [i for i, d in enumerate(docs) if back[i] != d.encode()]
        assert not bad, f"{mode}: {len(bad)} documents do not round-trip, first {bad[:5]}"


@S.case
def test_decode_every_id_matches_hf():
    ids = list(range(HF.get_vocab_size()))
    ours = c_decode([[i] for i in ids])
    bad = [i for i in ids if ours[i] is None or ours[i].decode("utf-8", errors="replace") != HF.decode([i], skip_special_tokens=False)]
    assert not bad, f"{len(bad)} ids decode differently, first {bad[:5]}"
    assert c_decode([[HF.get_vocab_size()]]) == [None], "an id past the vocabulary is refused"


@S.case
def test_invalid_utf8_refused():
    raw = b"3\nab\xff" + b"2\n\xc0\x80" + b"3\n\xed\xa0\x80" + b"2\nok"
    ok = " ".join(map(str, HF.encode("ok", add_special_tokens=False).ids))
    for mode in ("encode", "encode-added"):
        lines = run_driver(mode, raw).decode().split("\n")
        assert lines[:4] == ["error", "error", "error", ok], lines[:4]


def byte_level(data):
    """GPT-2's bytes_to_unicode, as the ByteLevel pre-tokenizer maps bytes."""
    def char(b):
        if b <= 0x20:
            return chr(0x100 + b)
        if 0x7F <= b <= 0xA0:
            return chr(0x100 + 33 + b - 0x7F)
        return chr(0x143) if b == 0xAD else chr(b)
    return "".join(char(b) for b in data)


@S.case
def test_regex_dialect_matches_hf():
    """Split patterns that use the translated parts of Oniguruma's dialect, on a tokenizer
    whose merges join every pair of bytes, so that a piece boundary in another place changes
    the ids."""
    alphabet = ["a", "b", "Z", "1", "٣", "١", " ", "  ", "\n", "\r\n", "\x0b", "\x85", "\xa0", "\u180e", "\u3000",
                "é", "e\u0301", "!", "{", ",", "}", "中", "\U0001FA77", "\U00011380"]
    used = sorted({b for ch in alphabet for b in ch.encode()})
    vocab = {byte_level(bytes([b])): b for b in range(256)}
    merges = []
    for x in used:
        for y in used:
            vocab[byte_level(bytes([x, y]))] = len(vocab)
            merges.append(f"{byte_level(bytes([x]))} {byte_level(bytes([y]))}")
    patterns = [r"\d+", r"\D+", r"\s+", r"\S+", r"[\s\d]+", r"ba{,2}", r"a{1,}", r"\v", r"^a", r"a$", r".", r"\p{^L}+",
                r"\P{N}+", r"\p{L}+|\p{N}+", r"(?=a)b|a", r"[^\s]+", r"\p{Lo}+", r"\p{Nd}{2}", r"\{|\}"]
    patterns += [p["pattern"]["Regex"] for p in _spec["pre_tokenizer"]["pretokenizers"] if p["type"] == "Split"]
    r = random.Random(11)
    docs = ["".join(r.choice(alphabet) for _ in range(r.randint(1, 30))) for _ in range(400)]
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "tokenizer"))
        path = os.path.join(tmp, "tokenizer", "tokenizer.json")
        for pattern in patterns:
            spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                    "normalizer": None, "post_processor": None,
                    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
                    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                              "ignore_merges": False, "vocab": vocab, "merges": merges}}
            with open(path, "w", encoding="utf-8") as f:
                json.dump(spec, f)
            hf = tokenizers.Tokenizer.from_file(path)
            compare(f"pattern {pattern!r}", docs, c_encode(docs, "encode", path), [e.ids for e in hf.encode_batch(docs)], hf)


def prompt_pieces(encoding, conv):
    """The rendered prompt as (is_special, text) pieces."""
    rendered = encoding.render_conversation(conv)
    prompt, pieces, pos = rendered.prompt, [], 0
    for start, end in rendered.special_ranges:  # code point offsets
        pieces += [(False, prompt[pos:start]), (True, prompt[start:end])]
        pos = end
    return pieces + [(False, prompt[pos:])]


@S.case
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
S.finish()
