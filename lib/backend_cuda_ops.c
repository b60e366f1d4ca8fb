/* CUDA backend ops other than matmul and experts: each one checks what the kernels assume,
 * launches them on the backend's stream (profiled under its name) and dies on a launch error. */
#include "backend_cuda_internal.h"
#include "util.h"

#define OP(name, launch)              \
    do {                              \
        cu_prof_begin(c, name);       \
        CU(launch);                   \
        cu_prof_end(c);               \
    } while (0)

static float *F(bk_tensor_t t) { return t.ptr; }
static int32_t *I(bk_tensor_t t) { return t.ptr; }

void cu_rmsnorm(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_tensor_t *w, float eps) {
    cuda_t *c = cu_of(bk);
    OP("rmsnorm", k_rmsnorm(F(out), out.ld, F(x), x.ld, w ? F(*w) : NULL, x.rows, x.cols, eps, c->stream));
}

void cu_rope(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, int64_t pos0, int64_t pos_step, bool inverse) {
    cuda_t *c = cu_of(bk);
    OP("rope", k_rope(F(x), x.ld, x.rows, x.cols, head_dim, F(inv_freq), (int)inv_freq.cols, pos0, pos_step, inverse,
                      c->stream));
}

void cu_qat(backend_t *bk, bk_tensor_t x, qat_kind_t kind, int block) {
    cuda_t *c = cu_of(bk);
    if (block <= 0 || block > 32 || 32 % block) die("CUDA backend: QAT block %d does not divide 32", block);
    OP("qat", k_qat(F(x), x.ld, x.rows, x.cols, (int)kind, block, c->stream));
}

void cu_hc_mix(backend_t *bk, bk_tensor_t coef, bk_tensor_t mixes, bk_tensor_t X, bk_tensor_t base, bk_tensor_t scale, int hc,
               float eps, float hc_eps, int iters) {
    cuda_t *c = cu_of(bk);
    if (hc > 16) die("CUDA backend: hc_mult %d > 16", hc);
    OP("hc_mix", k_hc_mix(F(coef), coef.ld, F(mixes), mixes.ld, F(X), X.ld, X.rows, X.cols, F(base), F(scale), hc, eps,
                          hc_eps, iters, c->stream));
}

void cu_hc_collapse(backend_t *bk, bk_tensor_t out, bk_tensor_t X, bk_tensor_t pre, int hc) {
    cuda_t *c = cu_of(bk);
    OP("hc_collapse", k_hc_collapse(F(out), out.ld, F(X), X.ld, F(pre), pre.ld, X.rows, out.cols, hc, c->stream));
}

void cu_hc_expand(backend_t *bk, bk_tensor_t X, bk_tensor_t y, bk_tensor_t coef, int hc) {
    cuda_t *c = cu_of(bk);
    if (hc > 16) die("CUDA backend: hc_mult %d > 16", hc);
    OP("hc_expand", k_hc_expand(F(X), X.ld, F(y), y.ld, F(coef), coef.ld, X.rows, y.cols, hc, c->stream));
}

void cu_hc_fill(backend_t *bk, bk_tensor_t X, bk_tensor_t e, int hc) {
    cuda_t *c = cu_of(bk);
    OP("hc_fill", k_hc_fill(F(X), X.ld, F(e), e.ld, X.rows, e.cols, hc, c->stream));
}

void cu_gather(backend_t *bk, bk_tensor_t out, const bk_weight_t *table, bk_tensor_t idx) {
    cuda_t *c = cu_of(bk);
    OP(table->host ? "gather (host table)" : "gather", k_gather(F(out), out.ld, &table->w, I(idx), idx.ld, out.rows, idx.cols,
                                                                c->stream));
}

void cu_engram_gate(backend_t *bk, bk_tensor_t X, bk_tensor_t kv, bk_tensor_t qk, int hc, float eps) {
    cuda_t *c = cu_of(bk);
    OP("engram_gate", k_engram_gate(F(X), X.ld, F(kv), kv.ld, F(qk), qk.ld, X.rows, qk.cols, hc, eps, c->stream));
}

void cu_group_pool(backend_t *bk, bk_tensor_t out, bk_tensor_t z, bk_tensor_t s, int ratio) {
    cuda_t *c = cu_of(bk);
    OP("group_pool", k_group_pool(F(out), out.ld, F(z), z.ld, F(s), s.ld, out.rows, out.cols, ratio, c->stream));
}

void cu_attention(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t ring,
                  bk_tensor_t kv_new, int64_t pos0, int window, int64_t win_lo, const bk_tensor_t *pool,
                  const bk_tensor_t *sel) {
    cuda_t *c = cu_of(bk);
    int d = (int)kv_new.cols;
    if (d > 512) die("CUDA backend: attention head_dim %d > 512", d);
    attn_args_t a = {
        .out = F(out), .ldo = out.ld, .q = F(q), .ldq = q.ld, .sink = F(sink), .scale = scale,
        .ring = F(ring), .ld_ring = ring.ld, .ring_rows = ring.rows, .kv_new = F(kv_new), .ld_kv = kv_new.ld,
        .pos0 = pos0, .win_lo = win_lo, .window = window,
        .pool = pool ? F(*pool) : NULL, .ld_pool = pool ? pool->ld : 0, .pool_rows = pool ? pool->rows : 0,
        .sel = sel ? I(*sel) : NULL, .ld_sel = sel ? sel->ld : 0, .n_sel = sel ? sel->cols : 0,
        .m = q.rows, .heads = (int)(q.cols / d), .d = d, .splits = 1,
    };
    /* few query rows: cut each row's keys into ranges (of 32 or more) so that about four blocks
     * per SM run */
    int64_t blocks = a.m * ((a.heads + 15) / 16), keys = window + a.n_sel;
    int64_t want = (4 * c->sms + blocks - 1) / blocks, most = (keys + 31) / 32;
    a.splits = (int)(want < most ? want : most);
    if (a.splits < 1) a.splits = 1;
    void *po = NULL, *pml = NULL;
    if (a.splits > 1) {
        po = cu_scratch(c, (size_t)(a.splits * a.m * a.heads * d) * 4);
        pml = cu_scratch(c, (size_t)(a.splits * a.m * a.heads * 2) * 4);
        a.part_o = po, a.part_ml = pml;
    }
    OP("attention", k_attention(&a, c->stream));
    if (po) cu_release_scratch(c, po), cu_release_scratch(c, pml);
}

void cu_indexer_topk(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                     bk_tensor_t keys, int64_t pos0, int ratio, const bk_tensor_t *blocks_in, int block_size, float q_scale,
                     float w_scale) {
    cuda_t *c = cu_of(bk);
    int64_t m = sel.rows, nk = keys.rows, heads = w.cols, di = keys.cols;
    cu_prof_begin(c, "indexer");
    float *scores = cu_scratch(c, (size_t)(m * (nk ? nk : 1)) * 4), *bs = NULL;
    CU(k_indexer_score(scores, F(q), q.ld, F(w), w.ld, F(keys), keys.ld, nk, m, (int)heads, (int)di, pos0, ratio, q_scale,
                       w_scale, c->stream));
    if (blocks_out) {
        int64_t nb = (nk + block_size - 1) / block_size;
        bs = cu_scratch(c, (size_t)(m * (nb ? nb : 1)) * 4);
        CU(k_block_scores(bs, nb, scores, nk, m, pos0, ratio, block_size, c->stream));
        CU(k_topk(I(*blocks_out), blocks_out->ld, (int)blocks_out->cols, bs, nb, m, nk, pos0, ratio, block_size, c->stream));
    }
    if (blocks_in) CU(k_mask_blocks(scores, nk, m, I(*blocks_in), blocks_in->ld, blocks_in->cols, block_size, c->stream));
    CU(k_topk(I(sel), sel.ld, (int)sel.cols, scores, nk, m, nk, pos0, ratio, 0, c->stream));
    cu_prof_end(c);
    cu_release_scratch(c, scores);
    if (bs) cu_release_scratch(c, bs);
}

void cu_router(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t bias, float temp,
               bool normalize, float scale) {
    cuda_t *c = cu_of(bk);
    OP("router", k_router(I(idx), idx.ld, F(wt), wt.ld, F(logits), logits.ld, F(bias), logits.rows, (int)logits.cols,
                          (int)idx.cols, temp, normalize, scale, c->stream));
}
