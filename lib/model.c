/* Loading a model for the forward: weights bound to the backend, parameter vectors as fp32
 * tensors, RoPE tables, the Engram layout and token map, the fingerprint. */
#include "model.h"
#include "hash64.h"
#include "rope.h"
#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)

static bool is_file(const char *p) {
    struct stat st;
    return !stat(p, &st) && S_ISREG(st.st_mode);
}

const char *model_token_map_path(const char *dir) {
    static char path[2048];
    snprintf(path, sizeof path, "%s/engram_token_map.u32", dir);
    if (is_file(path)) return path;
    const char *tok = tokenizer_default_path();
    const char *slash = strrchr(tok, '/');
    snprintf(path, sizeof path, "%.*s/engram_token_map.u32", slash ? (int)(slash - tok) : 1, slash ? tok : ".");
    return is_file(path) ? path : NULL;
}

/* A stored vector as an fp32 tensor. */
static bk_tensor_t vec(backend_t *bk, const wmat_t *v) {
    bk_tensor_t t = bk->alloc(bk, BK_F32, v->rows, v->cols);
    float *h = xmalloc((size_t)(v->rows * v->cols) * 4);
    wmat_rows(v, 0, v->rows, h);
    bk->upload(bk, t, h);
    free(h);
    return t;
}

static bk_weight_t *bind(backend_t *bk, const wmat_t *w) { return w->data ? bk->bind(bk, w) : NULL; }

static void bind_layer(model_t *m, int L) {
    backend_t *bk = m->bk;
    const model_config_t *c = &m->cfg;
    const layer_sched_t *s = &c->layers[L];
    const layer_weights_t *w = &m->w.layers[L];
    model_layer_t *l = &m->layers[L];
    l->hc_attn_fn = bind(bk, &w->hc_attn_fn);
    l->hc_ffn_fn = bind(bk, &w->hc_ffn_fn);
    l->hc_attn_base = vec(bk, &w->hc_attn_base);
    l->hc_attn_scale = vec(bk, &w->hc_attn_scale);
    l->hc_ffn_base = vec(bk, &w->hc_ffn_base);
    l->hc_ffn_scale = vec(bk, &w->hc_ffn_scale);
    l->attn_norm = vec(bk, &w->attn_norm);
    l->ffn_norm = vec(bk, &w->ffn_norm);
    l->attn.wq_a = bind(bk, &w->attn.wq_a);
    l->attn.wq_b = bind(bk, &w->attn.wq_b);
    l->attn.wkv = bind(bk, &w->attn.wkv);
    l->attn.wo_a = bind(bk, &w->attn.wo_a);
    l->attn.wo_b = bind(bk, &w->attn.wo_b);
    l->attn.q_norm = vec(bk, &w->attn.q_norm);
    l->attn.kv_norm = vec(bk, &w->attn.kv_norm);
    l->attn.sink = vec(bk, &w->attn.attn_sink);
    if (s->has_compressor) {
        l->attn.cmp_wkv = bind(bk, &w->attn.cmp_wkv);
        l->attn.cmp_norm = vec(bk, &w->attn.cmp_norm);
        if (s->compressor_gate) l->attn.cmp_wgate = bind(bk, &w->attn.cmp_wgate);
    }
    if (s->has_indexer) {
        l->attn.idx_wq_b = bind(bk, &w->attn.idx_wq_b);
        l->attn.idx_wproj = bind(bk, &w->attn.idx_weights_proj);
    }
    if (s->indexer_keys) {
        l->attn.idx_wk = bind(bk, &w->attn.idx_wk);
        l->attn.idx_k_norm = vec(bk, &w->attn.idx_k_norm);
    }
    l->ffn.gate = bind(bk, &w->ffn.gate);
    l->ffn.bias = vec(bk, &w->ffn.gate_bias);
    l->ffn.experts = xcalloc((size_t)c->n_routed_experts, sizeof *l->ffn.experts);
    for (int e = 0; e < c->n_routed_experts; e++)
        l->ffn.experts[e] = (bk_expert_t){bind(bk, &w->ffn.w1[e]), bind(bk, &w->ffn.w2[e]), bind(bk, &w->ffn.w3[e])};
    l->ffn.shared = (bk_expert_t){bind(bk, &w->ffn.sh_w1), bind(bk, &w->ffn.sh_w2), bind(bk, &w->ffn.sh_w3)};
    if (s->engram >= 0) {
        l->engram.table = bind(bk, &w->engram.embed);
        l->engram.wkv = bind(bk, &w->engram.wkv);
        int64_t hc = c->hc_mult, D = c->hidden_size;
        float *q = xmalloc((size_t)(hc * D) * 4), *k = xmalloc((size_t)(hc * D) * 4);
        wmat_rows(&w->engram.q_weight, 0, hc, q);
        wmat_rows(&w->engram.k_weight, 0, hc, k);
        for (int64_t i = 0; i < hc * D; i++) q[i] *= k[i];
        l->engram.qk = bk->alloc(bk, BK_F32, hc, D);
        bk->upload(bk, l->engram.qk, q);
        free(q);
        free(k);
    }
}

/* ---- fingerprint ------------------------------------------------------------------------ */
static size_t wmat_bytes(const wmat_t *m) {
    size_t row = m->kind == WQ_F32 ? (size_t)m->cols * 4 : m->kind == WQ_BF16 ? (size_t)m->cols * 2
               : m->kind == WQ_FP8 ? (size_t)m->cols : (size_t)(m->cols + 1) / 2;
    return row * (size_t)m->rows;
}

static uint64_t hash_sample(uint64_t h, const uint8_t *p, size_t n) {
    enum { SAMPLE = 64 };
    if (n <= 2 * SAMPLE) return hash64(h, p, n);
    h = hash64(h, p, SAMPLE);
    h = hash64(h, p + n / 2, SAMPLE);
    return hash64(h, p + n - SAMPLE, SAMPLE);
}

typedef struct {
    uint64_t h;
} fp_ctx_t;

static bool fp_tensor(void *ctx, const model_tensor_t *t) {
    fp_ctx_t *f = ctx;
    const wmat_t *m = t->slot;
    f->h = hash64(f->h, t->name, strlen(t->name) + 1);
    int64_t meta[4] = {m->kind, m->rows, m->cols, m->scale != NULL};
    f->h = hash64(f->h, meta, sizeof meta);
    f->h = hash_sample(f->h, m->data, wmat_bytes(m));
    if (m->scale)
        f->h = hash_sample(f->h, m->scale, wmat_scale_count(m->rows, m->cols, m->block_rows, m->block_cols) * (m->scale_f32 ? 4 : 1));
    return true;
}

static uint64_t fingerprint(model_t *m) {
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    size_t len = 0;
    char *cfg = read_file(path, &len);
    fp_ctx_t f = {hash64(HASH64_INIT, "deepseek_v41", 12)};
    if (cfg) f.h = hash64(f.h, cfg, len);
    free(cfg);
    model_tensors_foreach(&m->cfg, &m->w, fp_tensor, &f);
    if (m->engram.map) f.h = hash64(f.h, m->engram.map, (size_t)m->engram.vocab * 4);
    return f.h;
}

int model_open(model_t *m, const char *dir, backend_t *bk, const char *token_map, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    if (model_config_load(dir, &m->cfg, err, errlen)) return -1;
    const model_config_t *c = &m->cfg;
    if (c->vocab_size > INT32_MAX) FAIL("vocab_size %lld exceeds the int32 token ids", (long long)c->vocab_size);
    uint32_t *map = NULL;
    if (c->n_engram) {
        const char *path = token_map ? token_map : model_token_map_path(dir);
        if (!path)
            FAIL("the model has Engram layers and needs the tokenizer-derived token map: none at %s/engram_token_map.u32 "
                 "nor beside the tokenizer (run `make data`, or pass the map's path)", dir);
        if (engram_map_load(path, c, &map, err, errlen)) return -1;
        if (engram_hash_init(&m->engram, c, map, err, errlen)) {
            free(map);
            return -1;
        }
    }
    if (model_weights_load(&m->w, c, dir, err, errlen)) {
        engram_hash_free(&m->engram);
        return -1;
    }
    m->bk = bk;
    m->embed = bk->bind(bk, &m->w.embed);
    m->head = bk->bind(bk, &m->w.head);
    m->norm = vec(bk, &m->w.norm);
    for (int t = 0; t < 2; t++) {
        float f[4096];
        rope_inv_freq(c, (rope_table_t)t, f);
        m->inv_freq[t] = bk->alloc(bk, BK_F32, 1, c->rope_dim / 2);
        bk->upload(bk, m->inv_freq[t], f);
    }
    m->layers = xcalloc((size_t)c->n_layers, sizeof *m->layers);
    for (int L = 0; L < c->n_layers; L++) bind_layer(m, L);
    model_pages_new(m);
    m->fingerprint = fingerprint(m);
    return 0;
}

void model_pages_new(model_t *m) {
    m->pool_pages = pagepool_new(m->bk, m->cfg.head_dim);
    m->key_pages = m->cfg.index_head_dim > 0 ? pagepool_new(m->bk, m->cfg.index_head_dim) : NULL;
}

static void unbind(backend_t *bk, bk_weight_t *w) {
    if (w) bk->unbind(bk, w);
}

static void release(backend_t *bk, bk_tensor_t *t) {
    if (t->ptr) bk->release(bk, t);
}

void model_close(model_t *m) {
    backend_t *bk = m->bk;
    if (!bk) return;
    for (int L = 0; m->layers && L < m->cfg.n_layers; L++) {
        model_layer_t *l = &m->layers[L];
        bk_weight_t *ws[] = {l->hc_attn_fn, l->hc_ffn_fn, l->attn.wq_a, l->attn.wq_b, l->attn.wkv, l->attn.wo_a,
                             l->attn.wo_b, l->attn.cmp_wkv, l->attn.cmp_wgate, l->attn.idx_wq_b, l->attn.idx_wproj,
                             l->attn.idx_wk, l->ffn.gate, l->ffn.shared.w1, l->ffn.shared.w2, l->ffn.shared.w3,
                             l->engram.table, l->engram.wkv};
        for (size_t i = 0; i < DI_ARRAY_LEN(ws); i++) unbind(bk, ws[i]);
        for (int e = 0; e < m->cfg.n_routed_experts; e++) {
            unbind(bk, l->ffn.experts[e].w1);
            unbind(bk, l->ffn.experts[e].w2);
            unbind(bk, l->ffn.experts[e].w3);
        }
        free(l->ffn.experts);
        bk_tensor_t *ts[] = {&l->hc_attn_base, &l->hc_attn_scale, &l->hc_ffn_base, &l->hc_ffn_scale, &l->attn_norm,
                             &l->ffn_norm, &l->attn.q_norm, &l->attn.kv_norm, &l->attn.sink, &l->attn.cmp_norm,
                             &l->attn.idx_k_norm, &l->ffn.bias, &l->engram.qk};
        for (size_t i = 0; i < DI_ARRAY_LEN(ts); i++) release(bk, ts[i]);
    }
    free(m->layers);
    unbind(bk, m->embed);
    unbind(bk, m->head);
    release(bk, &m->norm);
    release(bk, &m->inv_freq[0]);
    release(bk, &m->inv_freq[1]);
    pagepool_free(m->pool_pages);
    pagepool_free(m->key_pages);
    model_weights_free(&m->w);
    engram_hash_free(&m->engram);
    m->bk = NULL;
}
