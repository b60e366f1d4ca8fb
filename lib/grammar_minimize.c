/* DFA minimisation (Hopcroft's partition refinement). Subset construction leaves equivalent
 * states behind (a counted repetition of a multi-byte character class leaves dozens per
 * repetition), and every state costs a vocabulary walk when the token masks are built, so
 * merging them pays. Calls of rules are symbols like byte classes; a missing transition
 * goes to an explicit sink. */
#include "grammar_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t n, k;            /* states (the last one the sink), symbols */
    uint32_t *delta;          /* n * k */
    uint32_t *inv_off, *inv;  /* per symbol and target: the sources, CSR over a * n + t */
    /* refinable partition */
    uint32_t *elems, *loc, *blk, *first, *end, *marks;
    uint32_t n_blocks;
    /* work list of (block, symbol) splitters */
    uint32_t *work;
    size_t n_work, cap_work;
    uint8_t *in_work;         /* n * k */
} hop_t;

static void push_work(hop_t *h, uint32_t b, uint32_t a)
{
    if (h->in_work[(size_t)b * h->k + a]) return;
    h->in_work[(size_t)b * h->k + a] = 1;
    if (h->n_work == h->cap_work) {
        h->cap_work = h->cap_work ? 2 * h->cap_work : 1024;
        h->work = xrealloc(h->work, h->cap_work * sizeof *h->work);
    }
    h->work[h->n_work++] = b * h->k + a;
}

/* Moves s to the marked front part of its block. */
static bool mark(hop_t *h, uint32_t s)
{
    uint32_t b = h->blk[s], pos = h->loc[s], dst = h->first[b] + h->marks[b];
    if (pos < dst) return false; /* already marked */
    uint32_t other = h->elems[dst];
    h->elems[dst] = s, h->loc[s] = dst;
    h->elems[pos] = other, h->loc[other] = pos;
    return h->marks[b]++ == 0;
}

static void refine(hop_t *h)
{
    uint32_t *members = xmalloc(h->n * sizeof *members), *touched = xmalloc(h->n * sizeof *touched);
    while (h->n_work) {
        uint32_t w = h->work[--h->n_work], b = w / h->k, a = w % h->k;
        h->in_work[w] = 0;
        uint32_t nm = h->end[b] - h->first[b], nt = 0;
        memcpy(members, h->elems + h->first[b], nm * sizeof *members);
        for (uint32_t i = 0; i < nm; i++) {
            uint32_t t = members[i];
            for (uint32_t j = h->inv_off[(size_t)a * h->n + t]; j < h->inv_off[(size_t)a * h->n + t + 1]; j++)
                if (mark(h, h->inv[j])) touched[nt++] = h->blk[h->inv[j]];
        }
        for (uint32_t i = 0; i < nt; i++) {
            uint32_t y = touched[i], m = h->marks[y], size = h->end[y] - h->first[y];
            h->marks[y] = 0;
            if (m == size) continue;
            /* the marked front part becomes a new block */
            uint32_t z = h->n_blocks++;
            h->first[z] = h->first[y];
            h->end[z] = h->first[y] + m;
            h->first[y] += m;
            h->marks[z] = 0;
            for (uint32_t p = h->first[z]; p < h->end[z]; p++) h->blk[h->elems[p]] = z;
            bool z_smaller = m <= size - m;
            for (uint32_t s = 0; s < h->k; s++) {
                if (h->in_work[(size_t)y * h->k + s]) push_work(h, z, s);
                else push_work(h, z_smaller ? z : y, s);
            }
        }
    }
    free(members);
    free(touched);
}

void dfa_minimize(dfa_t *d)
{
    uint32_t n = d->n_states + 1, nc = d->n_classes, sink = d->n_states;
    if (n <= 2 || dfa_is_empty(d)) return;
    /* call symbols: the distinct rules called */
    uint32_t total_calls = d->call_off ? d->call_off[d->n_states] : 0, nr = 0;
    uint32_t *rules = xmalloc((total_calls + 1) * sizeof *rules);
    for (uint32_t i = 0; i < total_calls; i++) {
        uint32_t r = d->calls[i].rule, j = 0;
        while (j < nr && rules[j] != r) j++;
        if (j == nr) rules[nr++] = r;
    }
    hop_t h = {.n = n, .k = nc + nr};
    h.delta = xmalloc((size_t)n * h.k * sizeof *h.delta);
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t a = 0; a < h.k; a++) {
            uint32_t t = sink;
            if (s < sink && a < nc) t = d->next[(size_t)s * nc + a];
            h.delta[(size_t)s * h.k + a] = t == G_NONE ? sink : t;
        }
    for (uint32_t s = 0; s < sink && total_calls; s++)
        for (uint32_t i = d->call_off[s]; i < d->call_off[s + 1]; i++) {
            uint32_t j = 0;
            while (rules[j] != d->calls[i].rule) j++;
            h.delta[(size_t)s * h.k + nc + j] = d->calls[i].to;
        }
    h.inv_off = xcalloc((size_t)h.k * n + 1, sizeof *h.inv_off);
    h.inv = xmalloc((size_t)h.k * n * sizeof *h.inv);
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t a = 0; a < h.k; a++) h.inv_off[(size_t)a * n + h.delta[(size_t)s * h.k + a] + 1]++;
    for (size_t i = 0; i < (size_t)h.k * n; i++) h.inv_off[i + 1] += h.inv_off[i];
    uint32_t *fill = xmalloc(((size_t)h.k * n + 1) * sizeof *fill);
    memcpy(fill, h.inv_off, ((size_t)h.k * n + 1) * sizeof *fill);
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t a = 0; a < h.k; a++) h.inv[fill[(size_t)a * n + h.delta[(size_t)s * h.k + a]]++] = s;
    free(fill);
    /* initial blocks: accepting, not accepting, the sink */
    h.elems = xmalloc(n * sizeof *h.elems);
    h.loc = xmalloc(n * sizeof *h.loc);
    h.blk = xmalloc(n * sizeof *h.blk);
    h.first = xmalloc(n * sizeof *h.first);
    h.end = xmalloc(n * sizeof *h.end);
    h.marks = xcalloc(n, sizeof *h.marks);
    h.in_work = xcalloc((size_t)n * h.k, 1);
    uint32_t pos = 0;
    for (int cls = 0; cls < 3; cls++) {
        uint32_t start = pos;
        for (uint32_t s = 0; s < n; s++) {
            int c = s == sink ? 2 : d->accept[s] ? 1 : 0;
            if (c != cls) continue;
            h.elems[pos] = s, h.loc[s] = pos++, h.blk[s] = h.n_blocks;
        }
        if (pos == start) continue;
        h.first[h.n_blocks] = start;
        h.end[h.n_blocks++] = pos;
    }
    for (uint32_t b = 0; b < h.n_blocks; b++)
        for (uint32_t a = 0; a < h.k; a++) push_work(&h, b, a);
    refine(&h);

    /* one state per block, numbered in order of their first original state; the sink's
     * block is no state (after trimming, only the sink is dead) */
    uint32_t *map = xmalloc(h.n_blocks * sizeof *map), m = 0;
    memset(map, 0xFF, h.n_blocks * sizeof *map);
    uint32_t *rep = xmalloc(n * sizeof *rep);
    for (uint32_t s = 0; s < sink; s++) {
        uint32_t b = h.blk[s];
        if (b == h.blk[sink] || map[b] != G_NONE) continue;
        rep[m] = s;
        map[b] = m++;
    }
    if (m < d->n_states) {
        uint32_t *next = xmalloc((size_t)m * nc * sizeof *next);
        uint8_t *accept = xmalloc(m);
        uint32_t *call_off = total_calls ? xmalloc((m + 1) * sizeof *call_off) : NULL;
        dfa_call_t *calls = total_calls ? xmalloc(total_calls * sizeof *calls) : NULL;
        uint32_t ncalls = 0;
        for (uint32_t q = 0; q < m; q++) {
            uint32_t s = rep[q];
            accept[q] = d->accept[s];
            for (uint32_t a = 0; a < nc; a++) {
                uint32_t t = h.delta[(size_t)s * h.k + a];
                next[(size_t)q * nc + a] = t == sink ? G_NONE : map[h.blk[t]];
            }
            if (!call_off) continue;
            call_off[q] = ncalls;
            for (uint32_t i = d->call_off[s]; i < d->call_off[s + 1]; i++)
                calls[ncalls++] = (dfa_call_t){d->calls[i].rule, map[h.blk[d->calls[i].to]]};
        }
        if (call_off) call_off[m] = ncalls;
        d->start = map[h.blk[d->start]];
        free(d->next);
        free(d->accept);
        free(d->call_off);
        free(d->calls);
        d->next = next, d->accept = accept, d->call_off = call_off, d->calls = calls;
        d->n_states = m;
    }
    free(map);
    free(rep);
    free(rules);
    free(h.delta);
    free(h.inv_off);
    free(h.inv);
    free(h.elems);
    free(h.loc);
    free(h.blk);
    free(h.first);
    free(h.end);
    free(h.marks);
    free(h.work);
    free(h.in_work);
}
