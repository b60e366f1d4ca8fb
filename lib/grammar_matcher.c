/* A request's position in a compiled grammar: the current state and the stack of rule
 * frames below it (frames live in an append-only array, so undoing tokens is truncating).
 * The mask of the current state is its stored token set, plus, for tokens that return to
 * a caller, a walk of just those trie subtrees with the real stack, and, where the state
 * may end its rule, the caller's mask in turn. */
#include "grammar_internal.h"

#include <stdlib.h>
#include <string.h>

typedef enum { PHASE_REASONING, PHASE_ANSWER, PHASE_FINISHED } phase_t;

typedef struct {
    gcfg_t cfg;
    uint32_t nodes;
    uint8_t phase;
} hist_t;

struct grammar_matcher {
    grammar_t *g;
    gnodes_t nodes;
    gcfg_t cfg;
    phase_t phase;
    hist_t *hist;
    uint32_t n_hist, cap_hist;
};

static gcfg_t start_cfg(const grammar_t *g) { return (gcfg_t){g->rule_start[0], G_NONE}; }

grammar_matcher_t *grammar_matcher_new(grammar_t *g, bool thinking)
{
    if (!g->has_masks) return NULL;
    grammar_matcher_t *m = xcalloc(1, sizeof *m);
    m->g = grammar_ref(g);
    m->cfg = start_cfg(g);
    m->phase = thinking && g->vocab->think_end >= 0 ? PHASE_REASONING : PHASE_ANSWER;
    return m;
}

void grammar_matcher_free(grammar_matcher_t *m)
{
    if (!m) return;
    grammar_unref(m->g);
    free(m->nodes.v);
    free(m->hist);
    free(m);
}

static bool is_eos(const grammar_vocab_t *v, uint32_t id)
{
    for (uint32_t i = 0; i < v->n_eos; i++)
        if (v->eos[i] == id) return true;
    return false;
}

bool grammar_matcher_can_end(const grammar_matcher_t *m)
{
    return m->phase == PHASE_ANSWER && g_cfg_can_end(m->g, &m->nodes, m->cfg);
}

bool grammar_matcher_is_accepting(const grammar_matcher_t *m)
{
    return m->phase == PHASE_FINISHED || grammar_matcher_can_end(m);
}

bool grammar_matcher_is_finished(const grammar_matcher_t *m) { return m->phase == PHASE_FINISHED; }
bool grammar_matcher_in_reasoning(const grammar_matcher_t *m) { return m->phase == PHASE_REASONING; }
uint32_t grammar_matcher_position(const grammar_matcher_t *m) { return m->n_hist; }

uint32_t grammar_matcher_bytes_to_end(const grammar_matcher_t *m)
{
    if (m->phase == PHASE_FINISHED) return 0;
    if (m->phase == PHASE_REASONING) return G_NONE;
    return g_cfg_distance(m->g, &m->nodes, m->cfg);
}

bool grammar_matcher_must_end(grammar_matcher_t *m)
{
    if (!grammar_matcher_can_end(m)) return false;
    uint32_t keep = m->nodes.n;
    bool more = false;
    for (int b = 0; b < 256 && !more; b++) {
        gcfg_t c = m->cfg;
        more = g_step(m->g, &m->nodes, &c, (uint8_t)b) == STEP_OK;
        m->nodes.n = keep;
    }
    return !more;
}

void grammar_matcher_fill_mask(grammar_matcher_t *m, uint32_t *mask)
{
    const grammar_t *g = m->g;
    const grammar_vocab_t *v = g->vocab;
    if (m->phase == PHASE_FINISHED) {
        memset(mask, 0, v->words * sizeof *mask);
        return;
    }
    if (m->phase == PHASE_REASONING) {
        /* free text, but the answer must come: no EOS */
        memset(mask, 0xFF, v->words * sizeof *mask);
        if (v->n % 32) mask[v->words - 1] = (1u << (v->n % 32)) - 1;
        for (uint32_t i = 0; i < v->n_eos; i++) mask[v->eos[i] / 32] &= ~(1u << (v->eos[i] % 32));
        return;
    }
    uint32_t keep = m->nodes.n;
    bool fresh = true;
    for (gcfg_t cfg = m->cfg;;) {
        const state_mask_t *sm = &g->masks[cfg.state];
        tokset_or(v, &g->sets[sm->set], mask, fresh);
        fresh = false;
        if (cfg.parent == G_NONE) break;
        const gnode_t *p = &m->nodes.v[cfg.parent];
        gcfg_t up = {p->state, p->parent};
        const trie_t *t = sm->pops_in_rest ? &v->rest : &v->all;
        for (uint32_t i = 0; i < sm->n_pops; i++) g_walk_subtree(g, &m->nodes, up, t, g->pops[sm->pop_off + i], mask);
        m->nodes.n = keep;
        if (!sm->pop_now) break;
        cfg = up;
    }
    if (grammar_matcher_can_end(m))
        for (uint32_t i = 0; i < v->n_eos; i++) mask[v->eos[i] / 32] |= 1u << (v->eos[i] % 32);
}

static void push_hist(grammar_matcher_t *m)
{
    if (m->n_hist == m->cap_hist) {
        m->cap_hist = m->cap_hist ? 2 * m->cap_hist : 64;
        m->hist = xrealloc(m->hist, m->cap_hist * sizeof *m->hist);
    }
    m->hist[m->n_hist++] = (hist_t){m->cfg, m->nodes.n, (uint8_t)m->phase};
}

bool grammar_matcher_accept(grammar_matcher_t *m, uint32_t token)
{
    const grammar_vocab_t *v = m->g->vocab;
    if (m->phase == PHASE_FINISHED || token >= v->n) return false;
    if (m->phase == PHASE_REASONING) {
        if (is_eos(v, token)) return false;
        push_hist(m);
        if ((int64_t)token == v->think_end) m->phase = PHASE_ANSWER;
        return true;
    }
    if (is_eos(v, token)) {
        if (!grammar_matcher_can_end(m)) return false;
        push_hist(m);
        m->phase = PHASE_FINISHED;
        return true;
    }
    if (v->excluded[token]) return false;
    gcfg_t c = m->cfg;
    uint32_t keep = m->nodes.n;
    for (uint32_t i = 0; i < v->lens[token]; i++)
        if (g_step(m->g, &m->nodes, &c, v->bytes[token][i]) != STEP_OK) {
            m->nodes.n = keep;
            return false;
        }
    uint32_t grown = m->nodes.n;
    m->nodes.n = keep;
    push_hist(m);
    m->nodes.n = grown;
    m->cfg = c;
    return true;
}

bool grammar_matcher_rollback(grammar_matcher_t *m, uint32_t n)
{
    if (n > m->n_hist) return false;
    if (!n) return true;
    hist_t h = m->hist[m->n_hist - n];
    m->n_hist -= n;
    m->cfg = h.cfg;
    m->nodes.n = h.nodes;
    m->phase = (phase_t)h.phase;
    return true;
}

size_t grammar_matcher_key(const grammar_matcher_t *m, uint32_t *out, size_t cap)
{
    size_t n = 0;
    if (n < cap) out[n] = m->phase;
    n++;
    if (n < cap) out[n] = m->cfg.state;
    n++;
    for (uint32_t p = m->cfg.parent; p != G_NONE; p = m->nodes.v[p].parent, n++)
        if (n < cap) out[n] = m->nodes.v[p].state;
    return n;
}

bool grammar_match_bytes(const grammar_t *g, const uint8_t *s, size_t n)
{
    gnodes_t nodes = {0};
    gcfg_t c = start_cfg(g);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) ok = g_step(g, &nodes, &c, s[i]) == STEP_OK;
    ok = ok && g_cfg_can_end(g, &nodes, c);
    free(nodes.v);
    return ok;
}
