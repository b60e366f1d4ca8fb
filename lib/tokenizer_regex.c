/* HF's split regexes in PCRE2. HF runs them with Oniguruma (Ruby syntax); most of that syntax
 * means the same in PCRE2, and the parts that do not are translated here:
 *   \p{X}, \P{X}, \p{^X}  widened by the code points Oniguruma's newer Unicode puts in X
 *   \s, \S                Oniguruma's White_Space set (PCRE2's differs: U+180E)
 *   \d, \D                \p{Nd}, widened likewise
 *   \v                    a vertical tab (PCRE2: any vertical space)
 *   {,n}                  {0,n} (PCRE2: literal text)
 *   ^ $                   line anchors, as in Ruby (PCRE2_MULTILINE, newline LF)
 * Constructs whose meaning differs and are not translated (\h, \w, \b, POSIX brackets,
 * nested classes, inline options, ...) are refused with a message naming them. */
#include "tokenizer_internal.h"
#include "tokenizer_unicode.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *p, *end;
    bool in_class;
    buf_t out;
    char *err;
    size_t errlen;
} translator_t;

static bool fail(translator_t *tr, const char *fmt, const char *what)
{
    snprintf(tr->err, tr->errlen, fmt, what);
    return false;
}

static void put_ranges(buf_t *b, const tok_range_t *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (r[i].lo == r[i].hi) buf_printf(b, "\\x{%x}", r[i].lo);
        else buf_printf(b, "\\x{%x}-\\x{%x}", r[i].lo, r[i].hi);
    }
}

/* A set given as ranges: inside a class its items, outside a class of its own. */
static bool put_set(translator_t *tr, const char *pcre_item, const tok_range_t *r, size_t n, bool negated,
                    const char *name)
{
    if (negated && tr->in_class) return fail(tr, "regex: negated \\%s inside a character class is not supported", name);
    if (!tr->in_class) buf_puts(&tr->out, negated ? "[^" : "[");
    if (pcre_item) buf_puts(&tr->out, pcre_item);
    put_ranges(&tr->out, r, n);
    if (!tr->in_class) buf_putc(&tr->out, ']');
    return true;
}

static bool put_category(translator_t *tr, const char *name, size_t len, bool negated)
{
    for (size_t i = 0; i < tok_category_count; i++) {
        const tok_category_t *c = &tok_categories[i];
        if (strlen(c->name) != len || memcmp(c->name, name, len)) continue;
        if (!c->count) {
            buf_printf(&tr->out, "\\%c{%s}", negated ? 'P' : 'p', c->name);
            return true;
        }
        char item[16];
        snprintf(item, sizeof item, "\\p{%s}", c->name);
        return put_set(tr, item, c->extra, c->count, negated, "p{..} with extra code points");
    }
    char shown[32];
    snprintf(shown, sizeof shown, "%.*s", (int)(len < 20 ? len : 20), name);
    return fail(tr, "regex: unicode property \\p{%s} is not supported (only general categories)", shown);
}

/* \p{X}, \P{X}, \p{^X}: tr->p is just past the 'p' or 'P'. */
static bool translate_property(translator_t *tr, bool negated)
{
    if (tr->p >= tr->end || *tr->p != '{') return fail(tr, "regex: %s", "\\p without {name}");
    const char *name = tr->p + 1, *close = memchr(name, '}', (size_t)(tr->end - name));
    if (!close) return fail(tr, "regex: %s", "unterminated \\p{");
    tr->p = close + 1;
    if (name < close && *name == '^') {
        negated = !negated;
        name++;
    }
    return put_category(tr, name, (size_t)(close - name), negated);
}

/* tr->p is just past the backslash. */
static bool translate_escape(translator_t *tr)
{
    if (tr->p >= tr->end) return fail(tr, "regex: %s", "pattern ends with a backslash");
    char c = *tr->p++;
    switch (c) {
    case 's': return put_set(tr, NULL, tok_space, tok_space_count, false, "s");
    case 'S': return put_set(tr, NULL, tok_space, tok_space_count, true, "S");
    case 'd': return put_category(tr, "Nd", 2, false);
    case 'D': return put_category(tr, "Nd", 2, true);
    case 'p': return translate_property(tr, false);
    case 'P': return translate_property(tr, true);
    case 'v': buf_puts(&tr->out, "\\x{0b}"); return true;
    /* Plain escapes with one meaning in both dialects. */
    case 't': case 'n': case 'r': case 'f': case 'a': case 'e': case 'x':
    case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9':
        buf_putc(&tr->out, '\\');
        buf_putc(&tr->out, (uint8_t)c);
        return true;
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            char what[3] = {'\\', c, 0};
            return fail(tr, "regex: the escape %s is not supported (its meaning differs between Oniguruma and PCRE2)", what);
        }
        buf_putc(&tr->out, '\\'); /* an escaped punctuation or non-ASCII character: itself */
        buf_putc(&tr->out, (uint8_t)c);
        return true;
    }
}

/* "(?" groups: only those with one meaning in both dialects (no inline options). */
static bool translate_group(translator_t *tr)
{
    const char *q = tr->p + 2;
    bool ok = q < tr->end && (*q == ':' || *q == '=' || *q == '!' || *q == '>' || *q == '<');
    if (ok && *q == '<') ok = q + 1 < tr->end && q[1] != '>';
    if (!ok) return fail(tr, "regex: %s", "this (? group kind is not supported (inline options, comments, conditionals)");
    buf_append(&tr->out, tr->p, 2);
    tr->p += 2;
    return true;
}

static bool translate(translator_t *tr)
{
    while (tr->p < tr->end) {
        char c = *tr->p;
        if (c == '\\') {
            tr->p++;
            if (!translate_escape(tr)) return false;
        } else if (tr->in_class) {
            if (c == '[') return fail(tr, "regex: %s", "nested character classes and POSIX brackets are not supported");
            if (c == '&' && tr->p + 1 < tr->end && tr->p[1] == '&') return fail(tr, "regex: %s", "class intersection && is not supported");
            if (c == ']') tr->in_class = false;
            buf_putc(&tr->out, (uint8_t)*tr->p++);
        } else if (c == '[') {
            tr->in_class = true;
            buf_putc(&tr->out, (uint8_t)*tr->p++);
            if (tr->p < tr->end && *tr->p == '^') buf_putc(&tr->out, (uint8_t)*tr->p++);
            if (tr->p < tr->end && *tr->p == ']') return fail(tr, "regex: %s", "a class starting with ] is not supported");
        } else if (c == '(' && tr->p + 1 < tr->end && tr->p[1] == '?') {
            if (!translate_group(tr)) return false;
        } else if (c == '{' && tr->p + 2 < tr->end && tr->p[1] == ',' && tr->p[2] >= '0' && tr->p[2] <= '9') {
            buf_puts(&tr->out, "{0"); /* Ruby's {,n} is {0,n} */
            tr->p++;
        } else {
            buf_putc(&tr->out, (uint8_t)*tr->p++);
        }
    }
    if (tr->in_class) return fail(tr, "regex: %s", "unterminated character class");
    return true;
}

static pcre2_code *compile_pcre2(const char *pattern, size_t len, const char *shown, char *err, size_t errlen)
{
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    if (!cc) die("out of memory creating a PCRE2 context");
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &code, &at, cc);
    pcre2_compile_context_free(cc);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, errlen, "regex %.80s: %s at offset %zu", shown, (const char *)msg, (size_t)at);
        return NULL;
    }
    /* An empty match would need HF's rules for stepping past it; none of the V4 splits can
     * match empty, so such patterns are refused rather than approximated. */
    uint32_t minlen = 0;
    pcre2_pattern_info(re, PCRE2_INFO_MINLENGTH, &minlen);
    if (minlen == 0) {
        snprintf(err, errlen, "regex %.80s: patterns that can match the empty string are not supported", shown);
        pcre2_code_free(re);
        return NULL;
    }
    /* Without JIT PCRE2 still matches correctly, only slower. */
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

pcre2_code *tok_regex_compile(const char *pattern, size_t len, char *err, size_t errlen)
{
    translator_t tr = {.p = pattern, .end = pattern + len, .err = err, .errlen = errlen};
    pcre2_code *re = NULL;
    if (translate(&tr)) {
        const char *translated = buf_cstr(&tr.out);
        re = compile_pcre2(translated, tr.out.len, translated, err, errlen);
    }
    buf_free(&tr.out);
    return re;
}

pcre2_code *tok_literal_compile(const char *text, size_t len, char *err, size_t errlen)
{
    buf_t b = {0};
    buf_puts(&b, "\\Q");
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\\' && i + 1 < len && text[i + 1] == 'E') buf_puts(&b, "\\E\\\\\\Q"); /* "\E" inside \Q..\E */
        else buf_putc(&b, (uint8_t)text[i]);
    }
    buf_puts(&b, "\\E");
    const char *quoted = buf_cstr(&b);
    pcre2_code *re = compile_pcre2(quoted, b.len, quoted, err, errlen);
    buf_free(&b);
    return re;
}
