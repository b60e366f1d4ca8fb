/* Choosing the next token from logits, per request: greedy, or temperature with top-k, top-p
 * and min-p, and the log-probabilities a request asks for.
 *
 * The random number for a token is a pure function of the request's seed and the token's
 * position in the sequence (SplitMix64's mixer, counter-based: u = mix(seed ^ mix(position)),
 * 53 bits), so a request's output depends only on its prompt, its parameters and its seed:
 * never on which requests share its batch, on arrival order, or on which process samples it
 * (prefill draws the first token, decode the rest). A request without a seed gets the FNV-1a 64
 * hash of its id as seed: the same request (same id) gives the same output every run; give a
 * seed to vary it. The state frame records the seed used (seqstate rng[0]).
 *
 * Steps when sampling (temperature > 0): z = logits / temperature; top-k keeps the k largest
 * (ties: the lower id); probabilities are softmax(z) over what is kept; top-p keeps the
 * smallest set of most probable tokens whose mass reaches top_p (at least one); min-p then drops
 * tokens below min_p times the most probable one; the token is where u times the kept mass
 * falls in the cumulative sum, walked in rank order (descending probability, the lower id first)
 * when top-k or top-p applied, else in id order.
 * Greedy (temperature below 1e-5, or top-k 1) takes the largest logit, the lower id on a tie;
 * smaller temperatures would only overflow the division.
 *
 * A token mask (constrained decoding, grammar.h) comes first: the tokens outside it are never
 * drawn, and everything above acts on the allowed tokens alone, as if the others were absent
 * from the vocabulary (top-k keeps the k largest allowed ones, greedy takes the largest
 * allowed logit, and so on).
 *
 * Log-probabilities are those of the model's distribution (log-softmax of the raw logits,
 * before the mask, temperature and filters), as OpenAI reports them; the top alternatives are
 * the most likely tokens under it (ties: the lower id), allowed by the mask or not. */
#ifndef DI_SAMPLER_H
#define DI_SAMPLER_H

#include "frame.h"

#include <stdbool.h>
#include <stdint.h>

#define SAMPLER_DEFAULT_TEMPERATURE 1.0
#define SAMPLER_MIN_TEMPERATURE 1e-5 /* below it sampling is greedy */

typedef struct {
    double temperature; /* below SAMPLER_MIN_TEMPERATURE: greedy */
    int64_t top_k;      /* 0: off */
    double top_p;       /* 1: off */
    double min_p;       /* 0: off */
    uint64_t seed;
    bool logprobs;
    int top_logprobs;   /* alternatives per token, 0..FRAME_MAX_TOP */
} sampler_params_t;

/* A request's parameters with the defaults applied (temperature 1, no top-k, top-p 1,
 * min-p 0) and its seed: p->seed, or the hash of id when the request has none. */
sampler_params_t sampler_params(const frame_params_t *p, const char *id);

/* Whether sp picks greedily (temperature below SAMPLER_MIN_TEMPERATURE, or top-k 1). */
bool sampler_greedy(const sampler_params_t *sp);

/* The seed of a request without one: FNV-1a 64 of its id. */
uint64_t sampler_seed_of_id(const char *id);

/* The uniform number in [0, 1) that picks the token at `position` for `seed`. */
double sampler_uniform(uint64_t seed, int64_t position);

/* Scratch for one vocabulary; one per thread that samples. */
typedef struct sampler sampler_t;

sampler_t *sampler_new(int64_t vocab);
void sampler_free(sampler_t *s);

/* What sampler_pick returns when the mask allows no token. */
#define SAMPLER_NONE UINT32_MAX

/* The token at `position` from vocab logits, among the tokens of mask (bit v % 32 of word
 * v / 32 allows token v; NULL: every token). lp (may be NULL) receives the chosen token's
 * log-probability and its top alternatives when sp->logprobs. */
uint32_t sampler_pick(sampler_t *s, const sampler_params_t *sp, const float *logits, int64_t position, const uint32_t *mask,
                      frame_logprob_t *lp);

#endif
