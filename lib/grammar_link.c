/* Links the rules' DFAs into one pushdown automaton: drops what cannot complete, numbers
 * all states globally with one set of byte classes, computes for each rule the bytes that
 * can begin it and follow it, and refuses grammars where a byte would leave a choice
 * (between consuming it, calling a rule with it, or returning from the rule on it), so the
 * matcher never has to track more than one stack. Also the fewest bytes to complete each
 * state, for steering towards an end. */
#include "grammar_internal.h"

#include <stdlib.h>
#include <string.h>

static uint32_t calls_of(const dfa_t *d, uint32_t s, const dfa_call_t **out)
{
    if (!d->call_off) return 0;
    *out = d->calls + d->call_off[s];
    return d->call_off[s + 1] - d->call_off[s];
}

/* Which rules can match anything at all (calling only rules that can). */
static void find_productive(dfa_t **dfas, uint32_t n, bool *prod)
{
    memset(prod, 0, n * sizeof *prod);
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < n; r++) {
            if (prod[r]) continue;
            const dfa_t *d = dfas[r];
            uint8_t *seen = xcalloc(d->n_states, 1);
            uint32_t *stack = xmalloc(d->n_states * sizeof *stack), sp = 0;
            stack[sp++] = d->start;
            seen[d->start] = 1;
            while (sp && !prod[r]) {
                uint32_t s = stack[--sp];
                if (d->accept[s]) prod[r] = true;
                for (uint32_t k = 0; k < d->n_classes; k++) {
                    uint32_t t = d->next[(size_t)s * d->n_classes + k];
                    if (t != G_NONE && !seen[t]) seen[t] = 1, stack[sp++] = t;
                }
                const dfa_call_t *cl;
                uint32_t nc = calls_of(d, s, &cl);
                for (uint32_t i = 0; i < nc; i++)
                    if (prod[cl[i].rule] && !seen[cl[i].to]) seen[cl[i].to] = 1, stack[sp++] = cl[i].to;
            }
            free(seen);
            free(stack);
            changed |= prod[r];
        }
    }
}

/* FIRST sets through the rules called at each start state; a rule reached again while its
 * own FIRST is being computed recurses without consuming anything. */
static bool first_of(gctx_t *c, grammar_t *g, uint32_t r, uint8_t *mark)
{
    if (mark[r] == 2) return true;
    if (mark[r] == 1) return g_fail(c, "the grammar is left-recursive (a schema refers to itself before any text)");
    mark[r] = 1;
    uint32_t s = g->rule_start[r];
    for (uint32_t b = 0; b < 256; b++)
        if (g->next[(size_t)s * g->n_classes + g->class_of[b]] != G_NONE) bit_set(g->first[r], (uint8_t)b);
    for (uint32_t i = g->call_off[s]; i < g->call_off[s + 1]; i++) {
        uint32_t callee = g->calls[i].rule;
        if (!first_of(c, g, callee, mark)) return false;
        for (int k = 0; k < 32; k++) g->first[r][k] |= g->first[callee][k];
    }
    mark[r] = 2;
    return true;
}

/* Bytes that can come first from state s. */
static void state_first(const grammar_t *g, uint32_t s, uint8_t out[32])
{
    memset(out, 0, 32);
    for (uint32_t b = 0; b < 256; b++)
        if (g->next[(size_t)s * g->n_classes + g->class_of[b]] != G_NONE) bit_set(out, (uint8_t)b);
    for (uint32_t i = g->call_off[s]; i < g->call_off[s + 1]; i++)
        for (int k = 0; k < 32; k++) out[k] |= g->first[g->calls[i].rule][k];
}

static void compute_follow(grammar_t *g)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t s = 0; s < g->n_states; s++)
            for (uint32_t i = g->call_off[s]; i < g->call_off[s + 1]; i++) {
                const dfa_call_t *cl = &g->calls[i];
                uint8_t add[32];
                state_first(g, cl->to, add);
                if (g->accept[cl->to])
                    for (int k = 0; k < 32; k++) add[k] |= g->follow[g->rule_of[s]][k];
                for (int k = 0; k < 32; k++) {
                    uint8_t nv = g->follow[cl->rule][k] | add[k];
                    if (nv != g->follow[cl->rule][k]) g->follow[cl->rule][k] = nv, changed = true;
                }
            }
    }
}

static bool check_deterministic(gctx_t *c, const grammar_t *g)
{
    for (uint32_t s = 0; s < g->n_states; s++) {
        uint8_t seen[32] = {0};
        for (uint32_t b = 0; b < 256; b++)
            if (g->next[(size_t)s * g->n_classes + g->class_of[b]] != G_NONE) bit_set(seen, (uint8_t)b);
        bool clash = false;
        for (uint32_t i = g->call_off[s]; i < g->call_off[s + 1]; i++) {
            const uint8_t *f = g->first[g->calls[i].rule];
            for (int k = 0; k < 32; k++) clash |= (seen[k] & f[k]) != 0, seen[k] |= f[k];
        }
        if (g->accept[s])
            for (int k = 0; k < 32; k++) clash |= (seen[k] & g->follow[g->rule_of[s]][k]) != 0;
        if (clash)
            return g_fail(c, "the grammar is ambiguous where it recurses (alternatives of a recursive schema start "
                             "with the same character); this is not supported");
    }
    return true;
}

/* ---- distances to the end: Dijkstra on reversed edges, rules' minima to a fixpoint ---- */

typedef struct {
    uint32_t *d, *heap, *pos, n;
} heap_t;

static void heap_swap(heap_t *h, uint32_t i, uint32_t j)
{
    uint32_t a = h->heap[i], b = h->heap[j];
    h->heap[i] = b, h->heap[j] = a;
    h->pos[b] = i, h->pos[a] = j;
}

static void heap_up(heap_t *h, uint32_t i)
{
    while (i && h->d[h->heap[(i - 1) / 2]] > h->d[h->heap[i]]) heap_swap(h, i, (i - 1) / 2), i = (i - 1) / 2;
}

static void heap_push_or_lower(heap_t *h, uint32_t s)
{
    if (h->pos[s] == G_NONE) {
        h->heap[h->n] = s;
        h->pos[s] = h->n++;
    }
    heap_up(h, h->pos[s]);
}

static uint32_t heap_pop(heap_t *h)
{
    uint32_t top = h->heap[0];
    h->pos[top] = G_NONE;
    if (--h->n) {
        h->heap[0] = h->heap[h->n];
        h->pos[h->heap[0]] = 0;
        for (uint32_t i = 0;;) {
            uint32_t l = 2 * i + 1, r = l + 1, m = i;
            if (l < h->n && h->d[h->heap[l]] < h->d[h->heap[m]]) m = l;
            if (r < h->n && h->d[h->heap[r]] < h->d[h->heap[m]]) m = r;
            if (m == i) break;
            heap_swap(h, i, m);
            i = m;
        }
    }
    return top;
}

static void compute_distances(grammar_t *g)
{
    uint32_t n = g->n_states, nc = g->n_classes;
    /* reversed edges: (source state, rule or G_NONE for a byte) */
    uint32_t *roff = xcalloc(n + 1, sizeof *roff);
    for (uint32_t s = 0; s < n; s++) {
        for (uint32_t k = 0; k < nc; k++)
            if (g->next[(size_t)s * nc + k] != G_NONE) roff[g->next[(size_t)s * nc + k] + 1]++;
        for (uint32_t i = g->call_off[s]; i < g->call_off[s + 1]; i++) roff[g->calls[i].to + 1]++;
    }
    for (uint32_t s = 0; s < n; s++) roff[s + 1] += roff[s];
    uint32_t *rsrc = xmalloc((roff[n] + 1) * sizeof *rsrc), *rrule = xmalloc((roff[n] + 1) * sizeof *rrule);
    uint32_t *fill = xmalloc((n + 1) * sizeof *fill);
    memcpy(fill, roff, (n + 1) * sizeof *fill);
    for (uint32_t s = 0; s < n; s++) {
        for (uint32_t k = 0; k < nc; k++) {
            uint32_t t = g->next[(size_t)s * nc + k];
            if (t != G_NONE) rsrc[fill[t]] = s, rrule[fill[t]++] = G_NONE;
        }
        for (uint32_t i = g->call_off[s]; i < g->call_off[s + 1]; i++) {
            uint32_t t = g->calls[i].to;
            rsrc[fill[t]] = s, rrule[fill[t]++] = g->calls[i].rule;
        }
    }
    heap_t h = {g->dist, xmalloc(n * sizeof(uint32_t)), xmalloc(n * sizeof(uint32_t)), 0};
    for (uint32_t r = 0; r < g->n_rules; r++) g->rule_min[r] = G_NONE;
    for (uint32_t round = 0; round <= g->n_rules + 1; round++) {
        h.n = 0;
        for (uint32_t s = 0; s < n; s++) {
            g->dist[s] = g->accept[s] ? 0 : G_NONE;
            h.pos[s] = G_NONE;
            if (g->accept[s]) heap_push_or_lower(&h, s);
        }
        while (h.n) {
            uint32_t t = heap_pop(&h);
            for (uint32_t i = roff[t]; i < roff[t + 1]; i++) {
                uint32_t s = rsrc[i], cost = rrule[i] == G_NONE ? 1 : g->rule_min[rrule[i]];
                if (cost == G_NONE) continue;
                uint32_t nd = g->dist[t] + cost;
                if (nd < g->dist[s]) {
                    g->dist[s] = nd;
                    heap_push_or_lower(&h, s);
                }
            }
        }
        bool changed = false;
        for (uint32_t r = 0; r < g->n_rules; r++)
            if (g->dist[g->rule_start[r]] != g->rule_min[r]) g->rule_min[r] = g->dist[g->rule_start[r]], changed = true;
        if (!changed) break;
    }
    free(h.heap);
    free(h.pos);
    free(roff);
    free(rsrc);
    free(rrule);
    free(fill);
}

/* ---- linking --------------------------------------------------------------------------- */

bool grammar_link(gctx_t *c, grammar_t *g, dfa_t **dfas, uint32_t n)
{
    bool *prod = xmalloc(n * sizeof *prod);
    find_productive(dfas, n, prod);
    if (!prod[0]) {
        free(prod);
        return g_fail(c, "the constraint cannot be satisfied by any output");
    }
    for (uint32_t r = 0; r < n; r++) dfa_trim(dfas[r], prod);
    free(prod);

    g->n_rules = n;
    uint32_t *off = xmalloc((n + 1) * sizeof *off);
    off[0] = 0;
    for (uint32_t r = 0; r < n; r++) off[r + 1] = off[r] + dfas[r]->n_states;
    g->n_states = off[n];
    if (g->n_states > GRAMMAR_MAX_DFA) {
        free(off);
        return g_fail(c, "the automaton is too large (%u states, the limit is %d)", g->n_states, GRAMMAR_MAX_DFA);
    }
    /* global byte classes: the common refinement of every rule's classes */
    uint8_t cls[256] = {0}, rep[256];
    uint32_t ncls = 1;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t map[256];
        uint32_t nn = 0;
        uint8_t out[256];
        for (int b = 0; b < 256; b++) {
            uint32_t key = (uint32_t)cls[b] << 8 | dfas[r]->class_of[b];
            uint32_t k = 0;
            while (k < nn && map[k] != key) k++;
            if (k == nn) map[nn++] = key;
            out[b] = (uint8_t)k;
        }
        memcpy(cls, out, sizeof cls);
        ncls = nn;
    }
    for (int b = 255; b >= 0; b--) rep[cls[b]] = (uint8_t)b;
    g->n_classes = ncls;
    memcpy(g->class_of, cls, sizeof cls);

    g->next = xmalloc((size_t)g->n_states * ncls * sizeof *g->next);
    g->accept = xmalloc(g->n_states);
    g->rule_of = xmalloc(g->n_states * sizeof *g->rule_of);
    g->call_off = xmalloc((g->n_states + 1) * sizeof *g->call_off);
    g->rule_start = xmalloc(n * sizeof *g->rule_start);
    uint32_t total_calls = 0;
    for (uint32_t r = 0; r < n; r++)
        if (dfas[r]->call_off) total_calls += dfas[r]->call_off[dfas[r]->n_states];
    g->calls = xmalloc((total_calls + 1) * sizeof *g->calls);
    uint32_t nc = 0;
    for (uint32_t r = 0; r < n; r++) {
        const dfa_t *d = dfas[r];
        g->rule_start[r] = off[r] + d->start;
        for (uint32_t s = 0; s < d->n_states; s++) {
            uint32_t gs = off[r] + s;
            g->accept[gs] = d->accept[s];
            g->rule_of[gs] = r;
            for (uint32_t k = 0; k < ncls; k++) {
                uint32_t t = d->next[(size_t)s * d->n_classes + d->class_of[rep[k]]];
                g->next[(size_t)gs * ncls + k] = t == G_NONE ? G_NONE : off[r] + t;
            }
            g->call_off[gs] = nc;
            const dfa_call_t *cl;
            uint32_t k = calls_of(d, s, &cl);
            for (uint32_t i = 0; i < k; i++) g->calls[nc++] = (dfa_call_t){cl[i].rule, off[r] + cl[i].to};
        }
    }
    g->call_off[g->n_states] = nc;
    free(off);

    /* called rules must consume something, or recursion could spin without input */
    for (uint32_t s = 0; s < g->n_states; s++)
        for (uint32_t i = g->call_off[s]; i < g->call_off[s + 1]; i++)
            if (g->accept[g->rule_start[g->calls[i].rule]])
                return g_fail(c, "a recursive part of the grammar can match the empty string");
    g->first = xcalloc(n, sizeof *g->first);
    g->follow = xcalloc(n, sizeof *g->follow);
    uint8_t *mark = xcalloc(n, 1);
    bool ok = true;
    for (uint32_t r = 0; r < n && ok; r++) ok = first_of(c, g, r, mark);
    free(mark);
    if (!ok) return false;
    compute_follow(g);
    if (!check_deterministic(c, g)) return false;
    g->dist = xmalloc(g->n_states * sizeof *g->dist);
    g->rule_min = xmalloc(n * sizeof *g->rule_min);
    compute_distances(g);
    return true;
}
