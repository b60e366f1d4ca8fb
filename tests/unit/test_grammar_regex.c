/* The regex engine against PCRE2: for every pattern, whole-string matches of the compiled
 * byte automaton equal PCRE2's full match (UTF, anchored at both ends, $ only at the very
 * end) on every string up to length 3 over the pattern's own characters plus a fixed mix of
 * ASCII and multi-byte characters, and on random longer strings. Then the dialect details
 * PCRE2 cannot judge (schema patterns), and the refusals. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "grammar_internal.h"
#include "testlib.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *PATTERNS[] = {
    "abc", "a|b|c", "a*", "a+b+", "a?b?c?", "(ab)*", "(a|bc)+d", "a{3}", "a{2,4}", "a{2,}", "(a|b){0,3}c",
    "[abc]+", "[^abc]", "[a-c0-2]*", "[^a-c]+", ".", ".*", "a.c", "\\d+", "\\D", "\\w+", "\\W", "\\s", "\\S+",
    "[\\d_]+", "[^\\d]", "[^\\s\\d]+", "[\\W]", "^abc$", "^a|b$", "(^a)|c", "a$|b", "^$", "^", "$", "(?:ab|cd)+",
    "(?<name>x)y", "(?P<n2>x)+", "a*?b", "a+?", "x??y", "a{2,3}?", "\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\",
    "\\x41\\x{42}\\x{10FFFF}", "\\x{e9}+", "[\\x{e9}-\\x{ff}]", "[\\x{2603}\\x{1F600}]", "[\\x{80}-\\x{10FFFF}]",
    "é+☃?", "😀{2}", "[é-ñ]", "[^é]", "[^\\x{0}-\\x{7f}]+", "\\n\\t\\r\\f", "[\\n\\t]+", "a\\-b", "[a\\-z]",
    "[-a]", "[a-]", "[]a]x|y", "{", "a{", "a{x}", "a}", "]", "x{1,2}y{3}", "(a|)+", "(|a)b", "()", "(a*)*",
    "(a|b)*a(a|b)", "[0-9]{4}-[0-9]{2}-[0-9]{2}", "[A-Za-z_][A-Za-z0-9_]*", "(\\+|-)?[0-9]+(\\.[0-9]+)?",
    "[\\s\\S]", "\\Aab\\z", "a\\z|b", "\\x{7f}\\x{80}\\x{7ff}\\x{800}\\x{ffff}\\x{10000}", "[\\x{d7ff}\\x{e000}]",
    "[^\\n]*", "(ab|a)(bc|c)", "(a{1,2}){2}", "a{0}", "a{0,0}b", "(?:a|b|c|d|e){1,4}",
};

/* The fixed characters every pattern is tried on, besides its own. */
static const char *EXTRAS[] = {"a", "b", "c", "0", "9", "_", " ", "\n", "\t", "-", ".", "x", "\xc3\xa9", "\xe2\x98\x83",
                               "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "\x7f", "\xc2\x80", "Z", "\r"};

typedef struct {
    char chars[64][5];
    int n;
} alphabet_t;

static void alpha_add(alphabet_t *a, const char *ch, size_t len)
{
    if (a->n == 64 || len > 4) return;
    for (int i = 0; i < a->n; i++)
        if (strlen(a->chars[i]) == len && !memcmp(a->chars[i], ch, len)) return;
    memcpy(a->chars[a->n], ch, len);
    a->chars[a->n][len] = 0;
    a->n++;
}

static void alphabet_for(const char *pattern, alphabet_t *a)
{
    a->n = 0;
    for (size_t i = 0; i < DI_ARRAY_LEN(EXTRAS); i++) alpha_add(a, EXTRAS[i], strlen(EXTRAS[i]));
    for (const unsigned char *p = (const unsigned char *)pattern; *p;) {
        size_t len = *p < 0x80 ? 1 : *p < 0xE0 ? 2 : *p < 0xF0 ? 3 : 4;
        if (!strchr("\\[](){}|*+?^$.", *p)) alpha_add(a, (const char *)p, len);
        p += len;
    }
}

static dfa_t *compile_ours(const char *pattern, regex_dialect_t dialect, char *err, size_t errlen)
{
    gctx_t c;
    gctx_init(&c, err, errlen);
    ast_t *a = regex_parse(&c, pattern, strlen(pattern), dialect);
    dfa_t *d = a ? dfa_from_ast(&c, a) : NULL;
    gctx_free(&c);
    return d;
}

static pcre2_code *compile_pcre(const char *pattern)
{
    int errcode;
    PCRE2_SIZE off;
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_DOLLAR_ENDONLY, &errcode, &off, cc);
    pcre2_compile_context_free(cc);
    return re;
}

static bool pcre_full(pcre2_code *re, pcre2_match_data *md, const char *s, size_t n)
{
    return pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL) >= 0;
}

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Compares on one subject; returns false (and reports) on a difference. */
static bool same(const char *pattern, const dfa_t *d, pcre2_code *re, pcre2_match_data *md, const char *s, size_t n)
{
    bool ours = dfa_match(d, (const uint8_t *)s, n), theirs = pcre_full(re, md, s, n);
    if (ours == theirs) return true;
    CHECKF(false, "pattern /%s/ on \"%.*s\": ours %d, PCRE2 %d", pattern, (int)n, s, ours, theirs);
    return false;
}

static long compared;

static void test_against_pcre2(void)
{
    for (size_t p = 0; p < DI_ARRAY_LEN(PATTERNS); p++) {
        const char *pat = PATTERNS[p];
        char err[256];
        pcre2_code *re = compile_pcre(pat);
        dfa_t *d = compile_ours(pat, REGEX_PCRE, err, sizeof err);
        if (!re) {
            /* PCRE2 refuses it: so must we */
            CHECKF(d == NULL, "/%s/: PCRE2 refuses it, we compiled it", pat);
            dfa_free(d);
            continue;
        }
        if (!d) {
            /* the dialect refusals are listed in test_refusals; nothing else may fail */
            bool expected = !strcmp(pat, "[]a]x|y");
            CHECKF(expected, "/%s/: we refused it: %s", pat, err);
            pcre2_code_free(re);
            continue;
        }
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        alphabet_t a;
        alphabet_for(pat, &a);
        bool ok = true;
        char s[64];
        /* every string of up to 3 characters */
        for (int len = 0; len <= 3 && ok; len++) {
            long total = 1;
            for (int k = 0; k < len; k++) total *= a.n;
            for (long idx = 0; idx < total && ok; idx++) {
                size_t n = 0;
                long x = idx;
                for (int k = 0; k < len; k++, x /= a.n) {
                    size_t cl = strlen(a.chars[x % a.n]);
                    memcpy(s + n, a.chars[x % a.n], cl);
                    n += cl;
                }
                ok = same(pat, d, re, md, s, n);
                compared++;
            }
        }
        /* and random ones up to 10 characters */
        for (int t = 0; t < 3000 && ok; t++) {
            size_t n = 0;
            int len = (int)rnd(11);
            for (int k = 0; k < len; k++) {
                const char *ch = a.chars[rnd((uint32_t)a.n)];
                memcpy(s + n, ch, strlen(ch));
                n += strlen(ch);
            }
            ok = same(pat, d, re, md, s, n);
            compared++;
        }
        CHECKF(ok, "/%s/ agrees with PCRE2", pat);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        dfa_free(d);
    }
}

static bool matches(const char *pattern, regex_dialect_t dialect, const char *s)
{
    char err[256];
    dfa_t *d = compile_ours(pattern, dialect, err, sizeof err);
    if (!d) {
        CHECKF(false, "/%s/ did not compile: %s", pattern, err);
        return false;
    }
    bool m = dfa_match(d, (const uint8_t *)s, strlen(s));
    dfa_free(d);
    return m;
}

/* What PCRE2 cannot judge: \u escapes, and schema patterns, whose negated classes keep to
 * ASCII and whose dot leaves out every line terminator, so that the same string is accepted
 * by ECMA-262, PCRE2 and Python re alike. */
static void test_dialects(void)
{
    CHECK(matches("\\u00e9\\u2603", REGEX_PCRE, "\xc3\xa9\xe2\x98\x83"));
    CHECK(matches("\\uD83D\\uDE00", REGEX_SCHEMA, "\xf0\x9f\x98\x80"));
    CHECK(matches("[\\u0041-\\u0043]+", REGEX_SCHEMA, "ABCA"));
    CHECK(!matches(".", REGEX_SCHEMA, "\r"));
    CHECK(!matches(".", REGEX_SCHEMA, "\xe2\x80\xa8"));
    CHECK(matches(".", REGEX_PCRE, "\r"));
    CHECK(matches("\\D", REGEX_PCRE, "\xc3\xa9"));
    CHECK(!matches("\\D", REGEX_SCHEMA, "\xd9\xa3")); /* ARABIC-INDIC DIGIT THREE: a digit to Python */
    CHECK(matches("\\D", REGEX_SCHEMA, "x"));
    CHECK(!matches("\\W", REGEX_SCHEMA, "\xc3\xa9"));
    CHECK(!matches("\\S", REGEX_SCHEMA, "\xc2\xa0"));
    CHECK(!matches("[^\\d]", REGEX_SCHEMA, "\xd9\xa3"));
    CHECK(matches("[^a]", REGEX_SCHEMA, "\xd9\xa3")); /* no shorthand: the full complement */
    CHECK(matches("\\v", REGEX_SCHEMA, "\x0b"));
    CHECK(matches("a\\/b", REGEX_SCHEMA, "a/b"));
}

static void refused(const char *pattern, regex_dialect_t dialect, const char *why)
{
    char err[256];
    dfa_t *d = compile_ours(pattern, dialect, err, sizeof err);
    CHECKF(!d, "/%s/ should be refused", pattern);
    if (!d) CHECKF(strstr(err, why) != NULL, "/%s/: error '%s' should mention '%s'", pattern, err, why);
    dfa_free(d);
}

static void test_refusals(void)
{
    refused("(?=a)", REGEX_PCRE, "lookahead");
    refused("(?<=a)b", REGEX_PCRE, "lookbehind");
    refused("(a)\\1", REGEX_PCRE, "backreferences");
    refused("\\bword", REGEX_PCRE, "word boundaries");
    refused("\\p{L}", REGEX_PCRE, "\\p");
    refused("(?i)a", REGEX_PCRE, "inline flags");
    refused("a++", REGEX_PCRE, "possessive");
    refused("a**", REGEX_PCRE, "quantifier cannot follow");
    refused("*a", REGEX_PCRE, "without anything to repeat");
    refused("^*", REGEX_PCRE, "anchor");
    refused("a{,3}", REGEX_PCRE, "{0,n}");
    refused("a{1001}", REGEX_PCRE, "limit");
    refused("a{3,2}", REGEX_PCRE, "n < m");
    refused("(ab", REGEX_PCRE, "missing ')'");
    refused("ab)", REGEX_PCRE, "unmatched ')'");
    refused("[ab", REGEX_PCRE, "unterminated");
    refused("[z-a]", REGEX_PCRE, "out of order");
    refused("[]a]", REGEX_PCRE, "']'");
    refused("[[:alpha:]]", REGEX_PCRE, "POSIX");
    refused("\\ud800", REGEX_SCHEMA, "surrogate");
    refused("\\x{110000}", REGEX_PCRE, "U+10FFFF");
    refused("\\012", REGEX_PCRE, "octal");
    refused("\\v", REGEX_PCRE, "ambiguous");
    refused("\\A", REGEX_SCHEMA, "\\A");
    refused("a\xff", REGEX_PCRE, "UTF-8");
    refused("[\\d-z]", REGEX_PCRE, "class escape");
    /* sizes: long patterns, deep nesting, repetition that multiplies, subset blow-up */
    char *big = xmalloc(GRAMMAR_MAX_PATTERN + 2);
    memset(big, 'a', GRAMMAR_MAX_PATTERN + 1);
    big[GRAMMAR_MAX_PATTERN + 1] = 0;
    refused(big, REGEX_PCRE, "exceeds the limit");
    free(big);
    char deep[400] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "(");
    strcat(deep, "a");
    for (int i = 0; i < 100; i++) strcat(deep, ")");
    refused(deep, REGEX_PCRE, "nest too deeply");
    refused("((a{1000}){1000}){1000}", REGEX_PCRE, "too large");
    refused("(a|b)*a(a|b){40}", REGEX_PCRE, "too large");
    /* 1,000 optional copies make every subset thousands of NFA states: bounded by the work,
     * not by the states (this one took minutes under the sanitizers), while a long counted
     * repetition of the kind schemas make (a string of up to 1,000 characters) still compiles */
    refused("(.?){1000}.{1000}", REGEX_PCRE, "too complex");
    const char *long_string = "([^\"\\\\]|\\\\.){0,1000}";
    char err[256];
    dfa_t *d = compile_ours(long_string, REGEX_PCRE, err, sizeof err);
    CHECKF(d != NULL, "/%s/ should compile: %s", long_string, err);
    dfa_free(d);
}

int main(void)
{
    RUN(test_against_pcre2);
    RUN(test_dialects);
    RUN(test_refusals);
    printf("%ld subjects compared with PCRE2\n", compared);
    return t_finish();
}
