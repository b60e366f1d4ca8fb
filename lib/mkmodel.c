/* Tiny checkpoint generator: presets, config.json, stand-in token map, weights. */
#include "mkmodel.h"

#include "dequant.h"
#include "model_weights.h"
#include "safetensors_write.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...)                               \
    do {                                        \
        snprintf(err, errlen, __VA_ARGS__);     \
        goto fail;                              \
    } while (0)

/* What each preset sets (each list with its count); mkmodel_config adds what all of them
 * share. */
static const struct {
    const char *name;
    model_config_t c;
} presets[] = {
    {"a", {.n_layers = 8, .hidden_size = 128, .n_heads = 4, .head_dim = 64, .rope_dim = 16, .q_lora_rank = 64,
           .o_groups = 2, .o_lora_rank = 32, .swiglu_limit = 1.0, .yarn_original_max_pos = 256, .n_routed_experts = 8,
           .n_experts_per_tok = 2, .moe_inter = 64, .sliding_window = 16,
           .n_compress_ratios = 11, .compress_ratios = {0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0},
           .n_kv_sources = 2, .kv_sources = {2, 4}, .n_index_sources = 3, .index_sources = {2, 4, 6},
           .candidate_source = 4, .candidate_topk_blocks = 3, .candidate_block_size = 4,
           .index_n_heads = 16, /* many heads: an entry scores exactly 0 (a top-k tie) with p = 2^-heads */
           .index_head_dim = 32, .index_topk = 8, .n_engram = 2, .engram_layers = {1, 2}, .engram_max_ngram = 4,
           .engram_n_heads = 2, .engram_head_dim = 32, .engram_vocab_size = 40}},
    {"b", {.n_layers = 12, .hidden_size = 160, .n_heads = 4, .head_dim = 96, .rope_dim = 32, .q_lora_rank = 80,
           .o_groups = 4, .o_lora_rank = 24, .swiglu_limit = 0.6, .yarn_original_max_pos = 64, .n_routed_experts = 6,
           .n_experts_per_tok = 3, .moe_inter = 96, .sliding_window = 24,
           .n_compress_ratios = 15, .compress_ratios = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0},
           .n_kv_sources = 3, .kv_sources = {2, 4, 6}, .n_index_sources = 5, .index_sources = {2, 4, 6, 8, 10},
           .candidate_source = 6, .candidate_topk_blocks = 2, .candidate_block_size = 6, .index_n_heads = 20,
           .index_head_dim = 64, .index_topk = 6, .n_engram = 2, .engram_layers = {1, 4}, .engram_max_ngram = 3,
           .engram_n_heads = 3, .engram_head_dim = 64, .engram_vocab_size = 50}},
    /* mid-size, for CPU benchmarks: the released shape at about 1/4 width */
    {"m", {.n_layers = 16, .hidden_size = 1024, .n_heads = 16, .head_dim = 128, .rope_dim = 64, .q_lora_rank = 512,
           .o_groups = 4, .o_lora_rank = 256, .swiglu_limit = 10.0, .yarn_original_max_pos = 256,
           .n_routed_experts = 16, .n_experts_per_tok = 2, .moe_inter = 256, .sliding_window = 64,
           .n_compress_ratios = 19, .compress_ratios = {0, 0, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0},
           .n_kv_sources = 3, .kv_sources = {2, 5, 8}, .n_index_sources = 5, .index_sources = {2, 5, 8, 11, 14},
           .candidate_source = 8, .candidate_topk_blocks = 4, .candidate_block_size = 32, .index_n_heads = 16,
           .index_head_dim = 64, .index_topk = 64, .n_engram = 2, .engram_layers = {1, 5}, .engram_max_ngram = 3,
           .engram_n_heads = 4, .engram_head_dim = 64, .engram_vocab_size = 64}},
};

int mkmodel_config(const char *preset, int64_t vocab, model_config_t *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    if (vocab < 16 || vocab > MKMODEL_FULL_VOCAB) FAIL("vocabulary size %lld outside [16, %d]", (long long)vocab, MKMODEL_FULL_VOCAB);
    size_t p = 0;
    while (p < DI_ARRAY_LEN(presets) && strcmp(presets[p].name, preset)) p++;
    if (p == DI_ARRAY_LEN(presets)) FAIL("unknown preset \"%s\" (a, b or m)", preset);
    *c = presets[p].c;
    c->arch = ARCH_DEEPSEEK_V41;
    c->vocab_size = vocab;
    c->n_kv_heads = 1;
    c->n_shared_experts = 1;
    c->rms_norm_eps = 1e-20;
    c->rope_theta = 10000;
    c->compress_rope_theta = 160000;
    c->yarn = true;
    c->yarn_factor = 16;
    c->yarn_beta_fast = 32;
    c->yarn_beta_slow = 1;
    c->routed_scaling_factor = 1.5;
    c->gate_temp = 1;
    c->norm_topk_prob = true;
    c->hc_mult = 4;
    c->hc_sinkhorn_iters = 20;
    c->hc_eps = 1e-6;
    c->engram_pad_id = 2;
    c->engram_compressed_vocab = vocab == MKMODEL_FULL_VOCAB ? 99092 : vocab * 3 / 5;
    c->n_mtp = 3;
    c->dspark_block_size = 5;
    c->dspark_noise_token_id = vocab > 128799 ? 128799 : vocab - 1;
    c->dspark_markov_rank = 32;
    c->dspark_n_routed_experts = 4;
    c->dspark_n_experts_per_tok = 2;
    c->bos_token_id = 0;
    c->eos_token_id = 1;
    c->pad_token_id = 2;
    c->image_token_id = vocab > 129264 ? 129264 : -1;
    c->quantized = true;
    c->quant_block_rows = c->quant_block_cols = 32;
    c->max_position_embeddings = c->yarn_original_max_pos * (int64_t)c->yarn_factor;
    int64_t primes[MC_MAX_ENGRAM][(MC_MAX_NGRAM - 1) * MC_MAX_ENGRAM_HEADS];
    if (engram_primes(c, primes)) FAIL("engram layout out of bounds");
    c->n_engram_rows = c->n_engram;
    for (int e = 0; e < c->n_engram; e++)
        for (int k = 0; k < (c->engram_max_ngram - 1) * c->engram_n_heads; k++) c->engram_rows[e] += primes[e][k];
    return model_config_schedule(c, err, errlen);
fail:
    return -1;
}

/* ---- config.json --------------------------------------------------------------------- */

static json_t *int_list(const int *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *text_config(const model_config_t *c) {
    json_t *t = json_object();
    json_t *rows = json_array();
    for (int e = 0; e < c->n_engram; e++) json_array_append_new(rows, json_integer(c->engram_rows[e]));
    json_t *targets = json_array();
    for (int L = c->n_layers - 3; L < c->n_layers; L++) json_array_append_new(targets, json_integer(L));
    json_object_set_new(t, "model_type", json_string("deepseek_v41_text"));
#define I(k, v) json_object_set_new(t, k, json_integer(v))
#define R(k, v) json_object_set_new(t, k, json_real(v))
    I("vocab_size", c->vocab_size);
    I("hidden_size", c->hidden_size);
    I("num_hidden_layers", c->n_layers);
    I("num_attention_heads", c->n_heads);
    I("num_key_value_heads", c->n_kv_heads);
    I("head_dim", c->head_dim);
    I("qk_rope_head_dim", c->rope_dim);
    I("q_lora_rank", c->q_lora_rank);
    I("o_groups", c->o_groups);
    I("o_lora_rank", c->o_lora_rank);
    json_object_set_new(t, "hidden_act", json_string("silu"));
    R("swiglu_limit", c->swiglu_limit);
    R("rms_norm_eps", c->rms_norm_eps);
    json_object_set_new(t, "attention_bias", json_false());
    I("max_position_embeddings", c->max_position_embeddings);
    R("rope_theta", c->rope_theta);
    R("compress_rope_theta", c->compress_rope_theta);
    json_object_set_new(t, "rope_scaling",
                        json_pack("{s:s,s:f,s:f,s:f,s:I}", "rope_type", "yarn", "factor", c->yarn_factor, "beta_fast",
                                  c->yarn_beta_fast, "beta_slow", c->yarn_beta_slow, "original_max_position_embeddings",
                                  (json_int_t)c->yarn_original_max_pos));
    I("n_routed_experts", c->n_routed_experts);
    I("n_shared_experts", c->n_shared_experts);
    I("num_experts_per_tok", c->n_experts_per_tok);
    I("moe_intermediate_size", c->moe_inter);
    json_object_set_new(t, "scoring_func", json_string("sqrtsoftplus"));
    json_object_set_new(t, "topk_method", json_string("noaux_tc"));
    json_object_set_new(t, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    R("routed_scaling_factor", c->routed_scaling_factor);
    I("sliding_window", c->sliding_window);
    json_object_set_new(t, "compress_ratios", int_list(c->compress_ratios, c->n_compress_ratios));
    json_object_set_new(t, "kv_source_layer_ids", int_list(c->kv_sources, c->n_kv_sources));
    json_object_set_new(t, "index_source_layer_ids", int_list(c->index_sources, c->n_index_sources));
    I("candidate_source_layer_id", c->candidate_source);
    I("candidate_topk_blocks", c->candidate_topk_blocks);
    I("candidate_block_size", c->candidate_block_size);
    I("index_n_heads", c->index_n_heads);
    I("index_head_dim", c->index_head_dim);
    I("index_topk", c->index_topk);
    I("hc_mult", c->hc_mult);
    I("hc_sinkhorn_iters", c->hc_sinkhorn_iters);
    R("hc_eps", c->hc_eps);
    json_object_set_new(t, "engram_layer_ids", int_list(c->engram_layers, c->n_engram));
    json_object_set_new(t, "engram_num_embeddings", rows);
    I("engram_max_ngram_size", c->engram_max_ngram);
    I("engram_n_heads", c->engram_n_heads);
    I("engram_head_dim", c->engram_head_dim);
    I("engram_vocab_size", c->engram_vocab_size);
    I("engram_pad_token_id", c->engram_pad_id);
    I("engram_compressed_vocab_size", c->engram_compressed_vocab);
    I("num_nextn_predict_layers", c->n_mtp);
    I("dspark_block_size", c->dspark_block_size);
    I("dspark_noise_token_id", c->dspark_noise_token_id);
    json_object_set_new(t, "dspark_target_layer_ids", targets);
    I("dspark_markov_rank", c->dspark_markov_rank);
    I("dspark_n_routed_experts", c->dspark_n_routed_experts);
    I("dspark_num_experts_per_tok", c->dspark_n_experts_per_tok);
#undef I
#undef R
    return t;
}

static int write_config(const model_config_t *c, const char *dir, char *err, size_t errlen) {
    json_t *root = json_object();
    json_object_set_new(root, "architectures", json_pack("[s]", "DeepseekV41ForCausalLM"));
    json_object_set_new(root, "model_type", json_string("deepseek_v41"));
    json_object_set_new(root, "dtype", json_string("bfloat16"));
    json_object_set_new(root, "bos_token_id", json_integer(c->bos_token_id));
    json_object_set_new(root, "eos_token_id", json_integer(c->eos_token_id));
    json_object_set_new(root, "pad_token_id", json_integer(c->pad_token_id));
    if (c->image_token_id >= 0) json_object_set_new(root, "image_token_id", json_integer(c->image_token_id));
    json_object_set_new(root, "tie_word_embeddings", json_false());
    if (c->quantized)
        json_object_set_new(root, "quantization_config",
                            json_pack("{s:s,s:s,s:[i,i],s:s,s:s}", "quant_method", "fp8", "activation_scheme", "dynamic",
                                      "weight_block_size", c->quant_block_rows, c->quant_block_cols, "scale_fmt", "ue8m0",
                                      "expert_dtype", "fp4"));
    json_object_set_new(root, "text_config", text_config(c));
    json_object_set_new(root, "vision_config",
                        json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:f,s:i,s:i,s:i,s:n}", "model_type", "deepseek_v41_vision",
                                  "num_hidden_layers", 32, "hidden_size", 1024, "num_attention_heads", 16,
                                  "intermediate_size", 2816, "patch_size", 14, "rope_theta", 10000.0, "downsample_ratio", 3,
                                  "max_image_tokens", 1024, "min_pixels", 295936, "max_wh_ratio"));
    buf_t p = {0};
    buf_printf(&p, "%s/config.json", dir);
    int rc = json_dump_file(root, buf_cstr(&p), JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (rc) snprintf(err, errlen, "%s: write failed", buf_cstr(&p));
    buf_free(&p);
    json_decref(root);
    return rc ? -1 : 0;
}

/* ---- deterministic numbers ---------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t name_seed(uint64_t seed, const char *name) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (; *name; name++) h = (h ^ (uint8_t)*name) * 0x100000001B3ull;
    return seed * 0x9E3779B97F4A7C15ull ^ h;
}

/* Uniform on [-sqrt 3, sqrt 3): unit variance, exactly reproducible (no libm). */
static float unit(uint64_t *s) {
    int32_t k = (int32_t)(splitmix(s) >> 40) - (1 << 23);
    return (float)k * (1.7320508f / 8388608.0f);
}

static int write_token_map(const model_config_t *c, uint64_t seed, const char *dir, char *err, size_t errlen) {
    uint32_t *m = xmalloc((size_t)c->vocab_size * 4);
    uint64_t s = name_seed(seed, "engram_token_map");
    /* ids below the compressed size map to themselves, so every compressed id is used and
     * the numbering is first-seen order, as the tokenizer-derived map's is */
    for (int64_t t = 0; t < c->vocab_size; t++)
        m[t] = t < c->engram_compressed_vocab ? (uint32_t)t : (uint32_t)(splitmix(&s) % (uint64_t)c->engram_compressed_vocab);
    buf_t p = {0};
    buf_printf(&p, "%s/engram_token_map.u32", dir);
    FILE *f = fopen(buf_cstr(&p), "wb");
    bool ok = f && fwrite(m, 4, (size_t)c->vocab_size, f) == (size_t)c->vocab_size;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) snprintf(err, errlen, "%s: %s", buf_cstr(&p), strerror(errno));
    buf_free(&p);
    free(m);
    return ok ? 0 : -1;
}

/* ---- weights --------------------------------------------------------------------------- */

typedef struct {
    const model_config_t *c;
    uint64_t seed;
    st_writer_t *w;
} gen_t;

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static void fill(const model_tensor_t *t, uint64_t seed, float *v) {
    uint64_t s = name_seed(seed, t->name);
    size_t n = (size_t)(t->rows * t->cols);
    float a = 0, k = 1; /* value = a + k r */
    if (ends_with(t->name, "norm.weight")) a = 1, k = 0.2f;
    else if (ends_with(t->name, "_base")) k = 0.5f;
    else if (ends_with(t->name, "_scale")) a = 1, k = 0.3f;
    else if (ends_with(t->name, ".bias") || ends_with(t->name, ".bias_vl")) k = 0.3f;
    else if (ends_with(t->name, "q_weight") || ends_with(t->name, "k_weight")) a = 1, k = 0.3f;
    else if (ends_with(t->name, "attn_sink") || !strcmp(t->name, "embed.weight") || ends_with(t->name, "engram.embed.weight")) k = 1;
    else k = 1.0f / sqrtf((float)t->cols);
    for (size_t i = 0; i < n; i++) v[i] = a + k * unit(&s);
}

/* UE8M0 exponent of the smallest power of two s with amax / s <= qmax. */
static int scale_exp(float amax, float qmax) {
    if (!(amax > 0)) return 0;
    int e;
    float f = frexpf(amax / qmax, &e); /* amax/qmax = f 2^e, f in [0.5, 1) */
    int k = f == 0.5f ? e - 1 : e;
    return k < -127 ? -127 : k > 127 ? 127 : k;
}

/* Quantizes v in br x bc blocks: codes (e4m3 bytes, or e2m1 codes one per byte) and E8M0
 * scale bytes [ceil(rows/br)][ceil(cols/bc)]; v is replaced by the dequantized values. */
static void quantize(float *v, int64_t rows, int64_t cols, int br, int bc, bool fp4, uint8_t *codes, uint8_t *scales) {
    int64_t nbr = (rows + br - 1) / br, nbc = (cols + bc - 1) / bc;
    for (int64_t R = 0; R < nbr; R++)
        for (int64_t C = 0; C < nbc; C++) {
            int64_t r1 = (R + 1) * br < rows ? (R + 1) * br : rows, c1 = (C + 1) * bc < cols ? (C + 1) * bc : cols;
            float amax = 0;
            for (int64_t r = R * br; r < r1; r++)
                for (int64_t c = C * bc; c < c1; c++) amax = fmaxf(amax, fabsf(v[r * cols + c]));
            int k = scale_exp(amax, fp4 ? 6.0f : 448.0f);
            scales[R * nbc + C] = (uint8_t)(127 + k);
            float s = e8m0_to_f32((uint8_t)(127 + k));
            for (int64_t r = R * br; r < r1; r++)
                for (int64_t c = C * bc; c < c1; c++) {
                    float q = v[r * cols + c] / s;
                    uint8_t code = fp4 ? f32_to_e2m1(q) : f32_to_e4m3(q);
                    codes[r * cols + c] = code;
                    v[r * cols + c] = (fp4 ? e2m1_to_f32(code) : e4m3_to_f32(code)) * s;
                }
        }
}

static void add(gen_t *g, const model_tensor_t *t, const char *name, st_dtype_t dt, int64_t d0, int64_t d1, void *data, size_t n) {
    int64_t shape[2] = {d0, d1};
    if (t->vector) shape[0] = d1;
    stw_add(g->w, name, dt, t->vector ? 1 : 2, shape, data, n);
}

static bool gen_one(void *ctx, const model_tensor_t *t) {
    gen_t *g = ctx;
    const model_config_t *c = g->c;
    size_t n = (size_t)(t->rows * t->cols);
    float *v = xmalloc(n * sizeof *v);
    fill(t, g->seed, v);
    if (t->stored == TS_F32) {
        add(g, t, t->name, ST_F32, t->rows, t->cols, v, n * 4);
        return true;
    }
    bool fp4 = t->stored == TS_FP4;
    if (t->stored != TS_BF16) {
        int br = t->stored == TS_FP8 ? c->quant_block_rows : 1, bc = t->stored == TS_FP8 ? c->quant_block_cols : 32;
        size_t ns = wmat_scale_count(t->rows, t->cols, br, bc);
        uint8_t *codes = xmalloc(n), *scales = xmalloc(ns);
        quantize(v, t->rows, t->cols, br, bc, fp4, codes, scales);
        if (c->quantized) {
            char sname[160];
            snprintf(sname, sizeof sname, "%.*s.scale", (int)(strlen(t->name) - 7), t->name);
            if (fp4) {
                int64_t pc = (t->cols + 1) / 2;
                uint8_t *packed = xcalloc((size_t)(t->rows * pc), 1);
                for (int64_t r = 0; r < t->rows; r++)
                    for (int64_t col = 0; col < t->cols; col++)
                        packed[r * pc + col / 2] |= (uint8_t)((codes[r * t->cols + col] & 15) << (4 * (col & 1)));
                free(codes);
                add(g, t, t->name, ST_I8, t->rows, pc, packed, (size_t)(t->rows * pc));
            } else {
                add(g, t, t->name, ST_F8_E4M3, t->rows, t->cols, codes, n);
            }
            int64_t shape[2] = {(t->rows + br - 1) / br, (t->cols + bc - 1) / bc};
            stw_add(g->w, sname, ST_F8_E8M0, 2, shape, scales, ns);
            free(v);
            return true;
        }
        free(codes);
        free(scales);
    }
    uint16_t *h = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(v[i]);
    free(v);
    add(g, t, t->name, ST_BF16, t->rows, t->cols, h, n * 2);
    return true;
}

int mkmodel_write(const model_config_t *c, uint64_t seed, int shards, const char *dir, char *err, size_t errlen) {
    if (c->quant_block_rows < 1 || c->quant_block_cols < 1) {
        snprintf(err, errlen, "the FP8 block size must be set (also for bf16, whose weights are the dequantized FP8 ones)");
        return -1;
    }
    if (write_config(c, dir, err, errlen)) return -1;
    if (c->vocab_size != MKMODEL_FULL_VOCAB && write_token_map(c, seed, dir, err, errlen)) return -1;
    gen_t g = {.c = c, .seed = seed, .w = stw_new()};
    model_tensors_foreach(c, NULL, gen_one, &g);
    int rc = stw_write(g.w, dir, shards, err, errlen);
    stw_free(g.w);
    return rc;
}
