/* The decode engine (di-decode): state frames in; tokens, done and error frames out, over any
 * transport.
 *
 * Continuous batching: the running sequences advance together, one batched forward step each
 * (forward_step_batch: weights read once for all of them); sequences join between steps as
 * room allows and leave as soon as they finish. Every step emits one tokens frame per running
 * sequence (the first frame of a request carries its meta and the first token prefill drew),
 * and a done frame (finish_reason, usage) when it ends (finish.h). Each frame carries the trace
 * with this stage's hop: read when the state arrived, written when the frame left.
 *
 * Memory: a sequence reserves, when it is admitted, room for every position it can reach: prompt +
 * min(max_tokens, context - prompt) tokens, counted against pool_tokens (its pools take pages as
 * it reaches them, pagestore.h, so one that ends early never holds the rest), plus its fixed
 * window rows; at most max_batch sequences run. A state that does not fit waits in arrival order
 * until running sequences finish: nothing is dropped. One that could never fit (more than
 * pool_tokens alone) is refused with an error frame (code too_large), as is a state that does not
 * deserialize (another model's fingerprint, truncated, corrupted: code bad_state) or disagrees
 * with its frame, and so is a request whose constraint cannot be used (constraints.h:
 * bad_constraint, or unsupported without a vocabulary) or whose tokens so far break it
 * (bad_state); the engine goes on serving the others.
 *
 * Constrained requests (constraints.h): the matcher is rebuilt from the tokens the state frame
 * carries; each step the row's logits are sampled within the tokens its grammar allows, and
 * the token taken advances the grammar. Where nothing but EOS may follow, EOS is taken at once
 * without another forward step (unless the request wants log-probabilities). max_tokens
 * reached inside an unfinished structure ends the request with "length", as any other. */
#ifndef DI_DECODE_ENGINE_H
#define DI_DECODE_ENGINE_H

#include "constraints.h"
#include "finish.h"
#include "model.h"
#include "reply.h"
#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const model_t *m;
    int64_t max_batch;        /* sequences per step */
    int64_t pool_tokens;      /* positions of state held at once, summed over sequences */
    finish_limits_t limits;   /* eos, default max_tokens, context */
    const tokenizer_t *tok;   /* for stop strings; NULL refuses requests that have them */
    const char *stage;
    frame_emit_fn emit;
    void *ctx;
    constraints_t *constraints; /* grammars for constrained requests (NULL: refused, unsupported) */
} decode_opts_t;

typedef struct {
    uint64_t requests, errors, steps, tokens, batch_sum, peak_batch, peak_pool;
    uint64_t forward_ns, deserialize_ns, queue_ns; /* forward_ns includes the backend's pick (sampling) */
    /* constrained tokens: mask, stop ids and accept time; EOS taken without a step */
    uint64_t grammar_tokens, grammar_ns, grammar_max_ns, forced_ends;
} decode_stats_t;

typedef struct decode_engine decode_engine_t;

decode_engine_t *decode_new(const decode_opts_t *o);
void decode_free(decode_engine_t *d);

/* Takes a state frame (moved: *f is left empty), read at in_us. */
void decode_submit(decode_engine_t *d, frame_t *f, uint64_t in_us);
size_t decode_waiting(const decode_engine_t *d);
/* Whether to read more states now: fewer than max_batch wait for admission (the transport's
 * queue holds the rest: backpressure upstream). */
bool decode_has_room(const decode_engine_t *d);
size_t decode_running(const decode_engine_t *d);
/* Admits what fits, then one step over the running sequences. Returns how many sequences
 * it moved (admitted or stepped); 0 when there was nothing to do. */
size_t decode_step(decode_engine_t *d);
const decode_stats_t *decode_stats(const decode_engine_t *d);

#endif
