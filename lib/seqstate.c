#include "seqstate.h"
#include "util.h"

#include <stdlib.h>

seqstate_t *seqstate_new(const model_t *m, bool qat) {
    const model_config_t *c = &m->cfg;
    backend_t *bk = m->bk;
    seqstate_t *st = xcalloc(1, sizeof *st);
    st->m = m;
    st->qat = qat;
    st->next_token = -1;
    for (int s = 0; s < MC_MAX_NGRAM; s++) st->hist[s] = ENGRAM_DEAD;
    st->layers = xcalloc((size_t)c->n_layers, sizeof *st->layers);
    for (int L = 0; L < c->n_layers; L++) {
        seq_layer_t *l = &st->layers[L];
        const layer_sched_t *s = &c->layers[L];
        l->ring = bk->alloc(bk, BK_F32, c->sliding_window, c->head_dim);
        if (s->has_compressor) {
            seqstate_reserve(st, L, 64);
            if (s->ratio > 1) {
                l->pend_z = bk->alloc(bk, BK_F32, s->ratio - 1, c->head_dim);
                l->pend_s = bk->alloc(bk, BK_F32, s->ratio - 1, c->head_dim);
            }
        }
    }
    return st;
}

void seqstate_reserve(seqstate_t *st, int L, int64_t n) {
    seq_layer_t *l = &st->layers[L];
    if (n <= l->cap) return;
    backend_t *bk = st->m->bk;
    const model_config_t *c = &st->m->cfg;
    int64_t cap = l->cap ? l->cap : 64;
    while (cap < n) cap *= 2;
    bk_tensor_t pool = bk->alloc(bk, BK_F32, cap, c->head_dim), keys = bk->alloc(bk, BK_F32, cap, c->index_head_dim);
    if (l->n_entries) {
        bk->copy(bk, bk_rows(pool, 0, l->n_entries), bk_rows(l->pool, 0, l->n_entries));
        bk->copy(bk, bk_rows(keys, 0, l->n_entries), bk_rows(l->keys, 0, l->n_entries));
    }
    if (l->cap) {
        bk->release(bk, &l->pool);
        bk->release(bk, &l->keys);
    }
    l->pool = pool;
    l->keys = keys;
    l->cap = cap;
}

void seqstate_free(seqstate_t *st) {
    if (!st) return;
    backend_t *bk = st->m->bk;
    for (int L = 0; L < st->m->cfg.n_layers; L++) {
        seq_layer_t *l = &st->layers[L];
        bk_tensor_t *ts[] = {&l->ring, &l->pool, &l->keys, &l->pend_z, &l->pend_s};
        for (size_t i = 0; i < DI_ARRAY_LEN(ts); i++)
            if (ts[i]->ptr) bk->release(bk, ts[i]);
    }
    free(st->layers);
    free(st);
}
