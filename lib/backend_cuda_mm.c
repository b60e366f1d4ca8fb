/* CUDA matmul and MoE. Path choice: FP8/FP4/BF16 weights against more than 32 positions
 * (grouped: 32 per expert on average) run on the tensor cores (bf16 operands, backend_cuda.h's
 * precision), FP8/FP4 against fewer (decode: dense projections, experts, the shared expert with
 * w1, w3 and its activation in one launch) on the tensor cores in passes of 8 positions;
 * everything else (fp32 precision, F32 weights, BF16 ones at few positions) on the CUDA cores
 * in fp32, memory-bound. Short outputs with few positions cut the
 * reduction across blocks (split-K: the last block of a tile adds the partial sums in a fixed
 * order, no extra launch) so that a single decode step fills the GPU. MoE routes on the device: dispatch, grouped up projections,
 * activation, grouped down projection, shared expert, combine; no host round trip. */
#include "backend_cuda_internal.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TC_MIN_POSITIONS 33
#define MOE_DIRECT_SLOTS 8 /* routed slots (rows x k) up to which the experts skip the dispatch: one decode row (at 8 rows slower, run 88) */

static const char *mm_name(int kind, bool tc, bool tcs) {
    static const char *simt[] = {"matmul f32", "matmul bf16", "matmul fp8 (cuda cores)", "matmul fp4 (cuda cores)"};
    static const char *tcn[] = {"matmul f32", "matmul bf16 (tensor cores)", "matmul fp8 (tensor cores)",
                                "matmul fp4 (tensor cores)"};
    static const char *tcsn[] = {"matmul f32", "matmul bf16", "matmul fp8 (tensor cores, 8 a pass)",
                                 "matmul fp4 (tensor cores, 8 a pass)"};
    return (tc ? tcn : tcs ? tcsn : simt)[kind & 3];
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The tensor cores take weight x scale rounded to bf16: exact for power-of-two scales; other
 * fp32 scales only where plain bf16 precision was asked for (the CUDA cores apply them in fp32). */
static bool tc_weights_ok(const cuda_t *c, const kw_t *w) {
    return !w->scale_inexact || c->precision == CUDA_BF16 || c->precision == CUDA_FP8;
}

static bool use_tc(const cuda_t *c, const mm_args_t *a) {
    bool enough = a->wtab ? a->positions >= 32 * a->max_active : a->m >= TC_MIN_POSITIONS;
    return c->precision != CUDA_FP32 && enough && a->k % (a->w.kind == KW_BF16 ? 8 : 32) == 0 && k_matmul_tc_ok(&a->w) &&
           tc_weights_ok(c, &a->w);
}

/* Fewer positions (decode; experts: per expert): the tensor cores in passes of 8 positions, at
 * every batch size, so that a sequence's numbers do not depend on what it is batched with. */
static bool use_tcs(const cuda_t *c, const mm_args_t *a) {
    return !use_tc(c, a) && c->precision != CUDA_FP32 && a->k % 32 == 0 && a->x_group_n % K_TCS_ROWS == 0 &&
           k_matmul_tcs_ok(&a->w) && tc_weights_ok(c, &a->w);
}

/* The reduction split of a dense few-position tensor-core matmul of `blocks` row blocks: the
 * split (a multiple of 256) whose waves (one block per SM) times a block's work (its columns
 * plus a fixed cost of ~512 columns: staging, latency, fix-up) is least. From the shape alone,
 * so that a row's sums do not depend on the batch. */
static int64_t tcs_split_k(const cuda_t *c, int64_t blocks, int64_t k) {
    int64_t best = k;
    double cost = INFINITY;
    for (int64_t s = 1; s <= k / 256; s++) {
        int64_t sk = cdiv(cdiv(k, s), 256) * 256, waves = cdiv(blocks * cdiv(k, sk), c->sms);
        double t = (double)waves * (double)(sk + 512);
        if (t < cost) cost = t, best = sk;
    }
    return best;
}

/* The reduction split (a multiple of 256 columns) of a dense matmul of `blocks` output blocks
 * when there are fewer than `few` of them and k >= 512: about two blocks per SM in all; else k. */
static int64_t split_below(const cuda_t *c, int64_t blocks, int64_t few, int64_t k) {
    if (blocks >= few || k < 512) return k;
    int64_t splits = cdiv(2 * c->sms, blocks), most = k / 256;
    if (splits > most) splits = most;
    return cdiv(cdiv(k, splits), 256) * 256;
}

int64_t cu_simt_split_k(const cuda_t *c, int64_t n, int64_t k) { return split_below(c, cdiv(n, 16), 2 * c->sms, k); }

/* The tensor cores' activations: bf16 pieces, or 0 for e4m3 (the fp8 precision's routed experts). */
static int act_terms(const cuda_t *c, const mm_args_t *a) {
    if (c->precision == CUDA_FP8 && use_tc(c, a) && k_matmul_tc8_form(a)) return 0;
    return c->precision == CUDA_BF16X3 ? 3 : c->precision == CUDA_BF16X2 ? 2 : 1;
}

/* Picks the path and the split of a dense or grouped matmul, launches it. profile: mark it. On
 * the tensor cores the activations' bf16 pieces go to scratch unless the caller left them in
 * a->tc_x. */
static void mm_run(cuda_t *c, mm_args_t *a, bool profile) {
    bool grouped = a->wtab != NULL, tc = use_tc(c, a), tcs = use_tcs(c, a);
    int32_t *route_idx = a->route.idx;
    a->act_terms = act_terms(c, a);
    bool fast = tc || k_matmul_fast_ok(&a->w);
    a->splits = 1, a->split_k = a->k, a->partial = NULL, a->pos_chunk = 0;
    a->sms = c->sms;
    a->x_vec = (uintptr_t)a->x % 16 == 0 && a->ldx % 4 == 0 && (!a->x_group_n || a->k % 4 == 0);
    if (!grouped && tcs) {
        a->split_k = tcs_split_k(c, cdiv(a->n, K_TCS_ROWS), a->k);
        a->splits = (int)cdiv(a->k, a->split_k);
    } else if (!grouped && fast) { /* tensor cores: split below half a wave only (prefill tiles fill the GPU) */
        int64_t sk = tc ? split_below(c, cdiv(a->n, K_TC_ROWS) * cdiv(a->m, K_TC_POSITIONS), c->sms / 2, a->k)
                        : cu_simt_split_k(c, a->n, a->k);
        if (!tc && a->m > 32) a->pos_chunk = 32;
        else if (sk < a->k) a->split_k = sk, a->splits = (int)cdiv(a->k, sk);
    }
    if (a->splits > 1) { /* the fused pair's sums: two planes */
        a->partial = cu_scratch(c, (size_t)(a->splits * a->positions * a->n) * (a->w_pair.data ? 8 : 4));
        a->counters = c->counters;
    }
    void *own_x = tc && !a->tc_x ? cu_scratch(c, k_matmul_tc_x_bytes(a)) : NULL;
    if (own_x) a->tc_x = own_x, a->tc_x_fresh = 1;
    bool routed = route_idx && !tc && !tcs && k_matmul_rows_ok(a); /* the router rides in the launch */
    if (routed) a->counters = c->counters;
    else a->route.idx = NULL;
    if (profile) cu_prof_begin(c, routed ? "matmul + router" : mm_name(a->w.kind, tc, tcs));
    CU(tc ? k_matmul_tc(a, c->stream) : tcs ? k_matmul_tcs(a, c->stream) : k_matmul_simt(a, c->stream));
    if (profile) cu_prof_end(c);
    a->route.idx = route_idx;
    if (route_idx && !routed) {
        if (profile) cu_prof_begin(c, "router");
        CU(k_router(route_idx, a->route.ldi, a->route.wt, a->route.ldw, a->out, a->ldo, a->route.bias, a->m, (int)a->n,
                    a->route.k, a->route.temp, a->route.normalize, a->route.scale, c->stream));
        if (profile) cu_prof_end(c);
    }
    if (a->partial) cu_release_scratch(c, a->partial);
    if (own_x) cu_release_scratch(c, own_x), a->tc_x = NULL;
}

static void dense(cuda_t *c, float *out, int64_t ldo, const float *x, int64_t ldx, int64_t m, const bk_weight_t *w,
                  int64_t row0, int64_t n, bool profile) {
    if (m <= 0 || n <= 0) return;
    mm_args_t a = {.m = m, .n = n, .k = w->w.cols, .row0 = row0, .x = x, .ldx = ldx, .out = out, .ldo = ldo, .w = w->w,
                   .positions = m};
    mm_run(c, &a, profile);
}

void cu_matmul(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int64_t row0) {
    if (x.cols != w->w.cols) die("CUDA backend: matmul of %lld columns against a weight of %lld", (long long)x.cols,
                                 (long long)w->w.cols);
    if (row0 < 0 || row0 + out.cols > w->w.rows)
        die("CUDA backend: matmul of weight rows %lld..%lld past a weight of %lld", (long long)row0,
            (long long)(row0 + out.cols), (long long)w->w.rows);
    dense(cu_of(bk), out.ptr, out.ld, x.ptr, x.ld, x.rows, w, row0, out.cols, true);
}

/* At one position the gate's launch routes too (its last block); else the router's own launch. */
void cu_gate_router(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t x, const bk_weight_t *gate,
                    bk_tensor_t bias, float temp, bool normalize, float scale) {
    if (x.cols != gate->w.cols || logits.cols != gate->w.rows || logits.rows != x.rows || idx.rows != x.rows ||
        wt.rows != x.rows || wt.cols != idx.cols || bias.cols != logits.cols)
        die("CUDA backend: gate_router of %lld x %lld against a %lld x %lld gate into %lld x %lld slots", (long long)x.rows,
            (long long)x.cols, (long long)gate->w.rows, (long long)gate->w.cols, (long long)idx.rows, (long long)idx.cols);
    mm_args_t a = {.m = x.rows, .n = logits.cols, .k = x.cols, .x = x.ptr, .ldx = x.ld, .out = logits.ptr, .ldo = logits.ld,
                   .w = gate->w, .positions = x.rows};
    a.route.idx = idx.ptr, a.route.wt = wt.ptr, a.route.ldi = idx.ld, a.route.ldw = wt.ld, a.route.bias = bias.ptr;
    a.route.k = (int)idx.cols, a.route.normalize = normalize, a.route.temp = temp, a.route.scale = scale;
    if (x.rows > 0) mm_run(cu_of(bk), &a, true);
}

/* At few positions on the tensor cores (decode) the expand rides in the matmul's epilogue (the
 * model's 4 streams), k_hc_expand's bits; else the matmul, then the hc_expand op. */
void cu_matmul_expand(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, const bk_expand_t *expand) {
    cuda_t *c = cu_of(bk);
    if (x.cols != w->w.cols || out.cols > w->w.rows)
        die("CUDA backend: matmul of %lld columns into %lld against a %lld x %lld weight", (long long)x.cols, (long long)out.cols,
            (long long)w->w.rows, (long long)w->w.cols);
    mm_args_t a = {.m = x.rows, .n = out.cols, .k = w->w.cols, .x = x.ptr, .ldx = x.ld, .out = out.ptr, .ldo = out.ld,
                   .w = w->w, .positions = x.rows};
    if (x.rows <= 0 || expand->hc != 4 || !use_tcs(c, &a)) {
        cu_matmul(bk, out, x, w, 0);
        cu_hc_expand(bk, expand->X, out, expand->coef, expand->hc);
        return;
    }
    cu_expand_check(c, expand->X, out, expand->coef, expand->hc);
    a.ex_X = expand->X.ptr, a.ex_ldx = expand->X.ld, a.ex_coef = expand->coef.ptr, a.ex_ldc = expand->coef.ld;
    mm_run(c, &a, true);
}

/* One launch when every output tile lies in one group (16 outputs on the CUDA cores, 128 on
 * the tensor cores at any number of positions), else one matmul per group. */
void cu_matmul_grouped(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int groups) {
    cuda_t *c = cu_of(bk);
    int64_t ng = groups > 0 ? out.cols / groups : 0, kg = groups > 0 ? x.cols / groups : 0;
    if (groups <= 0 || ng * groups != out.cols || kg * groups != x.cols || kg != w->w.cols || ng * groups > w->w.rows)
        die("CUDA backend: grouped matmul of %lld -> %lld columns in %d groups against a %lld x %lld weight",
            (long long)x.cols, (long long)out.cols, groups, (long long)w->w.rows, (long long)w->w.cols);
    if (x.rows <= 0 || ng <= 0) return;
    mm_args_t a = {.m = x.rows, .n = out.cols, .k = kg, .x = x.ptr, .ldx = x.ld, .out = out.ptr, .ldo = out.ld, .w = w->w,
                   .positions = x.rows, .x_group_n = ng};
    if (use_tc(c, &a) ? ng % 128 == 0 : use_tcs(c, &a) || (k_matmul_fast_ok(&w->w) && ng % 16 == 0)) {
        mm_run(c, &a, true);
        return;
    }
    for (int g = 0; g < groups; g++)
        dense(c, (float *)out.ptr + g * ng, out.ld, (const float *)x.ptr + g * kg, x.ld, x.rows, w, g * ng, ng, true);
}

/* ---- experts ---------------------------------------------------------------------------- */
static bool kw_same_layout(const kw_t *a, const kw_t *b) {
    return a->kind == b->kind && a->scale_f32 == b->scale_f32 && a->block_rows == b->block_rows &&
           a->block_cols == b->block_cols && a->rows == b->rows && a->cols == b->cols;
}

/* Same weight, same layout: the table caches whole descriptors, since a weight bound anew
 * can reuse a freed weight's data address with its scales elsewhere. */
static bool kw_same(const kw_t *a, const kw_t *b) { return a->data == b->data && a->scale == b->scale && kw_same_layout(a, b); }

/* Slot i of a layer's expert table: w1 of all experts, then w2, then w3. */
static const kw_t *expert_slot(const bk_expert_t *ex, int n, int i) {
    const bk_expert_t *e = &ex[i % n];
    return &(i < n ? e->w1 : i < 2 * n ? e->w2 : e->w3)->w;
}

/* The device table of a layer's expert weights, built on first use and rebuilt if any weight
 * changed (checked in place: every MoE call looks it up). */
static const cu_experts_t *expert_table(cuda_t *c, const bk_expert_t *ex, int n) {
    for (int t = 0; t < c->n_expert_tabs; t++) {
        cu_experts_t *e = &c->expert_tabs[t];
        if (e->experts != ex || e->n != n) continue;
        bool same = true;
        for (int i = 0; i < 3 * n && same; i++) same = kw_same(&e->host[i], expert_slot(ex, n, i));
        if (same) return e;
        CU(cudaFree(e->dev));
        free(e->host);
        *e = c->expert_tabs[--c->n_expert_tabs];
        break;
    }
    if (c->one_graph) die("CUDA backend: a layer's first MoE call happened inside a graph capture (run a step outside it first)");
    kw_t *h = xmalloc((size_t)(3 * n) * sizeof *h);
    int inexact = 0; /* one path for the whole table: any expert's inexact scales count for all */
    for (int i = 0; i < 3 * n; i++) {
        h[i] = *expert_slot(ex, n, i);
        inexact |= h[i].scale_inexact;
        if (!kw_same_layout(&h[i], &h[i / n * n]))
            die("CUDA backend: routed experts of one layer must share one storage format and shape");
    }
    for (int i = 0; i < 3 * n; i++) h[i].scale_inexact = inexact;
    void *dev;
    size_t tab = ((size_t)(3 * n) * sizeof *h + 63) & ~(size_t)63; /* the maps after the table, 64-byte aligned */
    CU(cudaMalloc(&dev, tab + k_matmul_tc_wmaps_bytes(3 * n)));
    CU(cudaMemcpy(dev, h, (size_t)(3 * n) * sizeof *h, cudaMemcpyHostToDevice));
    const void *maps = k_matmul_tc_wmaps(h, 3 * n, (char *)dev + tab) == cudaSuccess ? (char *)dev + tab : NULL;
    cudaGetLastError(); /* a table that cannot take the maps only goes without them */
    bool fp8 = maps && h[0].kind == KW_FP4 && k_matmul_tc8_ok(h, 3 * n);
    c->expert_tabs = xrealloc(c->expert_tabs, (size_t)(c->n_expert_tabs + 1) * sizeof *c->expert_tabs);
    c->expert_tabs[c->n_expert_tabs] = (cu_experts_t){ex, n, h, dev, maps, fp8};
    return &c->expert_tabs[c->n_expert_tabs++];
}

/* The tensor map of the table's weight i, or NULL (the table has none). */
static const void *map_at(const cu_experts_t *tab, int64_t i) {
    return tab->maps ? (const char *)tab->maps + k_matmul_tc_wmaps_bytes((int)i) : NULL;
}

/* One expert MLP over every row of x (the shared expert): out = w2 . act(w1 x, w3 x); at few
 * positions on the tensor cores w1, w3 and the activation are one launch. */
void cu_mlp(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_expert_t *e, float limit) {
    cuda_t *c = cu_of(bk);
    int64_t m = x.rows, I = e->w1->w.rows, D = e->w2->w.rows;
    if (m <= 0) return;
    cu_prof_begin(c, "moe shared expert");
    float *g = cu_scratch(c, (size_t)(m * I) * 4);
    mm_args_t a = {.m = m, .n = I, .k = e->w1->w.cols, .x = x.ptr, .ldx = x.ld, .out = g, .ldo = I, .w = e->w1->w,
                   .positions = m, .w_pair = e->w3->w, .limit = limit};
    if (use_tcs(c, &a) && k_matmul_tcs_ok(&e->w3->w) && tc_weights_ok(c, &e->w3->w) && kw_same_layout(&e->w1->w, &e->w3->w))
        mm_run(c, &a, false);
    else {
        float *u = cu_scratch(c, (size_t)(m * I) * 4);
        dense(c, g, I, x.ptr, x.ld, m, e->w1, 0, I, false);
        dense(c, u, I, x.ptr, x.ld, m, e->w3, 0, I, false);
        CU(k_moe_act(g, g, u, NULL, m, I, limit, c->stream));
        cu_release_scratch(c, u);
    }
    dense(c, out.ptr, out.ld, g, I, m, e->w2, 0, D, false);
    cu_release_scratch(c, g);
    cu_prof_end(c);
}

void cu_moe(backend_t *bk, bk_tensor_t out, bk_tensor_t x, bk_tensor_t idx, bk_tensor_t wt, const bk_expert_t *experts,
            int n_experts, const bk_tensor_t *add, const bk_expand_t *expand, float limit) {
    cuda_t *c = cu_of(bk);
    int64_t m = x.rows, D = x.cols, k = idx.cols, E = n_experts, P = m * k;
    if (m <= 0) return;
    int64_t I = experts[0].w1->w.rows, groups = E < P ? E : P, tiles = cdiv(P, K_TC_POSITIONS) + groups;
    const cu_experts_t *tab = expert_table(c, experts, (int)E);
    float *g = cu_scratch(c, (size_t)(P * I) * 4), *u = cu_scratch(c, (size_t)(P * I) * 4), *y = cu_scratch(c, (size_t)(P * D) * 4);
    mm_args_t a = {.m = m, .n = I, .k = D, .x = x.ptr, .ldx = x.ld, .out = g, .ldo = I, .w = tab->host[0],
                   .wtab = tab->dev, .max_active = groups, .max_tiles = tiles, .positions = P, .tc_wmaps = map_at(tab, 0),
                   .tc8_ok = tab->fp8};
    mm_args_t down = {.m = m, .n = D, .k = I, .x = g, .ldx = I, .out = y, .ldo = D, .w = tab->host[E], .wtab = tab->dev + E,
                      .max_active = groups, .max_tiles = tiles, .positions = P, .tc_wmaps = map_at(tab, E), .tc8_ok = tab->fp8};
    /* Few slots, each its own block on the tensor cores: the blocks read the router's idx and wt
     * themselves and the dispatch kernel is skipped (one dependent launch fewer a decode layer;
     * a slot's numbers are those of its one-position group either way). */
    bool direct = P <= MOE_DIRECT_SLOTS && (m == 1 || wt.ld == k) && use_tcs(c, &a) && use_tcs(c, &down);
    int32_t *ints = NULL, *pos_of = NULL;
    float *wpos = NULL;
    if (direct) {
        a.slot_idx = down.slot_idx = idx.ptr, a.ld_slot = down.ld_slot = idx.ld;
        a.n_groups = down.n_groups = E, a.slots = down.slots = (int)k, a.max_active = down.max_active = P;
        a.slot_x_row = 1;
    } else {
        ints = cu_scratch(c, (size_t)(E + 1 + 2 * P + E + 2 * tiles + 2) * 4);
        int32_t *offsets = ints, *x_rows = ints + E + 1 + P, *active = x_rows + P, *tl = active + E, *counts = tl + 2 * tiles;
        pos_of = offsets + E + 1;
        wpos = cu_scratch(c, (size_t)P * 4);
        a.offsets = down.offsets = offsets, a.x_rows = x_rows, a.active = down.active = active;
        a.tiles = down.tiles = tl, a.counts = down.counts = counts;
        cu_prof_begin(c, "moe dispatch");
        CU(k_moe_dispatch(idx.ptr, idx.ld, wt.ptr, wt.ld, m, (int)k, (int)E, offsets, pos_of, x_rows, wpos, active, tl, counts,
                          c->stream));
        cu_prof_end(c);
    }
    cu_prof_begin(c, use_tc(c, &a) ? "moe experts (tensor cores)" : use_tcs(c, &a) ? "moe experts (tensor cores, 8 a pass)"
                                                                                  : "moe experts (cuda cores)");
    void *xs = NULL; /* w1 and w3 read one conversion of x on the tensor cores */
    if (use_tc(c, &a)) a.act_terms = act_terms(c, &a), xs = a.tc_x = cu_scratch(c, k_matmul_tc_x_bytes(&a)), a.tc_x_fresh = 1;
    bool fused = use_tcs(c, &a); /* few positions per expert: w1, w3 and the activation in one launch */
    if (fused) a.wtab2 = tab->dev + 2 * E, a.wpos = direct ? wt.ptr : wpos, a.limit = limit;
    mm_run(c, &a, false); /* w1 */
    a.w = tab->host[2 * E], a.wtab = tab->dev + 2 * E, a.out = u, a.tc_x_fresh = 0, a.tc_wmaps = map_at(tab, 2 * E);
    if (!fused) mm_run(c, &a, false); /* w3 */
    if (xs) cu_release_scratch(c, xs);
    if (!fused) CU(k_moe_act(g, g, u, wpos, P, I, limit, c->stream));
    mm_run(c, &down, false); /* w2 */
    cu_prof_end(c);

    if (add) cu_join_branch(c); /* add may be the shared expert's, made on a branch */
    bool fuse = expand && expand->hc == 4; /* the combine's launch goes on to the expand (the model's 4 streams) */
    if (fuse) cu_expand_check(c, expand->X, out, expand->coef, expand->hc);
    cu_prof_begin(c, fuse ? "moe combine + hc_expand" : "moe combine");
    CU(k_moe_combine(out.ptr, out.ld, y, pos_of, idx.ptr, idx.ld, (int)E, add ? add->ptr : NULL,
                     add ? add->ld : 0, m, (int)k, D, fuse ? expand->X.ptr : NULL, fuse ? expand->X.ld : 0,
                     fuse ? expand->coef.ptr : NULL, fuse ? expand->coef.ld : 0, c->stream));
    cu_prof_end(c);
    if (expand && !fuse) cu_hc_expand(bk, expand->X, out, expand->coef, expand->hc);
    if (ints) cu_release_scratch(c, ints), cu_release_scratch(c, wpos);
    cu_release_scratch(c, g);
    cu_release_scratch(c, u);
    cu_release_scratch(c, y);
}
