/* Binding: the expected tensor list from the config, checked against the archive. */
#include "model_weights.h"

#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const model_config_t *c;
    st_archive_t *st;
    bool *used; /* per archive tensor */
    char *err;
    size_t errlen;
} binder_t;

#define FAIL(...)                                 \
    do {                                          \
        snprintf(b->err, b->errlen, __VA_ARGS__); \
        return false;                             \
    } while (0)

/* ---- the inventory -------------------------------------------------------------------- */

typedef struct {
    bool (*fn)(void *ctx, const model_tensor_t *t);
    void *ctx;
    bool ok;
} walk_t;

static void emit(walk_t *wk, wmat_t *slot, tensor_storage_t stored, bool vector, int64_t rows, int64_t cols, const char *fmt,
                 ...) __attribute__((format(printf, 7, 8)));

static void emit(walk_t *wk, wmat_t *slot, tensor_storage_t stored, bool vector, int64_t rows, int64_t cols, const char *fmt,
                 ...) {
    if (!wk->ok) return;
    model_tensor_t t = {.stored = stored, .vector = vector, .rows = vector ? 1 : rows, .cols = cols, .slot = slot};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t.name, sizeof t.name, fmt, ap);
    va_end(ap);
    wk->ok = wk->fn(wk->ctx, &t);
}

#define SLOT(expr) (lw ? &(expr) : NULL)

static void walk_expert(walk_t *wk, const model_config_t *c, tensor_storage_t st, wmat_t *w1, wmat_t *w2, wmat_t *w3,
                        const char *prefix) {
    emit(wk, w1, st, false, c->moe_inter, c->hidden_size, "%s.w1.weight", prefix);
    emit(wk, w2, st, false, c->hidden_size, c->moe_inter, "%s.w2.weight", prefix);
    emit(wk, w3, st, false, c->moe_inter, c->hidden_size, "%s.w3.weight", prefix);
}

static void walk_layer(walk_t *wk, const model_config_t *c, int L, layer_weights_t *lw) {
    const layer_sched_t *s = &c->layers[L];
    int64_t D = c->hidden_size, hd = c->head_dim, H = c->n_heads, ql = c->q_lora_rank, G = c->o_groups, R = c->o_lora_rank;
    int64_t mix = (2 + c->hc_mult) * c->hc_mult, E = c->n_routed_experts, Hi = c->index_n_heads, di = c->index_head_dim;
    emit(wk, SLOT(lw->hc_attn_fn), TS_F32, false, mix, c->hc_mult * D, "layers.%d.hc_attn_fn", L);
    emit(wk, SLOT(lw->hc_attn_base), TS_F32, true, 1, mix, "layers.%d.hc_attn_base", L);
    emit(wk, SLOT(lw->hc_attn_scale), TS_F32, true, 1, 3, "layers.%d.hc_attn_scale", L);
    emit(wk, SLOT(lw->hc_ffn_fn), TS_F32, false, mix, c->hc_mult * D, "layers.%d.hc_ffn_fn", L);
    emit(wk, SLOT(lw->hc_ffn_base), TS_F32, true, 1, mix, "layers.%d.hc_ffn_base", L);
    emit(wk, SLOT(lw->hc_ffn_scale), TS_F32, true, 1, 3, "layers.%d.hc_ffn_scale", L);
    emit(wk, SLOT(lw->attn_norm), TS_BF16, true, 1, D, "layers.%d.attn_norm.weight", L);
    emit(wk, SLOT(lw->ffn_norm), TS_BF16, true, 1, D, "layers.%d.ffn_norm.weight", L);
    emit(wk, SLOT(lw->attn.wq_a), TS_FP8, false, ql, D, "layers.%d.attn.wq_a.weight", L);
    emit(wk, SLOT(lw->attn.q_norm), TS_BF16, true, 1, ql, "layers.%d.attn.q_norm.weight", L);
    emit(wk, SLOT(lw->attn.wq_b), TS_FP8, false, H * hd, ql, "layers.%d.attn.wq_b.weight", L);
    emit(wk, SLOT(lw->attn.wkv), TS_FP8, false, hd, D, "layers.%d.attn.wkv.weight", L);
    emit(wk, SLOT(lw->attn.kv_norm), TS_BF16, true, 1, hd, "layers.%d.attn.kv_norm.weight", L);
    emit(wk, SLOT(lw->attn.wo_a), TS_FP8, false, G * R, H * hd / G, "layers.%d.attn.wo_a.weight", L);
    emit(wk, SLOT(lw->attn.wo_b), TS_FP8, false, D, G * R, "layers.%d.attn.wo_b.weight", L);
    emit(wk, SLOT(lw->attn.attn_sink), TS_F32, true, 1, H, "layers.%d.attn.attn_sink", L);
    if (s->has_compressor) {
        emit(wk, SLOT(lw->attn.cmp_wkv), TS_BF16, false, hd, D, "layers.%d.attn.compressor.wkv.weight", L);
        emit(wk, SLOT(lw->attn.cmp_norm), TS_BF16, true, 1, hd, "layers.%d.attn.compressor.norm.weight", L);
    }
    if (s->compressor_gate) emit(wk, SLOT(lw->attn.cmp_wgate), TS_BF16, false, hd, D, "layers.%d.attn.compressor.wgate.weight", L);
    if (s->has_indexer) {
        emit(wk, SLOT(lw->attn.idx_wq_b), TS_FP8, false, Hi * di, ql, "layers.%d.attn.indexer.wq_b.weight", L);
        emit(wk, SLOT(lw->attn.idx_weights_proj), TS_BF16, false, Hi, D, "layers.%d.attn.indexer.weights_proj.weight", L);
    }
    if (s->indexer_keys) {
        emit(wk, SLOT(lw->attn.idx_wk), TS_BF16, false, di, hd, "layers.%d.attn.indexer.wk.weight", L);
        emit(wk, SLOT(lw->attn.idx_k_norm), TS_BF16, true, 1, di, "layers.%d.attn.indexer.k_norm.weight", L);
    }
    emit(wk, SLOT(lw->ffn.gate), TS_BF16, false, E, D, "layers.%d.ffn.gate.weight", L);
    emit(wk, SLOT(lw->ffn.gate_bias), TS_F32, true, 1, E, "layers.%d.ffn.gate.bias", L);
    emit(wk, SLOT(lw->ffn.gate_bias_vl), TS_F32, true, 1, E, "layers.%d.ffn.gate.bias_vl", L);
    char prefix[96];
    for (int e = 0; e < E && wk->ok; e++) {
        snprintf(prefix, sizeof prefix, "layers.%d.ffn.experts.%d", L, e);
        walk_expert(wk, c, TS_FP4, SLOT(lw->ffn.w1[e]), SLOT(lw->ffn.w2[e]), SLOT(lw->ffn.w3[e]), prefix);
    }
    snprintf(prefix, sizeof prefix, "layers.%d.ffn.shared_experts", L);
    walk_expert(wk, c, TS_FP8, SLOT(lw->ffn.sh_w1), SLOT(lw->ffn.sh_w2), SLOT(lw->ffn.sh_w3), prefix);
    if (s->engram >= 0) {
        int64_t ed = c->engram_head_dim, cols = (int64_t)(c->engram_max_ngram - 1) * c->engram_n_heads * ed;
        emit(wk, SLOT(lw->engram.embed), TS_FP8_ROWS, false, c->engram_rows[s->engram], ed, "layers.%d.engram.embed.weight", L);
        emit(wk, SLOT(lw->engram.wkv), TS_FP8, false, D * (c->hc_mult + 1), cols, "layers.%d.engram.wkv.weight", L);
        emit(wk, SLOT(lw->engram.q_weight), TS_BF16, false, c->hc_mult, D, "layers.%d.engram.q_weight", L);
        emit(wk, SLOT(lw->engram.k_weight), TS_BF16, false, c->hc_mult, D, "layers.%d.engram.k_weight", L);
    }
}

bool model_tensors_foreach(const model_config_t *c, model_weights_t *w, bool (*fn)(void *ctx, const model_tensor_t *t),
                           void *ctx) {
    walk_t wk = {.fn = fn, .ctx = ctx, .ok = true};
    emit(&wk, w ? &w->embed : NULL, TS_BF16, false, c->vocab_size, c->hidden_size, "embed.weight");
    emit(&wk, w ? &w->norm : NULL, TS_BF16, true, 1, c->hidden_size, "norm.weight");
    emit(&wk, w ? &w->head : NULL, TS_BF16, false, c->vocab_size, c->hidden_size, "head.weight");
    for (int L = 0; L < c->n_layers && wk.ok; L++) {
        layer_weights_t *lw = w ? &w->layers[L] : NULL;
        if (lw && !lw->ffn.w1) {
            lw->ffn.w1 = xcalloc((size_t)c->n_routed_experts, sizeof(wmat_t));
            lw->ffn.w2 = xcalloc((size_t)c->n_routed_experts, sizeof(wmat_t));
            lw->ffn.w3 = xcalloc((size_t)c->n_routed_experts, sizeof(wmat_t));
        }
        walk_layer(&wk, c, L, lw);
    }
    return wk.ok;
}

/* ---- binding --------------------------------------------------------------------------- */

static void shape_str(const st_tensor_t *t, char *out, size_t n) {
    size_t k = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < t->ndim && k < n; i++) k += (size_t)snprintf(out + k, n - k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (k < n) snprintf(out + k, n - k, "]");
}

static bool has_shape(const st_tensor_t *t, int ndim, int64_t d0, int64_t d1) {
    return t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1);
}

static const st_tensor_t *take(binder_t *b, const char *name) {
    const st_tensor_t *t = st_find(b->st, name);
    if (t) b->used[t - st_tensor_at(b->st, 0)] = true;
    return t;
}

/* The .scale beside a quantized X.weight: [ceil(rows/br), ceil(cols/bc)], E8M0 or F32. */
static bool bind_scale(binder_t *b, const char *wname, wmat_t *m, int br, int bc) {
    char name[160], got[96];
    size_t n = strlen(wname);
    if (n < 7 || strcmp(wname + n - 7, ".weight")) FAIL("tensor '%s': a quantized tensor must be named X.weight", wname);
    snprintf(name, sizeof name, "%.*s.scale", (int)(n - 7), wname);
    const st_tensor_t *s = take(b, name);
    if (!s) FAIL("missing tensor '%s' (the scales of the quantized '%s')", name, wname);
    int64_t sr = (m->rows + br - 1) / br, sc = (m->cols + bc - 1) / bc;
    shape_str(s, got, sizeof got);
    if (!has_shape(s, 2, sr, sc)) FAIL("tensor '%s': shape %s, expected [%lld, %lld]", name, got, (long long)sr, (long long)sc);
    if (s->dtype != ST_F8_E8M0 && s->dtype != ST_F32)
        FAIL("tensor '%s': dtype %s, expected F8_E8M0 (or F32)", name, st_dtype_name(s->dtype));
    m->scale = s->data;
    m->scale_f32 = s->dtype == ST_F32;
    m->block_rows = br;
    m->block_cols = bc;
    return true;
}

/* Accepted storage (see the header): F32 slots take F32 only; the rest also BF16 and FP8;
 * routed experts also FP4. */
static bool bind_one(void *ctx, const model_tensor_t *e) {
    binder_t *b = ctx;
    wmat_t *m = e->slot;
    char got[96];
    const st_tensor_t *t = take(b, e->name);
    if (!t) FAIL("missing tensor '%s'", e->name);
    memset(m, 0, sizeof *m);
    m->rows = e->rows;
    m->cols = e->cols;
    m->data = t->data;
    int64_t want_cols = e->cols;
    bool accepted = false;
    switch (t->dtype) {
    case ST_F32: m->kind = WQ_F32, accepted = true; break;
    case ST_BF16: m->kind = WQ_BF16, accepted = e->stored != TS_F32; break;
    case ST_F8_E4M3: m->kind = WQ_FP8, accepted = e->stored != TS_F32 && !e->vector; break;
    case ST_I8:
    case ST_U8:
        m->kind = WQ_FP4, accepted = e->stored == TS_FP4;
        want_cols = (e->cols + 1) / 2;
        break;
    default: break;
    }
    if (!accepted)
        FAIL("tensor '%s': dtype %s not accepted (expected %s)", e->name, st_dtype_name(t->dtype),
             e->stored == TS_F32 ? "F32" : e->stored == TS_FP4 ? "FP4 packed in I8, F8_E4M3, BF16 or F32" : e->vector ? "BF16 or F32" : "F8_E4M3, BF16 or F32");
    shape_str(t, got, sizeof got);
    if (e->vector && !has_shape(t, 1, e->cols, 0)) FAIL("tensor '%s': shape %s, expected [%lld]", e->name, got, (long long)e->cols);
    if (!e->vector && !has_shape(t, 2, e->rows, want_cols))
        FAIL("tensor '%s': shape %s, expected [%lld, %lld]%s", e->name, got, (long long)e->rows, (long long)want_cols,
             m->kind == WQ_FP4 ? " (FP4, two per byte)" : "");
    if (m->kind == WQ_FP8 && e->stored != TS_FP8_ROWS) {
        if (!b->c->quantized) FAIL("tensor '%s' is F8_E4M3 but config.json has no quantization_config", e->name);
        return bind_scale(b, e->name, m, b->c->quant_block_rows, b->c->quant_block_cols);
    }
    if (m->kind == WQ_FP8 || m->kind == WQ_FP4) return bind_scale(b, e->name, m, 1, 32);
    return true;
}

static bool is_vision(const char *name) {
    return !strncmp(name, "vision.", 7) || !strncmp(name, "aligner.", 8) || !strcmp(name, "image_start") ||
           !strcmp(name, "image_end") || !strcmp(name, "image_newline") || !strcmp(name, "image_pad");
}

/* Binds an opened archive; w owns it from here on, also on failure. */
static int bind_archive(model_weights_t *w, const model_config_t *c, st_archive_t *st, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->st = st;
    w->n_layers = c->n_layers;
    w->n_experts = c->n_routed_experts;
    w->layers = xcalloc((size_t)c->n_layers, sizeof *w->layers);
    binder_t bd = {.c = c, .st = st, .used = xcalloc(st_count(st) + 1, 1), .err = err, .errlen = errlen};
    bool ok = model_tensors_foreach(c, w, bind_one, &bd);
    for (size_t i = 0; ok && i < st_count(st); i++) {
        const char *name = st_tensor_at(st, i)->name;
        if (bd.used[i]) w->n_bound++;
        else if (!strncmp(name, "mtp.", 4)) w->n_skipped_mtp++;
        else if (is_vision(name)) w->n_skipped_vision++;
        else {
            snprintf(err, errlen, "unexpected tensor '%s' (not part of this config's model)", name);
            ok = false;
        }
    }
    free(bd.used);
    if (!ok) {
        model_weights_free(w);
        return -1;
    }
    return 0;
}

int model_weights_load(model_weights_t *w, const model_config_t *c, const char *dir, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    st_archive_t *st = st_open(dir, err, errlen);
    if (!st) return -1;
    return bind_archive(w, c, st, err, errlen);
}

void model_weights_free(model_weights_t *w) {
    for (int L = 0; w->layers && L < w->n_layers; L++) {
        free(w->layers[L].ffn.w1);
        free(w->layers[L].ffn.w2);
        free(w->layers[L].ffn.w3);
    }
    free(w->layers);
    st_close(w->st);
    memset(w, 0, sizeof *w);
}
