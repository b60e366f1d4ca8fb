/* Random outputs through the masks: the model loop with a seeded coin in place of the
 * model (see grammar.h). */
#include "grammar_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static uint32_t nth_bit(const uint32_t *mask, size_t words, uint32_t k)
{
    for (size_t w = 0; w < words; w++) {
        uint32_t c = (uint32_t)__builtin_popcount(mask[w]);
        if (k < c) {
            uint32_t x = mask[w];
            while (k--) x &= x - 1;
            return (uint32_t)(w * 32 + (uint32_t)__builtin_ctz(x));
        }
        k -= c;
    }
    return G_NONE;
}

/* The allowed token after which the fewest bytes complete the output. */
static uint32_t steer(grammar_matcher_t *m, const uint32_t *mask, size_t words, uint64_t *rng)
{
    uint32_t best = G_NONE, best_id = G_NONE, ties = 0;
    for (size_t w = 0; w < words; w++)
        for (uint32_t x = mask[w]; x; x &= x - 1) {
            uint32_t id = (uint32_t)(w * 32 + (uint32_t)__builtin_ctz(x));
            if (!grammar_matcher_accept(m, id)) continue;
            uint32_t d = grammar_matcher_bytes_to_end(m);
            grammar_matcher_rollback(m, 1);
            if (d < best || best_id == G_NONE) best = d, best_id = id, ties = 1;
            else if (d == best && rng_next(rng) % ++ties == 0) best_id = id;
        }
    return best_id;
}

void grammar_walk(grammar_t *g, const grammar_walk_opts_t *o, grammar_walk_t *out)
{
    const grammar_vocab_t *v = g->vocab;
    uint32_t max_tokens = o->max_tokens ? o->max_tokens : 2000, steer_after = o->steer_after ? o->steer_after : 48;
    uint32_t think_tokens = o->think_tokens ? o->think_tokens : 12;
    uint64_t rng = o->seed * 2654435761u + 7;
    *out = (grammar_walk_t){0};
    out->mask_ns = xmalloc(max_tokens * sizeof *out->mask_ns);
    uint32_t *mask = xmalloc(v->words * sizeof *mask);
    grammar_matcher_t *m = grammar_matcher_new(g, o->thinking);
    while (out->tokens.n < max_tokens && !grammar_matcher_is_finished(m)) {
        uint64_t t0 = now_ns();
        grammar_matcher_fill_mask(m, mask);
        out->mask_ns[out->n_mask_ns++] = now_ns() - t0;
        uint32_t allowed = 0;
        for (size_t w = 0; w < v->words; w++) allowed += (uint32_t)__builtin_popcount(mask[w]);
        if (!allowed) break;
        uint32_t n = (uint32_t)out->tokens.n, id;
        if (grammar_matcher_in_reasoning(m)) {
            id = n >= think_tokens ? (uint32_t)v->think_end : nth_bit(mask, v->words, (uint32_t)(rng_next(&rng) % allowed));
        } else if (v->n_eos && grammar_matcher_can_end(m) && (n - out->answer_start >= steer_after || rng_next(&rng) % 3 == 0)) {
            id = v->eos[0];
        } else if (n - out->answer_start >= steer_after) {
            id = steer(m, mask, v->words, &rng);
        } else {
            id = nth_bit(mask, v->words, (uint32_t)(rng_next(&rng) % allowed));
        }
        if (id == G_NONE || !grammar_matcher_accept(m, id)) break;
        ids_push(&out->tokens, id);
        if ((int64_t)id == v->think_end && !grammar_matcher_in_reasoning(m)) out->answer_start = (uint32_t)out->tokens.n;
    }
    out->finished = grammar_matcher_is_finished(m);
    grammar_matcher_free(m);
    free(mask);
}

void grammar_walk_free(grammar_walk_t *w)
{
    ids_free(&w->tokens);
    free(w->mask_ns);
    *w = (grammar_walk_t){0};
}
