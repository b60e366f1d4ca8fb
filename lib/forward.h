/* The DeepSeek-V4.1 text forward (MODEL_V41.md §5), written once over the backend ops
 * (backend.h) and the per-sequence state (seqstate.h): embedding and the hc streams with
 * single-pass mHC, Engram, every attention mode of the layer schedule (SWA / Full / Reindex /
 * Reuse, model_config.h), compressors, indexer and two-level top-k, grouped output
 * projection, MoE, final collapse, norm and fp32 head. The QAT simulations follow the state's
 * qat flag. A chunk is processed layer by layer (as the reference does); any chunking gives
 * the same numbers as one-shot prefill and as token-by-token decoding (bit for bit on the CPU
 * backend).
 *
 * Prefill modes (§7): exact runs every layer on every prompt token, as the reference does.
 * Bounded replay runs the encoder and the first decoder layer (whose compressor writes the
 * decoder's shared KV pool) on every token and the later decoder layers only on the last N
 * prompt tokens ("variant A" of MODEL_V41 §7: fastllm, vLLM); their windows then start at
 * the replay start, which changes the logits (measured in BENCHMARKS.md, "Bounded replay").
 *
 * Other model types: the forward branches on the layer schedule's flags, never on the
 * architecture. DeepSeek-V4 (MODEL.md) would add flags its schedule builder sets (an
 * overlapping ratio-4 compressor with position biases, HCA layers that attend to every visible
 * entry without an indexer, per-head query norm, hash-routed MoE layers, mHC with its own pre
 * and an hc_head) and the few ops they need, inside this same block loop. */
#ifndef DI_FORWARD_H
#define DI_FORWARD_H

#include "seqstate.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { FWD_LOGITS_NONE, FWD_LOGITS_LAST, FWD_LOGITS_ALL } fwd_logits_t;

/* Runs tokens ids[0..n) at positions st->T .. st->T + n - 1 and appends them to the state.
 * decoder_from: decoder layers after the first run only on positions >= decoder_from (bounded
 * replay; -1 for exact). logits (host, vocab floats per row) receives: LAST, the last
 * position's row; ALL, one row per position >= decoder_from; *n_logits (may be NULL) the
 * number of rows written (0 when the chunk ends before decoder_from).
 * 0, or -1 with err for a token id outside the vocabulary (the state is then unchanged). */
int forward_prefill(seqstate_t *st, const uint32_t *ids, int64_t n, int64_t decoder_from, fwd_logits_t want,
                    float *logits, int64_t *n_logits, char *err, size_t errlen);

/* One decode step: the token at position st->T; logits gets vocab floats. */
int forward_step(seqstate_t *st, uint32_t id, float *logits, char *err, size_t errlen);

/* One sequence's part of a batched forward: its chunk, and which logits it wants (as
 * forward_prefill; n_logits is set on return). */
typedef struct {
    seqstate_t *st;
    const uint32_t *ids;
    int64_t n;
    int64_t decoder_from;
    fwd_logits_t want;
    float *logits;
    int64_t n_logits;
    const bk_pick_t *pick; /* with want LAST: the backend picks the next token instead (forward_batch_pick) */
} fwd_seq_t;

/* Several sequences' chunks in one forward (continuous batching, packed prefill): every
 * weight is read once for all rows, while RoPE, compressor grouping, indexer and attention
 * run per sequence. Each sequence gets exactly the numbers forward_prefill gives it alone
 * (bit for bit on the CPU backend): the batch's composition and order change nothing. A state
 * appears at most once; all share one model. 0, or -1 with err naming the first bad token id
 * (then no state changes). */
int forward_batch(fwd_seq_t *seqs, int n_seqs, char *err, size_t errlen);

/* forward_batch where sequences may carry a pick (want LAST): the backend's pick op chooses
 * their next token from the last position's logits, which stay on the device. scratch: host
 * sampler scratch for the rows the backend hands to the host sampler. */
int forward_batch_pick(fwd_seq_t *seqs, int n_seqs, sampler_t *scratch, char *err, size_t errlen);

/* One decode step for n sequences: token ids[i] at position sts[i]->T; logits gets n rows of
 * vocab floats. */
int forward_step_batch(seqstate_t *const *sts, const uint32_t *ids, int n, float *logits, char *err, size_t errlen);

/* The same step, each sequence's next token chosen by the backend's pick op (picks[i]: its
 * sampler parameters, position, mask and destination): the logits stay on the device.
 * scratch: host sampler scratch for the rows the backend hands to the host sampler. */
int forward_step_batch_pick(seqstate_t *const *sts, const uint32_t *ids, int n, const bk_pick_t *picks, sampler_t *scratch,
                            char *err, size_t errlen);

#define FWD_DEFAULT_REPLAY 140  /* DeepInfer's bounded-replay tail (MODEL_V41 §7: unverified; 128 = window) */
#define FWD_DEFAULT_CHUNK  512  /* prefill chunk: bounds the per-chunk scratch */

/* A whole prompt in chunks of at most chunk tokens: exact when replay < 0, else bounded replay
 * of the last `replay` tokens. logits as forward_prefill (ALL counts positions from the replay
 * start). 0 or -1 with err. */
int forward_prompt(seqstate_t *st, const uint32_t *ids, int64_t n, int64_t replay, int64_t chunk, fwd_logits_t want,
                   float *logits, int64_t *n_logits, char *err, size_t errlen);

#endif
