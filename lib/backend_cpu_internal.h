/* Shared pieces of the CPU backend's files: the backend's private state, per-worker scratch,
 * the fixed-order dot product, and the matmul kernel on plain pointers. */
#ifndef DI_BACKEND_CPU_INTERNAL_H
#define DI_BACKEND_CPU_INTERNAL_H

#include "backend.h"
#include "threadpool.h"

#include <stddef.h>
#include <stdint.h>

struct bk_weight {
    wmat_t m;
};

enum { SCRATCH_MATMUL, SCRATCH_OP, SCRATCH_OP2, SCRATCH_SLOTS };

typedef struct {
    threadpool_t *tp;
    int n_workers;
    float **scratch;   /* [worker * SCRATCH_SLOTS + slot] */
    size_t *scratch_n; /* floats allocated */
    sampler_t **samplers; /* [worker], 1.. (worker 0 uses the pick's scratch) */
    int64_t sampler_vocab;
} cpu_t;

static inline cpu_t *cpu_of(backend_t *bk) { return bk->impl; }

/* Items per thread for tp_for so that a part holds at least ~32K multiply-adds: smaller
 * loops run on the caller alone (waking a thread costs about as much). */
static inline int64_t cpu_grain(int64_t work_per_item) {
    int64_t g = ((int64_t)1 << 15) / (work_per_item > 0 ? work_per_item : 1);
    return g < 1 ? 1 : g;
}

/* A worker's scratch buffer of at least n floats (kept between calls). */
float *cpu_scratch(cpu_t *c, int worker, int slot, size_t n);

/* sum_i a[i] * b[i] in a fixed order (independent lanes, then a fixed reduction). */
float cpu_dot(const float *a, const float *b, int64_t n);

/* Four dot products against one shared vector w, each computed exactly as cpu_dot computes it
 * (same lanes, same reduction): batching never changes a bit, and w is loaded once.
 * out[k * ldo] = cpu_dot(x_k, w, n). */
void cpu_dot4(const float *x0, const float *x1, const float *x2, const float *x3, const float *w, int64_t n, float *out,
              int64_t ldo);

/* out[t*ldo + o] = sum_i x[t*ldx + i] * W[row0 + o][i] for t < m, o < n_out, threaded over
 * weight tiles (dequantized on the fly) and row blocks. */
void cpu_matmul(cpu_t *c, float *out, int64_t ldo, const float *x, int64_t ldx, int64_t m, const wmat_t *w,
                int64_t row0, int64_t n_out);

static inline float *f32_at(bk_tensor_t t, int64_t r) { return (float *)t.ptr + r * t.ld; }
static inline int32_t *i32_at(bk_tensor_t t, int64_t r) { return (int32_t *)t.ptr + r * t.ld; }
/* Row j of a paged store, through its table (the CPU backend's memory is the host's). */
static inline const float *paged_row(bk_paged_t p, int64_t j) {
    return ((float *const *)p.table)[j >> BK_PAGE_SHIFT] + (j & (BK_PAGE_ROWS - 1)) * p.cols;
}

void cpu_attention(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t ring,
                   bk_tensor_t kv_new, int64_t pos0, int window, int64_t win_lo, const bk_paged_t *pool,
                   const bk_tensor_t *sel);
void cpu_attention_spans(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t kv_new,
                         int window, const bk_span_t *spans, int n_spans, const bk_tensor_t *sel,
                         const bk_tensor_t *unrope);
void cpu_indexer_spans(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                       const bk_span_t *spans, int n_spans, int ratio, const bk_tensor_t *blocks_in, int block_size,
                       float q_scale, float w_scale);
void cpu_indexer_topk(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                      bk_paged_t keys, int64_t pos0, int ratio, const bk_tensor_t *blocks_in, int block_size,
                      float q_scale, float w_scale);
void cpu_router(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t bias, float temp,
                bool normalize, float scale);
void cpu_moe(backend_t *bk, bk_tensor_t out, bk_tensor_t x, bk_tensor_t idx, bk_tensor_t wt, const bk_expert_t *experts,
             int n_experts, const bk_tensor_t *add, const bk_expand_t *expand, float limit);
void cpu_mlp(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_expert_t *expert, float limit);
void cpu_matmul_op(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int64_t row0);
void cpu_matmul_grouped(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int groups);
void cpu_gather(backend_t *bk, bk_tensor_t out, const bk_weight_t *table, bk_tensor_t idx);

#endif
