/* Expression tree -> Thompson NFA over bytes. Code point classes become UTF-8 byte-range
 * paths, counted repetition becomes copies, embedded DFAs are copied in (with JSON string
 * escaping applied on the way when asked). The number of states is bounded. */
#include "grammar_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    gctx_t *c;
    nfa_t *n;
} nb_t;

static uint32_t new_state(nb_t *b)
{
    if (b->n->n_states >= GRAMMAR_MAX_NFA) {
        g_fail(b->c, "the automaton is too large (more than %d NFA states; lower repetition counts or lengths)",
               GRAMMAR_MAX_NFA);
        return 0;
    }
    return b->n->n_states++;
}

static void edge(nb_t *b, uint32_t from, uint32_t to, nfa_edge_kind_t kind, uint8_t lo, uint8_t hi, uint32_t rule)
{
    nfa_t *n = b->n;
    if (n->n_edges == n->cap) {
        n->cap = n->cap ? 2 * n->cap : 256;
        n->e = xrealloc(n->e, n->cap * sizeof *n->e);
    }
    n->e[n->n_edges++] = (nfa_edge_t){from, to, rule, (uint8_t)kind, lo, hi};
}

static void eps(nb_t *b, uint32_t from, uint32_t to) { edge(b, from, to, NE_EPS, 0, 0, 0); }
static void byte_edge(nb_t *b, uint32_t from, uint32_t to, uint8_t lo, uint8_t hi) { edge(b, from, to, NE_BYTES, lo, hi, 0); }

static void build(nb_t *b, const ast_t *a, uint32_t from, uint32_t to);

typedef struct {
    nb_t *b;
    uint32_t from, to;
} seq_ctx_t;

static void class_seq(void *ctx, const uint8_t *lo, const uint8_t *hi, int n)
{
    seq_ctx_t *s = ctx;
    uint32_t cur = s->from;
    for (int k = 0; k < n; k++) {
        uint32_t nx = k == n - 1 ? s->to : new_state(s->b);
        byte_edge(s->b, cur, nx, lo[k], hi[k]);
        cur = nx;
    }
}

/* The JSON spelling of a byte that cannot appear raw in a string: \" \\ \b \f \n \r \t or
 * \u00xx (lower-case hex). */
static const char *escape_of(uint8_t x, char buf[8])
{
    switch (x) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    }
    static const char hex[] = "0123456789abcdef";
    memcpy(buf, "\\u00", 4);
    buf[4] = hex[x >> 4];
    buf[5] = hex[x & 15];
    buf[6] = 0;
    return buf;
}

static bool needs_escape(uint8_t x) { return x < 0x20 || x == '"' || x == '\\'; }

static void build_dfa(nb_t *b, const ast_t *a, uint32_t from, uint32_t to)
{
    const dfa_t *d = a->dfa;
    uint32_t *map = xmalloc(d->n_states * sizeof *map);
    for (uint32_t s = 0; s < d->n_states && !b->c->failed; s++) map[s] = new_state(b);
    if (b->c->failed) {
        free(map);
        return;
    }
    eps(b, from, map[d->start]);
    for (uint32_t s = 0; s < d->n_states && !b->c->failed; s++) {
        if (d->accept[s]) eps(b, map[s], to);
        const uint32_t *row = d->next + (size_t)s * d->n_classes;
        for (int lo = 0; lo < 256;) {
            uint32_t t = row[d->class_of[lo]];
            if (a->json_escape && needs_escape((uint8_t)lo)) {
                if (t != G_NONE) {
                    char buf[8];
                    const char *e = escape_of((uint8_t)lo, buf);
                    uint32_t cur = map[s];
                    for (size_t k = 0; e[k]; k++) {
                        uint32_t nx = e[k + 1] ? new_state(b) : map[t];
                        byte_edge(b, cur, nx, (uint8_t)e[k], (uint8_t)e[k]);
                        cur = nx;
                    }
                }
                lo++;
                continue;
            }
            int hi = lo;
            while (hi + 1 < 256 && row[d->class_of[hi + 1]] == t && !(a->json_escape && needs_escape((uint8_t)(hi + 1))))
                hi++;
            if (t != G_NONE) byte_edge(b, map[s], map[t], (uint8_t)lo, (uint8_t)hi);
            lo = hi + 1;
        }
    }
    free(map);
}

/* Separated list with optional items: junction states (before item i, nothing written yet
 * or something written), so n optional items cost O(n), not 2^n. */
static void build_list(nb_t *b, const ast_t *a, uint32_t from, uint32_t to)
{
    uint32_t n = a->n;
    const ast_t *sep = a->kids[n], *rest = a->kids[n + 1];
    /* empty: nothing written yet; some: something written (G_NONE when impossible) */
    uint32_t empty = from, some = G_NONE;
    for (uint32_t i = 0; i < n && !b->c->failed; i++) {
        uint32_t ns = new_state(b);
        if (empty != G_NONE) build(b, a->kids[i], empty, ns);
        if (some != G_NONE) {
            uint32_t mid = new_state(b);
            build(b, sep, some, mid);
            build(b, a->kids[i], mid, ns);
            if (!a->required[i]) eps(b, some, ns);
        }
        if (a->required[i]) empty = G_NONE;
        some = ns;
    }
    if (b->c->failed) return;
    if (rest) {
        uint32_t loop = some != G_NONE ? some : new_state(b);
        uint32_t mid = new_state(b);
        if (empty != G_NONE) build(b, rest, empty, loop);
        build(b, sep, loop, mid);
        build(b, rest, mid, loop);
        some = loop;
    }
    if (empty != G_NONE) eps(b, empty, to);
    if (some != G_NONE) eps(b, some, to);
}

static void build(nb_t *b, const ast_t *a, uint32_t from, uint32_t to)
{
    if (b->c->failed) return;
    switch (a->kind) {
    case AST_EMPTY: eps(b, from, to); break;
    case AST_FAIL: break;
    case AST_BYTES: {
        uint32_t cur = from;
        for (uint32_t k = 0; k < a->n; k++) {
            uint32_t nx = k == a->n - 1 ? to : new_state(b);
            byte_edge(b, cur, nx, a->bytes[k], a->bytes[k]);
            cur = nx;
        }
        break;
    }
    case AST_CLASS: {
        seq_ctx_t s = {b, from, to};
        for (uint32_t k = 0; k < a->n; k++) utf8_sequences(a->ranges[k].lo, a->ranges[k].hi, class_seq, &s);
        break;
    }
    case AST_CONCAT: {
        uint32_t cur = from;
        for (uint32_t k = 0; k < a->n; k++) {
            uint32_t nx = k == a->n - 1 ? to : new_state(b);
            build(b, a->kids[k], cur, nx);
            cur = nx;
        }
        break;
    }
    case AST_ALT:
        /* Sharing the end points is safe: no construction adds edges into its own `from`
         * or out of its own `to` (loops get fresh states). */
        for (uint32_t k = 0; k < a->n; k++) build(b, a->kids[k], from, to);
        break;
    case AST_REPEAT: {
        uint32_t cur = from;
        for (uint32_t k = 0; k < a->min && !b->c->failed; k++) {
            uint32_t nx = new_state(b);
            build(b, a->kids[0], cur, nx);
            cur = nx;
        }
        if (a->max == G_INF) {
            uint32_t loop = new_state(b), back = new_state(b);
            eps(b, cur, loop);
            build(b, a->kids[0], loop, back);
            eps(b, back, loop);
            eps(b, loop, to);
        } else {
            for (uint32_t k = a->min; k < a->max && !b->c->failed; k++) {
                uint32_t nx = new_state(b);
                eps(b, cur, to);
                build(b, a->kids[0], cur, nx);
                cur = nx;
            }
            eps(b, cur, to);
        }
        break;
    }
    case AST_BEGIN: edge(b, from, to, NE_BEGIN, 0, 0, 0); break;
    case AST_END: edge(b, from, to, NE_END, 0, 0, 0); break;
    case AST_CALL: edge(b, from, to, NE_CALL, 0, 0, a->min); break;
    case AST_DFA: build_dfa(b, a, from, to); break;
    case AST_LIST: build_list(b, a, from, to); break;
    }
}

bool nfa_build(gctx_t *c, const ast_t *a, nfa_t *out)
{
    *out = (nfa_t){0};
    nb_t b = {c, out};
    out->start = new_state(&b);
    out->final = new_state(&b);
    build(&b, a, out->start, out->final);
    if (c->failed) nfa_free(out);
    return !c->failed;
}

void nfa_free(nfa_t *n)
{
    free(n->e);
    *n = (nfa_t){0};
}
