/* The regex front end: a pattern -> expression tree. The dialect is the common core of
 * PCRE2, ECMA-262 and Python re that JSON-schema patterns use: literals, '.', classes with
 * ranges and escapes (\d \w \s \D \W \S, \xHH, \x{H..}, \uHHHH), groups (capturing,
 * non-capturing, named), alternation, ? * + {m} {m,} {m,n} (lazy forms match the same
 * strings), and ^ $ anchors. Constructs whose meaning differs between the dialects, or that
 * a finite automaton cannot express (lookaround, backreferences, word boundaries), are
 * refused with a message naming them. docs/GRAMMAR.md has the details per dialect. */
#include "grammar_internal.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    gctx_t *c;
    const uint8_t *s;
    size_t n, i;
    regex_dialect_t dialect;
    int depth;
} rx_t;

static bool at_end(const rx_t *r) { return r->i >= r->n; }
static int peek(const rx_t *r) { return at_end(r) ? -1 : r->s[r->i]; }

static bool rx_fail(rx_t *r, const char *what)
{
    return g_fail(r->c, "regex: %s at offset %zu", what, r->i);
}

/* One UTF-8 character of the pattern. */
static bool next_cp(rx_t *r, uint32_t *cp)
{
    const uint8_t *p = r->s + r->i;
    size_t len = utf8_sequence_length(p, r->n - r->i);
    if (!len) return rx_fail(r, "invalid UTF-8 in the pattern");
    static const uint8_t lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t v = p[0] & lead_mask[len];
    for (size_t k = 1; k < len; k++) v = v << 6 | (p[k] & 0x3F);
    *cp = v;
    r->i += len;
    return true;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static bool read_hex(rx_t *r, int digits, uint32_t *out)
{
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = hexval(peek(r));
        if (h < 0) return rx_fail(r, "expected a hex digit");
        v = v * 16 + (uint32_t)h;
        r->i++;
    }
    *out = v;
    return true;
}

/* ---- shorthand classes ---------------------------------------------------------------- */

static void add_shorthand(cpset_t *s, int ch)
{
    switch (ch | 0x20) {
    case 'd': cpset_add(s, '0', '9'); break;
    case 'w':
        cpset_add(s, '0', '9');
        cpset_add(s, 'A', 'Z');
        cpset_add(s, 'a', 'z');
        cpset_add(s, '_', '_');
        break;
    case 's':
        cpset_add(s, '\t', '\r'); /* \t \n \v \f \r */
        cpset_add(s, ' ', ' ');
        break;
    }
}

/* \D \W \S: everything else, or in schema patterns only the ASCII rest, which no dialect's
 * Unicode-aware \d \w \s can claim. */
static void shorthand_set(const rx_t *r, int ch, cpset_t *out)
{
    add_shorthand(out, ch);
    if (ch >= 'a') return;
    cpset_negate(out);
    if (r->dialect == REGEX_SCHEMA) cpset_remove(out, 0x80, G_MAX_CP);
}

static bool is_shorthand(int ch) { return ch && strchr("dDwWsS", ch); }

/* ---- escapes -------------------------------------------------------------------------- */

/* A single-character escape after the backslash (shared by classes and the outside).
 * in_class: \b is a backspace there. Returns false on error. */
static bool escape_char(rx_t *r, bool in_class, uint32_t *cp)
{
    int ch = peek(r);
    if (ch < 0) return rx_fail(r, "pattern ends with a backslash");
    r->i++;
    switch (ch) {
    case 'n': *cp = '\n'; return true;
    case 't': *cp = '\t'; return true;
    case 'r': *cp = '\r'; return true;
    case 'f': *cp = '\f'; return true;
    case 'v':
        if (r->dialect == REGEX_PCRE) return rx_fail(r, "\\v (vertical space in PCRE, U+000B elsewhere) is ambiguous; write \\x0b");
        *cp = 0x0B;
        return true;
    case 'b':
        if (in_class) { *cp = 0x08; return true; }
        return rx_fail(r, "word boundaries (\\b) are not supported");
    case '0':
        if (peek(r) >= '0' && peek(r) <= '9') return rx_fail(r, "octal escapes are not supported");
        *cp = 0;
        return true;
    case 'x':
        if (peek(r) == '{') {
            r->i++;
            uint32_t v = 0;
            int digits = 0;
            while (hexval(peek(r)) >= 0) {
                if (++digits > 6) return rx_fail(r, "\\x{...} has too many digits");
                v = v * 16 + (uint32_t)hexval(peek(r));
                r->i++;
            }
            if (!digits || peek(r) != '}') return rx_fail(r, "malformed \\x{...}");
            r->i++;
            *cp = v;
        } else if (!read_hex(r, 2, cp)) {
            return false;
        }
        break;
    case 'u': {
        if (!read_hex(r, 4, cp)) return false;
        /* \uD83D\uDE00: a surrogate pair spelled as two escapes is one code point */
        if (*cp >= 0xD800 && *cp <= 0xDBFF && r->i + 6 <= r->n && r->s[r->i] == '\\' && r->s[r->i + 1] == 'u') {
            uint32_t lo = 0;
            bool ok = true;
            for (int k = 0; k < 4 && ok; k++) {
                int h = hexval(r->s[r->i + 2 + (size_t)k]);
                ok = h >= 0;
                lo = lo * 16 + (uint32_t)(ok ? h : 0);
            }
            if (ok && lo >= 0xDC00 && lo <= 0xDFFF) {
                *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
                r->i += 6;
                return true;
            }
        }
        break;
    }
    default:
        if (ch >= '1' && ch <= '9') return rx_fail(r, "backreferences are not supported");
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
            char what[64];
            snprintf(what, sizeof what, "the escape \\%c is not supported", ch);
            return rx_fail(r, what);
        }
        if (ch >= 0x80) {
            r->i--;
            return next_cp(r, cp);
        }
        *cp = (uint32_t)ch; /* escaped punctuation stands for itself */
        return true;
    }
    if (*cp > G_MAX_CP) return rx_fail(r, "code point beyond U+10FFFF");
    if (*cp >= 0xD800 && *cp <= 0xDFFF) return rx_fail(r, "a lone surrogate cannot be matched in UTF-8");
    return true;
}

/* ---- classes -------------------------------------------------------------------------- */

/* One class member: a shorthand set, or a character (possibly a range start). */
static bool class_atom(rx_t *r, cpset_t *set, bool *shorthand, bool *is_char, uint32_t *cp)
{
    *is_char = false;
    if (peek(r) == '\\') {
        r->i++;
        int ch = peek(r);
        if (is_shorthand(ch)) {
            r->i++;
            cpset_t t = {0};
            shorthand_set(r, ch, &t);
            cpset_add_set(set, &t);
            cpset_free(&t);
            *shorthand = true;
            return true;
        }
        *is_char = true;
        return escape_char(r, true, cp);
    }
    if (peek(r) == '[' && r->i + 1 < r->n && (r->s[r->i + 1] == ':' || r->s[r->i + 1] == '=' || r->s[r->i + 1] == '.'))
        return rx_fail(r, "POSIX classes ([:name:]) are not supported");
    *is_char = true;
    return next_cp(r, cp);
}

static ast_t *parse_class(rx_t *r)
{
    r->i++; /* '[' */
    bool negate = false, shorthand = false;
    if (peek(r) == '^') {
        negate = true;
        r->i++;
    }
    if (peek(r) == ']') {
        rx_fail(r, "']' right after '[' means different things in different dialects; escape it");
        return NULL;
    }
    cpset_t set = {0};
    for (;;) {
        if (at_end(r)) {
            rx_fail(r, "unterminated character class");
            break;
        }
        if (peek(r) == ']') {
            r->i++;
            break;
        }
        bool is_char;
        uint32_t lo;
        if (!class_atom(r, &set, &shorthand, &is_char, &lo)) break;
        if (!is_char) {
            if (peek(r) == '-' && r->i + 1 < r->n && r->s[r->i + 1] != ']') {
                rx_fail(r, "a range cannot start at a class escape");
                break;
            }
            continue;
        }
        if (peek(r) == '-' && r->i + 1 < r->n && r->s[r->i + 1] != ']') {
            r->i++;
            bool hi_char;
            uint32_t hi;
            cpset_t dummy = {0};
            bool ok = class_atom(r, &dummy, &shorthand, &hi_char, &hi);
            cpset_free(&dummy);
            if (!ok) break;
            if (!hi_char) {
                rx_fail(r, "a range cannot end at a class escape");
                break;
            }
            if (hi < lo) {
                rx_fail(r, "range out of order in character class");
                break;
            }
            cpset_add(&set, lo, hi);
        } else {
            cpset_add(&set, lo, lo);
        }
    }
    if (r->c->failed) {
        cpset_free(&set);
        return NULL;
    }
    if (negate) {
        cpset_negate(&set);
        if (shorthand && r->dialect == REGEX_SCHEMA) cpset_remove(&set, 0x80, G_MAX_CP);
    }
    cpset_remove(&set, 0xD800, 0xDFFF);
    ast_t *a = ast_class(r->c, &set);
    cpset_free(&set);
    return a;
}

/* ---- the recursive descent ------------------------------------------------------------- */

static ast_t *parse_alt(rx_t *r);

static bool is_name_char(int ch, bool digits_ok)
{
    return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (digits_ok && ch >= '0' && ch <= '9');
}

static ast_t *parse_group(rx_t *r)
{
    r->i++; /* '(' */
    if (peek(r) == '?') {
        r->i++;
        int ch = peek(r);
        if (ch == ':') {
            r->i++;
        } else if (ch == '=' || ch == '!') {
            rx_fail(r, "lookahead is not supported");
            return NULL;
        } else if (ch == '<' || ch == 'P') {
            if (ch == 'P') r->i++;
            if (peek(r) != '<') {
                rx_fail(r, "unsupported group syntax");
                return NULL;
            }
            r->i++;
            if (peek(r) == '=' || peek(r) == '!') {
                rx_fail(r, "lookbehind is not supported");
                return NULL;
            }
            size_t start = r->i;
            while (!at_end(r) && is_name_char(peek(r), r->i > start)) r->i++;
            if (r->i == start || peek(r) != '>') {
                rx_fail(r, "malformed group name");
                return NULL;
            }
            r->i++;
        } else {
            rx_fail(r, "inline flags and special groups are not supported");
            return NULL;
        }
    }
    if (++r->depth > GRAMMAR_MAX_NESTING) {
        rx_fail(r, "groups nest too deeply");
        return NULL;
    }
    ast_t *inner = parse_alt(r);
    r->depth--;
    if (!inner) return NULL;
    if (peek(r) != ')') {
        rx_fail(r, "missing ')'");
        return NULL;
    }
    r->i++;
    return inner;
}

static ast_t *parse_atom(rx_t *r)
{
    int ch = peek(r);
    switch (ch) {
    case '(': return parse_group(r);
    case '[': return parse_class(r);
    case '.': {
        r->i++;
        cpset_t s = {0};
        cpset_add(&s, '\n', '\n');
        if (r->dialect == REGEX_SCHEMA) {
            cpset_add(&s, '\r', '\r');
            cpset_add(&s, 0x2028, 0x2029);
        }
        cpset_negate(&s);
        cpset_remove(&s, 0xD800, 0xDFFF);
        ast_t *a = ast_class(r->c, &s);
        cpset_free(&s);
        return a;
    }
    case '^': r->i++; return ast_new(r->c, AST_BEGIN);
    case '$': r->i++; return ast_new(r->c, AST_END);
    case '*': case '+': case '?':
        rx_fail(r, "quantifier without anything to repeat");
        return NULL;
    case '\\': {
        r->i++;
        int e = peek(r);
        if (is_shorthand(e)) {
            r->i++;
            cpset_t s = {0};
            shorthand_set(r, e, &s);
            ast_t *a = ast_class(r->c, &s);
            cpset_free(&s);
            return a;
        }
        if (r->dialect == REGEX_PCRE && (e == 'A' || e == 'z')) {
            r->i++;
            return ast_new(r->c, e == 'A' ? AST_BEGIN : AST_END);
        }
        uint32_t cp;
        if (!escape_char(r, false, &cp)) return NULL;
        return ast_range(r->c, cp, cp);
    }
    default: {
        uint32_t cp;
        if (!next_cp(r, &cp)) return NULL;
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            rx_fail(r, "surrogate code point");
            return NULL;
        }
        return ast_range(r->c, cp, cp);
    }
    }
}

static bool read_count(rx_t *r, uint32_t *v)
{
    uint64_t x = 0;
    size_t start = r->i;
    while (peek(r) >= '0' && peek(r) <= '9') {
        x = x * 10 + (uint64_t)(peek(r) - '0');
        if (x > 1000000) x = 1000000;
        r->i++;
    }
    *v = (uint32_t)x;
    return r->i > start;
}

/* {m}, {m,}, {m,n} at r->i: true with the bounds, or false (not a quantifier: a literal
 * brace) with r->i unchanged. */
static bool brace_quantifier(rx_t *r, uint32_t *min, uint32_t *max)
{
    size_t save = r->i;
    r->i++;
    if (peek(r) == ',') {
        rx_fail(r, "'{,n}' is a quantifier in some dialects and a literal in others; write {0,n}");
        return false;
    }
    if (!read_count(r, min)) goto literal;
    *max = *min;
    if (peek(r) == ',') {
        r->i++;
        *max = G_INF;
        if (peek(r) != '}' && !read_count(r, max)) goto literal;
    }
    if (peek(r) != '}') goto literal;
    r->i++;
    return true;
literal:
    r->i = save;
    return false;
}

static ast_t *parse_quantified(rx_t *r)
{
    ast_t *a = parse_atom(r);
    if (!a) return NULL;
    uint32_t min, max;
    int ch = peek(r);
    if (ch == '*') min = 0, max = G_INF, r->i++;
    else if (ch == '+') min = 1, max = G_INF, r->i++;
    else if (ch == '?') min = 0, max = 1, r->i++;
    else if (ch == '{' && brace_quantifier(r, &min, &max)) {
    } else {
        return r->c->failed ? NULL : a;
    }
    if (a->kind == AST_BEGIN || a->kind == AST_END) {
        rx_fail(r, "quantifier on an anchor");
        return NULL;
    }
    if ((max != G_INF && max > GRAMMAR_MAX_REPEAT) || min > GRAMMAR_MAX_REPEAT) {
        g_fail(r->c, "regex: repetition count above the limit of %d at offset %zu", GRAMMAR_MAX_REPEAT, r->i);
        return NULL;
    }
    if (max < min) {
        rx_fail(r, "repetition {m,n} with n < m");
        return NULL;
    }
    if (peek(r) == '?') r->i++; /* lazy: same language */
    else if (peek(r) == '+') {
        rx_fail(r, "possessive quantifiers are not supported");
        return NULL;
    }
    ch = peek(r);
    if (ch == '*' || ch == '+' || ch == '?' || (ch == '{' && r->i + 1 < r->n && r->s[r->i + 1] >= '0' && r->s[r->i + 1] <= '9')) {
        rx_fail(r, "a quantifier cannot follow a quantifier; use a group");
        return NULL;
    }
    return ast_repeat(r->c, a, min, max);
}

static ast_t *parse_concat(rx_t *r)
{
    astv_t items = {0};
    while (!at_end(r) && peek(r) != '|' && peek(r) != ')') {
        ast_t *a = parse_quantified(r);
        if (!a) {
            astv_free(&items);
            return NULL;
        }
        astv_push(&items, a);
    }
    ast_t *a = ast_concat(r->c, items.v, items.n);
    astv_free(&items);
    return a;
}

static ast_t *parse_alt(rx_t *r)
{
    astv_t alts = {0};
    for (;;) {
        ast_t *a = parse_concat(r);
        if (!a) {
            astv_free(&alts);
            return NULL;
        }
        astv_push(&alts, a);
        if (peek(r) != '|') break;
        r->i++;
    }
    ast_t *a = ast_alt(r->c, alts.v, alts.n);
    astv_free(&alts);
    return a;
}

ast_t *regex_parse(gctx_t *c, const char *pattern, size_t len, regex_dialect_t dialect)
{
    if (len > GRAMMAR_MAX_PATTERN) {
        g_fail(c, "regex: pattern of %zu bytes exceeds the limit of %d", len, GRAMMAR_MAX_PATTERN);
        return NULL;
    }
    rx_t r = {c, (const uint8_t *)pattern, len, 0, dialect, 0};
    ast_t *a = parse_alt(&r);
    if (a && !at_end(&r)) {
        rx_fail(&r, "unmatched ')'");
        return NULL;
    }
    return a;
}
