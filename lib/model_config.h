/* Model configuration: config.json parsed and validated, and the per-layer schedule derived
 * from it (MODEL_V41.md §1).
 *
 * Accepted layouts: the composite HF file (top level with "text_config", "quantization_config",
 * "vision_config", ...), or a flat text config (the text_config object alone). The reference
 * spellings of inference/config.json (dim, n_layers, window_size, rope_factor, ...) are accepted
 * as aliases; when two spellings of one field are both present they must agree. Every field the
 * text model uses is required and type-checked; a missing, ill-typed or out-of-range field is an
 * error naming it. Only HF's documented defaults are filled in, for fields the released file
 * may lack: gate_temp 1, n_shared_experts 1, num_key_value_heads 1, norm_topk_prob true, the
 * DSpark fields, the token ids (-1: absent), and the Engram sizes when there is no Engram layer.
 *
 * The schedule is a function of the config only, never of a hard-coded layer count. One
 * builder per model type fills the same layer_sched_t: deepseek_v41 is implemented; deepseek_v4
 * (MODEL.md: CSA/HCA layers, hash-routed MoE) is meant to be a second builder adding the flags
 * it needs, not a fork. */
#ifndef DI_MODEL_CONFIG_H
#define DI_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_MAX_LAYERS       256 /* backbone layers + DSpark stages */
#define MC_MAX_ENGRAM       8   /* Engram layers */
#define MC_MAX_NGRAM        8   /* engram_max_ngram_size */
#define MC_MAX_ENGRAM_HEADS 64  /* engram_n_heads */

typedef enum { ARCH_DEEPSEEK_V41 } model_arch_t;

/* Attention mode of a layer (TR §2.3.1, MODEL_V41 §1.3, §5.8). */
typedef enum {
    ATTN_SWA,     /* window only (ratio 0) */
    ATTN_FULL,    /* KV source: own compressor (pool + indexer keys) and own indexer */
    ATTN_REINDEX, /* index source without a compressor: own indexer query over its pool's keys */
    ATTN_REUSE,   /* reads the pool and the selection of the nearest earlier sources */
} attn_mode_t;

typedef enum { ROPE_MAIN, ROPE_COMPRESS } rope_table_t;

typedef struct {
    int ratio;             /* compression ratio, 0 = window only */
    attn_mode_t mode;
    bool decoder;          /* CED half: true from the first ratio-1 layer on */
    rope_table_t rope;     /* table for Q, window KV, pool entries, indexer (MODEL_V41 §5.5) */
    int kv_source;         /* layer whose pool and indexer keys it reads; -1 for SWA */
    int topk_source;       /* layer whose selection it attends with (itself for index sources); -1: none */
    bool has_compressor;   /* attn.compressor.wkv + norm: emits pool entries */
    bool compressor_gate;  /* attn.compressor.wgate (ratio > 1 pooling) */
    bool has_indexer;      /* attn.indexer.wq_b + weights_proj */
    bool indexer_keys;     /* attn.indexer.wk + k_norm: emits the indexer keys */
    bool candidate_source; /* publishes the level-1 candidate blocks (two-level top-k) */
    bool uses_candidates;  /* its top-k is restricted to the candidate source's blocks */
    int engram;            /* index into engram_layer_ids, -1: no Engram */
} layer_sched_t;

typedef struct {
    model_arch_t arch;

    /* --- text model (text_config) --- */
    int64_t vocab_size;
    int hidden_size;
    int n_layers;              /* backbone layers (num_hidden_layers) */
    int n_heads, n_kv_heads, head_dim, rope_dim, q_lora_rank, o_groups, o_lora_rank;
    double swiglu_limit, rms_norm_eps;
    int64_t max_position_embeddings;
    double rope_theta, compress_rope_theta;
    bool yarn;                 /* rope_scaling type yarn (compress table only) */
    double yarn_factor, yarn_beta_fast, yarn_beta_slow;
    int64_t yarn_original_max_pos;

    int n_routed_experts, n_shared_experts, n_experts_per_tok, moe_inter;
    double routed_scaling_factor, gate_temp;
    bool norm_topk_prob;

    int sliding_window;
    int n_compress_ratios;     /* entries given: n_layers .. n_layers + n_mtp; missing DSpark ones are 0 */
    int compress_ratios[MC_MAX_LAYERS];
    int n_kv_sources, kv_sources[MC_MAX_LAYERS];
    int n_index_sources, index_sources[MC_MAX_LAYERS];
    int candidate_source;      /* -1: two-level top-k disabled */
    int candidate_topk_blocks, candidate_block_size;
    int index_n_heads, index_head_dim, index_topk;

    int hc_mult, hc_sinkhorn_iters;
    double hc_eps;

    int n_engram;
    int engram_layers[MC_MAX_ENGRAM];
    int n_engram_rows;
    int64_t engram_rows[MC_MAX_ENGRAM]; /* engram_num_embeddings, checked against the prime layout */
    int engram_max_ngram, engram_n_heads, engram_head_dim;
    int64_t engram_vocab_size, engram_compressed_vocab;
    int engram_pad_id;

    int n_mtp;                 /* num_nextn_predict_layers (DSpark stages mtp.*) */
    int dspark_block_size, dspark_markov_rank, dspark_n_routed_experts, dspark_n_experts_per_tok;
    int64_t dspark_noise_token_id;
    int n_dspark_targets, dspark_targets[MC_MAX_LAYERS];

    /* --- top level (or text_config) --- */
    int64_t bos_token_id, eos_token_id, pad_token_id, image_token_id; /* -1: absent */

    /* --- quantization_config (absent for a bf16 checkpoint). Which tensors are FP8 or FP4 is
     * read from the checkpoint's dtypes, not from here. --- */
    bool quantized;
    int quant_block_rows, quant_block_cols; /* weight_block_size, [32, 32] for V4.1 */

    /* --- derived --- */
    int first_decoder_layer;   /* n_layers when there is no decoder half */
    layer_sched_t layers[MC_MAX_LAYERS];
} model_config_t;

/* Parses config.json text. 0 on success; -1 with the reason in err. */
int model_config_parse(const char *json, size_t len, model_config_t *c, char *err, size_t errlen);

/* Loads path: a config.json, or a directory holding one. */
int model_config_load(const char *path, model_config_t *c, char *err, size_t errlen);

/* Derives c->layers and c->first_decoder_layer from the fields (called by the parsers; exposed
 * for code that builds a config in memory, e.g. the checkpoint generator). Validates the
 * schedule. 0 or -1 with err. */
int model_config_schedule(model_config_t *c, char *err, size_t errlen);

const char *attn_mode_name(attn_mode_t m);

/* The Engram bucket layout (MODEL_V41 §5.2): for every Engram layer e, n-gram order
 * g = 2..max_ngram and head j, a distinct prime; primes are searched upwards from
 * engram_vocab_size for each (e, g), skipping primes handed out before (globally).
 * primes[e][(g-2)*heads + j]; returns 0, or -1 if the sizes exceed the bounds above. The table
 * of layer e has the sum of its primes as rows. */
int engram_primes(const model_config_t *c, int64_t primes[MC_MAX_ENGRAM][(MC_MAX_NGRAM - 1) * MC_MAX_ENGRAM_HEADS]);

#endif
