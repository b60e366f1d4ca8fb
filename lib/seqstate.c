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
            l->pool = pagestore_new(m->pool_pages);
            if (s->indexer_keys) l->keys = pagestore_new(m->key_pages);
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
    pagestore_reserve(&l->pool, n);
    if (st->m->cfg.layers[L].indexer_keys) pagestore_reserve(&l->keys, n);
}

void seqstate_sync(seqstate_t *st, int L) {
    seq_layer_t *l = &st->layers[L];
    if (l->pool.pp) pagestore_sync(&l->pool);
    if (l->keys.pp) pagestore_sync(&l->keys);
}

bk_paged_t seqstate_pool(const seqstate_t *st, int L, int64_t n) { return pagestore_view(&st->layers[L].pool, n); }
bk_paged_t seqstate_keys(const seqstate_t *st, int L, int64_t n) { return pagestore_view(&st->layers[L].keys, n); }

void seqstate_free(seqstate_t *st) {
    if (!st) return;
    backend_t *bk = st->m->bk;
    for (int L = 0; L < st->m->cfg.n_layers; L++) {
        seq_layer_t *l = &st->layers[L];
        if (l->pool.pp) pagestore_release(&l->pool);
        if (l->keys.pp) pagestore_release(&l->keys);
        bk_tensor_t *ts[] = {&l->ring, &l->pend_z, &l->pend_s};
        for (size_t i = 0; i < DI_ARRAY_LEN(ts); i++)
            if (ts[i]->ptr) bk->release(bk, ts[i]);
    }
    free(st->layers);
    free(st);
}
