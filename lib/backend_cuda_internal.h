/* Shared pieces of the CUDA backend's host files: the backend's state (stream, caching
 * allocator, graph capture, profiling), the bound weight, scratch memory and error checks.
 * backend_cuda.c: memory, binding, graphs, profiling; backend_cuda_ops.c: row-wise ops,
 * attention, indexer, router; backend_cuda_mm.c: matmul and experts. */
#ifndef DI_BACKEND_CUDA_INTERNAL_H
#define DI_BACKEND_CUDA_INTERNAL_H

#include "backend_cuda.h"
#include "u64map.h"

#include "../kernels/kernels.h"

#include <cuda_runtime_api.h>

struct bk_weight {
    kw_t w;          /* device view (data/scale device or mapped host pointers) */
    bool host;       /* lives in page-locked host memory */
    void *reg[2];    /* host: the page-locked copies (data, scale) */
    size_t bytes;
};

typedef struct {
    void *p;
    size_t size;
} cu_block_t;

/* The caching allocator's free blocks of one size, a stack. */
typedef struct {
    size_t size;
    void **p;
    size_t n, cap;
} cu_bin_t;

typedef struct {
    void *host;
    size_t off, bytes;
} cu_pending_t;

typedef struct {
    const char *name;
    double ms;
    long calls;
} cu_total_t;

/* A recorded op (backend_cuda_graph.c): a kernel launch (its arguments' bytes in the list), a
 * copy, a zero fill, or an event recorded on / waited for by a stream. */
typedef enum { CU_OP_KERNEL, CU_OP_COPY, CU_OP_SET, CU_OP_RECORD, CU_OP_WAIT } cu_op_kind_t;
typedef struct {
    cu_op_kind_t kind;
    cudaStream_t stream;
    const void *func;
    dim3 grid, block;
    size_t smem;
    uint32_t arg0, n_args;
    void *dst;
    const void *src;
    size_t bytes;
    enum cudaMemcpyKind dir;
    cudaEvent_t event;
} cu_op_t;

typedef struct {
    uint32_t off, size;
} cu_arg_t;

typedef struct {
    cu_op_t *ops;
    size_t n_ops, cap_ops;
    cu_arg_t *args;
    size_t n_args, cap_args;
    uint8_t *bytes;
    size_t n_bytes, cap_bytes;
} cu_list_t;

/* A captured segment: its graph, executable, a node per op (NULL for events) and the ops it
 * last ran, to patch the nodes that change. */
typedef struct {
    uint64_t sig, used;
    int index; /* segments launched before it since the last sync; -1: a begin/end region */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaGraphNode_t *nodes;
    cu_list_t params;
} cu_seg_t;

typedef struct {
    const char *name;
    cudaEvent_t a, b;
} cu_mark_t;

typedef struct {
    const bk_expert_t *experts; /* the host array the table mirrors */
    int n;
    kw_t *host, *dev; /* 3 * n: w1 of every expert, then w2, then w3 */
    const void *maps; /* their tensor maps in dev's allocation (k_matmul_tc_wmaps), NULL where not all take them */
    bool fp8;         /* all take the fp8 precision's form (k_matmul_tc8_ok) */
} cu_experts_t;

typedef struct {
    int device, sms;
    cuda_precision_t precision;
    cudaStream_t stream;
    unsigned *counters; /* split-K tile counters, CU_COUNTERS, zero between launches */
    /* caching allocator */
    cu_bin_t *bins; /* by ascending size, none empty */
    size_t n_bins, cap_bins;
    u64map_t live; /* ptr -> cu_block_t* */
    size_t bytes_live, bytes_cached, bytes_weights;
    /* the recorder (backend_cuda_graph.c) */
    bool graphs;     /* ops recorded and launched as graph segments (DI_CUDA_GRAPHS) */
    bool one_graph;  /* between backend_cuda_graph_begin and _end: one graph, downloads staged */
    int direct;      /* > 0: ops go straight to the streams */
    cu_list_t rec;   /* recorded, not yet launched */
    cu_seg_t *segs;
    int n_segs, seg_index;
    uint64_t tick;
    cudaGraphExec_t last;
    long n_updated, n_instantiated, n_patched_nodes;
    uint8_t *stage; /* page-locked staging for the transfers of a begin/end region */
    size_t stage_cap, stage_used;
    uint8_t *ring;  /* page-locked staging for uploads otherwise, reused after a sync */
    size_t ring_used;
    uint8_t *spill; /* page-locked staging for recorded uploads the ring cannot take, reused after a sync */
    size_t spill_cap, spill_used;
    void **retired; /* spill blocks outgrown since the last sync */
    size_t n_retired, cap_retired;
    cu_pending_t *pending;
    size_t n_pending, cap_pending;
    /* profiling */
    bool prof;
    cu_mark_t *marks;
    size_t n_marks, cap_marks;
    cu_total_t totals[64];
    int n_totals;
    /* MoE expert tables */
    cu_experts_t *expert_tabs;
    int n_expert_tabs;
    /* the second and third streams (backend_cuda_streams.c) */
    bool side_on, branch_on;
    cudaStream_t side, branch, main_stream;
    cudaEvent_t side_fork, side_done, branch_fork, branch_done;
    bool side_pending;      /* a hc_pre's coefficients in flight on side */
    void *side_partial;     /* its scratch, released when joined */
    unsigned *side_counter; /* its split-K counter (the main stream's matmuls use c->counters) */
    bool in_branch;         /* between branch_begin and branch_end: c->stream is the branch */
    bool branch_open;       /* ended, not yet joined */
    unsigned *branch_counters; /* the split-K counters of the stream not issuing now */
    void **held;            /* blocks released while another stream may still use them */
    size_t n_held, cap_held;
} cuda_t;

#define CU_COUNTERS 65536

static inline cuda_t *cu_of(backend_t *bk) { return bk->impl; }

/* Dies naming the call and the CUDA error. */
void cu_check(cudaError_t e, const char *what, const char *file, int line);
#define CU(call) cu_check((call), #call, __FILE__, __LINE__)

/* The recorder (backend_cuda_graph.c). While it records, these enqueue nothing: they append
 * to the list that the next segment launches. */
static inline bool cu_recording(const cuda_t *c) { return !c->direct && (c->one_graph || (c->graphs && !c->prof)); }
void cu_recorder_init(cuda_t *c, bool graphs);
void cu_recorder_destroy(cuda_t *c);
void cu_copy_async(cuda_t *c, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s);
void cu_set_async(cuda_t *c, void *dst, size_t bytes, cudaStream_t s); /* zero fill */
void cu_event_record(cuda_t *c, cudaEvent_t e, cudaStream_t s);
void cu_event_wait(cuda_t *c, cudaStream_t s, cudaEvent_t e);
/* Launches what was recorded (streams joined); outside a begin/end region. */
void cu_flush(cuda_t *c);
/* The other streams joined, cu_flush, then waits for the main stream (and the page-locked
 * upload staging is free again). */
void cu_sync(cuda_t *c);
/* Between begin and end, ops go straight to the streams (the other streams joined and what
 * was recorded launched first). */
void cu_direct_begin(cuda_t *c);
void cu_direct_end(cuda_t *c);
/* After a sync: the spill blocks outgrown since the last one freed, the area empty again. */
void cu_spill_reset(cuda_t *c);
/* Room in the begin/end region's page-locked staging. */
void *cu_stage_take(cuda_t *c, size_t bytes);
/* Whether the side and branch streams are joined to the main one. */
bool cu_streams_joined(const cuda_t *c);

/* The main stream waits for the side stream's coefficients (cu_hc_pre): before any op that
 * reads a site's coefficients or writes the streams X (the hc ops, the Engram gate) and before
 * the next hc_pre. The forward's other ops (matmuls, norms, RoPE, QAT, attention, indexer,
 * router, MoE, copies) read neither, so they run while it is in flight. */
void cu_join_side(cuda_t *c);
/* Work for the side stream that starts after everything the main stream has issued: launches
 * on c->side between cu_side_fork and cu_side_end, joined by cu_join_side. */
void cu_side_fork(cuda_t *c);
void cu_side_end(cuda_t *c);
/* The main stream waits for the open branch (branch_join, moe's add). */
void cu_join_branch(cuda_t *c);
/* Both: before the host sees or frees memory (download, upload, unbind, fill, sync, pick),
 * around a capture, at destroy. */
void cu_join_all(cuda_t *c);
/* Releases p now, or holds it until both other streams are joined if either may use it. */
void cu_release_later(cuda_t *c, void *p);
void cu_streams_create(cuda_t *c, bool side_on, bool branch_on);
void cu_streams_destroy(cuda_t *c);
void cu_branch_begin(backend_t *bk);
void cu_branch_end(backend_t *bk);
void cu_branch_join(backend_t *bk);

/* Device scratch from the caching allocator (ordered on the stream, so it may be released as
 * soon as the last kernel using it is enqueued; inside a branch it is held to the join). */
void *cu_scratch(cuda_t *c, size_t bytes);
void cu_release_scratch(cuda_t *c, void *p);

/* The copies d[0..n) in one launch (k_copy_many). */
void cu_copy_descs(cuda_t *c, const copy_desc_t *d, int n);

/* A device copy of a small host table (scratch: release it once its users are enqueued). */
void *cu_upload_table(cuda_t *c, const void *host, size_t bytes);
/* Page-locked room (NULL when too large) for a download enqueued now and read after the stream's
 * next synchronization, before the next upload. */
void *cu_pinned_room(cuda_t *c, size_t bytes);

/* The reduction split (columns) of a dense CUDA-core matmul of n outputs at 32 positions or
 * fewer: k when it does not split (backend_cuda_mm.c). */
int64_t cu_simt_split_k(const cuda_t *c, int64_t n, int64_t k);

/* Profiling marks around an op (no-ops unless profiling). */
void cu_prof_begin(cuda_t *c, const char *name);
void cu_prof_end(cuda_t *c);

/* Op entry points (filled into the backend table by backend_cuda.c). */
void cu_matmul(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int64_t row0);
void cu_matmul_grouped(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, int groups);
void cu_moe(backend_t *bk, bk_tensor_t out, bk_tensor_t x, bk_tensor_t idx, bk_tensor_t wt, const bk_expert_t *experts,
            int n_experts, const bk_tensor_t *add, const bk_expand_t *expand, float limit);
void cu_mlp(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_expert_t *expert, float limit);
void cu_pick(backend_t *bk, bk_tensor_t logits, const bk_pick_t *rows, int n, sampler_t *scratch);
void cu_rmsnorm(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_tensor_t *w, float eps);
void cu_rope(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, int64_t pos0, int64_t pos_step, bool inverse);
void cu_rope_spans(backend_t *bk, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, const bk_span_t *spans, int n_spans,
                   int64_t pos_step, bool inverse);
void cu_qat(backend_t *bk, bk_tensor_t x, qat_kind_t kind, int block);
void cu_rope_qat_spans(backend_t *bk, bk_tensor_t out, bk_tensor_t x, int head_dim, bk_tensor_t inv_freq, const bk_span_t *spans,
                       int n_spans, int64_t pos_step, qat_kind_t kind, int block);
void cu_hc_mix(backend_t *bk, bk_tensor_t coef, bk_tensor_t mixes, bk_tensor_t X, bk_tensor_t base, bk_tensor_t scale, int hc,
               float eps, float hc_eps, int iters);
void cu_hc_collapse(backend_t *bk, bk_tensor_t out, bk_tensor_t X, bk_tensor_t pre, int hc);
void cu_gate_router(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t x, const bk_weight_t *gate,
                    bk_tensor_t bias, float temp, bool normalize, float scale);
void cu_matmul_expand(backend_t *bk, bk_tensor_t out, bk_tensor_t x, const bk_weight_t *w, const bk_expand_t *expand);
void cu_expand_check(cuda_t *c, bk_tensor_t X, bk_tensor_t y, bk_tensor_t coef, int hc);
void cu_hc_expand(backend_t *bk, bk_tensor_t X, bk_tensor_t y, bk_tensor_t coef, int hc);
void cu_hc_fill(backend_t *bk, bk_tensor_t X, bk_tensor_t pre, bk_tensor_t e, int hc);
void cu_hc_pre(backend_t *bk, bk_tensor_t out, bk_tensor_t coef, bk_tensor_t X, const bk_weight_t *fn, bk_tensor_t base,
               bk_tensor_t scale, bk_tensor_t pre, const bk_tensor_t *norm, int hc, float eps, float hc_eps, int iters);
void cu_gather(backend_t *bk, bk_tensor_t out, const bk_weight_t *table, bk_tensor_t idx);
void cu_engram_gate(backend_t *bk, bk_tensor_t X, bk_tensor_t kv, bk_tensor_t qk, int hc, float eps);
void cu_group_pool(backend_t *bk, bk_tensor_t out, bk_tensor_t z, bk_tensor_t s, int ratio);
void cu_attention(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t ring,
                  bk_tensor_t kv_new, int64_t pos0, int window, int64_t win_lo, const bk_paged_t *pool,
                  const bk_tensor_t *sel);
void cu_attention_spans(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t kv_new,
                        int window, const bk_span_t *spans, int n_spans, const bk_tensor_t *sel,
                         const bk_tensor_t *unrope);
void cu_indexer_spans(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                      const bk_span_t *spans, int n_spans, int ratio, const bk_tensor_t *blocks_in, int block_size,
                      float q_scale, float w_scale);
void cu_indexer_topk(backend_t *bk, bk_tensor_t sel, const bk_tensor_t *blocks_out, bk_tensor_t q, bk_tensor_t w,
                     bk_paged_t keys, int64_t pos0, int ratio, const bk_tensor_t *blocks_in, int block_size, float q_scale,
                     float w_scale);
/* Tensor cores for prefill (backend_cuda_tc.c). cu_attention_tc runs the spans it takes (and
 * turns their output back from RoPE when unrope is given) and copies the others into rest
 * (returning how many); cu_indexer_tc fills a's scores for every span (false: it takes none,
 * the caller scores them). */
int cu_attention_tc(backend_t *bk, bk_tensor_t out, bk_tensor_t q, bk_tensor_t sink, float scale, bk_tensor_t kv_new,
                    int window, const bk_span_t *spans, int n_spans, const bk_tensor_t *sel, const bk_tensor_t *unrope,
                    bk_span_t *rest);
bool cu_indexer_tc(cuda_t *c, const ix_args_t *a, bk_tensor_t q, bk_tensor_t w, const bk_span_t *spans, int n_spans);
/* The scores of a's rows as short spans' (the tensor cores' row kernel unless fp32 or the shapes
 * rule it out, then the CUDA cores). */
void cu_indexer_rows(cuda_t *c, const ix_args_t *a);
void cu_router(backend_t *bk, bk_tensor_t idx, bk_tensor_t wt, bk_tensor_t logits, bk_tensor_t bias, float temp,
               bool normalize, float scale);

#endif
