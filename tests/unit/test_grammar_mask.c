/* Token masks are exact. On a small synthetic vocabulary (single bytes, JSON punctuation
 * runs, pieces of multi-byte characters, an excluded token, EOS and </think>), every
 * position reachable within a few tokens is visited, and there the mask equals the
 * brute-force reference: the tokens the matcher accepts when each one is tried in turn
 * (EOS exactly where the output may end). For regexes, the reference is also PCRE2's
 * partial match: a token is allowed exactly when the text so far plus the token can still
 * become a full match. Rollback, thinking mode and dead-end freedom are checked on the way. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "grammar_internal.h"
#include "testlib.h"
#include "utf8.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 400

static const uint8_t *tok_bytes[MAX_TOKENS];
static uint32_t tok_lens[MAX_TOKENS];
static bool tok_excluded[MAX_TOKENS];
static uint32_t n_tokens, eos_id, think_id;

static uint32_t add_token(const char *s, size_t n)
{
    tok_bytes[n_tokens] = (const uint8_t *)s;
    tok_lens[n_tokens] = (uint32_t)n;
    return n_tokens++;
}

static grammar_vocab_t *synthetic_vocab(void)
{
    static char singles[256][2];
    n_tokens = 0;
    for (int b = 0x20; b < 0x7F; b++) {
        singles[b][0] = (char)b;
        add_token(singles[b], 1);
    }
    static const char *multi[] = {
        "\n", "\t", "{\"", "\":", "\",", "\"}", "},", "}}", "[{", "]}", "]]", "[[", "true", "false", "null", "nul", "12",
        "345", "-1", ".5", "e+", "E-", "00", "ab", "abc", "bc", "ca", "\\n", "\\u00", "\\\"", "\\\\", " \"", ", \"",
        "\": \"", "\"]", "\":[", "\":{", "\"a", "\"b\"", "a\"", "{}", "[]", "\xc3\xa9", "\xc3", "\xa9", "\xc3\xa9\"",
        "\xe2\x98\x83", "\xe2\x98", "\x83", "\xf0\x9f", "\x98\x80", "\xf0\x9f\x98\x80", "x@y", ".com", "-0", "0.",
        "1e", "10", "99", "100", "-", "\"\"", "a,b", "aaaa", "xyz", "\xc3\xa9t\xc3\xa9", "\\u00e9", "\\ud83d",
    };
    for (size_t i = 0; i < DI_ARRAY_LEN(multi); i++) add_token(multi[i], strlen(multi[i]));
    uint32_t special = add_token("<s>", 3);
    tok_excluded[special] = true;
    eos_id = add_token("</s>", 4);
    think_id = add_token("</think>", 8);
    return grammar_vocab_new(n_tokens, tok_bytes, tok_lens, tok_excluded, &eos_id, 1, think_id);
}

static bool bit(const uint32_t *mask, uint32_t id) { return mask[id / 32] >> (id % 32) & 1; }

/* ---- the PCRE2 reference for regex grammars --------------------------------------------- */

typedef struct {
    pcre2_code *re;
    pcre2_match_data *md;
} pcre_ref_t;

static bool pcre_viable(pcre_ref_t *p, const uint8_t *s, size_t n, bool *complete)
{
    int rc = pcre2_match(p->re, s, n, 0, PCRE2_NO_UTF_CHECK, p->md, NULL);
    *complete = rc >= 0;
    rc = pcre2_match(p->re, s, n, 0, PCRE2_PARTIAL_HARD | PCRE2_NO_UTF_CHECK, p->md, NULL);
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL || *complete;
}

/* ---- exploration ------------------------------------------------------------------------ */

typedef struct {
    uint32_t toks[16];
    uint32_t n;
} path_t;

typedef struct {
    long positions, checks, pcre_checks, mismatches;
} stats_t;

static void replay(grammar_matcher_t *m, const path_t *p, buf_t *text)
{
    grammar_matcher_rollback(m, grammar_matcher_position(m));
    text->len = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        if (!grammar_matcher_accept(m, p->toks[i])) CHECKF(false, "replay refused token %u", p->toks[i]);
        if (p->toks[i] != eos_id && p->toks[i] != think_id && !grammar_matcher_in_reasoning(m))
            buf_append(text, tok_bytes[p->toks[i]], tok_lens[p->toks[i]]);
    }
}

static uint64_t key_hash(const grammar_matcher_t *m)
{
    uint32_t k[256];
    size_t n = grammar_matcher_key(m, k, 256);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < (n < 256 ? n : 256); i++) h = (h ^ k[i]) * 1099511628211ull;
    return h ^ n;
}

/* Visits positions breadth first (distinct by matcher key), up to max positions. */
static void explore(const char *name, grammar_t *g, bool thinking, pcre_ref_t *ref, int max_positions, stats_t *st)
{
    const grammar_vocab_t *v = g->vocab;
    grammar_matcher_t *m = grammar_matcher_new(g, thinking);
    uint32_t *mask = xmalloc(grammar_mask_words(v) * sizeof *mask);
    path_t *queue = xmalloc((size_t)max_positions * sizeof *queue);
    uint64_t *seen = xcalloc((size_t)max_positions * 4, sizeof *seen);
    size_t seen_cap = (size_t)max_positions * 4;
    int head = 0, tail = 0;
    queue[tail++] = (path_t){{0}, 0};
    buf_t text = {0};
    long bad = 0;
    while (head < tail) {
        path_t p = queue[head++];
        replay(m, &p, &text);
        grammar_matcher_fill_mask(m, mask);
        st->positions++;
        bool can_end = grammar_matcher_can_end(m);
        if (!grammar_matcher_in_reasoning(m))
            CHECKF(grammar_matcher_bytes_to_end(m) != G_NONE, "%s: a position that cannot complete", name);
        for (uint32_t t = 0; t < v->n; t++) {
            bool in_mask = bit(mask, t);
            bool ok = grammar_matcher_accept(m, t);
            st->checks++;
            if (ok != in_mask) {
                if (bad++ < 5) CHECKF(false, "%s: after \"%.*s\" token %u (\"%.*s\") mask %d, accept %d", name, (int)text.len,
                                      (char *)text.data, t, (int)tok_lens[t], (const char *)tok_bytes[t], in_mask, ok);
                continue;
            }
            if (t == eos_id) {
                CHECKF(ok == can_end, "%s: EOS allowed %d but can_end %d", name, ok, can_end);
                if (ok) {
                    /* finished: nothing more */
                    uint32_t *after = xmalloc(grammar_mask_words(v) * sizeof *after);
                    grammar_matcher_fill_mask(m, after);
                    bool none = true;
                    for (size_t w = 0; w < grammar_mask_words(v); w++) none &= after[w] == 0;
                    CHECKF(none && grammar_matcher_is_finished(m), "%s: tokens allowed after EOS", name);
                    free(after);
                    grammar_matcher_rollback(m, 1);
                }
                continue;
            }
            if (ref && !grammar_matcher_in_reasoning(m) && t != eos_id && !tok_excluded[t] && t != think_id) {
                buf_t s = {0};
                buf_append(&s, text.data, text.len);
                buf_append(&s, tok_bytes[t], tok_lens[t]);
                /* PCRE2's partial matching cannot judge a cut-off character: whole ones only */
                if (!utf8_valid((const char *)s.data, s.len)) {
                    buf_free(&s);
                    goto next;
                }
                st->pcre_checks++;
                bool complete, viable = pcre_viable(ref, s.data, s.len, &complete);
                if (viable != in_mask && bad++ < 5)
                    CHECKF(false, "%s: after \"%.*s\" token \"%.*s\": ours %d, PCRE2 partial match %d", name, (int)text.len,
                           (char *)text.data, (int)tok_lens[t], (const char *)tok_bytes[t], in_mask, viable);
                buf_free(&s);
            }
        next:
            if (!ok) continue;
            uint64_t h = key_hash(m);
            size_t slot = h % seen_cap;
            bool dup = false;
            while (seen[slot]) {
                if (seen[slot] == h) {
                    dup = true;
                    break;
                }
                slot = (slot + 1) % seen_cap;
            }
            if (!dup && tail < max_positions && p.n < 16) {
                seen[slot] = h;
                path_t q = p;
                q.toks[q.n++] = t;
                queue[tail++] = q;
            }
            grammar_matcher_rollback(m, 1);
        }
        if (ref && !grammar_matcher_in_reasoning(m) && utf8_valid((const char *)text.data, text.len)) {
            bool complete;
            pcre_viable(ref, text.data, text.len, &complete);
            if (complete != can_end && bad++ < 5)
                CHECKF(false, "%s: \"%.*s\": can_end %d, PCRE2 full match %d", name, (int)text.len, (char *)text.data, can_end, complete);
        }
    }
    st->mismatches += bad;
    CHECKF(bad == 0, "%s: %ld mismatches", name, bad);
    buf_free(&text);
    free(queue);
    free(seen);
    free(mask);
    grammar_matcher_free(m);
}

static grammar_vocab_t *vocab;
static stats_t totals;

static void check_grammar(constraint_kind_t kind, const char *text, bool thinking, int max_positions)
{
    char err[512];
    grammar_t *g = grammar_compile(vocab, kind, text, true, err, sizeof err);
    if (!g) {
        CHECKF(false, "compile %s: %s", text ? text : "json_object", err);
        return;
    }
    pcre_ref_t ref = {0}, *rp = NULL;
    if (kind == CONSTRAINT_REGEX) {
        /* partial matching needs the end as an assertion, not PCRE2_ENDANCHORED */
        int code;
        PCRE2_SIZE off;
        char pat[512];
        snprintf(pat, sizeof pat, "(?:%s)\\z", text);
        ref.re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_ANCHORED | PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_INVALID_UTF, &code, &off, NULL);
        if (ref.re) {
            ref.md = pcre2_match_data_create_from_pattern(ref.re, NULL);
            rp = &ref;
        }
    }
    explore(text ? text : "json_object", g, thinking, rp, max_positions, &totals);
    if (rp) {
        pcre2_match_data_free(ref.md);
        pcre2_code_free(ref.re);
    }
    grammar_unref(g);
}

static void test_regex_masks(void)
{
    static const char *res[] = {
        "abc|ab", "[a-c]+", "a*b?c{2,3}", "(ab|ca)*x@y\\.com", "\\d{1,4}", "[^\"]*", ".{0,5}", "-?(0|[1-9]\\d*)(\\.\\d+)?",
        "(true|false|null)", "\\x{e9}+t?", "[\\x{2603}\\x{1F600}]{1,3}", "x|\\x{e9}\\x{e9}|\\x{2603}", "(a|b|c)*a(a|b|c)",
        "[ -~]{2}", "\\w+@\\w+", "\\{\"a\":[0-9]+\\}",
    };
    for (size_t i = 0; i < DI_ARRAY_LEN(res); i++) check_grammar(CONSTRAINT_REGEX, res[i], false, 1000);
}

static void test_schema_masks(void)
{
    static const char *schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120},\"b\":{\"type\":\"string\"}},\"required\":[\"a\"]}",
        "{\"type\":\"array\",\"items\":{\"enum\":[\"ab\",\"\\u00e9t\\u00e9\",null,12]},\"maxItems\":3}",
        "{\"type\":\"string\",\"pattern\":\"^[a-c]+$\",\"maxLength\":4}",
        "{\"type\":\"string\",\"minLength\":1,\"maxLength\":3}",
        "{\"type\":\"number\",\"exclusiveMinimum\":0.5,\"maximum\":100}",
        "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"c\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}",
        "{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}]}",
        "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"}}",
        "{}",
    };
    for (size_t i = 0; i < DI_ARRAY_LEN(schemas); i++) check_grammar(CONSTRAINT_JSON_SCHEMA, schemas[i], false, 1000);
    check_grammar(CONSTRAINT_JSON_OBJECT, NULL, false, 1000);
}

static void test_thinking_masks(void)
{
    check_grammar(CONSTRAINT_REGEX, "(ab|ca)+", true, 200);
    check_grammar(CONSTRAINT_JSON_OBJECT, NULL, true, 200);
}

/* Free reasoning, then the constraint; rollback across the boundary restores it. */
static void test_thinking_phases(void)
{
    char err[256];
    grammar_t *g = grammar_compile(vocab, CONSTRAINT_REGEX, "abc", true, err, sizeof err);
    grammar_matcher_t *m = grammar_matcher_new(g, true);
    uint32_t *mask = xmalloc(grammar_mask_words(vocab) * sizeof *mask);
    grammar_matcher_fill_mask(m, mask);
    CHECK(bit(mask, 'z' - 0x20) && bit(mask, think_id) && bit(mask, n_tokens - 3) && !bit(mask, eos_id));
    CHECK(!grammar_matcher_accept(m, eos_id));
    CHECK(grammar_matcher_accept(m, 'z' - 0x20) && grammar_matcher_in_reasoning(m));
    CHECK(grammar_matcher_accept(m, think_id) && !grammar_matcher_in_reasoning(m));
    CHECK(!grammar_matcher_accept(m, 'z' - 0x20) && !grammar_matcher_accept(m, think_id));
    CHECK(grammar_matcher_accept(m, 'a' - 0x20));
    CHECK(grammar_matcher_rollback(m, 2) && grammar_matcher_in_reasoning(m));
    CHECK(!grammar_matcher_rollback(m, 5));
    grammar_matcher_free(m);
    free(mask);
    grammar_unref(g);
}

int main(void)
{
    vocab = synthetic_vocab();
    RUN(test_regex_masks);
    RUN(test_schema_masks);
    RUN(test_thinking_masks);
    RUN(test_thinking_phases);
    printf("%ld positions, %ld token checks (%ld also against PCRE2), %ld mismatches\n", totals.positions, totals.checks,
           totals.pcre_checks, totals.mismatches);
    grammar_vocab_free(vocab);
    return t_finish();
}
