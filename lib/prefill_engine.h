/* The prefill engine (di-prefill): request frames in, state frames out, over any transport.
 *
 * Requests wait in arrival order. Each step packs the oldest unfinished prompts into one
 * batched forward of at most token_budget prompt tokens (a long prompt takes several steps,
 * short ones share a step; forward_batch). When a prompt is complete the engine samples its
 * first output token from the last position's logits (sampler.h, at position T = the prompt's
 * length), stores it and the seed in the state (next_token, rng = {seed, 0}), serializes the
 * state (seqstate_io.h) and emits one state frame: the request's id, seq, params, constraint
 * and meta, `tokens` = [first token], its logprobs when asked, and `state`.
 *
 * What the state holds (docs/STATE.md): every layer's window rows, the compressed pools and
 * indexer keys of the KV-source layers, the open ratio-2 group, the Engram history, T, the
 * first token and the seed. Exact prefill (replay < 0, the default) runs every layer over
 * every prompt token, as the reference does. Bounded replay (replay N) runs the encoder and the
 * first decoder layer over every token and the later decoder layers over the last N only
 * (MODEL_V41 §7): those layers' windows then start N tokens before the end, and the first token
 * is drawn from replayed logits (exact from 1 + (W-1)*k tokens on, BENCHMARKS.md).
 *
 * Refused at once with an error frame: a prompt that is empty, holds an id outside the
 * vocabulary, or leaves no room in the context (code context_length: the prompt must be
 * shorter than `context`, so that at least one output token fits), or whose constraint cannot
 * be used (constraints.h: bad_constraint, or unsupported without a vocabulary).
 *
 * A constrained request's first token is drawn among the tokens its grammar allows at the
 * start of the output (grammar_matcher_fill_mask); di-decode replays it through the grammar. */
#ifndef DI_PREFILL_ENGINE_H
#define DI_PREFILL_ENGINE_H

#include "constraints.h"
#include "model.h"
#include "reply.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const model_t *m;
    bool qat;              /* the QAT simulations (on: the model as trained) */
    int64_t replay;        /* bounded replay tail in tokens; < 0: exact */
    int64_t token_budget;  /* prompt tokens per forward call */
    int64_t context;       /* positions a sequence may reach */
    const char *stage;     /* name in traces and error frames */
    frame_emit_fn emit;    /* state and error frames */
    void *ctx;
    constraints_t *constraints; /* grammars for constrained requests (NULL: refused, unsupported) */
} prefill_opts_t;

typedef struct {
    uint64_t requests, errors, tokens, calls, state_bytes;
    uint64_t forward_ns, mask_ns, serialize_ns; /* forward_ns includes the first tokens' pick; mask_ns: their grammar masks */
} prefill_stats_t;

typedef struct prefill_engine prefill_engine_t;

prefill_engine_t *prefill_new(const prefill_opts_t *o);
void prefill_free(prefill_engine_t *p);

/* Takes a request frame (moved: *f is left empty), read at in_us. */
void prefill_submit(prefill_engine_t *p, frame_t *f, uint64_t in_us);
/* Prompt tokens accepted and not yet prefilled. */
int64_t prefill_pending_tokens(const prefill_engine_t *p);
/* Whether to read more requests now: fewer than two budgets of tokens wait (the transport's
 * queue holds the rest: backpressure upstream). */
bool prefill_has_room(const prefill_engine_t *p);
/* One batched forward over up to token_budget tokens; emits the state frame of every prompt it
 * completes. Returns the tokens processed, 0 when there was nothing to do. */
int64_t prefill_step(prefill_engine_t *p);
const prefill_stats_t *prefill_stats(const prefill_engine_t *p);

#endif
