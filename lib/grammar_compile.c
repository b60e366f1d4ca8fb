/* Constraint -> grammar: the front end for the constraint's kind gives rule trees, each
 * rule becomes a DFA, the DFAs are linked into one pushdown automaton, and (optionally)
 * the per-state token sets are computed. Also the grammar's identity (canonical text and
 * hash) and its reference count. */
#include "grammar_internal.h"
#include "hash64.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t rules_add(rules_t *r)
{
    if (r->n_rules == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 8;
        r->rules = xrealloc(r->rules, r->cap * sizeof *r->rules);
    }
    r->rules[r->n_rules] = NULL;
    return r->n_rules++;
}

uint64_t grammar_key(const grammar_vocab_t *v, constraint_kind_t kind, const char *text)
{
    uint32_t head[2] = {GRAMMAR_VERSION, (uint32_t)kind};
    uint64_t h = hash64(HASH64_INIT, head, sizeof head);
    h = hash64(h, &v->fingerprint, sizeof v->fingerprint);
    if (text && kind != CONSTRAINT_JSON_OBJECT) h = hash64(h, text, strlen(text) + 1);
    return h;
}

/* Front ends: fill rules (rule 0 the start) and the canonical text. */
static bool front_end(gctx_t *c, constraint_kind_t kind, const char *text, rules_t *rules, char **canonical)
{
    switch (kind) {
    case CONSTRAINT_REGEX: {
        if (!text) return g_fail(c, "regex constraint without a pattern");
        rules_add(rules);
        rules->rules[0] = regex_parse(c, text, strlen(text), REGEX_PCRE);
        *canonical = xstrdup(text);
        return rules->rules[0] != NULL;
    }
    case CONSTRAINT_JSON_OBJECT: {
        uint32_t root = rules_add(rules), value = rules_add(rules);
        rules->rules[root] = json_object_body(c, value);
        rules->rules[value] = json_value_body(c, value);
        return true;
    }
    case CONSTRAINT_JSON_SCHEMA:
        if (!text) return g_fail(c, "json_schema constraint without a schema");
        return schema_compile(c, text, rules, canonical);
    case CONSTRAINT_NONE: break;
    }
    return g_fail(c, "no constraint to compile");
}

static void grammar_free(grammar_t *g)
{
    free(g->canonical);
    free(g->next);
    free(g->accept);
    free(g->rule_of);
    free(g->call_off);
    free(g->calls);
    free(g->rule_start);
    free(g->first);
    free(g->follow);
    free(g->dist);
    free(g->rule_min);
    free(g->masks);
    for (uint32_t i = 0; i < g->n_sets; i++) free(g->sets[i].data);
    free(g->sets);
    free(g->pops);
    free(g);
}

grammar_t *grammar_compile(const grammar_vocab_t *v, constraint_kind_t kind, const char *text, bool with_masks,
                           char *err, size_t errlen)
{
    uint64_t t0 = now_ns();
    gctx_t c;
    gctx_init(&c, err, errlen);
    rules_t rules = {0};
    char *canonical = NULL;
    dfa_t **dfas = NULL;
    grammar_t *g = NULL;
    bool ok = front_end(&c, kind, text, &rules, &canonical);
    if (ok) {
        dfas = xcalloc(rules.n_rules, sizeof *dfas);
        for (uint32_t r = 0; r < rules.n_rules && ok; r++) {
            dfas[r] = dfa_from_ast(&c, rules.rules[r]);
            ok = dfas[r] != NULL;
            if (ok) c.dfa_states += dfas[r]->n_states;
        }
    }
    if (ok) {
        g = xcalloc(1, sizeof *g);
        atomic_init(&g->refs, 1);
        g->vocab = v;
        g->kind = kind;
        ok = grammar_link(&c, g, dfas, rules.n_rules);
    }
    for (uint32_t r = 0; dfas && r < rules.n_rules; r++) dfa_free(dfas[r]);
    free(dfas);
    free(rules.rules);
    gctx_free(&c);
    if (!ok) {
        if (g) grammar_free(g);
        free(canonical);
        return NULL;
    }
    g->canonical = canonical;
    g->hash = grammar_key(v, kind, canonical);
    g->stats.rules = g->n_rules;
    g->stats.states = g->n_states;
    g->stats.classes = g->n_classes;
    g->stats.compile_ns = now_ns() - t0;
    if (with_masks) {
        uint64_t t1 = now_ns();
        if (!grammar_build_masks(g)) {
            snprintf(err, errlen, "the constraint is too costly to prepare (its token masks take more than %llu steps)",
                     (unsigned long long)GRAMMAR_MAX_MASK_WORK);
            grammar_free(g);
            return NULL;
        }
        g->stats.masks_ns = now_ns() - t1;
    }
    return g;
}

grammar_t *grammar_ref(grammar_t *g)
{
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void grammar_unref(grammar_t *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_free(g);
}

const char *grammar_canonical(const grammar_t *g) { return g->canonical; }
constraint_kind_t grammar_kind(const grammar_t *g) { return g->kind; }
uint64_t grammar_hash(const grammar_t *g) { return g->hash; }
grammar_stats_t grammar_stats(const grammar_t *g) { return g->stats; }
