/* A model ready for the forward: config, memory-mapped weights bound to a backend, the
 * small parameter vectors uploaded as fp32 tensors, the RoPE tables, the Engram hash layout
 * with the tokenizer-derived token map, and a fingerprint that states refer to.
 *
 * The Engram token map (MODEL_V41 §5.2) comes from, in order: the path given; DIR/
 * engram_token_map.u32 (the generator writes one for its small-vocabulary models); the file
 * engram_token_map.u32 beside the default tokenizer.json (scripts/engram-token-map.py writes it
 * there at set-up time from the tokenizer, for the real vocabulary). */
#ifndef DI_MODEL_H
#define DI_MODEL_H

#include "backend.h"
#include "engram_hash.h"
#include "model_config.h"
#include "model_weights.h"
#include "pagestore.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bk_weight_t *hc_attn_fn, *hc_ffn_fn;
    bk_tensor_t hc_attn_base, hc_attn_scale, hc_ffn_base, hc_ffn_scale;
    bk_tensor_t attn_norm, ffn_norm;
    struct {
        bk_weight_t *wq_a, *wq_b, *wkv, *wo_a, *wo_b;
        bk_tensor_t q_norm, kv_norm, sink;
        bk_weight_t *cmp_wkv, *cmp_wgate;       /* has_compressor; compressor_gate */
        bk_tensor_t cmp_norm;
        bk_weight_t *idx_wq_b, *idx_wproj;      /* has_indexer */
        bk_weight_t *idx_wk;                    /* indexer_keys */
        bk_tensor_t idx_k_norm;
    } attn;
    struct {
        bk_weight_t *gate;
        bk_tensor_t bias;
        bk_expert_t *experts;                   /* n_routed_experts */
        bk_expert_t shared;
    } ffn;
    struct {
        bk_weight_t *table, *wkv;
        bk_tensor_t qk;                         /* q_weight * k_weight, hc x D */
    } engram;                                   /* schedule's engram >= 0 */
} model_layer_t;

typedef struct {
    model_config_t cfg;
    model_weights_t w;
    backend_t *bk;
    model_layer_t *layers;
    bk_weight_t *embed, *head;
    bk_tensor_t norm;
    bk_tensor_t inv_freq[2];                    /* by rope_table_t */
    engram_hash_t engram;                       /* n_layers 0 when the model has none */
    pagepool_t *pool_pages, *key_pages;         /* the sequences' pool entries and indexer keys (seqstate.h) */
    uint64_t fingerprint;                       /* config, tensor layout and samples, token map */
    char dir[1024];
} model_t;

/* The model's page pools for its sequences' states (model_open calls it; a model built another
 * way, the benchmark's random one, calls it once bk is set); model_close frees them. */
void model_pages_new(model_t *m);

/* Opens the checkpoint in dir for backend bk. token_map: NULL for the search above. 0, or -1
 * with err; on failure nothing needs freeing. */
int model_open(model_t *m, const char *dir, backend_t *bk, const char *token_map, char *err, size_t errlen);
void model_close(model_t *m);

/* The token-map path model_open would use for dir (a static buffer), or NULL if none exists. */
const char *model_token_map_path(const char *dir);

#endif
