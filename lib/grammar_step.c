/* One byte through the pushdown automaton. The compiler checked that at every state the
 * byte edges, the first bytes of each callable rule and (where the state may end its rule)
 * the bytes that can follow the rule are disjoint, so each byte has at most one way on:
 * a configuration is a single stack, never a set. */
#include "grammar_internal.h"

#include <stdlib.h>

static uint32_t push_node(const grammar_t *g, gnodes_t *nodes, uint32_t ret, uint32_t parent)
{
    if (nodes->n == nodes->cap) {
        nodes->cap = nodes->cap ? 2 * nodes->cap : 64;
        nodes->v = xrealloc(nodes->v, nodes->cap * sizeof *nodes->v);
    }
    gnode_t n = {ret, parent, g->dist[ret], g->accept[ret] != 0};
    if (parent < G_BASE) {
        const gnode_t *p = &nodes->v[parent];
        n.tail = n.tail == G_NONE || p->tail == G_NONE ? G_NONE : n.tail + p->tail;
        n.can_end = n.can_end && p->can_end;
    }
    nodes->v[nodes->n] = n;
    return nodes->n++;
}

step_result_t g_step(const grammar_t *g, gnodes_t *nodes, gcfg_t *cfg, uint8_t b)
{
    for (;;) {
        uint32_t s = cfg->state;
        uint32_t t = g->next[(size_t)s * g->n_classes + g->class_of[b]];
        if (t != G_NONE) {
            cfg->state = t;
            return STEP_OK;
        }
        bool called = false;
        for (uint32_t i = g->call_off[s]; i < g->call_off[s + 1]; i++) {
            const dfa_call_t *c = &g->calls[i];
            if (bit_has(g->first[c->rule], b)) {
                cfg->parent = push_node(g, nodes, c->to, cfg->parent);
                cfg->state = g->rule_start[c->rule];
                called = true;
                break;
            }
        }
        if (called) continue;
        if (!g->accept[s] || !bit_has(g->follow[g->rule_of[s]], b)) return STEP_DEAD;
        if (cfg->parent == G_NONE) return STEP_DEAD;
        if (cfg->parent == G_BASE) return STEP_POP_BASE;
        const gnode_t *p = &nodes->v[cfg->parent];
        cfg->state = p->state;
        cfg->parent = p->parent;
    }
}

bool g_cfg_can_end(const grammar_t *g, const gnodes_t *nodes, gcfg_t cfg)
{
    if (!g->accept[cfg.state]) return false;
    return cfg.parent == G_NONE || nodes->v[cfg.parent].can_end;
}

uint32_t g_cfg_distance(const grammar_t *g, const gnodes_t *nodes, gcfg_t cfg)
{
    uint32_t d = g->dist[cfg.state];
    if (cfg.parent == G_NONE || d == G_NONE) return d;
    uint32_t t = nodes->v[cfg.parent].tail;
    return t == G_NONE ? G_NONE : d + t;
}

void g_walk_subtree(const grammar_t *g, gnodes_t *nodes, gcfg_t cfg, const trie_t *t, uint32_t node, uint32_t *mask)
{
    const grammar_vocab_t *v = g->vocab;
    gcfg_t at[GRAMMAR_MAX_TOKEN + 1];
    uint32_t mark[GRAMMAR_MAX_TOKEN + 2];
    uint32_t d0 = t->depth[node];
    at[d0 - 1] = cfg;
    mark[d0] = nodes->n;
    for (uint32_t i = node, end = t->skip[node]; i < end;) {
        uint32_t d = t->depth[i];
        nodes->n = mark[d];
        gcfg_t c = at[d - 1];
        if (g_step(g, nodes, &c, t->byte[i]) != STEP_OK) {
            i = t->skip[i];
            continue;
        }
        at[d] = c;
        mark[d + 1] = nodes->n;
        for (uint32_t id = t->tok[i]; id != G_NONE; id = v->tok_next[id]) mask[id / 32] |= 1u << (id % 32);
        i++;
    }
    nodes->n = mark[d0];
}
