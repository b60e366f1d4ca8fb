/* The forward's branches keep backend.h's contract, checked on the CPU: a recording backend
 * wraps the CPU one and notes every tensor each op reads or writes. Between branch_begin and
 * branch_end only the ops a branch allows may run; at the join (branch_join, or moe reading its
 * add) nothing the branch wrote may have been read or written by the main line's ops issued
 * after branch_end, nor anything the branch read written by them. The CUDA backend runs the
 * two sides on different streams, where a broken contract is a race that shows only sometimes;
 * here it fails every time. The checker's own failures are tested first. */
#include "backend_cpu.h"
#include "forward.h"
#include "seqstate.h"
#include "testlib.h"
#include "testmodel.h"
#include "util.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the recording backend ------------------------------------------------------------------ */
typedef struct {
    const char *base; /* first element */
    int64_t rows, cols, ld;
    bool write;
    const char *op;
} access_t;

typedef struct {
    access_t *v;
    size_t n, cap;
} accesses_t;

enum { OUTSIDE, IN_BRANCH, AFTER_END };

static struct {
    backend_t *inner;
    int phase;
    accesses_t branch, main; /* IN_BRANCH's accesses, AFTER_END's */
    int branches, conflicts, misplaced;
    char first[256]; /* the first violation */
} rec;

static void violation(const char *fmt, ...) {
    if (rec.first[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rec.first, sizeof rec.first, fmt, ap);
    va_end(ap);
}

static void misplaced(const char *what) {
    rec.misplaced++;
    violation("%s", what);
}

static void note(bk_tensor_t t, bool write, const char *op) {
    if (rec.phase == OUTSIDE || !t.ptr || t.rows <= 0 || t.cols <= 0) return;
    accesses_t *a = rec.phase == IN_BRANCH ? &rec.branch : &rec.main;
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->v = xrealloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = (access_t){t.ptr, t.rows, t.cols, t.ld, write, op};
}
static void rd(bk_tensor_t t, const char *op) { note(t, false, op); }
static void wr(bk_tensor_t t, const char *op) { note(t, true, op); }
static void rdp(const bk_tensor_t *t, const char *op) {
    if (t) rd(*t, op);
}
/* Reads of a paged store: its rows, page by page. */
static void rd_paged(bk_paged_t p, const char *op) {
    bk_tensor_t v;
    for (int64_t j = 0; j < p.rows; j += v.rows) {
        bk_paged_run(p, j, p.rows - j, &v);
        rd(v, op);
    }
}

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

/* Whether two strided views share an element: for each row of a, the rows of b that can meet it. */
static bool overlap(const access_t *a, const access_t *b) {
    int64_t a_end = (a->rows - 1) * a->ld + a->cols, b_end = (b->rows - 1) * b->ld + b->cols;
    int64_t d0 = ((intptr_t)a->base - (intptr_t)b->base) / 4; /* a's first element, in b's elements */
    if (d0 >= b_end || d0 + a_end <= 0) return false;
    for (int64_t r = 0; r < a->rows; r++) {
        int64_t d = d0 + r * a->ld; /* b's row s meets [d, d + a->cols) when s ld < d + cols_a and s ld + cols_b > d */
        int64_t lo = floor_div(d - b->cols, b->ld) + 1, hi = -floor_div(-(d + a->cols), b->ld) - 1;
        if (lo < 0) lo = 0;
        if (hi > b->rows - 1) hi = b->rows - 1;
        if (lo <= hi) return true;
    }
    return false;
}

static void check_join(void) {
    if (rec.phase == IN_BRANCH) misplaced("a join inside a branch");
    if (rec.phase != AFTER_END) return;
    for (size_t i = 0; i < rec.branch.n; i++)
        for (size_t j = 0; j < rec.main.n; j++) {
            const access_t *b = &rec.branch.v[i], *m = &rec.main.v[j];
            if ((b->write || m->write) && overlap(b, m)) {
                rec.conflicts++;
                violation("the branch's %s and the main line's %s touch the same memory", b->op, m->op);
            }
        }
    rec.branch.n = rec.main.n = 0;
    rec.phase = OUTSIDE;
}

/* An op a branch may not hold (backend.h's list). */
static void main_line_only(const char *op) {
    if (rec.phase != IN_BRANCH) return;
    rec.misplaced++;
    violation("%s inside a branch", op);
}

#define IN rec.inner
static bk_tensor_t w_alloc(backend_t *bk, bk_dtype_t dt, int64_t rows, int64_t cols) {
    (void)bk;
    bk_tensor_t t = IN->alloc(IN, dt, rows, cols);
    wr(t, "alloc");
    return t;
}
static void w_release(backend_t *bk, bk_tensor_t *t) {
    (void)bk;
    wr(*t, "release");
    IN->release(IN, t);
}
static void w_upload(backend_t *bk, bk_tensor_t dst, const void *host) {
    (void)bk, main_line_only("upload"), wr(dst, "upload");
    IN->upload(IN, dst, host);
}
static void w_download(backend_t *bk, void *host, bk_tensor_t src) {
    (void)bk, main_line_only("download"), rd(src, "download");
    IN->download(IN, host, src);
}
static void w_copy(backend_t *bk, bk_tensor_t dst, bk_tensor_t src) {
    (void)bk, rd(src, "copy"), wr(dst, "copy");
    IN->copy(IN, dst, src);
}
static void w_copy_many(backend_t *bk, const bk_tensor_t *dst, const bk_tensor_t *src, int n) {
    (void)bk;
    for (int i = 0; i < n; i++) rd(src[i], "copy_many"), wr(dst[i], "copy_many");
    IN->copy_many(IN, dst, src, n);
}
static bk_weight_t *w_bind(backend_t *bk, const wmat_t *m) {
    (void)bk, main_line_only("bind");
    return IN->bind(IN, m);
}
static void w_unbind(backend_t *bk, bk_weight_t *w) {
    (void)bk, main_line_only("unbind");
    IN->unbind(IN, w);
}
static void w_branch_begin(backend_t *bk) {
    (void)bk;
    if (rec.phase != OUTSIDE) misplaced("branch_begin before the last branch was joined");
    rec.phase = IN_BRANCH;
    rec.branches++;
}
static void w_branch_end(backend_t *bk) {
    (void)bk;
    if (rec.phase != IN_BRANCH) misplaced("branch_end outside a branch");
    rec.phase = AFTER_END;
}
static void w_branch_join(backend_t *bk) {
    (void)bk;
    check_join();
}
static void w_matmul(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int64_t row0) {
    (void)bk, rd(x, "matmul"), wr(out, "matmul");
    IN->matmul(IN, out, x, w, row0);
}
static void w_matmul_expand(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, const bk_expand_t *expand) {
    (void)bk, main_line_only("matmul_expand"), rd(x, "matmul_expand"), wr(out, "matmul_expand");
    rd(expand->coef, "matmul_expand"), wr(expand->X, "matmul_expand");
    IN->matmul_expand(IN, out, x, w, expand);
}
static void w_matmul_grouped(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int groups) {
    (void)bk, rd(x, "matmul_grouped"), wr(out, "matmul_grouped");
    IN->matmul_grouped(IN, out, x, w, groups);
}
static void w_rmsnorm(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_tensor_t *w, float eps) {
    (void)bk, rd(x, "rmsnorm"), rdp(w, "rmsnorm"), wr(out, "rmsnorm");
    IN->rmsnorm(IN, out, x, w, eps);
}
static void w_rope(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, int64_t pos0, int64_t pos_step,
                   bool inverse) {
    (void)bk, rd(inv_freq, "rope"), wr(x, "rope");
    IN->rope(IN, x, head_dim, inv_freq, pos0, pos_step, inverse);
}
static void w_rope_spans(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, const bk_span_t *spans, int n_spans,
                         int64_t pos_step, bool inverse) {
    (void)bk, rd(inv_freq, "rope_spans");
    for (int i = 0; i < n_spans; i++) wr(bk_rows(x, spans[i].r0, spans[i].n), "rope_spans");
    IN->rope_spans(IN, x, head_dim, inv_freq, spans, n_spans, pos_step, inverse);
}
static void w_qat(backend_t *bk, bk_tensor_t x, qat_kind_t kind, int block) {
    (void)bk, wr(x, "qat");
    IN->qat(IN, x, kind, block);
}
static void w_rope_qat_spans(backend_t *bk, bk_tensor_t out, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq,
                             const bk_span_t *spans, int n_spans, int64_t pos_step, qat_kind_t kind, int block) {
    (void)bk, rd(inv_freq, "rope_qat_spans");
    for (int i = 0; i < n_spans; i++)
        rd(bk_rows(x, spans[i].r0, spans[i].n), "rope_qat_spans"), wr(bk_rows(out, spans[i].r0, spans[i].n), "rope_qat_spans");
    IN->rope_qat_spans(IN, out, x, head_dim, inv_freq, spans, n_spans, pos_step, kind, block);
}
static void w_hc_mix(backend_t *bk, bk_tensor_t coef, bk_tensor_t mixes, bk_tensor_t X, bk_tensor_t base, bk_tensor_t scale,
                     int hc, float eps, float hc_eps, int iters) {
    (void)bk, main_line_only("hc_mix"), rd(mixes, "hc_mix"), rd(X, "hc_mix"), wr(coef, "hc_mix");
    IN->hc_mix(IN, coef, mixes, X, base, scale, hc, eps, hc_eps, iters);
}
static void w_hc_collapse(backend_t *bk, bk_tensor_t out, bk_tensor_t X, bk_tensor_t pre, int hc) {
    (void)bk, main_line_only("hc_collapse"), rd(X, "hc_collapse"), rd(pre, "hc_collapse"), wr(out, "hc_collapse");
    IN->hc_collapse(IN, out, X, pre, hc);
}
static void w_hc_expand(backend_t *bk, bk_tensor_t X, bk_tensor_t y, bk_tensor_t coef, int hc) {
    (void)bk, main_line_only("hc_expand"), rd(y, "hc_expand"), rd(coef, "hc_expand"), wr(X, "hc_expand");
    IN->hc_expand(IN, X, y, coef, hc);
}
static void w_hc_fill(backend_t *bk, bk_tensor_t X, bk_tensor_t pre, bk_tensor_t e, int hc) {
    (void)bk, main_line_only("hc_fill"), rd(e, "hc_fill"), wr(X, "hc_fill"), wr(pre, "hc_fill");
    IN->hc_fill(IN, X, pre, e, hc);
}
static void w_hc_pre(backend_t *bk, bk_tensor_t out, bk_tensor_t coef, bk_tensor_t X, const bk_weight_t *fn, bk_tensor_t base,
                     bk_tensor_t scale, bk_tensor_t pre, const bk_tensor_t *norm, int hc, float eps, float hc_eps, int iters) {
    (void)bk, main_line_only("hc_pre"), rd(X, "hc_pre"), rd(pre, "hc_pre"), wr(coef, "hc_pre"), wr(out, "hc_pre");
    IN->hc_pre(IN, out, coef, X, fn, base, scale, pre, norm, hc, eps, hc_eps, iters);
}
static void w_gather(backend_t *bk, bk_tensor_t out, const bk_weight_t *table, bk_tensor_t idx) {
    (void)bk, main_line_only("gather"), rd(idx, "gather"), wr(out, "gather");
    IN->gather(IN, out, table, idx);
}
static void w_engram_gate(backend_t *bk, bk_tensor_t X, bk_tensor_t kv, bk_tensor_t qk, int hc, float eps) {
    (void)bk, main_line_only("engram_gate"), rd(kv, "engram_gate"), wr(X, "engram_gate");
    IN->engram_gate(IN, X, kv, qk, hc, eps);
}
static void w_group_pool(backend_t *bk, bk_tensor_t out, bk_tensor_t z, bk_tensor_t s, int ratio) {
    (void)bk, rd(z, "group_pool"), rd(s, "group_pool"), wr(out, "group_pool");
    IN->group_pool(IN, out, z, s, ratio);
}
static void w_attention(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t ring,
                        bk_tensor_t kv_new, int64_t pos0, int window, int64_t win_lo, const bk_paged_t *pool,
                        const bk_tensor_t *sel) {
    (void)bk, main_line_only("attention"), rd(q, "attention"), rd(ring, "attention"), rd(kv_new, "attention");
    if (pool) rd_paged(*pool, "attention");
    rdp(sel, "attention"), wr(out, "attention");
    IN->attention(IN, out, q, sink, scale, ring, kv_new, pos0, window, win_lo, pool, sel);
}
static void w_attention_spans(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t kv_new,
                              int window, const bk_span_t *spans, int n_spans, const bk_tensor_t *sel,
                              const bk_tensor_t *unrope) {
    (void)bk, main_line_only("attention_spans"), rd(q, "attention_spans"), rd(kv_new, "attention_spans");
    rdp(sel, "attention_spans"), wr(out, "attention_spans");
    for (int i = 0; i < n_spans; i++) rd(spans[i].ring, "attention_spans"), rd_paged(spans[i].pool, "attention_spans");
    IN->attention_spans(IN, out, q, sink, scale, kv_new, window, spans, n_spans, sel, unrope);
}
static void w_indexer_topk(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                           bk_paged_t keys, int64_t pos0, int ratio, const bk_tensor_t *blocks_in, int block_size,
                           float q_scale, float w_scale) {
    (void)bk, main_line_only("indexer_topk"), rd(q, "indexer_topk"), rd(w, "indexer_topk"), rd_paged(keys, "indexer_topk");
    rdp(blocks_in, "indexer_topk"), wr(sel, "indexer_topk");
    if (blocks_out) wr(*blocks_out, "indexer_topk");
    IN->indexer_topk(IN, sel, blocks_out, q, w, keys, pos0, ratio, blocks_in, block_size, q_scale, w_scale);
}
static void w_indexer_spans(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                            const bk_span_t *spans, int n_spans, int ratio, const bk_tensor_t *blocks_in, int block_size,
                            float q_scale, float w_scale) {
    (void)bk, main_line_only("indexer_spans"), rd(q, "indexer_spans"), rd(w, "indexer_spans");
    rdp(blocks_in, "indexer_spans"), wr(sel, "indexer_spans");
    if (blocks_out) wr(*blocks_out, "indexer_spans");
    for (int i = 0; i < n_spans; i++) rd_paged(spans[i].keys, "indexer_spans");
    IN->indexer_spans(IN, sel, blocks_out, q, w, spans, n_spans, ratio, blocks_in, block_size, q_scale, w_scale);
}
static void w_router(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t bias, float temp,
                     bool normalize, float scale) {
    (void)bk, main_line_only("router"), rd(logits, "router"), wr(idx, "router"), wr(wt, "router");
    IN->router(IN, idx, wt, logits, bias, temp, normalize, scale);
}
static void w_gate_router(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t x,
                          const bk_weight_t *gate, bk_tensor_t bias, float temp, bool normalize, float scale) {
    (void)bk, main_line_only("gate_router"), rd(x, "gate_router"), wr(logits, "gate_router"), wr(idx, "gate_router");
    wr(wt, "gate_router");
    IN->gate_router(IN, idx, wt, logits, x, gate, bias, temp, normalize, scale);
}
static void w_mlp(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_expert_t *e, float limit) {
    (void)bk, rd(x, "mlp"), wr(out, "mlp");
    IN->mlp(IN, out, x, e, limit);
}
static void w_moe(backend_t *bk, bk_tensor_t out, bk_tensor_t x, bk_tensor_t idx, bk_tensor_t wt, const bk_expert_t *experts,
                  int n, const bk_tensor_t *add, const bk_expand_t *expand, float limit) {
    (void)bk, main_line_only("moe"), rd(x, "moe"), rd(idx, "moe"), rd(wt, "moe"), wr(out, "moe");
    if (add) check_join(); /* moe joins before it reads add */
    rdp(add, "moe");
    if (expand) rd(expand->coef, "moe"), wr(expand->X, "moe");
    IN->moe(IN, out, x, idx, wt, experts, n, add, expand, limit);
}
static void w_pick(backend_t *bk, bk_tensor_t logits, const bk_pick_t *rows, int n, sampler_t *scratch) {
    (void)bk, main_line_only("pick"), rd(logits, "pick");
    IN->pick(IN, logits, rows, n, scratch);
}
#undef IN

static backend_t *recorder(backend_t *inner) {
    memset(&rec, 0, sizeof rec);
    rec.inner = inner;
    backend_t *bk = xcalloc(1, sizeof *bk);
    *bk = (backend_t){
        .name = "recorder", .impl = NULL,
        .alloc = w_alloc, .release = w_release, .upload = w_upload, .download = w_download, .copy = w_copy,
        .copy_many = w_copy_many, .bind = w_bind, .unbind = w_unbind, .destroy = NULL,
        .branch_begin = w_branch_begin, .branch_end = w_branch_end, .branch_join = w_branch_join,
        .matmul = w_matmul, .matmul_grouped = w_matmul_grouped, .matmul_expand = w_matmul_expand, .rmsnorm = w_rmsnorm, .rope = w_rope, .rope_spans = w_rope_spans,
        .qat = w_qat, .rope_qat_spans = w_rope_qat_spans, .hc_mix = w_hc_mix, .hc_collapse = w_hc_collapse, .hc_expand = w_hc_expand, .hc_fill = w_hc_fill,
        .hc_pre = w_hc_pre, .gather = w_gather, .engram_gate = w_engram_gate, .group_pool = w_group_pool,
        .attention = w_attention, .attention_spans = w_attention_spans, .indexer_topk = w_indexer_topk,
        .indexer_spans = w_indexer_spans, .router = w_router, .gate_router = w_gate_router, .mlp = w_mlp, .moe = w_moe, .pick = w_pick,
    };
    return bk;
}

static void recorder_free(backend_t *bk) {
    free(rec.branch.v), free(rec.main.v);
    free(bk);
}

/* ---- the checker fails on broken contracts ------------------------------------------------- */
static backend_t *cpu;

static void test_checker_finds_violations(void) {
    backend_t *bk = recorder(cpu);
    bk_tensor_t a = bk->alloc(bk, BK_F32, 4, 8), b = bk->alloc(bk, BK_F32, 4, 8);
    /* the main line reads what the branch writes, before the join */
    bk->branch_begin(bk);
    bk->rmsnorm(bk, a, a, NULL, 1e-6f);
    bk->branch_end(bk);
    bk->copy(bk, b, a);
    bk->branch_join(bk);
    CHECK(rec.conflicts > 0);
    /* disjoint columns of one tensor do not conflict; overlapping ones do */
    rec.conflicts = 0;
    bk->branch_begin(bk);
    bk->rmsnorm(bk, bk_cols(a, 0, 4), bk_cols(a, 0, 4), NULL, 1e-6f);
    bk->branch_end(bk);
    bk->rmsnorm(bk, bk_cols(a, 4, 4), bk_cols(a, 4, 4), NULL, 1e-6f);
    bk->branch_join(bk);
    CHECK_EQ(rec.conflicts, 0);
    bk->branch_begin(bk);
    bk->rmsnorm(bk, bk_cols(a, 0, 5), bk_cols(a, 0, 5), NULL, 1e-6f);
    bk->branch_end(bk);
    bk->rmsnorm(bk, bk_rows(bk_cols(a, 4, 4), 3, 1), bk_rows(bk_cols(a, 4, 4), 3, 1), NULL, 1e-6f);
    bk->branch_join(bk);
    CHECK(rec.conflicts > 0);
    /* an op a branch may not hold, and a branch inside a branch */
    bk->branch_begin(bk);
    bk->hc_fill(bk, a, bk_cols(b, 0, 4), bk_cols(a, 0, 2), 4);
    bk->branch_begin(bk);
    CHECK_EQ(rec.misplaced, 2);
    rec.phase = OUTSIDE;
    bk->release(bk, &a), bk->release(bk, &b);
    recorder_free(bk);
}

/* ---- the forward keeps it ------------------------------------------------------------------- */
static char tmp[64] = "/tmp/di-branch-XXXXXX", err[512];

/* Prompts' prefills, a few sequences stepped together, two chunks packed in one forward and a
 * bounded replay in chunks (head pieces): compressor groups completed, pools grown inside
 * branches, the indexer, Engram, the shared expert. */
static void run_forward(const char *preset, int64_t vocab) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/tiny-%s", tmp, preset);
    CHECKF(t_tiny_model(dir, preset, vocab, 11, true, err, sizeof err) == 0, "%s", err);
    backend_t *bk = recorder(cpu);
    model_t m;
    CHECKF(model_open(&m, dir, bk, NULL, err, sizeof err) == 0, "%s", err);
    enum { SEQS = 3, PROMPT = 37, STEPS = 12 };
    seqstate_t *st[SEQS];
    uint32_t ids[PROMPT];
    float *logits = xmalloc((size_t)SEQS * (size_t)vocab * 4);
    for (int s = 0; s < SEQS; s++) {
        st[s] = seqstate_new(&m, true);
        for (int i = 0; i < PROMPT; i++) ids[i] = (uint32_t)((i * 7 + s * 13 + 1) % vocab);
        int64_t got = 0;
        CHECKF(forward_prefill(st[s], ids, PROMPT - 5 * s, -1, FWD_LOGITS_LAST, logits, &got, err, sizeof err) == 0, "%s", err);
    }
    for (int k = 0; k < STEPS; k++) {
        uint32_t next[SEQS];
        for (int s = 0; s < SEQS; s++) next[s] = (uint32_t)((k * 5 + s) % vocab);
        CHECKF(forward_step_batch(st, next, SEQS, logits, err, sizeof err) == 0, "%s", err);
    }
    /* chunks of two sequences packed in one forward, and a bounded replay in chunks (head pieces) */
    fwd_seq_t packed[2] = {{.st = st[0], .ids = ids, .n = 9, .decoder_from = -1, .want = FWD_LOGITS_LAST, .logits = logits},
                           {.st = st[1], .ids = ids + 9, .n = 6, .decoder_from = -1, .want = FWD_LOGITS_LAST,
                            .logits = logits + vocab}};
    CHECKF(forward_batch(packed, 2, err, sizeof err) == 0, "%s", err);
    seqstate_t *replayed = seqstate_new(&m, true);
    uint32_t prompt[3 * PROMPT];
    for (int i = 0; i < 3 * PROMPT; i++) prompt[i] = (uint32_t)((i * 11 + 3) % vocab);
    CHECKF(forward_prompt(replayed, prompt, 3 * PROMPT, 20, 16, FWD_LOGITS_LAST, logits, NULL, err, sizeof err) == 0, "%s", err);
    seqstate_free(replayed);
    CHECKF(rec.conflicts == 0 && rec.misplaced == 0, "tiny-%s: %d conflicts, %d misplaced ops (first: %s)", preset,
           rec.conflicts, rec.misplaced, rec.first);
    CHECKF(rec.branches >= 2 * (1 + SEQS + STEPS), "tiny-%s: only %d branches checked", preset, rec.branches);
    CHECK_EQ(rec.phase, OUTSIDE);
    for (int s = 0; s < SEQS; s++) seqstate_free(st[s]);
    model_close(&m);
    recorder_free(bk);
    free(logits);
}

static void test_forward_tiny_a(void) { run_forward("a", 512); }
static void test_forward_tiny_b(void) { run_forward("b", 320); }

int main(void) {
    cpu = backend_cpu_create(1);
    CHECKF(mkdtemp(tmp) != NULL, "no temporary directory");
    RUN(test_checker_finds_violations);
    RUN(test_forward_tiny_a);
    RUN(test_forward_tiny_b);
    t_remove_tree(tmp);
    cpu->destroy(cpu);
    return t_finish();
}
