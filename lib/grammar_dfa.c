/* NFA -> DFA by subset construction over byte classes (bytes no edge tells apart share a
 * column) plus one symbol per called rule. Anchors: ^ edges are followed only in the start
 * state's closure, $ edges only when deciding whether a state accepts (the input ends
 * there). Trimming removes states from which acceptance is out of reach, so a transition
 * that exists always leads somewhere that can still complete. */
#include "grammar_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- interning of uint32 vectors -------------------------------------------------------- */

typedef struct {
    uint32_t *data;
    size_t len, cap;
    size_t *off;
    uint32_t *cnt;
    uint32_t n, cap_ids;
    uint32_t *table;
    uint32_t table_cap;
} vecset_t;

static uint64_t vec_hash(const uint32_t *v, uint32_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (uint32_t i = 0; i < n; i++) h = (h ^ v[i]) * 0xFF51AFD7ED558CCDull, h ^= h >> 29;
    return h;
}

static void vecset_grow_table(vecset_t *vs)
{
    uint32_t cap = vs->table_cap ? 2 * vs->table_cap : 1024;
    uint32_t *t = xmalloc(cap * sizeof *t);
    memset(t, 0xFF, cap * sizeof *t);
    for (uint32_t id = 0; id < vs->n; id++) {
        uint64_t h = vec_hash(vs->data + vs->off[id], vs->cnt[id]);
        uint32_t i = (uint32_t)h & (cap - 1);
        while (t[i] != G_NONE) i = (i + 1) & (cap - 1);
        t[i] = id;
    }
    free(vs->table);
    vs->table = t;
    vs->table_cap = cap;
}

/* The id of vector v, adding it if new (*added tells). */
static uint32_t vecset_intern(vecset_t *vs, const uint32_t *v, uint32_t n, bool *added)
{
    if ((vs->n + 1) * 2 > vs->table_cap) vecset_grow_table(vs);
    uint64_t h = vec_hash(v, n);
    uint32_t i = (uint32_t)h & (vs->table_cap - 1);
    for (; vs->table[i] != G_NONE; i = (i + 1) & (vs->table_cap - 1)) {
        uint32_t id = vs->table[i];
        if (vs->cnt[id] == n && !memcmp(vs->data + vs->off[id], v, n * sizeof *v)) {
            *added = false;
            return id;
        }
    }
    if (vs->n == vs->cap_ids) {
        vs->cap_ids = vs->cap_ids ? 2 * vs->cap_ids : 256;
        vs->off = xrealloc(vs->off, vs->cap_ids * sizeof *vs->off);
        vs->cnt = xrealloc(vs->cnt, vs->cap_ids * sizeof *vs->cnt);
    }
    if (vs->len + n > vs->cap) {
        while (vs->len + n > vs->cap) vs->cap = vs->cap ? 2 * vs->cap : 4096;
        vs->data = xrealloc(vs->data, vs->cap * sizeof *vs->data);
    }
    memcpy(vs->data + vs->len, v, n * sizeof *v);
    vs->off[vs->n] = vs->len;
    vs->cnt[vs->n] = n;
    vs->len += n;
    vs->table[i] = vs->n;
    *added = true;
    return vs->n++;
}

static void vecset_free(vecset_t *vs)
{
    free(vs->data);
    free(vs->off);
    free(vs->cnt);
    free(vs->table);
}

/* ---- subset construction --------------------------------------------------------------- */

typedef struct {
    const nfa_t *nfa;
    uint32_t *off;        /* CSR of edges by source state */
    nfa_edge_t *edges;
    uint32_t *stamp;
    uint32_t epoch;
    ids_t stack;
    uint64_t work;        /* NFA states and edges visited, for the compile's budget */
} nfa_index_t;

static void index_nfa(nfa_index_t *x, const nfa_t *n)
{
    x->nfa = n;
    x->off = xcalloc(n->n_states + 1, sizeof *x->off);
    for (uint32_t i = 0; i < n->n_edges; i++) x->off[n->e[i].from + 1]++;
    for (uint32_t s = 0; s < n->n_states; s++) x->off[s + 1] += x->off[s];
    x->edges = xmalloc((n->n_edges ? n->n_edges : 1) * sizeof *x->edges);
    uint32_t *pos = xmalloc((n->n_states + 1) * sizeof *pos);
    memcpy(pos, x->off, (n->n_states + 1) * sizeof *pos);
    for (uint32_t i = 0; i < n->n_edges; i++) x->edges[pos[n->e[i].from]++] = n->e[i];
    free(pos);
    x->stamp = xcalloc(n->n_states, sizeof *x->stamp);
    x->epoch = 0;
    x->stack = (ids_t){0};
    x->work = 0;
}

static void index_free(nfa_index_t *x)
{
    free(x->off);
    free(x->edges);
    free(x->stamp);
    free(x->stack.v);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void sort_u32(ids_t *a)
{
    if (a->n > 1) qsort(a->v, a->n, sizeof *a->v, cmp_u32);
}

/* Epsilon closure of seeds into out (sorted). Follows ^ edges only at the start; $ edges
 * only when `at_end` (used for the acceptance test). */
static void closure(nfa_index_t *x, const uint32_t *seeds, uint32_t n, bool at_start, bool at_end, ids_t *out)
{
    x->epoch++;
    out->n = 0;
    x->stack.n = 0;
    for (uint32_t i = 0; i < n; i++)
        if (x->stamp[seeds[i]] != x->epoch) {
            x->stamp[seeds[i]] = x->epoch;
            ids_push(&x->stack, seeds[i]);
        }
    while (x->stack.n) {
        uint32_t q = x->stack.v[--x->stack.n];
        ids_push(out, q);
        x->work += 1 + x->off[q + 1] - x->off[q];
        for (uint32_t e = x->off[q]; e < x->off[q + 1]; e++) {
            const nfa_edge_t *ed = &x->edges[e];
            bool follow = ed->kind == NE_EPS || (ed->kind == NE_BEGIN && at_start) || (ed->kind == NE_END && at_end);
            if (follow && x->stamp[ed->to] != x->epoch) {
                x->stamp[ed->to] = x->epoch;
                ids_push(&x->stack, ed->to);
            }
        }
    }
    sort_u32(out);
}

typedef struct {
    dfa_t *d;
    uint32_t cap_states;
    ids_t calls_rule, calls_to;
} dfa_builder_t;

static void dfa_add_state(dfa_builder_t *b)
{
    dfa_t *d = b->d;
    if (d->n_states == b->cap_states) {
        b->cap_states = b->cap_states ? 2 * b->cap_states : 64;
        d->next = xrealloc(d->next, (size_t)b->cap_states * d->n_classes * sizeof *d->next);
        d->accept = xrealloc(d->accept, b->cap_states);
        d->call_off = xrealloc(d->call_off, (b->cap_states + 1) * sizeof *d->call_off);
    }
    memset(d->next + (size_t)d->n_states * d->n_classes, 0xFF, d->n_classes * sizeof *d->next);
    d->accept[d->n_states] = 0;
    d->n_states++;
}

static dfa_t *determinize(gctx_t *c, const nfa_t *n)
{
    dfa_t *d = xcalloc(1, sizeof *d);
    /* byte classes: cut at every edge boundary */
    uint8_t cut[257] = {0};
    uint32_t n_rules_used = 0;
    ids_t rule_ids = {0};
    for (uint32_t i = 0; i < n->n_edges; i++) {
        const nfa_edge_t *e = &n->e[i];
        if (e->kind == NE_BYTES) {
            cut[e->lo] = 1;
            cut[e->hi + 1] = 1;
        } else if (e->kind == NE_CALL) {
            ids_push(&rule_ids, e->rule);
        }
    }
    uint32_t k = 0;
    for (int b = 0; b < 256; b++) {
        if (b > 0 && cut[b]) k++;
        d->class_of[b] = (uint8_t)k;
    }
    d->n_classes = k + 1;
    sort_u32(&rule_ids);
    for (uint32_t i = 0; i < rule_ids.n; i++)
        if (!n_rules_used || rule_ids.v[n_rules_used - 1] != rule_ids.v[i]) rule_ids.v[n_rules_used++] = rule_ids.v[i];
    uint32_t n_sym = d->n_classes + n_rules_used;

    nfa_index_t x;
    index_nfa(&x, n);
    vecset_t subsets = {0};
    dfa_builder_t b = {d, 0, {0}, {0}};
    ids_t cl = {0}, key = {0}, acc = {0};
    ids_t *bucket = xcalloc(n_sym, sizeof *bucket);
    ids_t touched = {0};
    bool added;

    /* state 0: the start, keyed with a leading 1 (at the start of the input) */
    closure(&x, &n->start, 1, true, false, &cl);
    ids_push(&key, 1);
    for (uint32_t i = 0; i < cl.n; i++) ids_push(&key, cl.v[i]);
    vecset_intern(&subsets, key.v, key.n, &added);
    dfa_add_state(&b);
    d->start = 0;
    d->call_off[0] = 0;

    for (uint32_t s = 0; s < d->n_states && !c->failed; s++) {
        const uint32_t *set = subsets.data + subsets.off[s];
        uint32_t set_n = subsets.cnt[s];
        bool at_start = set[0] == 1;
        set++, set_n--;
        closure(&x, set, set_n, at_start, true, &acc);
        for (uint32_t i = 0; i < acc.n; i++)
            if (acc.v[i] == n->final) d->accept[s] = 1;
        touched.n = 0;
        for (uint32_t i = 0; i < set_n; i++) {
            uint32_t q = set[i];
            x.work += 1 + x.off[q + 1] - x.off[q];
            for (uint32_t e = x.off[q]; e < x.off[q + 1]; e++) {
                const nfa_edge_t *ed = &x.edges[e];
                if (ed->kind == NE_BYTES) {
                    for (uint32_t cls = d->class_of[ed->lo]; cls <= d->class_of[ed->hi]; cls++) {
                        if (!bucket[cls].n) ids_push(&touched, cls);
                        ids_push(&bucket[cls], ed->to);
                    }
                } else if (ed->kind == NE_CALL) {
                    uint32_t lo = 0, hi = n_rules_used;
                    while (lo < hi) {
                        uint32_t mid = (lo + hi) / 2;
                        if (rule_ids.v[mid] < ed->rule) lo = mid + 1;
                        else hi = mid;
                    }
                    uint32_t sym = d->n_classes + lo;
                    if (!bucket[sym].n) ids_push(&touched, sym);
                    ids_push(&bucket[sym], ed->to);
                }
            }
        }
        sort_u32(&touched);
        for (uint32_t t = 0; t < touched.n; t++) {
            uint32_t sym = touched.v[t];
            if (c->subset_work + x.work > GRAMMAR_MAX_WORK) {
                g_fail(c, "the pattern is too complex to compile (its automaton takes more than %d steps to build)",
                       GRAMMAR_MAX_WORK);
                break;
            }
            closure(&x, bucket[sym].v, bucket[sym].n, false, false, &cl);
            bucket[sym].n = 0;
            key.n = 0;
            ids_push(&key, 0);
            for (uint32_t i = 0; i < cl.n; i++) ids_push(&key, cl.v[i]);
            uint32_t id = vecset_intern(&subsets, key.v, key.n, &added);
            if (added) {
                if (c->dfa_states + d->n_states >= GRAMMAR_MAX_DFA) {
                    g_fail(c, "the automaton is too large (more than %d states)", GRAMMAR_MAX_DFA);
                    break;
                }
                dfa_add_state(&b);
            }
            if (sym < d->n_classes) {
                d->next[(size_t)s * d->n_classes + sym] = id;
            } else {
                ids_push(&b.calls_rule, rule_ids.v[sym - d->n_classes]);
                ids_push(&b.calls_to, id);
            }
        }
        for (uint32_t t = 0; t < touched.n; t++) bucket[touched.v[t]].n = 0;
        d->call_off[s + 1] = b.calls_rule.n;
    }
    if (b.calls_rule.n && !c->failed) {
        d->calls = xmalloc(b.calls_rule.n * sizeof *d->calls);
        for (uint32_t i = 0; i < b.calls_rule.n; i++) d->calls[i] = (dfa_call_t){b.calls_rule.v[i], b.calls_to.v[i]};
    } else {
        free(d->call_off);
        d->call_off = NULL;
    }
    for (uint32_t i = 0; i < n_sym; i++) free(bucket[i].v);
    free(bucket);
    free(touched.v);
    free(cl.v);
    free(key.v);
    free(acc.v);
    free(rule_ids.v);
    free(b.calls_rule.v);
    free(b.calls_to.v);
    vecset_free(&subsets);
    c->subset_work += x.work;
    index_free(&x);
    if (c->failed) {
        dfa_free(d);
        return NULL;
    }
    return d;
}

/* ---- trimming ---------------------------------------------------------------------------- */

static uint32_t n_calls(const dfa_t *d, uint32_t s)
{
    return d->call_off ? d->call_off[s + 1] - d->call_off[s] : 0;
}

void dfa_trim(dfa_t *d, const bool *productive)
{
    uint32_t n = d->n_states, nc = d->n_classes;
    /* reverse edges, then backwards search from accepting states */
    uint32_t *roff = xcalloc(n + 1, sizeof *roff);
    for (uint32_t s = 0; s < n; s++) {
        for (uint32_t k = 0; k < nc; k++)
            if (d->next[(size_t)s * nc + k] != G_NONE) roff[d->next[(size_t)s * nc + k] + 1]++;
        for (uint32_t i = 0; i < n_calls(d, s); i++) {
            const dfa_call_t *cl = &d->calls[d->call_off[s] + i];
            if (!productive || productive[cl->rule]) roff[cl->to + 1]++;
        }
    }
    for (uint32_t s = 0; s < n; s++) roff[s + 1] += roff[s];
    uint32_t *rev = xmalloc((roff[n] ? roff[n] : 1) * sizeof *rev), *pos = xmalloc((n + 1) * sizeof *pos);
    memcpy(pos, roff, (n + 1) * sizeof *pos);
    for (uint32_t s = 0; s < n; s++) {
        for (uint32_t k = 0; k < nc; k++)
            if (d->next[(size_t)s * nc + k] != G_NONE) rev[pos[d->next[(size_t)s * nc + k]]++] = s;
        for (uint32_t i = 0; i < n_calls(d, s); i++) {
            const dfa_call_t *cl = &d->calls[d->call_off[s] + i];
            if (!productive || productive[cl->rule]) rev[pos[cl->to]++] = s;
        }
    }
    uint8_t *alive = xcalloc(n, 1), *seen = xcalloc(n, 1);
    uint32_t *stack = xmalloc(n * sizeof *stack), sp = 0;
    for (uint32_t s = 0; s < n; s++)
        if (d->accept[s]) alive[s] = 1, stack[sp++] = s;
    while (sp) {
        uint32_t s = stack[--sp];
        for (uint32_t i = roff[s]; i < roff[s + 1]; i++)
            if (!alive[rev[i]]) alive[rev[i]] = 1, stack[sp++] = rev[i];
    }
    /* forwards from the start through live states */
    seen[d->start] = 1;
    stack[sp++] = d->start;
    while (sp) {
        uint32_t s = stack[--sp];
        for (uint32_t k = 0; k < nc; k++) {
            uint32_t t = d->next[(size_t)s * nc + k];
            if (t != G_NONE && alive[t] && !seen[t]) seen[t] = 1, stack[sp++] = t;
        }
        for (uint32_t i = 0; i < n_calls(d, s); i++) {
            const dfa_call_t *cl = &d->calls[d->call_off[s] + i];
            if ((!productive || productive[cl->rule]) && alive[cl->to] && !seen[cl->to]) seen[cl->to] = 1, stack[sp++] = cl->to;
        }
    }
    uint32_t *map = xmalloc(n * sizeof *map), m = 0;
    for (uint32_t s = 0; s < n; s++) map[s] = seen[s] && (alive[s] || s == d->start) ? m++ : G_NONE;
    /* compact in place: states only move down */
    uint32_t nc_out = 0;
    for (uint32_t s = 0; s < n; s++) {
        if (map[s] == G_NONE) continue;
        uint32_t t = map[s];
        for (uint32_t k = 0; k < nc; k++) {
            uint32_t x = d->next[(size_t)s * nc + k];
            d->next[(size_t)t * nc + k] = x == G_NONE ? G_NONE : map[x];
        }
        d->accept[t] = d->accept[s];
        if (d->call_off) {
            uint32_t from = d->call_off[s], to = d->call_off[s + 1];
            d->call_off[t] = nc_out;
            for (uint32_t i = from; i < to; i++) {
                dfa_call_t cl = d->calls[i];
                if ((!productive || productive[cl.rule]) && map[cl.to] != G_NONE)
                    d->calls[nc_out++] = (dfa_call_t){cl.rule, map[cl.to]};
            }
        }
    }
    if (d->call_off) d->call_off[m] = nc_out;
    d->start = map[d->start];
    d->n_states = m;
    free(roff);
    free(rev);
    free(pos);
    free(alive);
    free(seen);
    free(stack);
    free(map);
}

bool dfa_is_empty(const dfa_t *d)
{
    if (d->accept[d->start]) return false;
    for (uint32_t k = 0; k < d->n_classes; k++)
        if (d->next[(size_t)d->start * d->n_classes + k] != G_NONE) return false;
    return n_calls(d, d->start) == 0;
}

dfa_t *dfa_from_ast(gctx_t *c, const ast_t *a)
{
    nfa_t nfa;
    if (!nfa_build(c, a, &nfa)) return NULL;
    dfa_t *d = determinize(c, &nfa);
    nfa_free(&nfa);
    if (d) {
        dfa_trim(d, NULL);
        dfa_minimize(d);
    }
    return d;
}

void dfa_free(dfa_t *d)
{
    if (!d) return;
    free(d->next);
    free(d->accept);
    free(d->call_off);
    free(d->calls);
    free(d);
}

bool dfa_match(const dfa_t *d, const uint8_t *s, size_t n)
{
    uint32_t q = d->start;
    for (size_t i = 0; i < n; i++) {
        q = d->next[(size_t)q * d->n_classes + d->class_of[s[i]]];
        if (q == G_NONE) return false;
    }
    return d->accept[q];
}

/* ---- products -------------------------------------------------------------------------- */

dfa_t *dfa_product(gctx_t *c, const dfa_t *a, const dfa_t *b, bool minus)
{
    dfa_t *d = xcalloc(1, sizeof *d);
    /* joint classes, and a representative byte per class */
    uint8_t rep[256];
    uint32_t nc = 0;
    for (int x = 0; x < 256; x++) {
        int found = -1;
        for (uint32_t k = 0; k < nc; k++)
            if (a->class_of[rep[k]] == a->class_of[x] && b->class_of[rep[k]] == b->class_of[x]) {
                found = (int)k;
                break;
            }
        if (found < 0) {
            rep[nc] = (uint8_t)x;
            found = (int)nc++;
        }
        d->class_of[x] = (uint8_t)found;
    }
    d->n_classes = nc;
    vecset_t pairs = {0};
    dfa_builder_t bld = {d, 0, {0}, {0}};
    bool added;
    uint32_t key[2] = {a->start, b->start};
    vecset_intern(&pairs, key, 2, &added);
    dfa_add_state(&bld);
    d->start = 0;
    for (uint32_t s = 0; s < d->n_states && !c->failed; s++) {
        uint32_t sa = pairs.data[pairs.off[s]], sb = pairs.data[pairs.off[s] + 1];
        bool in_b = sb != G_NONE && b->accept[sb];
        d->accept[s] = a->accept[sa] && (minus ? !in_b : in_b);
        for (uint32_t k = 0; k < nc; k++) {
            uint32_t ta = a->next[(size_t)sa * a->n_classes + a->class_of[rep[k]]];
            uint32_t tb = sb == G_NONE ? G_NONE : b->next[(size_t)sb * b->n_classes + b->class_of[rep[k]]];
            if (ta == G_NONE || (!minus && tb == G_NONE)) continue;
            key[0] = ta;
            key[1] = tb;
            uint32_t id = vecset_intern(&pairs, key, 2, &added);
            if (added) {
                if (c->dfa_states + d->n_states >= GRAMMAR_MAX_DFA) {
                    g_fail(c, "the automaton is too large (more than %d states)", GRAMMAR_MAX_DFA);
                    break;
                }
                dfa_add_state(&bld);
            }
            d->next[(size_t)s * nc + k] = id;
        }
    }
    free(d->call_off);
    d->call_off = NULL;
    vecset_free(&pairs);
    if (c->failed) {
        dfa_free(d);
        return NULL;
    }
    dfa_trim(d, NULL);
    dfa_minimize(d);
    return d;
}
