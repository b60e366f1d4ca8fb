/* libFuzzer target: the grammar compiler on arbitrary regexes and schemas. The first byte
 * picks the kind (regex, JSON schema, json_object), the rest is the constraint. Whatever the
 * bytes: a refusal comes with a message; a grammar that compiles recompiles from its
 * canonical form to the same hash, and random outputs made through its masks (on a small
 * vocabulary with every byte, so masks are computed quickly) are accepted by its own
 * whole-output check. */
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

static const char *MULTI[] = {"{\"", "\":", "\",", "\"}", "},", "]}", "true", "null", "12", ".5", "ab", "\\n",
                              "\xc3\xa9", "\xe2\x98\x83", ", \"", "\": ", "abc", "-1", "e+", "00"};
enum { N_MULTI = sizeof MULTI / sizeof *MULTI, N_TOKENS = 256 + N_MULTI + 1, EOS = N_TOKENS - 1 };
static uint8_t singles[256];
static const uint8_t *tok_bytes[N_TOKENS];
static uint32_t tok_lens[N_TOKENS];

static grammar_vocab_t *vocab_once(void)
{
    static grammar_vocab_t *v;
    if (v) return v;
    for (int b = 0; b < 256; b++) {
        singles[b] = (uint8_t)b;
        tok_bytes[b] = &singles[b];
        tok_lens[b] = 1;
    }
    for (int i = 0; i < N_MULTI; i++) {
        tok_bytes[256 + i] = (const uint8_t *)MULTI[i];
        tok_lens[256 + i] = (uint32_t)strlen(MULTI[i]);
    }
    tok_bytes[EOS] = (const uint8_t *)"</s>";
    tok_lens[EOS] = 4;
    uint32_t eos = EOS;
    v = grammar_vocab_new(N_TOKENS, tok_bytes, tok_lens, NULL, &eos, 1, -1);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096) return 0;
    static const constraint_kind_t kinds[] = {CONSTRAINT_REGEX, CONSTRAINT_JSON_SCHEMA, CONSTRAINT_JSON_OBJECT};
    constraint_kind_t kind = kinds[data[0] % 3];
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    char err[512] = "";
    grammar_vocab_t *v = vocab_once();
    grammar_t *g = grammar_compile(v, kind, text, true, err, sizeof err);
    if (!g) {
        if (!err[0]) abort();
        free(text);
        return 0;
    }
    grammar_t *again = grammar_compile(v, kind, grammar_canonical(g), false, err, sizeof err);
    if (!again || grammar_hash(again) != grammar_hash(g)) abort();
    grammar_unref(again);
    for (uint64_t seed = 1; seed <= 2; seed++) {
        grammar_walk_opts_t o = {.seed = seed, .max_tokens = 64, .steer_after = 16};
        grammar_walk_t w;
        grammar_walk(g, &o, &w);
        if (w.finished) {
            buf_t out = {0};
            for (size_t i = 0; i + 1 < w.tokens.n; i++) buf_append(&out, tok_bytes[w.tokens.v[i]], tok_lens[w.tokens.v[i]]);
            if (!grammar_match_bytes(g, out.data, out.len)) abort();
            buf_free(&out);
        }
        grammar_walk_free(&w);
    }
    grammar_unref(g);
    free(text);
    return 0;
}
