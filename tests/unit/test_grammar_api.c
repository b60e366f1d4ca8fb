/* The grammar API as the sampler uses it, on a small vocabulary: the cache (one compile per
 * distinct constraint, errors remembered, least recently used evicted, references outliving
 * eviction), identity (canonical form and hash), matcher life cycle (accept, EOS, finished,
 * must_end, bytes_to_end, rollback), recursion depth, the determinism refusal, and the
 * limits on sizes. */
#include "grammar_internal.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static grammar_vocab_t *vocab;
static uint32_t eos_id;
static uint8_t singles[256];

static grammar_vocab_t *byte_vocab(void)
{
    static const uint8_t *bytes[258];
    static uint32_t lens[258];
    for (int b = 0; b < 256; b++) {
        singles[b] = (uint8_t)b;
        bytes[b] = &singles[b];
        lens[b] = 1;
    }
    bytes[256] = (const uint8_t *)"[[";
    lens[256] = 2;
    eos_id = 257;
    bytes[257] = (const uint8_t *)"<eos>";
    lens[257] = 5;
    return grammar_vocab_new(258, bytes, lens, NULL, &eos_id, 1, -1);
}

static grammar_t *compile(constraint_kind_t kind, const char *text)
{
    char err[512];
    grammar_t *g = grammar_compile(vocab, kind, text, true, err, sizeof err);
    CHECKF(g != NULL, "compile '%s': %s", text ? text : "", err);
    return g;
}

static bool accept_text(grammar_matcher_t *m, const char *s)
{
    for (; *s; s++)
        if (!grammar_matcher_accept(m, (uint8_t)*s)) return false;
    return true;
}

static void test_identity(void)
{
    grammar_t *a = compile(CONSTRAINT_JSON_SCHEMA, "{ \"type\" : \"object\",\n \"properties\": {\"b\": {}, \"a\": {}} }");
    CHECK_STR(grammar_canonical(a), "{\"type\":\"object\",\"properties\":{\"b\":{},\"a\":{}}}");
    grammar_t *b = compile(CONSTRAINT_JSON_SCHEMA, grammar_canonical(a));
    CHECK(grammar_hash(a) == grammar_hash(b));
    CHECK(grammar_hash(a) == grammar_key(vocab, CONSTRAINT_JSON_SCHEMA, grammar_canonical(a)));
    grammar_t *c = compile(CONSTRAINT_REGEX, grammar_canonical(a));
    CHECK(grammar_hash(c) != grammar_hash(a)); /* the kind is part of it */
    char err[64];
    grammar_t *bare = grammar_compile(vocab, CONSTRAINT_REGEX, "a", false, err, sizeof err);
    CHECK(bare && grammar_matcher_new(bare, false) == NULL); /* validated only: no masks to match with */
    grammar_unref(bare);
    grammar_t *o = compile(CONSTRAINT_JSON_OBJECT, NULL);
    CHECK(grammar_canonical(o) == NULL && grammar_kind(o) == CONSTRAINT_JSON_OBJECT);
    grammar_unref(a);
    grammar_unref(b);
    grammar_unref(c);
    grammar_unref(o);
}

static void test_cache(void)
{
    grammar_cache_t *cache = grammar_cache_new(vocab, 2, true);
    char err[256];
    bool hit;
    grammar_t *a = grammar_cache_get(cache, CONSTRAINT_REGEX, "a+", &hit, err, sizeof err);
    CHECK(a && !hit);
    grammar_t *a2 = grammar_cache_get(cache, CONSTRAINT_REGEX, "a+", &hit, err, sizeof err);
    CHECK(a2 == a && hit);
    grammar_t *bad = grammar_cache_get(cache, CONSTRAINT_REGEX, "(", &hit, err, sizeof err);
    CHECK(!bad && !hit && strstr(err, "missing ')'"));
    err[0] = 0;
    bad = grammar_cache_get(cache, CONSTRAINT_REGEX, "(", &hit, err, sizeof err);
    CHECK(!bad && hit && strstr(err, "missing ')'"));
    /* a third distinct constraint evicts the least recently used ("a+" was used before "(") */
    grammar_t *b = grammar_cache_get(cache, CONSTRAINT_REGEX, "b+", &hit, err, sizeof err);
    CHECK(b && !hit);
    grammar_t *a3 = grammar_cache_get(cache, CONSTRAINT_REGEX, "a+", &hit, err, sizeof err);
    CHECK(a3 && !hit && a3 != a);
    /* the evicted grammar lives on while referenced */
    grammar_matcher_t *m = grammar_matcher_new(a, false);
    grammar_unref(a);
    grammar_unref(a2);
    CHECK(accept_text(m, "aaa") && grammar_matcher_can_end(m));
    grammar_matcher_free(m);
    grammar_unref(a3);
    grammar_unref(b);
    grammar_cache_free(cache);
}

static bool bit(const uint32_t *mask, uint32_t id) { return mask[id / 32] >> (id % 32) & 1; }

static void test_matcher_life(void)
{
    grammar_t *g = compile(CONSTRAINT_REGEX, "ab|abc");
    grammar_matcher_t *m = grammar_matcher_new(g, false);
    uint32_t *mask = xmalloc(grammar_mask_words(vocab) * sizeof *mask);
    CHECK(grammar_matcher_bytes_to_end(m) == 2);
    CHECK(!grammar_matcher_can_end(m) && !grammar_matcher_accept(m, eos_id));
    CHECK(!grammar_matcher_accept(m, 'b') && grammar_matcher_position(m) == 0);
    CHECK(accept_text(m, "ab") && grammar_matcher_can_end(m) && !grammar_matcher_must_end(m));
    grammar_matcher_fill_mask(m, mask);
    CHECK(bit(mask, eos_id) && bit(mask, 'c') && !bit(mask, 'a'));
    CHECK(grammar_matcher_accept(m, 'c') && grammar_matcher_must_end(m) && grammar_matcher_bytes_to_end(m) == 0);
    CHECK(grammar_matcher_accept(m, eos_id) && grammar_matcher_is_finished(m) && grammar_matcher_is_accepting(m));
    grammar_matcher_fill_mask(m, mask);
    bool none = true;
    for (size_t w = 0; w < grammar_mask_words(vocab); w++) none &= !mask[w];
    CHECK(none && !grammar_matcher_accept(m, 'a'));
    CHECK(grammar_matcher_rollback(m, 2) && grammar_matcher_position(m) == 2 && !grammar_matcher_is_finished(m));
    CHECK(grammar_matcher_accept(m, eos_id));
    CHECK(grammar_matcher_rollback(m, 3) && grammar_matcher_position(m) == 0 && grammar_matcher_accept(m, 'a'));
    CHECK(grammar_matcher_accept(m, 256) == false); /* "[[" */
    free(mask);
    grammar_matcher_free(m);
    grammar_unref(g);
}

/* Recursion: depth is only bounded by memory, masks stay exact at depth, rollback unwinds. */
static void test_deep_recursion(void)
{
    grammar_t *g = compile(CONSTRAINT_JSON_SCHEMA, "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}]}");
    grammar_matcher_t *m = grammar_matcher_new(g, false);
    uint32_t *mask = xmalloc(grammar_mask_words(vocab) * sizeof *mask);
    for (int i = 0; i < 5000; i++) CHECK_EQ(grammar_matcher_accept(m, 256), true); /* "[[" */
    grammar_matcher_fill_mask(m, mask);
    CHECK(bit(mask, '[') && bit(mask, ']') && bit(mask, '7') && bit(mask, 256) && !bit(mask, eos_id) && !bit(mask, ','));
    CHECK_EQ(grammar_matcher_bytes_to_end(m), 10000); /* ]]]...] */
    CHECK(grammar_matcher_accept(m, '1'));
    grammar_matcher_fill_mask(m, mask);
    CHECK(bit(mask, ']') && bit(mask, ',') && bit(mask, '2') && !bit(mask, '[') && !bit(mask, eos_id));
    CHECK(grammar_matcher_rollback(m, 4991)); /* '1' and all but ten "[[" */
    for (int i = 0; i < 20; i++) CHECK(grammar_matcher_accept(m, ']'));
    CHECK(grammar_matcher_can_end(m) && grammar_matcher_must_end(m));
    free(mask);
    grammar_matcher_free(m);
    grammar_unref(g);
}

static void refused(constraint_kind_t kind, const char *text, const char *why)
{
    char err[512];
    grammar_t *g = grammar_compile(vocab, kind, text, true, err, sizeof err);
    CHECKF(!g, "'%.60s' should be refused", text);
    if (!g) CHECKF(strstr(err, why) != NULL, "'%.60s': error '%s' should mention '%s'", text, err, why);
    grammar_unref(g);
}

static void test_refusals(void)
{
    /* two recursive alternatives that begin alike: the matcher would need two stacks */
    refused(CONSTRAINT_JSON_SCHEMA,
            "{\"$defs\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/a\"}},\"b\":{\"type\":\"array\",\"items\":"
            "{\"$ref\":\"#/$defs/b\"},\"maxItems\":1}},\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"$ref\":\"#/$defs/b\"}]}",
            "ambiguous");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}",
            "left-recursive");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"hostname\"}", "format 'hostname'");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"enum\":[1,2],\"minimum\":1}", "enum/const together with 'minimum'");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", "allOf combining");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"type\":\"number\",\"exclusiveMinimum\":true}", "draft 4");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"properties\":{\"a\":{\"$id\":\"x\"}}}", "$id");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"x-vendor\":1}", "unknown keyword");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"type\":\"object\",\"required\":[\"a\"],\"additionalProperties\":false}", "not allowed");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"items\":[{}]}", "prefixItems");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":1.5}", "non-negative integer");
    refused(CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":1e98}", "above the limit");
    refused(CONSTRAINT_REGEX, NULL, "without a pattern");
    refused(CONSTRAINT_NONE, "x", "no constraint");
    char *huge = xmalloc(GRAMMAR_MAX_TEXT + 16);
    memset(huge, ' ', GRAMMAR_MAX_TEXT + 8);
    memcpy(huge, "{}", 2);
    huge[GRAMMAR_MAX_TEXT + 8] = 0;
    refused(CONSTRAINT_JSON_SCHEMA, huge, "exceed the limit");
    free(huge);
}

/* Counts past any limit (beyond 2^63 too) are clamped, not refused: every output still validates;
 * a real past 2^63 without a fraction is an integer. */
static void test_huge_counts(void)
{
    static const struct {
        const char *schema, *text;
    } cases[] = {{"{\"type\":\"string\",\"maxLength\":1e98}", "\"abc\""},
                 {"{\"type\":\"array\",\"maxItems\":1e20}", "[1,2]"},
                 {"{\"type\":\"integer\",\"enum\":[1e98,2.5]}", "1e98"} /* an integer past 2^63 */};
    for (size_t i = 0; i < DI_ARRAY_LEN(cases); i++) {
        grammar_t *g = compile(CONSTRAINT_JSON_SCHEMA, cases[i].schema);
        if (g) CHECKF(grammar_match_bytes(g, (const uint8_t *)cases[i].text, strlen(cases[i].text)), "%s", cases[i].schema);
        grammar_unref(g);
    }
}

/* What is accepted where the policy chooses: property order, separators, number spelling. */
static void test_policy(void)
{
    grammar_t *g = compile(CONSTRAINT_JSON_SCHEMA,
                           "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\",\"minimum\":0},\"y\":{\"type\":\"boolean\"}}}");
    static const struct {
        const char *text;
        bool ok;
    } cases[] = {
        {"{}", true}, {"{\"x\":1.5,\"y\":true}", true}, {"{\"x\": 1.5, \"y\": true}", true}, {"{\"y\":true}", true},
        {"{\"y\":true,\"x\":1}", false},   /* declared order only */
        {"{\"x\":1 }", false},             /* one space after ',' and ':' only */
        {"{ \"x\":1}", false}, {"{\"x\":1e2}", false}, /* bounded numbers: plain decimals */
        {"{\"x\":0.123456789012345}", true}, {"{\"x\":0.1234567890123456}", false}, /* at most 15 digits */
        {"{\"z\":1}", false},              /* no undeclared properties */
    };
    for (size_t i = 0; i < DI_ARRAY_LEN(cases); i++)
        CHECKF(grammar_match_bytes(g, (const uint8_t *)cases[i].text, strlen(cases[i].text)) == cases[i].ok, "%s: %d",
               cases[i].text, cases[i].ok);
    grammar_unref(g);
}

int main(void)
{
    vocab = byte_vocab();
    RUN(test_identity);
    RUN(test_cache);
    RUN(test_matcher_life);
    RUN(test_deep_recursion);
    RUN(test_refusals);
    RUN(test_huge_counts);
    RUN(test_policy);
    grammar_vocab_free(vocab);
    return t_finish();
}
