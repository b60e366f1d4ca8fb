/* The grammar compiler's working memory and vocabulary: compile context with an arena and
 * a first-error message, code point sets with their UTF-8 byte-range expansion, and the
 * expression tree constructors. */
#include "grammar_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct g_block {
    g_block_t *next;
    size_t used, cap;
    max_align_t data[];
};

void gctx_init(gctx_t *c, char *err, size_t errlen)
{
    *c = (gctx_t){.err = err, .errlen = errlen};
    if (errlen) err[0] = 0;
}

void g_own_dfa(gctx_t *c, dfa_t *d)
{
    if (c->n_owned == c->cap_owned) {
        c->cap_owned = c->cap_owned ? 2 * c->cap_owned : 8;
        c->owned = xrealloc(c->owned, c->cap_owned * sizeof *c->owned);
    }
    c->owned[c->n_owned++] = d;
}

void gctx_free(gctx_t *c)
{
    for (uint32_t i = 0; i < c->n_owned; i++) dfa_free(c->owned[i]);
    free(c->owned);
    c->owned = NULL;
    c->n_owned = 0;
    for (g_block_t *b = c->blocks, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    c->blocks = NULL;
}

bool g_fail(gctx_t *c, const char *fmt, ...)
{
    if (c->failed) return false;
    c->failed = true;
    if (c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return false;
}

void *g_alloc(gctx_t *c, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    g_block_t *b = c->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (64u << 10) ? n : (64u << 10);
        b = xmalloc(sizeof *b + cap);
        b->used = 0;
        b->cap = cap;
        b->next = c->blocks;
        c->blocks = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

/* ---- code point sets ------------------------------------------------------------------ */

void cpset_add(cpset_t *s, uint32_t lo, uint32_t hi)
{
    if (lo > hi) return;
    /* Insert, then merge overlapping or adjacent neighbours. */
    uint32_t i = 0;
    while (i < s->n && s->r[i].hi + 1 < lo) i++;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->r = xrealloc(s->r, s->cap * sizeof *s->r);
    }
    memmove(s->r + i + 1, s->r + i, (s->n - i) * sizeof *s->r);
    s->r[i] = (cp_range_t){lo, hi};
    s->n++;
    uint32_t j = i + 1;
    while (j < s->n && s->r[j].lo <= s->r[i].hi + 1) {
        if (s->r[j].lo < s->r[i].lo) s->r[i].lo = s->r[j].lo;
        if (s->r[j].hi > s->r[i].hi) s->r[i].hi = s->r[j].hi;
        j++;
    }
    memmove(s->r + i + 1, s->r + j, (s->n - j) * sizeof *s->r);
    s->n -= j - i - 1;
}

void cpset_add_set(cpset_t *s, const cpset_t *t)
{
    for (uint32_t i = 0; i < t->n; i++) cpset_add(s, t->r[i].lo, t->r[i].hi);
}

void cpset_negate(cpset_t *s)
{
    cpset_t out = {0};
    uint32_t next = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next) cpset_add(&out, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= G_MAX_CP) cpset_add(&out, next, G_MAX_CP);
    free(s->r);
    *s = out;
}

void cpset_remove(cpset_t *s, uint32_t lo, uint32_t hi)
{
    cpset_t out = {0};
    for (uint32_t i = 0; i < s->n; i++) {
        cp_range_t r = s->r[i];
        if (r.hi < lo || r.lo > hi) {
            cpset_add(&out, r.lo, r.hi);
            continue;
        }
        if (r.lo < lo) cpset_add(&out, r.lo, lo - 1);
        if (r.hi > hi) cpset_add(&out, hi + 1, r.hi);
    }
    free(s->r);
    *s = out;
}

void cpset_free(cpset_t *s)
{
    free(s->r);
    *s = (cpset_t){0};
}

int utf8_encode_cp(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* A range whose ends encode to the same length splits into pieces where every byte
 * position is a plain byte range: cut where the trailing 6k bits stop being "full". */
static void utf8_split(uint32_t lo, uint32_t hi, utf8_seq_fn fn, void *ctx)
{
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && bounds[i] < hi) {
            utf8_split(lo, bounds[i], fn, ctx);
            utf8_split(bounds[i] + 1, hi, fn, ctx);
            return;
        }
    uint8_t a[4], b[4];
    int n = utf8_encode_cp(lo, a);
    for (int k = 1; k < n; k++) {
        uint32_t m = (1u << (6 * k)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                utf8_split(lo, lo | m, fn, ctx);
                utf8_split((lo | m) + 1, hi, fn, ctx);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(lo, (hi & ~m) - 1, fn, ctx);
                utf8_split(hi & ~m, hi, fn, ctx);
                return;
            }
        }
    }
    utf8_encode_cp(hi, b);
    fn(ctx, a, b, n);
}

void utf8_sequences(uint32_t lo, uint32_t hi, utf8_seq_fn fn, void *ctx)
{
    if (hi > G_MAX_CP) hi = G_MAX_CP;
    if (lo > hi) return;
    if (lo < 0xD800 && hi >= 0xD800) {
        utf8_sequences(lo, 0xD7FF, fn, ctx);
        utf8_sequences(0xE000, hi, fn, ctx);
        return;
    }
    if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
    if (lo > hi) return;
    utf8_split(lo, hi, fn, ctx);
}

/* ---- trees ----------------------------------------------------------------------------- */

ast_t *ast_new(gctx_t *c, ast_kind_t kind)
{
    ast_t *a = g_alloc(c, sizeof *a);
    a->kind = kind;
    return a;
}

ast_t *ast_empty(gctx_t *c) { return ast_new(c, AST_EMPTY); }
ast_t *ast_fail(gctx_t *c) { return ast_new(c, AST_FAIL); }

ast_t *ast_bytes(gctx_t *c, const void *p, size_t n)
{
    if (!n) return ast_empty(c);
    ast_t *a = ast_new(c, AST_BYTES);
    a->bytes = g_alloc(c, n);
    memcpy(a->bytes, p, n);
    a->n = (uint32_t)n;
    return a;
}

ast_t *ast_str(gctx_t *c, const char *s) { return ast_bytes(c, s, strlen(s)); }

ast_t *ast_class(gctx_t *c, const cpset_t *set)
{
    if (!set->n) return ast_fail(c);
    ast_t *a = ast_new(c, AST_CLASS);
    a->ranges = g_alloc(c, set->n * sizeof *a->ranges);
    memcpy(a->ranges, set->r, set->n * sizeof *a->ranges);
    a->n = set->n;
    return a;
}

ast_t *ast_range(gctx_t *c, uint32_t lo, uint32_t hi)
{
    cpset_t s = {0};
    cpset_add(&s, lo, hi);
    ast_t *a = ast_class(c, &s);
    cpset_free(&s);
    return a;
}

static ast_t *ast_list_node(gctx_t *c, ast_kind_t kind, ast_t **kids, uint32_t n)
{
    ast_t *a = ast_new(c, kind);
    a->kids = g_alloc(c, (n ? n : 1) * sizeof *kids);
    memcpy(a->kids, kids, n * sizeof *kids);
    a->n = n;
    return a;
}

ast_t *ast_concat(gctx_t *c, ast_t **kids, uint32_t n)
{
    if (n == 0) return ast_empty(c);
    if (n == 1) return kids[0];
    return ast_list_node(c, AST_CONCAT, kids, n);
}

ast_t *ast_alt(gctx_t *c, ast_t **kids, uint32_t n)
{
    if (n == 0) return ast_fail(c);
    if (n == 1) return kids[0];
    return ast_list_node(c, AST_ALT, kids, n);
}

ast_t *ast_seq2(gctx_t *c, ast_t *a, ast_t *b) { return ast_concat(c, (ast_t *[]){a, b}, 2); }
ast_t *ast_seq3(gctx_t *c, ast_t *a, ast_t *b, ast_t *d) { return ast_concat(c, (ast_t *[]){a, b, d}, 3); }
ast_t *ast_or2(gctx_t *c, ast_t *a, ast_t *b) { return ast_alt(c, (ast_t *[]){a, b}, 2); }

ast_t *ast_repeat(gctx_t *c, ast_t *kid, uint32_t min, uint32_t max)
{
    ast_t *a = ast_list_node(c, AST_REPEAT, &kid, 1);
    a->min = min;
    a->max = max;
    return a;
}

ast_t *ast_opt(gctx_t *c, ast_t *kid) { return ast_repeat(c, kid, 0, 1); }

ast_t *ast_call(gctx_t *c, uint32_t rule)
{
    ast_t *a = ast_new(c, AST_CALL);
    a->min = rule;
    return a;
}

ast_t *ast_dfa(gctx_t *c, const dfa_t *d, bool json_escape)
{
    ast_t *a = ast_new(c, AST_DFA);
    a->dfa = d;
    a->json_escape = json_escape;
    return a;
}

void astv_push(astv_t *a, ast_t *x)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 8;
        a->v = xrealloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = x;
}

void astv_free(astv_t *a)
{
    free(a->v);
    *a = (astv_t){0};
}
