/* The operations the model forward is written over, as a table of functions a backend fills
 * (the CPU backend now, a CUDA backend later). The forward never touches tensor memory: it
 * allocates tensors, uploads and downloads them, and calls these ops, so the same forward runs
 * on device memory.
 *
 * Tensors are 2-D row-major fp32 or int32 arrays in the backend's memory. A view (bk_rows,
 * bk_cols) is the same memory with an offset and a row stride (ld), so a column block of a
 * wider tensor (one head group, one expert slot) is passed without copying. Weights stay in
 * their storage format (wmat_t: F32/BF16/FP8 tiles/FP4 blocks) and are bound once; ops
 * dequantize them on the fly (the CPU backend in tiles, never a full fp32 copy).
 *
 * Conventions: m is the number of token rows an op works on; row r of a token tensor belongs
 * to absolute position pos0 + r. Every op computes each output row from its own input rows in
 * a fixed order, so results do not depend on how many rows are batched or on the thread count
 * (chunked prefill is bit-identical to one-shot). Index tensors use -1 for "no entry".
 *
 * The CPU backend computes in exact fp32 (fp32 storage and accumulation); tests/unit/
 * test_backend_ops.c checks every op against a straightforward reference, and is the place a
 * new backend is tested op by op against the CPU one. */
#ifndef DI_BACKEND_H
#define DI_BACKEND_H

#include "dequant.h"
#include "qat.h"
#include "sampler.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { BK_F32, BK_I32 } bk_dtype_t;

typedef struct {
    void *ptr;             /* backend memory; only the backend dereferences it */
    bk_dtype_t dtype;
    int64_t rows, cols, ld; /* ld >= cols: elements from one row start to the next */
} bk_tensor_t;

typedef struct bk_weight bk_weight_t; /* a bound weight matrix, backend-specific */

typedef struct backend backend_t;

/* One row's next-token choice (the pick op): sampler.h's rules for sp at `position`, among
 * the tokens of mask (NULL: all); the token goes to *token, the log-probabilities sp asks for
 * to *lp (may be NULL when sp->logprobs is false). */
typedef struct {
    const sampler_params_t *sp;
    int64_t position;
    const uint32_t *mask;
    uint32_t *token;
    frame_logprob_t *lp;
} bk_pick_t;

/* Rows [r0, r0+n) and columns [c0, c0+n) of t (no copy). */
static inline bk_tensor_t bk_rows(bk_tensor_t t, int64_t r0, int64_t n) {
    t.ptr = (char *)t.ptr + (size_t)(r0 * t.ld) * 4;
    t.rows = n;
    return t;
}
static inline bk_tensor_t bk_cols(bk_tensor_t t, int64_t c0, int64_t n) {
    t.ptr = (char *)t.ptr + (size_t)c0 * 4;
    t.cols = n;
    return t;
}

/* A paged row store (a sequence's pool entries or indexer keys, lib/pagestore.h): fp32 rows of
 * `cols` in pages of BK_PAGE_ROWS rows (ld = cols) anywhere in backend memory, each page
 * starting 16-byte aligned; row j is row
 * j % BK_PAGE_ROWS of page j / BK_PAGE_ROWS. table (backend memory, what the ops read) and pages
 * (its host copy) hold the pages' addresses, so a store grows a page at a time and never moves
 * the rows it holds. Only the first `rows` rows are read. */
#define BK_PAGE_SHIFT 6
#define BK_PAGE_ROWS (1 << BK_PAGE_SHIFT)
typedef struct {
    const void *table;  /* the pages' addresses (one void * each), backend memory */
    void *const *pages; /* the same addresses, host memory */
    int64_t rows, cols;
} bk_paged_t;

/* The view of rows [j, j + len) of p, len = n cut at the end of j's page; returns len. */
static inline int64_t bk_paged_run(bk_paged_t p, int64_t j, int64_t n, bk_tensor_t *view) {
    int64_t in_page = j & (BK_PAGE_ROWS - 1), len = BK_PAGE_ROWS - in_page < n ? BK_PAGE_ROWS - in_page : n;
    *view = (bk_tensor_t){(char *)p.pages[j >> BK_PAGE_SHIFT] + (size_t)(in_page * p.cols) * 4, BK_F32, len, p.cols, p.cols};
    return len;
}

/* A run of rows of one sequence for the ops that serve a whole batch in one call (the CUDA
 * backend's one launch instead of one per sequence): rows [r0, r0 + n) of the op's row
 * tensors, row r0 at position pos0. An op reads the fields its single-sequence form takes
 * (attention: ring, win_lo, pool; indexer: keys; rope_qat_spans: qat) and leaves rows outside
 * every span alone. */
typedef struct {
    int64_t r0, n, pos0;
    bk_tensor_t ring;
    bk_paged_t pool, keys;
    int64_t win_lo;
    bool qat; /* the sequence runs with QAT on: rope_qat_spans fake-quantizes its rows */
} bk_span_t;

/* The hc_expand an op's output feeds (matmul_expand, moe): X <- hc_expand(X, output, coef) over hc streams. */
typedef struct {
    bk_tensor_t X, coef;
    int hc;
} bk_expand_t;

/* One routed or shared expert's three projections (MODEL_V41 §5.11). */
typedef struct {
    bk_weight_t *w1, *w2, *w3; /* [I, D], [D, I], [I, D] */
} bk_expert_t;

struct backend {
    const char *name;
    void *impl;

    /* ---- memory ---- */
    /* A zero-filled rows x cols tensor (ld = cols). Out of memory is fatal. */
    bk_tensor_t (*alloc)(backend_t *bk, bk_dtype_t dtype, int64_t rows, int64_t cols);
    void (*release)(backend_t *bk, bk_tensor_t *t);
    /* Host <-> backend; host data is packed rows x cols (no ld). */
    void (*upload)(backend_t *bk, bk_tensor_t dst, const void *host);
    void (*download)(backend_t *bk, void *host, bk_tensor_t src);
    void (*copy)(backend_t *bk, bk_tensor_t dst, bk_tensor_t src); /* same shape, no overlap */
    /* copy(dst[i], src[i]) for i < n; no destination overlaps another copy's source or destination. */
    void (*copy_many)(backend_t *bk, const bk_tensor_t *dst, const bk_tensor_t *src, int n);
    /* Binds a stored weight for the ops (the wmat_t's memory must outlive the binding). */
    bk_weight_t *(*bind)(backend_t *bk, const wmat_t *m);
    void (*unbind)(backend_t *bk, bk_weight_t *w);
    void (*destroy)(backend_t *bk);

    /* ---- concurrency ---- */
    /* The ops issued between branch_begin and branch_end form a branch: they start after every
     * op issued before branch_begin and may run alongside the ops issued after branch_end, up to
     * branch_join (or an op documented to join it); the ops after that see the branch's results.
     * Neither side may write what the other reads or writes. A join with no open branch does
     * nothing. One branch at a time; inside a branch only the dense ops, mlp, the row, RoPE,
     * QAT, pooling and copy ops and alloc/release. A backend may run everything in issue order
     * (the CPU backend does). */
    void (*branch_begin)(backend_t *bk);
    void (*branch_end)(backend_t *bk);
    void (*branch_join)(backend_t *bk);

    /* ---- dense algebra ---- */
    /* out[t][o] = sum_i x[t][i] * W[row0 + o][i], for out->cols rows of W from row0. */
    void (*matmul)(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int64_t row0);
    /* Block-diagonal: x and out cut into `groups` equal column blocks; out block g = x block g
     * times rows [g * n_g, (g + 1) * n_g) of W (n_g = out.cols / groups; W has x.cols / groups
     * columns). Each group's numbers are matmul's on the same views. */
    void (*matmul_grouped)(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int groups);
    /* matmul (row0 0), then the hc_expand op on out (the CUDA backend does it in the matmul's
     * epilogue at few positions). */
    void (*matmul_expand)(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, const bk_expand_t *expand);
    /* out = x / sqrt(mean(x^2) + eps) per row, times w (1 x cols) unless w is NULL. out may be x. */
    void (*rmsnorm)(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_tensor_t *w, float eps);
    /* In place: every head_dim-wide head of a row rotates its last 2*inv_freq->cols channels in
     * adjacent pairs by angle (pos0 + r*pos_step) * f_p (fp32); inverse rotates by minus that. */
    void (*rope)(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, int64_t pos0, int64_t pos_step,
                 bool inverse);
    /* rope over the rows of each span at positions pos0 + k * pos_step (k < n). */
    void (*rope_spans)(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, const bk_span_t *spans, int n_spans,
                       int64_t pos_step, bool inverse);
    /* In place fake quantization of each row in blocks (qat.h). */
    void (*qat)(backend_t *bk, bk_tensor_t x, qat_kind_t kind, int block);
    /* The rows of each span of x into the same rows of out (x itself, or a tensor of its shape
     * that does not overlap it), turned as rope_spans turns them (not inverse), then those of the
     * spans with qat fake-quantized as qat does: the same bits as the three ops. */
    void (*rope_qat_spans)(backend_t *bk, bk_tensor_t out, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq,
                           const bk_span_t *spans, int n_spans, int64_t pos_step, qat_kind_t kind, int block);

    /* ---- hyper-connections (MODEL_V41 §5.3) ---- */
    /* coef <- from mixes = fn . X (m x (2+hc)*hc) and X (m x hc*D): pre[hc], post[hc],
     * C[hc][hc] with the Sinkhorn projection. coef may be mixes. */
    void (*hc_mix)(backend_t *bk, bk_tensor_t coef, bk_tensor_t mixes, bk_tensor_t X, bk_tensor_t base, bk_tensor_t scale,
                   int hc, float eps, float hc_eps, int iters);
    /* out = sum_k pre[k] * X_k, pre an m x hc view. */
    void (*hc_collapse)(backend_t *bk, bk_tensor_t out, bk_tensor_t X, bk_tensor_t pre, int hc);
    /* In place X_b <- post[b] * y + sum_a C[a][b] X_a, post and C from coef. */
    void (*hc_expand)(backend_t *bk, bk_tensor_t X, bk_tensor_t y, bk_tensor_t coef, int hc);
    /* X_k = e for every stream k, and pre (m x hc) = (1, 0, .., 0): the first site's collapse
     * takes stream 0 (made here, not uploaded: the CPU builds no tensor for a step). */
    void (*hc_fill)(backend_t *bk, bk_tensor_t X, bk_tensor_t pre, bk_tensor_t e, int hc);
    /* The pre step of an mHC site in one op (a backend may fuse it): the numbers of
     * matmul(coef, X, fn, 0); hc_mix(coef, coef, X, base, scale, hc, eps, hc_eps, iters);
     * hc_collapse(out, X, pre, hc); rmsnorm(out, out, norm, eps), in that order: coef gets the
     * site's coefficients, out (m x D) the normed input collapsed with pre (m x hc, the earlier
     * site's pre, not overlapping coef). */
    void (*hc_pre)(backend_t *bk, bk_tensor_t out, bk_tensor_t coef, bk_tensor_t X, const bk_weight_t *fn, bk_tensor_t base,
                   bk_tensor_t scale, bk_tensor_t pre, const bk_tensor_t *norm, int hc, float eps, float hc_eps, int iters);

    /* ---- embeddings and Engram (§5.1, §5.2) ---- */
    /* out row t = concatenation of the dequantized rows idx[t][0..k) of table. */
    void (*gather)(backend_t *bk, bk_tensor_t out, const bk_weight_t *table, bk_tensor_t idx);
    /* Engram write: kv = [K_0..K_{hc-1}, V] (m x (hc+1)*D), qk = q_weight * k_weight (hc x D);
     * X_k += sigmoid(copysign(sqrt(max(|dot_k|,1e-6)), dot_k)) * V per stream. */
    void (*engram_gate)(backend_t *bk, bk_tensor_t X, bk_tensor_t kv, bk_tensor_t qk, int hc, float eps);

    /* ---- attention (§5.4-§5.9) ---- */
    /* Ratio-r compressor pooling: out row j = sum over the r rows of group j of
     * softmax_rows(s)[.][d] * z[.][d]; z and s are (rows of out * r) x d. */
    void (*group_pool)(backend_t *bk, bk_tensor_t out, bk_tensor_t z, bk_tensor_t s, int ratio);
    /* Sparse attention with sink, K = V. Query r (position i = pos0 + r) attends to window
     * positions max(win_lo, i - window + 1) .. i and to pool rows sel[r][*] (>= 0). Window rows
     * of positions < pos0 come from ring (slot pos % ring->rows), the others from kv_new
     * (row pos - pos0). q and out: m x heads*d; sink: 1 x heads. pool and sel may be NULL. */
    void (*attention)(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t ring,
                      bk_tensor_t kv_new, int64_t pos0, int window, int64_t win_lo, const bk_paged_t *pool,
                      const bk_tensor_t *sel);
    /* attention over each span's rows of out, q, kv_new (and sel): its ring, win_lo, pos0, and
     * its pool when sel is given. With unrope (RoPE frequencies, or NULL), then out's heads
     * turned back: rope_spans(out, d, *unrope, spans, 1, inverse) (the CUDA backend does it in
     * the attention's merge at few rows). */
    void (*attention_spans)(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t kv_new,
                            int window, const bk_span_t *spans, int n_spans, const bk_tensor_t *sel, const bk_tensor_t *unrope);
    /* Indexer (§5.7) for query rows at pos0 + r over keys (n_keys x di): entry j is visible
     * when j < (pos + 1) / ratio; score I_j = sum_h relu(q_h . k_j) * q_scale * w[h] * w_scale.
     * blocks_in (m x KB, or NULL): only entries of those candidate blocks compete. blocks_out
     * (m x KB, or NULL: not a candidate source): block score = max of its visible entries, the
     * newest visible block pinned, the top KB blocks with a finite score. sel (m x K) gets the
     * top min(K, finite) entries. Ties go to the lower index; outputs ascending, -1 padded. */
    void (*indexer_topk)(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                         bk_paged_t keys, int64_t pos0, int ratio, const bk_tensor_t *blocks_in, int block_size,
                         float q_scale, float w_scale);

    /* indexer_topk over each span's rows of sel, q, w (and blocks_out, blocks_in) against its keys at pos0. */
    void (*indexer_spans)(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                          const bk_span_t *spans, int n_spans, int ratio, const bk_tensor_t *blocks_in, int block_size,
                          float q_scale, float w_scale);

    /* ---- mixture of experts (§5.11) ---- */
    /* s = sqrt(softplus(logits / temp)); idx = top-k of s + bias (ties: lower index);
     * wt = s[idx] (divided by their sum + 1e-20 when normalize) * scale. */
    void (*router)(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t bias, float temp,
                   bool normalize, float scale);
    /* The gate, then the router: matmul(logits, x, gate, 0); router(idx, wt, logits, ...) (a
     * backend may route inside the gate's launch). */
    void (*gate_router)(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t x, const bk_weight_t *gate,
                        bk_tensor_t bias, float temp, bool normalize, float scale);
    /* out = expert(x) = w2 . (silu(min(w1.x, limit)) * clamp(w3.x, -limit, limit)) (no clamp
     * when limit <= 0): one expert over every row (the shared expert). */
    void (*mlp)(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_expert_t *expert, float limit);
    /* out = sum over slots of wt * expert_idx(x) (in ascending expert order), then + add (m x D,
     * e.g. the shared expert's mlp, or NULL). add may come from an open branch: moe joins it
     * before reading add. With expand, then the hc_expand op on out (the CUDA backend does it
     * in the combine's launch). */
    void (*moe)(backend_t *bk, bk_tensor_t out, bk_tensor_t x, bk_tensor_t idx, bk_tensor_t wt, const bk_expert_t *experts,
                int n_experts, const bk_tensor_t *add, const bk_expand_t *expand, float limit);

    /* ---- sampling ---- */
    /* Row i of logits (n x vocab) -> rows[i]'s token, exactly as sampler_pick chooses it from
     * that row on the host; scratch is host scratch for one vocabulary (sampler_new). */
    void (*pick)(backend_t *bk, bk_tensor_t logits, const bk_pick_t *rows, int n, sampler_t *scratch);
};

#endif
