// Log-probabilities of the chosen tokens (sampler.h's): the log-softmax of the raw logits (the
// max ignoring NaN, the sum of exp in double, as the host) at the chosen token, and the n_top
// most likely tokens in rank order (larger first, the lower id on a tie, NaN last). A row is cut
// into chunks (sample.cuh), in three launches:
//   max:   each chunk's largest logit;
//   local: from the row's max, each chunk's sum of exp and its own n_top best tokens, found one
//          block reduction per rank among the chunk's tokens that rank after the previous one;
//   final: the row's log-sum-exp from the chunks' sums in chunk order, and its n_top best among
//          the chunks' lists, again one reduction per rank.
// The ranking is a total order on distinct ids, so the merged lists are the host's exactly; only
// the grouping of the sum differs from the host's (the values agree to about 1e-7 relative).
#include "sample.cuh"

#include <cub/block/block_reduce.cuh>

struct lp_part { /* one chunk of a row */
    float mx;
    double sum;
    pk_best top[K_MAX_TOP];
};

typedef cub::BlockReduce<float, PK_THREADS> lp_fmax_t;
typedef cub::BlockReduce<double, PK_THREADS> lp_sum_t;
typedef cub::BlockReduce<pk_best, PK_THREADS> lp_best_t;

union lp_tmp {
    lp_fmax_t::TempStorage mx;
    lp_sum_t::TempStorage sum;
    lp_best_t::TempStorage best;
};

__global__ void __launch_bounds__(PK_THREADS) logprob_max_kernel(const float *logits, int64_t ld, int64_t V, const logprob_row_t *rows,
                                                                 const int32_t *chosen, lp_part *parts, int nb) {
    pdl_begin();
    __shared__ lp_tmp tmp;
    const logprob_row_t pr = rows[blockIdx.x];
    if (chosen[pr.slot] < 0) return; /* nothing chosen (or the host's row) */
    const float *l = logits + pr.row * ld;
    int64_t lo = (int64_t)blockIdx.y * PK_CHUNK, hi = min(V, lo + PK_CHUNK);
    float mx = -INFINITY;
    for (int64_t v = lo + threadIdx.x; v < hi; v += PK_THREADS) mx = l[v] > mx ? l[v] : mx; /* NaN never taken */
    mx = lp_fmax_t(tmp.mx).Reduce(mx, pk_max());
    if (threadIdx.x == 0) parts[(int64_t)blockIdx.x * nb + blockIdx.y].mx = mx;
}

// The row's largest logit from its chunks' maxima (every thread gets it).
__device__ float lp_row_max(lp_tmp &tmp, const lp_part *part, int nb) {
    __shared__ float sh_mx;
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < nb; c += PK_THREADS) mx = part[c].mx > mx ? part[c].mx : mx;
    mx = lp_fmax_t(tmp.mx).Reduce(mx, pk_max());
    if (threadIdx.x == 0) sh_mx = mx;
    __syncthreads();
    return sh_mx;
}

// The best of a block's candidates (each thread's own best, already restricted to the tokens
// ranking after the previous pick), shared through thread 0; every thread gets it.
__device__ pk_best lp_best(lp_tmp &tmp, pk_best mine) {
    __shared__ pk_best sh_best;
    mine = lp_best_t(tmp.best).Reduce(mine, pk_best_op());
    if (threadIdx.x == 0) sh_best = mine;
    __syncthreads();
    pk_best b = sh_best;
    __syncthreads(); /* read before the next reduction writes */
    return b;
}

__global__ void __launch_bounds__(PK_THREADS) logprob_local_kernel(const float *logits, int64_t ld, int64_t V,
                                                                   const logprob_row_t *rows, const int32_t *chosen, lp_part *parts,
                                                                   int nb) {
    pdl_begin();
    __shared__ lp_tmp tmp;
    const logprob_row_t pr = rows[blockIdx.x];
    if (chosen[pr.slot] < 0) return;
    const float *l = logits + pr.row * ld;
    lp_part *part = parts + (int64_t)blockIdx.x * nb;
    float mx = lp_row_max(tmp, part, nb);
    int64_t lo = (int64_t)blockIdx.y * PK_CHUNK, hi = min(V, lo + PK_CHUNK);
    double dmx = mx, sum = 0;
    for (int64_t v = lo + threadIdx.x; v < hi; v += PK_THREADS) sum += exp((double)l[v] - dmx);
    sum = lp_sum_t(tmp.sum).Sum(sum);
    __syncthreads();
    lp_part *mine = part + blockIdx.y;
    if (threadIdx.x == 0) { /* the list: -1 past the chunk's last token */
        mine->sum = sum;
        for (int t = 0; t < pr.n_top; t++) mine->top[t] = pk_best{0.0f, -1};
    }
    pk_best prev = {0.0f, -1};
    for (int t = 0; t < pr.n_top; t++) { /* the chunk's best token ranking after prev */
        pk_best b = {0.0f, -1};
        for (int64_t v = lo + threadIdx.x; v < hi; v += PK_THREADS)
            if (prev.id < 0 || pk_before(prev.v, prev.id, l[v], v)) b = pk_best_op()(b, pk_best{l[v], v});
        prev = lp_best(tmp, b);
        if (prev.id < 0) break;
        if (threadIdx.x == 0) mine->top[t] = prev;
    }
}

__global__ void __launch_bounds__(PK_THREADS) logprob_final_kernel(const float *logits, int64_t ld, const logprob_row_t *rows,
                                                                   const int32_t *chosen, const lp_part *parts, int nb,
                                                                   logprob_out_t *out) {
    pdl_begin();
    __shared__ lp_tmp tmp;
    __shared__ double sh_lse;
    const logprob_row_t pr = rows[blockIdx.x];
    int32_t id = chosen[pr.slot];
    if (id < 0) return;
    const float *l = logits + pr.row * ld;
    const lp_part *part = parts + (int64_t)blockIdx.x * nb;
    float mx = lp_row_max(tmp, part, nb);
    if (threadIdx.x == 0) { /* the chunks' sums in chunk order */
        double sum = 0;
        for (int c = 0; c < nb; c++) sum += part[c].sum;
        sh_lse = (double)mx + log(sum);
    }
    __syncthreads();
    double lse = sh_lse;
    logprob_out_t *o = out + blockIdx.x;
    if (threadIdx.x == 0) o->logprob = (float)((double)l[id] - lse), o->n_top = 0;
    int n_top = pr.n_top;
    pk_best prev = {0.0f, -1};
    for (int t = 0; t < n_top; t++) { /* the best of the chunks' lists ranking after prev */
        pk_best b = {0.0f, -1};
        for (int64_t x = threadIdx.x; x < (int64_t)nb * n_top; x += PK_THREADS) {
            pk_best e = part[x / n_top].top[x % n_top];
            if (e.id >= 0 && (prev.id < 0 || pk_before(prev.v, prev.id, e.v, e.id))) b = pk_best_op()(b, e);
        }
        prev = lp_best(tmp, b);
        if (prev.id < 0) break;
        if (threadIdx.x == 0) o->top_ids[t] = (uint32_t)prev.id, o->top_logprobs[t] = (float)((double)prev.v - lse), o->n_top = t + 1;
    }
}

extern "C" size_t k_logprobs_scratch(int64_t V, int n) { return (size_t)n * (size_t)pk_chunks(V) * sizeof(lp_part); }

extern "C" cudaError_t k_logprobs(logprob_out_t *out, const float *logits, int64_t ld, int64_t V, const logprob_row_t *rows, int n,
                                  const int32_t *chosen, void *scratch, cudaStream_t s) {
    if (n <= 0 || V <= 0) return cudaSuccess;
    dim3 grid;
    int nb;
    lp_part *parts = (lp_part *)scratch;
    cudaError_t e = pk_chunk_grid(V, n, &grid, &nb);
    if (e == cudaSuccess) e = k_launch(logprob_max_kernel, grid, PK_THREADS, 0, s, logits, ld, V, rows, chosen, parts, nb);
    if (e == cudaSuccess) e = k_launch(logprob_local_kernel, grid, PK_THREADS, 0, s, logits, ld, V, rows, chosen, parts, nb);
    if (e == cudaSuccess) e = k_launch(logprob_final_kernel, (unsigned)n, PK_THREADS, 0, s, logits, ld, rows, chosen, (const lp_part *)parts, nb, out);
    return e;
}
