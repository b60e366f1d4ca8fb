/* config.json: table-driven field parsing with aliases, then the per-model-type schedule. */
#include "model_config.h"

#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MC_MAX_FILE (16u << 20)

typedef enum { F_I32, F_I64, F_F64, F_BOOL, F_STR, F_I32_LIST, F_I64_LIST } fkind_t;

typedef enum {
    REQUIRED,
    OPTIONAL,    /* absent: the default */
    ENGRAM_ONLY, /* required when engram_layer_ids is not empty, else the default */
} need_t;

typedef struct {
    const char *names[3]; /* HF spelling first, then aliases of the reference config */
    fkind_t kind;
    size_t off;           /* value, or list array */
    size_t count_off;     /* list: its int count */
    int max_count;
    double min, max;      /* numbers and list items */
    need_t need;
    double def;
    const char *must;     /* F_STR: the only accepted value */
} field_t;

#define OFF(f) offsetof(model_config_t, f)
#define NUM(k, n0, n1, fld, lo, hi) {{n0, n1, NULL}, k, OFF(fld), 0, 0, lo, hi, REQUIRED, 0, NULL}
#define OPT(k, n0, n1, fld, lo, hi, d) {{n0, n1, NULL}, k, OFF(fld), 0, 0, lo, hi, OPTIONAL, d, NULL}
#define ENG(k, n0, n1, fld, lo, hi, d) {{n0, n1, NULL}, k, OFF(fld), 0, 0, lo, hi, ENGRAM_ONLY, d, NULL}
#define LIST(k, n0, n1, fld, cnt, maxc, lo, hi) {{n0, n1, NULL}, k, OFF(fld), OFF(cnt), maxc, lo, hi, REQUIRED, 0, NULL}
#define STR(n0, n1, need, value) {{n0, n1, NULL}, F_STR, 0, 0, 0, 0, 0, need, 0, value}

static const field_t FIELDS[] = {
    NUM(F_I64, "vocab_size", NULL, vocab_size, 1, 1 << 24),
    NUM(F_I32, "hidden_size", "dim", hidden_size, 1, 1 << 16),
    NUM(F_I32, "num_hidden_layers", "n_layers", n_layers, 1, MC_MAX_LAYERS),
    NUM(F_I32, "num_attention_heads", "n_heads", n_heads, 1, 1024),
    OPT(F_I32, "num_key_value_heads", NULL, n_kv_heads, 1, 1, 1),
    NUM(F_I32, "head_dim", NULL, head_dim, 32, 4096),
    NUM(F_I32, "qk_rope_head_dim", "rope_head_dim", rope_dim, 2, 4096),
    NUM(F_I32, "q_lora_rank", NULL, q_lora_rank, 1, 1 << 16),
    NUM(F_I32, "o_groups", NULL, o_groups, 1, 1024),
    NUM(F_I32, "o_lora_rank", NULL, o_lora_rank, 1, 1 << 16),
    STR("hidden_act", NULL, REQUIRED, "silu"),
    NUM(F_F64, "swiglu_limit", NULL, swiglu_limit, 0, 1e9),
    NUM(F_F64, "rms_norm_eps", "norm_eps", rms_norm_eps, 0, 1),
    NUM(F_I64, "max_position_embeddings", NULL, max_position_embeddings, 1, 1LL << 40),
    NUM(F_F64, "rope_theta", NULL, rope_theta, 1e-9, 1e15),
    NUM(F_F64, "compress_rope_theta", NULL, compress_rope_theta, 1e-9, 1e15),
    NUM(F_I32, "n_routed_experts", NULL, n_routed_experts, 1, 1 << 16),
    OPT(F_I32, "n_shared_experts", NULL, n_shared_experts, 1, 1, 1),
    NUM(F_I32, "num_experts_per_tok", "n_activated_experts", n_experts_per_tok, 1, 1 << 16),
    NUM(F_I32, "moe_intermediate_size", "moe_inter_dim", moe_inter, 1, 1 << 20),
    STR("scoring_func", "score_func", REQUIRED, "sqrtsoftplus"),
    STR("topk_method", NULL, OPTIONAL, "noaux_tc"),
    OPT(F_BOOL, "norm_topk_prob", NULL, norm_topk_prob, 0, 1, 1),
    NUM(F_F64, "routed_scaling_factor", "route_scale", routed_scaling_factor, 0, 1e9),
    OPT(F_F64, "gate_temp", NULL, gate_temp, 1e-9, 1e9, 1.0),
    NUM(F_I32, "sliding_window", "window_size", sliding_window, 1, 1 << 20),
    LIST(F_I32_LIST, "compress_ratios", NULL, compress_ratios, n_compress_ratios, MC_MAX_LAYERS, 0, 1024),
    LIST(F_I32_LIST, "kv_source_layer_ids", "kv_source_layers", kv_sources, n_kv_sources, MC_MAX_LAYERS, 0, MC_MAX_LAYERS - 1),
    LIST(F_I32_LIST, "index_source_layer_ids", "index_source_layers", index_sources, n_index_sources, MC_MAX_LAYERS, 0, MC_MAX_LAYERS - 1),
    NUM(F_I32, "candidate_source_layer_id", "candidate_source_layer", candidate_source, -1, MC_MAX_LAYERS - 1),
    NUM(F_I32, "candidate_topk_blocks", NULL, candidate_topk_blocks, 1, 1 << 24),
    NUM(F_I32, "candidate_block_size", NULL, candidate_block_size, 1, 1 << 20),
    NUM(F_I32, "index_n_heads", NULL, index_n_heads, 1, 1024),
    NUM(F_I32, "index_head_dim", NULL, index_head_dim, 32, 4096),
    NUM(F_I32, "index_topk", NULL, index_topk, 1, 1 << 24),
    NUM(F_I32, "hc_mult", NULL, hc_mult, 1, 16),
    NUM(F_I32, "hc_sinkhorn_iters", NULL, hc_sinkhorn_iters, 1, 1000),
    NUM(F_F64, "hc_eps", NULL, hc_eps, 0, 1),
    LIST(F_I32_LIST, "engram_layer_ids", NULL, engram_layers, n_engram, MC_MAX_ENGRAM, 0, MC_MAX_LAYERS - 1),
    {{"engram_num_embeddings", NULL, NULL}, F_I64_LIST, OFF(engram_rows), OFF(n_engram_rows), MC_MAX_ENGRAM, 1, 1e15, ENGRAM_ONLY, 0, NULL},
    ENG(F_I32, "engram_max_ngram_size", NULL, engram_max_ngram, 2, MC_MAX_NGRAM, 4),
    ENG(F_I32, "engram_n_heads", NULL, engram_n_heads, 1, MC_MAX_ENGRAM_HEADS, 8),
    ENG(F_I32, "engram_head_dim", NULL, engram_head_dim, 32, 1 << 16, 256),
    ENG(F_I64, "engram_vocab_size", NULL, engram_vocab_size, 1, 1e12, 16000000),
    ENG(F_I32, "engram_pad_token_id", "engram_pad_id", engram_pad_id, 0, 1 << 24, 2),
    ENG(F_I64, "engram_compressed_vocab_size", NULL, engram_compressed_vocab, 1, 1 << 24, 99092),
    NUM(F_I32, "num_nextn_predict_layers", "n_mtp_layers", n_mtp, 0, 16),
    OPT(F_I32, "dspark_block_size", NULL, dspark_block_size, 1, 1024, 5),
    OPT(F_I64, "dspark_noise_token_id", NULL, dspark_noise_token_id, 0, 1 << 24, 128799),
    OPT(F_I32, "dspark_markov_rank", NULL, dspark_markov_rank, 1, 1 << 16, 256),
    OPT(F_I32, "dspark_n_routed_experts", NULL, dspark_n_routed_experts, 1, 1 << 16, 128),
    OPT(F_I32, "dspark_num_experts_per_tok", "dspark_n_activated_experts", dspark_n_experts_per_tok, 1, 1 << 16, 3),
    {{"dspark_target_layer_ids", NULL, NULL}, F_I32_LIST, OFF(dspark_targets), OFF(n_dspark_targets), MC_MAX_LAYERS, 0, MC_MAX_LAYERS - 1, OPTIONAL, 0, NULL},
    OPT(F_I64, "bos_token_id", NULL, bos_token_id, -1, 1 << 24, -1),
    OPT(F_I64, "eos_token_id", NULL, eos_token_id, -1, 1 << 24, -1),
    OPT(F_I64, "pad_token_id", NULL, pad_token_id, -1, 1 << 24, -1),
    OPT(F_I64, "image_token_id", NULL, image_token_id, -1, 1 << 24, -1),
};

/* A parsed value, so that two spellings can be compared before one is stored. */
typedef struct {
    double num;
    bool b;
    int n;
    int64_t list[MC_MAX_LAYERS];
} value_t;

#define FAIL(...)                               \
    do {                                        \
        snprintf(err, errlen, __VA_ARGS__);     \
        goto fail;                              \
    } while (0)

static bool integral(const json_t *v, double lo, double hi, double *out) {
    if (!json_is_integer(v)) return false;
    json_int_t x = json_integer_value(v);
    if ((double)x < lo || (double)x > hi) return false;
    *out = (double)x;
    return true;
}

static const char *kind_desc(fkind_t k) {
    switch (k) {
    case F_I32: case F_I64: return "an integer";
    case F_F64: return "a number";
    case F_BOOL: return "true or false";
    case F_STR: return "a string";
    default: return "a list of integers";
    }
}

static bool parse_value(const field_t *f, const char *name, const json_t *v, value_t *out, char *err, size_t errlen) {
    switch (f->kind) {
    case F_I32:
    case F_I64:
        if (!integral(v, f->min, f->max, &out->num)) FAIL("config: '%s' must be an integer in [%.0f, %.0f]", name, f->min, f->max);
        return true;
    case F_F64:
        if (!json_is_number(v)) FAIL("config: '%s' must be a number", name);
        out->num = json_number_value(v);
        if (!(out->num >= f->min && out->num <= f->max)) FAIL("config: '%s' = %g is outside [%g, %g]", name, out->num, f->min, f->max);
        return true;
    case F_BOOL:
        if (!json_is_boolean(v)) FAIL("config: '%s' must be true or false", name);
        out->b = json_is_true(v);
        return true;
    case F_STR:
        if (!json_is_string(v)) FAIL("config: '%s' must be a string", name);
        if (strcmp(json_string_value(v), f->must)) FAIL("config: '%s' is \"%.40s\"; only \"%s\" is supported", name, json_string_value(v), f->must);
        return true;
    case F_I32_LIST:
    case F_I64_LIST:
        if (!json_is_array(v)) FAIL("config: '%s' must be a list of integers", name);
        if (json_array_size(v) > (size_t)f->max_count) FAIL("config: '%s' has %zu entries (at most %d)", name, json_array_size(v), f->max_count);
        out->n = (int)json_array_size(v);
        for (int i = 0; i < out->n; i++) {
            double x;
            if (!integral(json_array_get(v, (size_t)i), f->min, f->max, &x))
                FAIL("config: '%s'[%d] must be an integer in [%.0f, %.0f]", name, i, f->min, f->max);
            out->list[i] = (int64_t)x;
        }
        return true;
    }
fail:
    return false;
}

static bool same_value(const field_t *f, const value_t *a, const value_t *b) {
    switch (f->kind) {
    case F_BOOL: return a->b == b->b;
    case F_STR: return true;
    case F_I32_LIST:
    case F_I64_LIST: return a->n == b->n && !memcmp(a->list, b->list, (size_t)a->n * sizeof a->list[0]);
    default: return a->num == b->num;
    }
}

static void store(model_config_t *c, const field_t *f, const value_t *v) {
    char *base = (char *)c;
    switch (f->kind) {
    case F_I32: *(int *)(base + f->off) = (int)v->num; break;
    case F_I64: *(int64_t *)(base + f->off) = (int64_t)v->num; break;
    case F_F64: *(double *)(base + f->off) = v->num; break;
    case F_BOOL: *(bool *)(base + f->off) = v->b; break;
    case F_STR: break;
    case F_I32_LIST:
        for (int i = 0; i < v->n; i++) ((int *)(base + f->off))[i] = (int)v->list[i];
        *(int *)(base + f->count_off) = v->n;
        break;
    case F_I64_LIST:
        for (int i = 0; i < v->n; i++) ((int64_t *)(base + f->off))[i] = v->list[i];
        *(int *)(base + f->count_off) = v->n;
        break;
    }
}

/* Reads one field from any of its spellings in any of the objects; all present must agree. */
static bool read_field(const field_t *f, json_t *const objs[2], model_config_t *c, bool engram, char *err, size_t errlen) {
    value_t *first = xcalloc(1, sizeof *first), *next = xcalloc(1, sizeof *next);
    const char *first_name = NULL;
    for (int k = 0; k < 3 && f->names[k]; k++)
        for (int o = 0; o < 2; o++) {
            if (!objs[o] || (o == 1 && objs[1] == objs[0])) continue;
            json_t *v = json_object_get(objs[o], f->names[k]);
            if (!v || json_is_null(v)) continue;
            if (!parse_value(f, f->names[k], v, first_name ? next : first, err, errlen)) goto fail;
            if (!first_name) first_name = f->names[k];
            else if (!same_value(f, first, next))
                FAIL("config: '%s' and '%s' are both given and disagree", first_name, f->names[k]);
        }
    if (first_name) {
        store(c, f, first);
    } else if (f->need == REQUIRED || (f->need == ENGRAM_ONLY && engram)) {
        FAIL("config: missing field '%s' (%s)", f->names[0], kind_desc(f->kind));
    } else if (f->kind != F_STR) {
        first->num = f->def;
        first->b = f->def != 0;
        store(c, f, first);
    }
    free(first);
    free(next);
    return true;
fail:
    free(first);
    free(next);
    return false;
}

static const field_t *field_named(const char *name) {
    for (size_t i = 0; i < DI_ARRAY_LEN(FIELDS); i++)
        if (!strcmp(FIELDS[i].names[0], name)) return &FIELDS[i];
    return NULL;
}

/* A number from obj[name], or the flat alias text[alias]; both present must agree. */
static bool rope_number(json_t *obj, const char *name, json_t *text, const char *alias, bool required, double *out,
                        char *err, size_t errlen) {
    json_t *a = obj ? json_object_get(obj, name) : NULL, *b = alias ? json_object_get(text, alias) : NULL;
    if (a && !json_is_number(a)) FAIL("config: 'rope_scaling.%s' must be a number", name);
    if (b && !json_is_number(b)) FAIL("config: '%s' must be a number", alias);
    if (a && b && json_number_value(a) != json_number_value(b))
        FAIL("config: 'rope_scaling.%s' and '%s' are both given and disagree", name, alias);
    if (!a && !b) {
        if (required) FAIL("config: rope_scaling is yarn but '%s' is missing", name);
        return true;
    }
    *out = json_number_value(a ? a : b);
    if (!(*out > 0) || *out > 1e15) FAIL("config: 'rope_scaling.%s' = %g must be positive", name, *out);
    return true;
fail:
    return false;
}

/* rope_scaling {rope_type: yarn, factor, beta_fast, beta_slow, original_max_position_embeddings}
 * (HF), or rope_parameters.compress (a config HF re-saved), or the flat rope_factor /
 * original_seq_len / beta_fast / beta_slow of the reference config. */
static bool parse_rope(json_t *text, model_config_t *c, char *err, size_t errlen) {
    json_t *rs = json_object_get(text, "rope_scaling");
    if (rs && json_is_null(rs)) rs = NULL;
    if (!rs) {
        json_t *rp = json_object_get(text, "rope_parameters");
        if (json_is_object(rp) && json_is_object(json_object_get(rp, "compress"))) rs = json_object_get(rp, "compress");
    }
    if (rs && !json_is_object(rs)) FAIL("config: 'rope_scaling' must be an object");
    c->yarn = false;
    if (rs) {
        json_t *t = json_object_get(rs, "rope_type");
        if (!t) t = json_object_get(rs, "type");
        if (t && !json_is_string(t)) FAIL("config: 'rope_scaling.rope_type' must be a string");
        const char *type = t ? json_string_value(t) : "default";
        if (!strcmp(type, "yarn")) c->yarn = true;
        else if (strcmp(type, "default")) FAIL("config: rope_scaling type \"%.40s\" is not supported (yarn or default)", type);
    } else if (json_object_get(text, "rope_factor")) {
        c->yarn = true;
    }
    if (!c->yarn) return true;
    json_t *af = rs ? json_object_get(rs, "attention_factor") : NULL;
    if (af && (!json_is_number(af) || json_number_value(af) != 1.0))
        FAIL("config: 'rope_scaling.attention_factor' must be 1 (V4.1 applies no YaRN magnitude scaling)");
    double orig = 0;
    c->yarn_beta_fast = 32;
    c->yarn_beta_slow = 1;
    if (!rope_number(rs, "factor", text, "rope_factor", true, &c->yarn_factor, err, errlen) ||
        !rope_number(rs, "beta_fast", text, "beta_fast", false, &c->yarn_beta_fast, err, errlen) ||
        !rope_number(rs, "beta_slow", text, "beta_slow", false, &c->yarn_beta_slow, err, errlen) ||
        !rope_number(rs, "original_max_position_embeddings", text, "original_seq_len", true, &orig, err, errlen))
        goto fail;
    if (orig != floor(orig)) FAIL("config: 'rope_scaling.original_max_position_embeddings' must be an integer");
    c->yarn_original_max_pos = (int64_t)orig;
    return true;
fail:
    return false;
}

static bool parse_quant(json_t *top, json_t *text, model_config_t *c, char *err, size_t errlen) {
    json_t *q = json_object_get(top, "quantization_config");
    if (!q) q = json_object_get(text, "quantization_config");
    c->quantized = q && !json_is_null(q);
    c->quant_block_rows = c->quant_block_cols = 0;
    if (!c->quantized) return true;
    if (!json_is_object(q)) FAIL("config: 'quantization_config' must be an object");
    json_t *m = json_object_get(q, "quant_method"), *bs = json_object_get(q, "weight_block_size"),
           *sf = json_object_get(q, "scale_fmt");
    if (!json_is_string(m) || strcmp(json_string_value(m), "fp8"))
        FAIL("config: 'quantization_config.quant_method' must be \"fp8\"");
    if (sf && (!json_is_string(sf) || strcmp(json_string_value(sf), "ue8m0")))
        FAIL("config: 'quantization_config.scale_fmt' must be \"ue8m0\"");
    double r, k;
    if (!json_is_array(bs) || json_array_size(bs) != 2 || !integral(json_array_get(bs, 0), 1, 4096, &r) ||
        !integral(json_array_get(bs, 1), 1, 4096, &k))
        FAIL("config: 'quantization_config.weight_block_size' must be two integers in [1, 4096]");
    c->quant_block_rows = (int)r;
    c->quant_block_cols = (int)k;
    return true;
fail:
    return false;
}

static bool model_type_ok(json_t *obj, const char *const *allowed, char *err, size_t errlen) {
    json_t *t = json_object_get(obj, "model_type");
    if (!t) return true;
    if (!json_is_string(t)) FAIL("config: 'model_type' must be a string");
    for (; *allowed; allowed++)
        if (!strcmp(json_string_value(t), *allowed)) return true;
    if (!strcmp(json_string_value(t), "deepseek_v4"))
        FAIL("config: model_type deepseek_v4 is not supported yet (it is planned as a second schedule)");
    FAIL("config: model_type \"%.40s\" is not a DeepSeek-V4.1 text model", json_string_value(t));
fail:
    return false;
}

int model_config_parse(const char *text_json, size_t len, model_config_t *c, char *err, size_t errlen) {
    static const char *const TOP_TYPES[] = {"deepseek_v41", "deepseek_v41_text", NULL};
    static const char *const TEXT_TYPES[] = {"deepseek_v41_text", NULL};
    json_error_t je;
    memset(c, 0, sizeof *c);
    json_t *root = json_loadb(text_json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) FAIL("config: not valid JSON: %s (line %d)", je.text, je.line);
    if (!json_is_object(root)) FAIL("config: not a JSON object");
    json_t *text = json_object_get(root, "text_config");
    if (text && !json_is_object(text)) FAIL("config: 'text_config' must be an object");
    if (!model_type_ok(root, TOP_TYPES, err, errlen) || (text && !model_type_ok(text, TEXT_TYPES, err, errlen))) goto fail;
    if (!text) text = root;
    c->arch = ARCH_DEEPSEEK_V41;
    json_t *objs[2] = {text, root};
    const field_t *engram_ids = field_named("engram_layer_ids");
    if (!read_field(engram_ids, objs, c, false, err, errlen)) goto fail;
    for (size_t i = 0; i < DI_ARRAY_LEN(FIELDS); i++)
        if (&FIELDS[i] != engram_ids && !read_field(&FIELDS[i], objs, c, c->n_engram > 0, err, errlen)) goto fail;
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (!tie) tie = json_object_get(text, "tie_word_embeddings");
    if (tie && !json_is_false(tie)) FAIL("config: 'tie_word_embeddings' must be false (the checkpoint has its own head)");
    json_t *bias = json_object_get(text, "attention_bias");
    if (bias && !json_is_false(bias)) FAIL("config: 'attention_bias' must be false");
    if (!parse_rope(text, c, err, errlen) || !parse_quant(root, text, c, err, errlen)) goto fail;
    json_decref(root);
    return model_config_schedule(c, err, errlen);
fail:
    json_decref(root);
    return -1;
}

int model_config_load(const char *path, model_config_t *c, char *err, size_t errlen) {
    buf_t p = {0};
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) buf_printf(&p, "%s/config.json", path);
    else buf_puts(&p, path);
    size_t len;
    char *text = NULL;
    errno = 0;
    if (stat(buf_cstr(&p), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (off_t)MC_MAX_FILE ||
        !(text = read_file(buf_cstr(&p), &len))) {
        snprintf(err, errlen, "%s: %s", buf_cstr(&p), errno ? strerror(errno) : "not a regular file of at most 16 MiB");
        buf_free(&p);
        return -1;
    }
    int rc = model_config_parse(text, len, c, err, errlen);
    if (rc) {
        /* prefix the file name */
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err);
        snprintf(err, errlen, "%s: %s", buf_cstr(&p), tmp);
    }
    free(text);
    buf_free(&p);
    return rc;
}

const char *attn_mode_name(attn_mode_t m) {
    switch (m) {
    case ATTN_SWA: return "swa";
    case ATTN_FULL: return "full";
    case ATTN_REINDEX: return "reindex";
    case ATTN_REUSE: return "reuse";
    }
    return "?";
}

static bool in_list(const int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return true;
    return false;
}

/* The largest entry of v (sorted) that is <= x, or -1. */
static int last_at_or_before(const int *v, int n, int x) {
    int r = -1;
    for (int i = 0; i < n && v[i] <= x; i++) r = v[i];
    return r;
}

static bool strictly_increasing(const int *v, int n) {
    for (int i = 1; i < n; i++)
        if (v[i] <= v[i - 1]) return false;
    return true;
}

static bool is_prime(int64_t n) {
    if (n < 2) return false;
    if (n % 2 == 0) return n == 2;
    for (int64_t f = 3; f * f <= n; f += 2)
        if (n % f == 0) return false;
    return true;
}

int engram_primes(const model_config_t *c, int64_t primes[MC_MAX_ENGRAM][(MC_MAX_NGRAM - 1) * MC_MAX_ENGRAM_HEADS]) {
    int orders = c->engram_max_ngram - 1, heads = c->engram_n_heads;
    if (c->n_engram > MC_MAX_ENGRAM || orders < 1 || orders > MC_MAX_NGRAM - 1 || heads < 1 || heads > MC_MAX_ENGRAM_HEADS)
        return -1;
    int64_t seen[MC_MAX_ENGRAM * (MC_MAX_NGRAM - 1) * MC_MAX_ENGRAM_HEADS];
    int nseen = 0;
    for (int e = 0; e < c->n_engram; e++)
        for (int g = 0; g < orders; g++) {
            int64_t cur = c->engram_vocab_size - 1;
            for (int j = 0; j < heads; j++) {
                bool taken;
                do {
                    cur++;
                    taken = false;
                    for (int s = 0; s < nseen && !taken; s++) taken = seen[s] == cur;
                } while (taken || !is_prime(cur));
                seen[nseen++] = cur;
                primes[e][g * heads + j] = cur;
            }
        }
    return 0;
}

/* deepseek_v41 (MODEL_V41 §1.3 and HF DeepseekV41TextConfig.__post_init__): KV sources own a
 * compressor, index sources an indexer; every compressed layer reads the pool of the nearest KV
 * source at or before it and the selection of the nearest index source at or before it. */
static int schedule_v41(model_config_t *c, char *err, size_t errlen) {
    int n = c->n_layers;
    if (n + c->n_mtp > MC_MAX_LAYERS) FAIL("config: %d layers + %d DSpark stages exceed %d", n, c->n_mtp, MC_MAX_LAYERS);
    if (c->n_compress_ratios < n || c->n_compress_ratios > n + c->n_mtp)
        FAIL("config: 'compress_ratios' has %d entries; needs num_hidden_layers (%d) up to %d with the DSpark stages",
             c->n_compress_ratios, n, n + c->n_mtp);
    for (int i = n; i < n + c->n_mtp; i++) {
        if (i >= c->n_compress_ratios) c->compress_ratios[i] = 0;
        else if (c->compress_ratios[i]) FAIL("config: 'compress_ratios'[%d] is a DSpark stage and must be 0", i);
    }
    if (c->head_dim % 32 || c->index_head_dim % 32)
        FAIL("config: head_dim (%d) and index_head_dim (%d) must be multiples of 32 (the FP8/FP4 QAT blocks)", c->head_dim, c->index_head_dim);
    if (c->rope_dim % 2 || c->rope_dim > c->head_dim || c->rope_dim > c->index_head_dim)
        FAIL("config: 'qk_rope_head_dim' (%d) must be even and fit head_dim and index_head_dim", c->rope_dim);
    if (c->n_heads % c->o_groups) FAIL("config: num_attention_heads (%d) is not a multiple of o_groups (%d)", c->n_heads, c->o_groups);
    if (c->n_experts_per_tok > c->n_routed_experts)
        FAIL("config: num_experts_per_tok (%d) exceeds n_routed_experts (%d)", c->n_experts_per_tok, c->n_routed_experts);
    if (c->engram_pad_id >= c->vocab_size) FAIL("config: 'engram_pad_token_id' %d is outside the vocabulary", c->engram_pad_id);
    if (!strictly_increasing(c->kv_sources, c->n_kv_sources)) FAIL("config: 'kv_source_layer_ids' must be strictly increasing");
    if (!strictly_increasing(c->index_sources, c->n_index_sources)) FAIL("config: 'index_source_layer_ids' must be strictly increasing");
    if (!strictly_increasing(c->engram_layers, c->n_engram)) FAIL("config: 'engram_layer_ids' must be strictly increasing");
    for (int i = 0; i < c->n_kv_sources; i++) {
        int L = c->kv_sources[i];
        if (L >= n || !c->compress_ratios[L]) FAIL("config: kv source layer %d must exist and have compress_ratios > 0", L);
        if (!in_list(c->index_sources, c->n_index_sources, L))
            FAIL("config: kv source layer %d is not an index source (nothing would publish its indexer keys)", L);
    }
    for (int i = 0; i < c->n_index_sources; i++) {
        int L = c->index_sources[i];
        if (L >= n || !c->compress_ratios[L]) FAIL("config: index source layer %d must exist and have compress_ratios > 0", L);
    }
    if (c->candidate_source >= 0 && !in_list(c->index_sources, c->n_index_sources, c->candidate_source))
        FAIL("config: candidate_source_layer_id %d is not an index source", c->candidate_source);
    for (int i = 0; i < c->n_engram; i++)
        if (c->engram_layers[i] >= n) FAIL("config: engram layer %d is outside the %d layers", c->engram_layers[i], n);
    for (int i = 0; i < c->n_dspark_targets; i++)
        if (c->dspark_targets[i] >= n) FAIL("config: dspark target layer %d is outside the %d layers", c->dspark_targets[i], n);
    if (c->n_engram_rows != c->n_engram)
        FAIL("config: 'engram_num_embeddings' has %d entries but 'engram_layer_ids' has %d", c->n_engram_rows, c->n_engram);
    if (c->n_engram) {
        int64_t primes[MC_MAX_ENGRAM][(MC_MAX_NGRAM - 1) * MC_MAX_ENGRAM_HEADS];
        if (engram_primes(c, primes)) FAIL("config: engram layout out of bounds");
        for (int e = 0; e < c->n_engram; e++) {
            int64_t rows = 0;
            for (int k = 0; k < (c->engram_max_ngram - 1) * c->engram_n_heads; k++) rows += primes[e][k];
            if (rows != c->engram_rows[e])
                FAIL("config: engram_num_embeddings[%d] is %lld but the prime layout gives %lld rows", e,
                     (long long)c->engram_rows[e], (long long)rows);
        }
    }
    c->first_decoder_layer = n;
    for (int L = n - 1; L >= 0 && c->compress_ratios[L] == 1; L--) c->first_decoder_layer = L;
    for (int L = 0; L < c->first_decoder_layer; L++)
        if (c->compress_ratios[L] == 1) FAIL("config: ratio-1 layer %d lies before the decoder half (ratio-1 layers must be the last ones)", L);
    if (c->first_decoder_layer < n && !in_list(c->kv_sources, c->n_kv_sources, c->first_decoder_layer))
        FAIL("config: the first decoder layer %d must be a kv source (the decoder's shared KV)", c->first_decoder_layer);
    for (int L = 0; L < n; L++) {
        layer_sched_t *s = &c->layers[L];
        int r = c->compress_ratios[L];
        memset(s, 0, sizeof *s);
        s->ratio = r;
        s->decoder = L >= c->first_decoder_layer;
        s->rope = r ? ROPE_COMPRESS : ROPE_MAIN;
        s->engram = -1;
        for (int e = 0; e < c->n_engram; e++)
            if (c->engram_layers[e] == L) s->engram = e;
        s->kv_source = s->topk_source = -1;
        if (!r) {
            s->mode = ATTN_SWA;
            continue;
        }
        bool kv = in_list(c->kv_sources, c->n_kv_sources, L), ix = in_list(c->index_sources, c->n_index_sources, L);
        s->mode = kv ? ATTN_FULL : ix ? ATTN_REINDEX : ATTN_REUSE;
        s->kv_source = last_at_or_before(c->kv_sources, c->n_kv_sources, L);
        s->topk_source = last_at_or_before(c->index_sources, c->n_index_sources, L);
        if (s->kv_source < 0) FAIL("config: layer %d has compress_ratios %d but no kv source at or before it", L, r);
        if (c->compress_ratios[s->kv_source] != r)
            FAIL("config: layer %d has ratio %d but its kv source %d has ratio %d", L, r, s->kv_source, c->compress_ratios[s->kv_source]);
        s->has_compressor = kv;
        s->compressor_gate = kv && r > 1;
        s->has_indexer = ix;
        s->indexer_keys = ix && kv;
        s->candidate_source = L == c->candidate_source;
        s->uses_candidates = ix && c->candidate_source >= 0 && c->candidate_source < L;
    }
    return 0;
fail:
    return -1;
}

int model_config_schedule(model_config_t *c, char *err, size_t errlen) {
    switch (c->arch) {
    case ARCH_DEEPSEEK_V41: return schedule_v41(c, err, errlen);
    }
    snprintf(err, errlen, "config: unknown model type");
    return -1;
}
