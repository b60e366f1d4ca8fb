/* The checkpoint's tensors bound to the model structure by their official names
 * (MODEL_V41.md §3: no "model." prefix, "head.weight" for the LM head, "X.scale" beside every
 * quantized "X.weight"), with the shape of each derived from the config and its schedule.
 *
 * Accepted storage per tensor:
 *   hc_* mixes, attn_sink, gate.bias, gate.bias_vl   F32 only (as released);
 *   every other weight                              F32, BF16, or F8_E4M3 with a .scale
 *                                                   (F8_E8M0 or F32) of 32x32 tiles as the
 *                                                   config's weight_block_size says, 1x32
 *                                                   blocks for the Engram tables;
 *   routed experts additionally                     FP4: I8/U8 [out, ceil(in/2)], even column in
 *                                                   the low nibble, .scale [out, ceil(in/32)].
 * A missing tensor, a tensor of the wrong shape or dtype, and a tensor the model does not have
 * are errors naming the tensor. Tensors under vision., aligner. and image_* (the vision tower)
 * are skipped, as are the DSpark stages mtp.* (no DSpark in the forward yet): both are counted.
 * Every wmat_t points into the memory-mapped files; dequantize with wmat_rows (dequant.h).
 * Vectors (norm weights, biases, sinks) are 1 x n. */
#ifndef DI_MODEL_WEIGHTS_H
#define DI_MODEL_WEIGHTS_H

#include "dequant.h"
#include "model_config.h"
#include "safetensors.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    wmat_t hc_attn_fn, hc_attn_base, hc_attn_scale; /* [(2+hc)*hc, hc*D], [(2+hc)*hc], [3] */
    wmat_t hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
    wmat_t attn_norm, ffn_norm;                     /* [D] */
    struct {
        wmat_t wq_a, q_norm, wq_b;                  /* [q_lora, D], [q_lora], [H*hd, q_lora] */
        wmat_t wkv, kv_norm;                        /* [hd, D], [hd] */
        wmat_t wo_a, wo_b;                          /* [G*R, H*hd/G], [D, G*R] */
        wmat_t attn_sink;                           /* [H] */
        wmat_t cmp_wkv, cmp_norm;                   /* has_compressor: [hd, D], [hd] */
        wmat_t cmp_wgate;                           /* compressor_gate: [hd, D] */
        wmat_t idx_wq_b, idx_weights_proj;          /* has_indexer: [Hi*di, q_lora], [Hi, D] */
        wmat_t idx_wk, idx_k_norm;                  /* indexer_keys: [di, hd], [di] */
    } attn;
    struct {
        wmat_t gate, gate_bias, gate_bias_vl;       /* [E, D], [E], [E] */
        wmat_t *w1, *w2, *w3;                       /* n_routed_experts each: [I, D], [D, I], [I, D] */
        wmat_t sh_w1, sh_w2, sh_w3;                 /* shared expert, same shapes */
    } ffn;
    struct {
        wmat_t embed;                               /* [rows, ed]: the hash table */
        wmat_t wkv;                                 /* [D*(hc+1), (ngram-1)*heads*ed] */
        wmat_t q_weight, k_weight;                  /* [hc, D] */
    } engram;                                       /* when the schedule's engram >= 0 */
} layer_weights_t;

typedef struct {
    st_archive_t *st;               /* owned */
    wmat_t embed, norm, head;       /* [V, D], [D], [V, D] */
    layer_weights_t *layers;        /* n_layers */
    int n_layers, n_experts;
    size_t n_bound, n_skipped_vision, n_skipped_mtp;
} model_weights_t;

/* The inventory: every tensor the model has under this config, with its shape and the storage
 * the released checkpoint uses. One list serves the binder and the checkpoint generator. */
typedef enum {
    TS_F32,      /* F32 (mHC mixes, sinks, gate biases) */
    TS_BF16,     /* BF16 (norms, embed, head, router, compressor, indexer keys/weights) */
    TS_FP8,      /* F8_E4M3 + .scale in weight_block_size tiles (dense projections) */
    TS_FP8_ROWS, /* F8_E4M3 + .scale in 1x32 blocks (Engram tables) */
    TS_FP4,      /* E2M1 packed in I8 + .scale in 1x32 blocks (routed experts) */
} tensor_storage_t;

typedef struct {
    char name[128];
    tensor_storage_t stored;  /* as released */
    bool vector;              /* 1-D [cols] */
    int64_t rows, cols;       /* logical shape (rows 1 for vectors) */
    wmat_t *slot;             /* its place in model_weights_t, when enumerating for one */
} model_tensor_t;

/* Calls fn for every tensor in a fixed order; stops and returns false when fn does. With w
 * non-NULL, slot points into w (whose expert arrays are allocated here). */
bool model_tensors_foreach(const model_config_t *c, model_weights_t *w, bool (*fn)(void *ctx, const model_tensor_t *t),
                           void *ctx);

/* Opens the checkpoint at dir (see st_open) and binds it for config c. 0, or -1 with err;
 * on failure nothing needs freeing. */
int model_weights_load(model_weights_t *w, const model_config_t *c, const char *dir, char *err, size_t errlen);

void model_weights_free(model_weights_t *w);

#endif
