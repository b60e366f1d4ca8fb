/* Per automaton state, the tokens that may come next, computed once at compile time by a
 * walk of the vocabulary trie from that state (a dead prefix skips its subtree). A token
 * whose path leaves the state's rule (returns to a caller not known yet) is not decided
 * here: the walk records where that happens and the matcher finishes the job with the real
 * stack. States that accept any run of plain text (inside a JSON string, say) take every
 * plain token at once and walk only the small trie of the other tokens. Identical token
 * sets are stored once, each as a list, a list of exceptions, or a bitmap. */
#include "grammar_internal.h"
#include "hash64.h"
#include "threadpool.h"

#include <stdlib.h>
#include <string.h>

/* ---- plain text depth -------------------------------------------------------------------- */

typedef struct {
    uint8_t lo[4], hi[4];
    int n;
} seq_t;
typedef struct {
    seq_t v[32];
    int n;
} seqs_t;

static void add_seq(void *ctx, const uint8_t *lo, const uint8_t *hi, int n)
{
    seqs_t *s = ctx;
    if (s->n == 32) return;
    memcpy(s->v[s->n].lo, lo, (size_t)n);
    memcpy(s->v[s->n].hi, hi, (size_t)n);
    s->v[s->n++].n = n;
}

/* The states one plain character (any but '"', '\\' and controls) leads to from s through
 * byte edges of its own rule; false if some plain character has no way on. */
static bool plain_successors(const grammar_t *g, const seqs_t *seqs, uint32_t s, uint32_t *out, uint32_t *n_out,
                             uint32_t cap)
{
    *n_out = 0;
    for (int q = 0; q < seqs->n; q++) {
        const seq_t *sq = &seqs->v[q];
        uint32_t front[64], nf = 1, nxt[64];
        front[0] = s;
        for (int k = 0; k < sq->n; k++) {
            uint32_t nn = 0;
            for (uint32_t f = 0; f < nf; f++) {
                uint8_t seen[256] = {0};
                for (int b = sq->lo[k]; b <= sq->hi[k]; b++) {
                    uint8_t cl = g->class_of[b];
                    if (seen[cl]) continue;
                    seen[cl] = 1;
                    uint32_t t = g->next[(size_t)front[f] * g->n_classes + cl];
                    if (t == G_NONE) return false;
                    uint32_t j = 0;
                    while (j < nn && nxt[j] != t) j++;
                    if (j == nn) {
                        if (nn == 64) return false; /* too branchy to bother: walk it */
                        nxt[nn++] = t;
                    }
                }
            }
            memcpy(front, nxt, nn * sizeof *nxt);
            nf = nn;
        }
        for (uint32_t f = 0; f < nf; f++) {
            uint32_t j = 0;
            while (j < *n_out && out[j] != front[f]) j++;
            if (j == *n_out) {
                if (*n_out == cap) return false;
                out[(*n_out)++] = front[f];
            }
        }
    }
    return true;
}

/* depth[s]: how many plain characters s surely takes (capped at cap). */
static void plain_depth(const grammar_t *g, uint32_t cap, uint32_t *depth)
{
    seqs_t seqs = {0};
    utf8_sequences(0x20, 0x21, add_seq, &seqs);
    utf8_sequences(0x23, 0x5B, add_seq, &seqs);
    utf8_sequences(0x5D, G_MAX_CP, add_seq, &seqs);
    enum { MAXS = 16 };
    uint32_t n = g->n_states;
    uint32_t *succ = xmalloc((size_t)n * MAXS * sizeof *succ), *nsucc = xcalloc(n, sizeof *nsucc);
    uint8_t *cand = xcalloc(n, 1);
    static const uint8_t probe[] = {'a', ' ', '0', '~', 0xC3, 0xE4};
    for (uint32_t s = 0; s < n; s++) {
        depth[s] = 0;
        bool quick = true;
        for (size_t k = 0; k < sizeof probe && quick; k++)
            quick = g->next[(size_t)s * g->n_classes + g->class_of[probe[k]]] != G_NONE;
        if (quick) cand[s] = plain_successors(g, &seqs, s, succ + (size_t)s * MAXS, &nsucc[s], MAXS);
    }
    for (uint32_t round = 0; round < cap; round++) {
        bool changed = false;
        for (uint32_t s = 0; s < n; s++) {
            if (!cand[s]) continue;
            uint32_t m = cap;
            for (uint32_t i = 0; i < nsucc[s]; i++) {
                uint32_t t = succ[(size_t)s * MAXS + i];
                uint32_t dt = cand[t] ? depth[t] : 0;
                if (dt + 1 < m) m = dt + 1;
            }
            if (m != depth[s]) depth[s] = m, changed = true;
        }
        if (!changed) break;
    }
    free(succ);
    free(nsucc);
    free(cand);
}

/* ---- the walk ---------------------------------------------------------------------------- */

static void set_tokens(const grammar_vocab_t *v, const trie_t *t, uint32_t node, uint32_t *bits)
{
    for (uint32_t id = t->tok[node]; id != G_NONE; id = v->tok_next[id]) bits[id / 32] |= 1u << (id % 32);
}

/* Rules without calls: a plain table walk. Subtrees holding only plain tokens of at most
 * `skip_chars` characters are skipped: the caller has them already. */
static uint64_t walk_flat(const grammar_t *g, const trie_t *t, const uint8_t *plain_max, uint32_t skip_chars, uint32_t q,
                          uint32_t *bits)
{
    uint32_t at[GRAMMAR_MAX_TOKEN + 1];
    at[0] = q;
    const uint32_t *next = g->next;
    uint32_t nc = g->n_classes;
    uint64_t visits = 0;
    for (uint32_t i = 1; i < t->n; visits++) {
        if (plain_max && plain_max[i] <= skip_chars) {
            i = t->skip[i];
            continue;
        }
        uint32_t d = t->depth[i];
        uint32_t s = next[(size_t)at[d - 1] * nc + g->class_of[t->byte[i]]];
        if (s == G_NONE) {
            i = t->skip[i];
            continue;
        }
        at[d] = s;
        if (t->tok[i] != G_NONE) set_tokens(g->vocab, t, i, bits);
        i++;
    }
    return visits;
}

static uint64_t walk_stack(const grammar_t *g, const trie_t *t, const uint8_t *plain_max, uint32_t skip_chars, uint32_t q,
                           uint32_t *bits, gnodes_t *nodes, ids_t *pops, bool *pop_now)
{
    gcfg_t at[GRAMMAR_MAX_TOKEN + 1];
    uint32_t mark[GRAMMAR_MAX_TOKEN + 2];
    at[0] = (gcfg_t){q, G_BASE};
    mark[1] = 0;
    nodes->n = 0;
    uint64_t visits = 0;
    for (uint32_t i = 1; i < t->n; visits++) {
        if (plain_max && plain_max[i] <= skip_chars) {
            i = t->skip[i];
            continue;
        }
        uint32_t d = t->depth[i];
        nodes->n = mark[d];
        gcfg_t c = at[d - 1];
        step_result_t r = g_step(g, nodes, &c, t->byte[i]);
        if (r != STEP_OK) {
            if (r == STEP_POP_BASE) {
                if (d == 1) *pop_now = true;
                else ids_push(pops, i);
            }
            i = t->skip[i];
            continue;
        }
        at[d] = c;
        mark[d + 1] = nodes->n;
        if (t->tok[i] != G_NONE) set_tokens(g->vocab, t, i, bits);
        i++;
    }
    return visits;
}

/* ---- token sets ---------------------------------------------------------------------------- */

typedef struct {
    uint64_t *hash;
    uint32_t *table, cap;
} set_index_t;

static uint32_t popcount_words(const uint32_t *w, size_t n)
{
    uint32_t c = 0;
    for (size_t i = 0; i < n; i++) c += (uint32_t)__builtin_popcount(w[i]);
    return c;
}

static tokset_t encode_set(const grammar_vocab_t *v, const uint32_t *bits)
{
    size_t words = v->words;
    uint32_t n_in = popcount_words(bits, words), n_allowed = popcount_words(v->allowed, words);
    uint32_t n_out = n_allowed - n_in;
    tokset_t s = {0};
    if (n_in <= n_out && n_in <= words) {
        s.form = SET_LIST;
        s.n = n_in;
    } else if (n_out <= words) {
        s.form = SET_EXCEPT;
        s.n = n_out;
    } else {
        s.form = SET_BITMAP;
        s.n = (uint32_t)words;
    }
    s.data = xmalloc((s.n ? s.n : 1) * sizeof *s.data);
    uint32_t k = 0;
    for (size_t w = 0; w < words && s.form != SET_BITMAP; w++) {
        uint32_t x = s.form == SET_LIST ? bits[w] : v->allowed[w] & ~bits[w];
        while (x) {
            s.data[k++] = (uint32_t)(w * 32 + (uint32_t)__builtin_ctz(x));
            x &= x - 1;
        }
    }
    if (s.form == SET_BITMAP) memcpy(s.data, bits, words * sizeof *bits);
    return s;
}

static uint64_t set_hash(const tokset_t *s)
{
    uint64_t h = hash64(HASH64_INIT, &s->form, 1);
    return hash64(h, s->data, s->n * sizeof *s->data);
}

static uint32_t intern_set(grammar_t *g, set_index_t *ix, tokset_t s, uint32_t *cap_sets)
{
    if ((g->n_sets + 1) * 2 > ix->cap) {
        uint32_t cap = ix->cap ? 2 * ix->cap : 256;
        uint32_t *t = xmalloc(cap * sizeof *t);
        memset(t, 0xFF, cap * sizeof *t);
        for (uint32_t i = 0; i < g->n_sets; i++) {
            uint32_t j = (uint32_t)ix->hash[i] & (cap - 1);
            while (t[j] != G_NONE) j = (j + 1) & (cap - 1);
            t[j] = i;
        }
        free(ix->table);
        ix->table = t;
        ix->cap = cap;
    }
    uint64_t h = set_hash(&s);
    uint32_t j = (uint32_t)h & (ix->cap - 1);
    for (; ix->table[j] != G_NONE; j = (j + 1) & (ix->cap - 1)) {
        const tokset_t *o = &g->sets[ix->table[j]];
        if (ix->hash[ix->table[j]] == h && o->form == s.form && o->n == s.n && !memcmp(o->data, s.data, s.n * sizeof *s.data)) {
            free(s.data);
            return ix->table[j];
        }
    }
    if (g->n_sets == *cap_sets) {
        *cap_sets = *cap_sets ? 2 * *cap_sets : 64;
        g->sets = xrealloc(g->sets, *cap_sets * sizeof *g->sets);
        ix->hash = xrealloc(ix->hash, *cap_sets * sizeof *ix->hash);
    }
    g->sets[g->n_sets] = s;
    ix->hash[g->n_sets] = h;
    ix->table[j] = g->n_sets;
    g->stats.mask_bytes += s.n * sizeof *s.data;
    return g->n_sets++;
}

void tokset_or(const grammar_vocab_t *v, const tokset_t *s, uint32_t *mask, bool fresh)
{
    switch (s->form) {
    case SET_LIST:
        if (fresh) memset(mask, 0, v->words * sizeof *mask);
        for (uint32_t i = 0; i < s->n; i++) mask[s->data[i] / 32] |= 1u << (s->data[i] % 32);
        break;
    case SET_BITMAP:
        if (fresh) memcpy(mask, s->data, s->n * sizeof *mask);
        else
            for (uint32_t w = 0; w < s->n; w++) mask[w] |= s->data[w];
        break;
    case SET_EXCEPT:
        if (fresh) {
            memcpy(mask, v->allowed, v->words * sizeof *mask);
            for (uint32_t i = 0; i < s->n; i++) mask[s->data[i] / 32] &= ~(1u << (s->data[i] % 32));
            break;
        }
        /* allowed minus the exceptions (sorted), but what mask already has stays */
        for (size_t w = 0, k = 0; w < v->words; w++) {
            uint32_t ex = 0;
            while (k < s->n && s->data[k] / 32 == w) ex |= 1u << (s->data[k++] % 32);
            mask[w] |= v->allowed[w] & ~ex;
        }
        break;
    }
}

/* States are walked in chunks, in parallel when the vocabulary has a thread pool; each
 * chunk's sets are then interned in state order, so the result does not depend on it. */
#define CHUNK 256

typedef struct {
    const grammar_t *g;
    const uint32_t *depth;
    uint32_t cap, first;
    bool flat;
    uint32_t **bits;       /* per worker */
    gnodes_t *nodes;       /* per worker */
    tokset_t *sets;        /* per state of the chunk */
    uint64_t *visits;      /* per state of the chunk: trie nodes its walk visited */
    ids_t *pops;
    state_mask_t *masks;
} chunk_t;

static void walk_states(void *ctx, int64_t i0, int64_t i1, int worker)
{
    chunk_t *ch = ctx;
    const grammar_t *g = ch->g;
    const grammar_vocab_t *v = g->vocab;
    uint32_t *bits = ch->bits[worker];
    for (int64_t i = i0; i < i1; i++) {
        uint32_t s = ch->first + (uint32_t)i;
        state_mask_t *m = &ch->masks[s];
        /* every plain token of at most k characters is in; walk for the others: only the
         * small trie of non-plain tokens when no plain token is too long */
        uint32_t k = ch->depth[s] < ch->cap ? ch->depth[s] : ch->cap;
        bool fast = ch->cap > 0 && k == ch->cap;
        const trie_t *t = fast ? &v->rest : &v->all;
        const uint8_t *skip = fast || k == 0 ? NULL : v->plain_max;
        memcpy(bits, v->plain_le + (size_t)k * v->words, v->words * sizeof *bits);
        ch->pops[i].n = 0;
        ch->visits[i] = ch->flat ? walk_flat(g, t, skip, k, s, bits)
                                 : walk_stack(g, t, skip, k, s, bits, &ch->nodes[worker], &ch->pops[i], &m->pop_now);
        ch->sets[i] = encode_set(v, bits);
        m->pops_in_rest = fast;
    }
}

bool grammar_build_masks(grammar_t *g)
{
    const grammar_vocab_t *v = g->vocab;
    uint32_t n = g->n_states;
    int workers = v->pool ? tp_size(v->pool) : 1;
    chunk_t ch = {.g = g, .cap = v->plain_chars, .flat = g->call_off[n] == 0};
    uint32_t *depth = xmalloc(n * sizeof *depth);
    plain_depth(g, ch.cap, depth);
    ch.depth = depth;
    ch.bits = xmalloc((size_t)workers * sizeof *ch.bits);
    for (int w = 0; w < workers; w++) ch.bits[w] = xmalloc(v->words * sizeof **ch.bits);
    ch.nodes = xcalloc((size_t)workers, sizeof *ch.nodes);
    ch.sets = xmalloc(CHUNK * sizeof *ch.sets);
    ch.visits = xmalloc(CHUNK * sizeof *ch.visits);
    ch.pops = xcalloc(CHUNK, sizeof *ch.pops);
    ch.masks = g->masks = xcalloc(n, sizeof *g->masks);
    set_index_t ix = {0};
    uint32_t cap_sets = 0, cap_pops = 0;
    uint64_t visits = 0;
    bool ok = true;
    for (ch.first = 0; ch.first < n && ok; ch.first += CHUNK) {
        uint32_t count = n - ch.first < CHUNK ? n - ch.first : CHUNK;
        if (v->pool && count > 1) tp_for(v->pool, count, 1, walk_states, &ch);
        else walk_states(&ch, 0, count, 0);
        for (uint32_t i = 0; i < count; i++) visits += ch.visits[i];
        ok = visits <= GRAMMAR_MAX_MASK_WORK;
        for (uint32_t i = 0; i < count && !ok; i++) free(ch.sets[i].data); /* refused: the chunk's sets go unused */
        for (uint32_t i = 0; i < count && ok; i++) {
            state_mask_t *m = &g->masks[ch.first + i];
            m->set = intern_set(g, &ix, ch.sets[i], &cap_sets);
            m->pop_off = g->n_pops_total;
            m->n_pops = ch.pops[i].n;
            if (!m->n_pops) continue;
            if (g->n_pops_total + m->n_pops > cap_pops) {
                while (g->n_pops_total + m->n_pops > cap_pops) cap_pops = cap_pops ? 2 * cap_pops : 256;
                g->pops = xrealloc(g->pops, cap_pops * sizeof *g->pops);
            }
            memcpy(g->pops + g->n_pops_total, ch.pops[i].v, m->n_pops * sizeof *g->pops);
            g->n_pops_total += m->n_pops;
        }
    }
    g->stats.mask_sets = g->n_sets;
    g->stats.mask_bytes += g->n_pops_total * sizeof *g->pops + n * sizeof *g->masks;
    g->has_masks = ok;
    for (int w = 0; w < workers; w++) {
        free(ch.bits[w]);
        free(ch.nodes[w].v);
    }
    for (uint32_t i = 0; i < CHUNK; i++) free(ch.pops[i].v);
    free(ch.bits);
    free(ch.nodes);
    free(ch.sets);
    free(ch.visits);
    free(ch.pops);
    free(depth);
    free(ix.hash);
    free(ix.table);
    return ok;
}
