/* The C interface of the CUDA kernels (kernels/, one op per .cu file), called by the CUDA
 * backend (lib/backend_cuda*.c). Every launcher enqueues its work on the given stream and
 * returns the launch status. Tensors are fp32 or int32 row-major with a leading dimension in
 * elements (the backend's bk_tensor_t); weights stay in their storage format (kw_t, the device
 * copy of a wmat_t) and are dequantized by the kernels that read them.
 *
 * Precision: fp32 everywhere except the tensor-core matmuls (FP8/FP4 weights; BF16 ones at
 * many positions), whose activations become bf16 operands (one to three pieces) with fp32
 * accumulation. */
#ifndef DI_KERNELS_H
#define DI_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { KW_F32 = 0, KW_BF16 = 1, KW_FP8 = 2, KW_FP4 = 3 }; /* = wq_kind_t */

typedef struct {
    const uint8_t *data, *scale; /* device (or mapped host) memory; FP4 rows are ceil(cols/2) bytes */
    int kind, scale_f32, block_rows, block_cols;
    int64_t rows, cols;
    int scale_inexact; /* fp32 scales not all powers of two: weight x scale is not exact in bf16 */
} kw_t;

/* Programmatic dependent launch (launch.cu, common.cuh's k_launch): on (1, the default) every
 * kernel may start while the one before it in the stream finishes; 0 launches them plainly. Set
 * before the first launch. */
void k_set_pdl(int on);
/* The prefill kernels' Hopper forms where they apply, on by default: the tensor-core matmul's
 * copying warp (matmul_tc.cu) and attention on wgmma in plain bf16 (attention_wg.cu); off, the
 * forms before them (every thread copying; attention on mma.sync). */
void k_set_hopper_forms(int on);

/* One kernel launch as k_launch issues it: the kernel, its shape, its stream and its arguments
 * (pointers to their values and their sizes, valid during the call). */
typedef struct {
    const void *func;
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    int n_args;
    void **args;
    const size_t *sizes;
} k_launch_t;
/* While set, every k_launch hands its launch to this function instead of enqueueing it (the
 * backend's recorder, lib/backend_cuda_graph.c, which replays it into a graph or a stream).
 * Launches not made by k_launch bypass it: the callers of k_pick_ranked (cub's device-wide
 * sort) and k_matmul_tc8_ok (a check it waits for) keep the recorder out of the way. */
extern cudaError_t (*k_recorder)(const k_launch_t *l);
/* Enqueues l as k_launch would (programmatic dependent launch as set), bypassing the recorder. */
cudaError_t k_launch_now(const k_launch_t *l);

/* ---- matmul (matmul_simt.cu, matmul_tc.cu) -------------------------------------------------------
 * out[p][o] = sum_i x[xrow(p)][i] * W[row0 + o][i] for o < n, over positions p.
 * Dense: positions 0..m-1, xrow(p) = p, weight w.
 * Grouped (MoE, wtab != NULL): group g owns positions offsets[g] .. offsets[g+1]-1 and weight
 * wtab[g] (format of w); xrow(p) = x_rows[p]. active[0 .. counts[0]) lists the groups with
 * positions, tiles[0 .. counts[1]) the (group, first position) pairs of K_TC_POSITIONS-position
 * tiles.
 * splits > 1 (dense): the reduction is cut in `splits` ranges whose partial sums go to partial
 * ([splits][positions][n]); the last block of an output tile to finish (counted in counters,
 * zero before and after) adds them in split order. pos_chunk > 0 (dense, CUDA cores, splits
 * 1): blocks take pos_chunk positions each instead of all of them.
 * Block-diagonal (dense, x_group_n > 0): output o reads x columns [(o / x_group_n) * k, + k), so
 * one launch does a grouped projection (x_group_n a multiple of 16, of 128 on the tensor
 * cores). x_vec: x, ldx (and k when block-diagonal) allow 16-byte activation loads. */
typedef struct {
    int64_t m, n, k, row0;
    const float *x;
    int64_t ldx;
    float *out;
    int64_t ldo;
    int act_terms; /* tensor cores: activations as 1, 2 or 3 bf16 pieces (bf16 .. fp32 precision); 0: e4m3 (fp8, k_matmul_tc8_ok) */
    kw_t w;
    const kw_t *wtab;
    const int32_t *offsets, *x_rows, *active, *tiles, *counts;
    int64_t max_active, max_tiles, positions;
    /* Grouped without a dispatch (k_matmul_tcs; max_active = positions): position p = r * slots
     * + s is slot s of row r and belongs to group slot_idx[r * ld_slot + s], none outside
     * 0 .. n_groups-1 (its block does nothing); x row r when slot_x_row (the up projections),
     * else p (offsets, x_rows, active, tiles, counts unused). */
    const int32_t *slot_idx;
    int64_t ld_slot, n_groups;
    int slots, slot_x_row;
    int splits;
    int64_t split_k; /* reduction elements per split (multiple of 256) */
    float *partial;
    unsigned *counters;
    int64_t pos_chunk;
    int sms;            /* the GPU's multiprocessors: the CUDA-core grid (one wave in all) and matmul_tcs's rows per expert block */
    int64_t x_group_n;
    int x_vec;
    /* tensor cores: the activations as act_terms bf16 pieces (k_matmul_tc_x_bytes of device
     * memory), converted by k_matmul_tc when tc_x_fresh, else left by an earlier call on the same x */
    void *tc_x;
    int tc_x_fresh;
    /* with wtab: the weights' tensor maps for the copying form (k_matmul_tc_wmaps; NULL: not that
     * form), and whether they take e4m3 activations (k_matmul_tc8_ok) */
    const void *tc_wmaps;
    int tc8_ok;
    /* On the tensor cores at few positions (k_matmul_tcs) with wtab2 (grouped) or w_pair.data
     * (dense; weights of w's format and shape): out[p] = wpos[p] * act(W x, W2 x) (wpos NULL: 1)
     * with k_moe_act's act and limit: an expert's up projections w1, w3 and their activation in
     * one launch. */
    const kw_t *wtab2;
    kw_t w_pair;
    const float *wpos;
    float limit;
    /* k_matmul_tcs, dense, one weight: with ex_X, then X <- hc_expand(X, out, ex_coef) per output
     * (4 streams of n, row0 0; k_hc_expand's bits). */
    float *ex_X;
    const float *ex_coef;
    int64_t ex_ldx, ex_ldc;
    /* k_matmul_simt at one position (k_matmul_rows_ok), with route.idx: then the launch's last
     * block routes the position from its n outputs (the gate's logits) as k_router does, the same
     * bits (counters as for a split). */
    struct {
        int32_t *idx;
        float *wt;
        int64_t ldi, ldw;
        const float *bias;
        int k, normalize;
        float temp, scale;
    } route;
} mm_args_t;

/* True when the fast kernels can read this weight (else k_matmul_simt uses a plain one). */
int k_matmul_fast_ok(const kw_t *w);
/* True when k_matmul_simt takes a with its one-position kernel (a block per few output rows, the
 * split over its warps), the one that can route. */
int k_matmul_rows_ok(const mm_args_t *a);
cudaError_t k_matmul_simt(const mm_args_t *a, cudaStream_t s);
/* A narrow F32 weight (at most 24 outputs: the mHC mixes) over many positions, unsplit
 * (matmul_narrow.cu): k_matmul_simt's unsplit bits; k_matmul_simt hands its position-chunked
 * launches of such weights to it. */
int k_matmul_narrow_ok(const mm_args_t *a);
cudaError_t k_matmul_narrow(const mm_args_t *a, cudaStream_t s);
/* Tensor cores (wgmma bf16, sm_90a); FP8/FP4 weights (FP4 with E8M0 scales) with k a multiple of
 * 32, block_cols 32, or BF16 weights with k a multiple of 8. Blocks of K_TC_ROWS outputs by
 * K_TC_POSITIONS positions (half as many with three activation pieces); split_k a multiple of 64. */
#define K_TC_ROWS 128
#define K_TC_POSITIONS 256
int k_matmul_tc_ok(const kw_t *w);
size_t k_matmul_tc_x_bytes(const mm_args_t *a);
/* The tensor maps of n weights (a grouped launch's wtab) in k_matmul_tc_wmaps_bytes(n) bytes of
 * device memory at dev (64-byte aligned), written by a copy; an error where one of them cannot
 * take the copying form. */
size_t k_matmul_tc_wmaps_bytes(int n);
cudaError_t k_matmul_tc_wmaps(const kw_t *w, int n, void *dev);
cudaError_t k_matmul_tc(const mm_args_t *a, cudaStream_t s);
/* Whether the fp8 precision's form (act_terms 0: e4m3 activations, a grouped launch's FP4
 * weights in the copying form) takes these n weights exactly: FP4 with UE8M0 1x32 scales, k a
 * multiple of 128, each row's four scales of every 128-block within 2^8 of each other. Checked on
 * the device, synchronously (once per expert table). */
int k_matmul_tc8_ok(const kw_t *w, int n);
/* Whether k_matmul_tc takes a (its shapes, form and weights' tc8_ok) with act_terms 0. */
int k_matmul_tc8_form(const mm_args_t *a);
/* Tensor cores for few positions (matmul_tcs.cu), dense or per group: K_TCS_ROWS output rows
 * per block, up to 8 positions a pass (at most m); FP8/FP4 weights, k a multiple of 32; dense:
 * split_k a multiple of 256 and x_group_n of K_TCS_ROWS; wtab2 / w_pair: the fused up
 * projections (mm_args_t). */
#define K_TCS_ROWS 128
int k_matmul_tcs_ok(const kw_t *w);
cudaError_t k_matmul_tcs(const mm_args_t *a, cudaStream_t s);

/* ---- memory (copy.cu) and row-wise ops ---------------------------------------------------- */
cudaError_t k_copy(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols, cudaStream_t s);
/* n copies (rows x cols each, most: the largest rows * cols): up to K_COPY_INLINE of them
 * travel as the launch's arguments (host, dev unused), more from the device table dev (the same
 * descriptors). */
typedef struct {
    float *dst;
    const float *src;
    int64_t ldd, lds, rows, cols;
} copy_desc_t;
#define K_COPY_INLINE 16
cudaError_t k_copy_many(const copy_desc_t *host, const copy_desc_t *dev, int n, int64_t most, cudaStream_t s);
cudaError_t k_rmsnorm(float *out, int64_t ldo, const float *x, int64_t ldx, const float *w, int64_t rows, int64_t cols,
                      float eps, cudaStream_t s);
/* Row r at position pos0 + r * pos_step, or (row_pos, device, rows pairs) row row_pos[2i] at
 * position row_pos[2i + 1]. */
cudaError_t k_rope(float *x, int64_t ldx, int64_t rows, int64_t cols, int head_dim, const float *inv_freq, int half,
                   int64_t pos0, int64_t pos_step, const int64_t *row_pos, int inverse, cudaStream_t s);
cudaError_t k_qat(float *x, int64_t ldx, int64_t rows, int64_t cols, int kind, int block, cudaStream_t s);
/* k_rope then k_qat (block 16 or 32) of rows of x into out (the same bits): launch row r is
 * row r0 + r at position pos0 + r * pos_step quantized when qat, or (table: device, rows triples)
 * row table[3r] at position table[3r + 1] quantized when table[3r + 2]. k_rope_qat_ok: the shapes
 * it takes (16-byte rows of at most 4,096 channels, head_dim a multiple of 4). */
int k_rope_qat_ok(const float *out, int64_t ldo, const float *x, int64_t ldx, int64_t cols, int head_dim, int block);
cudaError_t k_rope_qat(float *out, int64_t ldo, const float *x, int64_t ldx, int64_t rows, int64_t cols, int head_dim,
                       const float *inv_freq, int half, int64_t r0, int64_t pos0, int64_t pos_step, int qat, const int64_t *table,
                       int kind, int block, cudaStream_t s);
cudaError_t k_hc_mix(float *coef, int64_t ldc, const float *mixes, int64_t ldm, const float *X, int64_t ldx, int64_t rows,
                     int64_t xcols, const float *base, const float *scale, int hc, float eps, float hc_eps, int iters,
                     cudaStream_t s);
cudaError_t k_hc_collapse(float *out, int64_t ldo, const float *X, int64_t ldx, const float *pre, int64_t ldp, int64_t rows,
                          int64_t D, int hc, cudaStream_t s);
/* The mHC pre step of a site (hc_pre.cu, backend.h's hc_pre) for 1..K_HC_PRE_ROWS rows in one
 * launch: coef (m x (2+hc)*hc) <- the mixes fn . X (fn F32, its first rows) through hc_mix, and
 * out (m x D) <- rmsnorm(sum_k pre[k] * X_k) times norm (NULL: 1). The bits of k_matmul_simt at
 * a reduction split of split_k columns (the CUDA-core matmul's split of that shape), k_hc_mix
 * (coef in place), k_hc_collapse into out and k_rmsnorm in place on out. part: both, or one of
 * the two (they share no data, so two launches may run them on two streams). partial: scratch
 * of k_hc_pre_partial_floats floats; counter: zero before, and after (both unused by the norm
 * part). k_hc_pre_ok: the shapes and layouts it takes (the others take the four kernels). */
#define K_HC_PRE_ROWS 8
enum { K_HC_PRE_ALL, K_HC_PRE_MIXES, K_HC_PRE_NORM };
typedef struct {
    float *out, *coef;
    int64_t ldo, ldc;
    const float *X, *pre, *base, *scale, *norm;
    int64_t ldx, ldp;
    kw_t fn;
    int64_t m, D, split_k;
    int hc, iters, part;
    float eps, hc_eps;
    float *partial;
    unsigned *counter;
} hc_pre_args_t;
int k_hc_pre_ok(const hc_pre_args_t *a);
size_t k_hc_pre_partial_floats(const hc_pre_args_t *a);
cudaError_t k_hc_pre(const hc_pre_args_t *a, cudaStream_t s);
cudaError_t k_hc_expand(float *X, int64_t ldx, const float *y, int64_t ldy, const float *coef, int64_t ldc, int64_t rows,
                        int64_t D, int hc, cudaStream_t s);
cudaError_t k_hc_fill(float *X, int64_t ldx, float *pre, int64_t ldp, const float *e, int64_t lde, int64_t rows, int64_t D, int hc,
                      cudaStream_t s);
cudaError_t k_gather(float *out, int64_t ldo, const kw_t *table, const int32_t *idx, int64_t ldi, int64_t rows, int64_t k,
                     cudaStream_t s);
cudaError_t k_engram_gate(float *X, int64_t ldx, const float *kv, int64_t ldkv, const float *qk, int64_t ldqk, int64_t rows,
                          int64_t D, int hc, float eps, cudaStream_t s);
cudaError_t k_group_pool(float *out, int64_t ldo, const float *z, int64_t ldz, const float *sc, int64_t lds, int64_t groups,
                         int64_t d, int ratio, cudaStream_t s);

/* Paged stores (lib/backend.h's bk_paged_t): a table of page addresses; row j is row
 * j % (1 << K_PAGE_SHIFT) of page j >> K_PAGE_SHIFT (the row stride the store's ld). */
#define K_PAGE_SHIFT 6

/* ---- attention (attention.cu) --------------------------------------------------------------
 * Sparse attention with sink (backend.h). Virtual key u < window: the window row of position
 * i - u; u >= window: pool row sel[r][u - window] (the pool a paged store). splits > 1: partial
 * results of key ranges in part_o ([splits][m][heads*d]) and part_ml ([splits][m][heads][2]),
 * merged by the same launcher. rows (device, m entries) or NULL: each query row's sequence; NULL
 * means row b is row b of q/out/sel at position pos0 + b with the scalar fields' ring, kv_new and
 * pool. vec: every row pointer and stride allows 16-byte loads. */
typedef struct {
    const float *ring;
    int64_t ld_ring, ring_rows;
    const float *kv; /* the kv_new row of position pos0 (window positions >= pos0 come from there on) */
    int64_t pos0, win_lo;
    const float *const *pool; /* page table */
    int64_t ld_pool, pool_rows;
    int64_t row, pos; /* row of q, out and sel; its position */
} attn_row_t;
typedef struct {
    float *out;
    int64_t ldo;
    const float *q;
    int64_t ldq;
    const float *sink;
    float scale;
    const float *ring;
    int64_t ld_ring, ring_rows;
    const float *kv_new;
    int64_t ld_kv;
    int64_t pos0, win_lo;
    int window;
    const float *const *pool; /* page table */
    int64_t ld_pool, pool_rows;
    const int32_t *sel;
    int64_t ld_sel, n_sel;
    int64_t m;
    int heads, d;
    int splits;
    float *part_o, *part_ml;
    const attn_row_t *rows;
    int vec;
    /* with unrope (the RoPE frequencies, unrope_half of them; splits > 1, d % 4 == 0): the merge
     * turns each head's last 2 * unrope_half channels back (k_rope's inverse, its bits) */
    const float *unrope;
    int unrope_half;
} attn_args_t;
cudaError_t k_attention(const attn_args_t *a, cudaStream_t s);
size_t k_attention_smem(int d);

/* ---- indexer (indexer_score.cu, topk.cu) ------------------------------------------------------
 * Query row b (b < m) of the launch scores the keys of its sequence: row rows[b] of the table,
 * or (rows NULL) row b of q/w/outputs at position pos0 + b against the scalar fields' keys
 * (a paged store).
 * Row b sees nvis(b) = min(nk, (pos + 1) / ratio) entries. scores: m x nk_max (ld nk_max). */
typedef struct {
    const float *const *keys; /* page table */
    int64_t ldk, nk;
    int64_t row, pos; /* row of q, w and the selections; its position */
} ix_row_t;
typedef struct {
    float *scores;
    int64_t nk_max;
    const float *q, *w;
    const float *const *keys; /* page table */
    int64_t ldq, ldw, ldk, nk, pos0, m;
    int heads, di, ratio, vec; /* vec: q and every key row allow 16-byte loads */
    float q_scale, w_scale;
    const ix_row_t *rows;
} ix_args_t;
/* scores[b][j] = the score of entry j for j < nvis(b), -inf beyond; heads 1..K_IX_MAX_HEADS. */
#define K_IX_MAX_HEADS 128
cudaError_t k_indexer_score(const ix_args_t *a, cudaStream_t s);
/* Top-k per row of sc (row b has nvis(b) entries) into out row `row`: the ids of the k largest
 * finite scores, ties to the lower id, ascending, -1 padded. block > 0 (level 1 of the two-level
 * top-k): sc row b (lds >= its block count) first receives the block scores, the max of each
 * `block` visible scores of a->scores, the newest block +inf, and the top-k is over those.
 * blocks != NULL (level 2): entries of sc outside the row's candidate blocks (blocks row `row`:
 * nblocks ascending ids of block_size entries, -1 padded) first become -inf. */
cudaError_t k_topk(int32_t *out, int64_t ldo, int k, float *sc, int64_t lds, const ix_args_t *a, int block,
                   const int32_t *blocks, int64_t ldb, int64_t nblocks, int block_size, cudaStream_t s);

/* ---- tensor cores for prefill attention and indexer scores (bf16_pieces.cu, attention_tc.cu,
 * indexer_tc.cu) ----------------------------------------------------------------------------
 * A store of bf16 pieces: piece t of store row x at store + (t * store_rows + x) * cols holds
 * the bf16 of what pieces 0..t-1 left of an fp32 row; inexact[x] = some piece past the first is
 * non-zero (always 0 for one piece). Segment s: store rows dst0 + j <- src row j, or
 * (first + j) % mod when mod > 0 (a ring), or row j of a paged store, for j < rows. most: the largest rows of a segment;
 * vec: every source row allows 16-byte loads; cols a multiple of 4, pieces 1..3. */
typedef struct {
    const float *src;
    int64_t ld, rows, mod, first, dst0;
    const float *const *pages; /* or NULL: src row j is row j of this paged store (page table) */
} piece_seg_t;
typedef struct {
    uint16_t *store;
    uint8_t *inexact;
    int64_t store_rows;
    int cols, pieces, vec;
    const piece_seg_t *segs; /* device */
    int n_segs;
    int64_t most;
} pieces_args_t;
cudaError_t k_bf16_pieces(const pieces_args_t *a, cudaStream_t s);

/* Attention (backend.h) with one block per query row over keys from a store. Launch rows b0..
 * of a span are rows r0.. of q, out and sel at positions pos0..; window position p (wstart <= p
 * < pos0 + n) is store row base + p - wstart, pool row j store row pool + j (j < pool_rows).
 * pieces: Q and probabilities as 1 or 2 bf16 pieces (and that many key pieces where inexact).
 * vec: q and out rows allow 16-byte loads and 8-byte stores. */
typedef struct {
    int64_t b0, r0, n, pos0, win_lo, wstart, base, pool, pool_rows;
} attn_tc_span_t;
typedef struct {
    float *out;
    int64_t ldo;
    const float *q;
    int64_t ldq;
    const float *sink;
    float scale;
    const int32_t *sel;
    int64_t ld_sel, n_sel;
    const uint16_t *store;
    const uint8_t *inexact;
    int64_t store_rows;
    const attn_tc_span_t *spans; /* device, ascending b0 */
    int n_spans;
    int64_t m;
    int window, heads, d, pieces, vec;
} attn_tc_args_t;
int k_attention_tc_ok(int heads, int d);
cudaError_t k_attention_tc(const attn_tc_args_t *a, cudaStream_t s);
/* The same in plain bf16 (pieces 1) on wgmma (attention_wg.cu), for head_dim 128, 256 or 512 and
 * at most 64 heads; k_attention_tc hands such launches to it. */
int k_attention_wg_ok(int heads, int d);
cudaError_t k_attention_wg(const attn_tc_args_t *a, cudaStream_t s);

/* Indexer scores (as k_indexer_score) of the rows of spans whose keys are in a store: launch
 * rows b0.. of a span are rows r0.. of q and w at positions pos0..; its keys are store rows
 * base.. (nk of them); its rows take blocks blk0.. (k_indexer_tc_rows_per_block rows each). */
typedef struct {
    int64_t b0, r0, n, pos0, nk, base, blk0;
} ix_tc_span_t;
typedef struct {
    float *scores;
    int64_t nk_max;
    const float *q, *w;
    int64_t ldq, ldw;
    const uint16_t *store;
    const uint8_t *inexact;
    int64_t store_rows;
    const ix_tc_span_t *spans; /* device, ascending blk0 */
    int n_spans;
    int heads, di, ratio, pieces;
    float q_scale, w_scale;
} ix_tc_args_t;
int k_indexer_tc_ok(int heads, int di);
int k_indexer_tc_rows_per_block(int heads);
cudaError_t k_indexer_tc(const ix_tc_args_t *a, int64_t blocks, cudaStream_t s);
/* k_indexer_score's launch on the tensor cores (indexer_tc_rows.cu) in `pieces` (1-3) bf16
 * pieces, reading the fp32 keys through their pages: for rows of short spans (decode). */
int k_indexer_tc_rows_ok(const ix_args_t *a);
cudaError_t k_indexer_tc_rows(const ix_args_t *a, int pieces, cudaStream_t s);

/* ---- router and experts (router.cu, moe_dispatch.cu, moe_act.cu, moe_combine.cu) ------------ */
cudaError_t k_router(int32_t *idx, int64_t ldi, float *wt, int64_t ldw, const float *logits, int64_t ldl, const float *bias,
                     int64_t rows, int E, int k, float temp, int normalize, float scale, cudaStream_t s);
/* From idx (m x k, ld ldi) over E experts: offsets[E+1], pos_of[m*k] (-1 for invalid ids),
 * x_rows[P], wpos[P] (the slot weight), active/tiles lists and counts[2] (kw matmul layout). */
cudaError_t k_moe_dispatch(const int32_t *idx, int64_t ldi, const float *wt, int64_t ldw, int64_t m, int k, int E,
                           int32_t *offsets, int32_t *pos_of, int32_t *x_rows, float *wpos, int32_t *active, int32_t *tiles,
                           int32_t *counts, cudaStream_t s);
/* h[p][i] = weight(p) * silu(min(g, limit)) * clamp(u, -limit, limit) (no clamp if limit <= 0);
 * weight(p) = wpos[p], or 1 when wpos is NULL. g, u, h: P x I (h may be g). */
cudaError_t k_moe_act(float *h, const float *g, const float *u, const float *wpos, int64_t P, int64_t I, float limit,
                      cudaStream_t s);
/* out[r] = sum of y[pos_of[r][s]] over slots in ascending expert order, then + shared[r]
 * (pos_of NULL: slot s of row r is position r * k + s, none when idx is outside 0 .. E-1); with
 * X (the model's 4 streams) then X <- hc_expand(X, out, coef) with k_hc_expand's bits. */
cudaError_t k_moe_combine(float *out, int64_t ldo, const float *y, const int32_t *pos_of, const int32_t *idx, int64_t ldi, int E,
                          const float *add, int64_t lda, int64_t m, int k, int64_t D, float *X, int64_t ldx, const float *coef,
                          int64_t ldc, cudaStream_t s);

/* ---- next-token choice (sample.cu) ------------------------------------------------------------
 * Row i of the launch picks from logits row rows[i].row: greedy, or temperature sampling with
 * min-p (min_p <= 0: off) at the uniform number u, among the tokens of the mask at word
 * mask_off of masks (-1: every token); out[slot] = the token, -1 when the mask allows none. */
typedef struct {
    double temperature, min_p, u;
    int64_t row, mask_off;
    int greedy, slot; /* the row's entry of out */
} pick_row_t;
/* scratch: k_pick_scratch(V, n) bytes. */
size_t k_pick_scratch(int64_t V, int n);
cudaError_t k_pick(int32_t *out, const float *logits, int64_t ld, int64_t V, const pick_row_t *rows, int n,
                   const uint32_t *masks, void *scratch, cudaStream_t s);

/* ---- ranked next-token choice and log-probabilities (sample_rank.cu) -----------------------------
 * Row i (rows[i].row of logits) with top-k (0: off) and/or top-p (1: off), then min-p, at the uniform
 * number u among the `allowed` tokens of its mask (mask_off as above) -> out[rows[i].slot]: the token,
 * -1 when none is allowed, -2 when the row must take the host sampler (its largest z is not finite).
 * keys and sorted hold n * V entries; sort_tmp NULL asks for its size in *sort_tmp_bytes. */
typedef struct {
    double temperature, top_p, min_p, u;
    int64_t row, mask_off, top_k, allowed;
    int slot;
} rank_row_t;
cudaError_t k_pick_ranked(int32_t *out, const float *logits, int64_t ld, int64_t V, const rank_row_t *rows, int n,
                          const uint32_t *masks, uint64_t *keys, uint64_t *sorted, void *sort_tmp, size_t *sort_tmp_bytes,
                          cudaStream_t s);
/* The same for rows with 0 < top_k <= K_RANK_FIRST without sorting whole rows (when
 * k_pick_ranked_first_ok(V): up to 32 chunks of 4,096 ids), or (top_p_rows) for rows with top-p
 * and no top-k below their allowed count, which answer -3 when their nucleus is not among their
 * first K_RANK_FIRST ranks (the caller then sorts them whole); scratch: k_pick_ranked_first_scratch(V, n) bytes. */
#define K_RANK_FIRST 128
int k_pick_ranked_first_ok(int64_t V);
size_t k_pick_ranked_first_scratch(int64_t V, int n);
cudaError_t k_pick_ranked_first(int32_t *out, const float *logits, int64_t ld, int64_t V, const rank_row_t *rows, int n,
                                const uint32_t *masks, int top_p_rows, void *scratch, cudaStream_t s);
/* Row i: log-softmax of logits row rows[i].row at the token chosen[rows[i].slot] (skipped when
 * negative) and the n_top most likely tokens (sampler.h's log-probabilities) -> out[i]. */
#define K_MAX_TOP 32 /* = FRAME_MAX_TOP */
typedef struct {
    int64_t row;
    int slot, n_top;
} logprob_row_t;
typedef struct { /* frame_logprob_t's layout */
    float logprob;
    uint32_t n_top;
    uint32_t top_ids[K_MAX_TOP];
    float top_logprobs[K_MAX_TOP];
} logprob_out_t;
/* scratch: k_logprobs_scratch(V, n) bytes (logprob.cu). */
size_t k_logprobs_scratch(int64_t V, int n);
cudaError_t k_logprobs(logprob_out_t *out, const float *logits, int64_t ld, int64_t V, const logprob_row_t *rows, int n,
                       const int32_t *chosen, void *scratch, cudaStream_t s);

/* ---- bench-only synthesis (random_fill.cu) ---------------------------------------------------- */
cudaError_t k_fill_uniform(float *x, int64_t ld, int64_t rows, int64_t cols, float lo, float hi, uint64_t seed,
                           cudaStream_t s);
/* Random weights of the given format, values uniform in +-amp, encoded with per-block scales. */
cudaError_t k_random_weight(uint8_t *data, uint8_t *scale, int kind, int64_t rows, int64_t cols, int block_rows,
                            int block_cols, float amp, uint64_t seed, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
