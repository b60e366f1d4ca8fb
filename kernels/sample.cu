// Next-token choice on the device for the rows the host sampler would handle without ranking
// (lib/sampler.h): greedy, and temperature sampling with min-p, each within an optional token
// mask. A row is cut into chunks (sample.cuh; one block a row took ~50 us a row at 129,280 ids,
// latency-bound), in three launches:
//   scan:  each chunk's best (logit, id) pair (greedy) or its largest z and last allowed id;
//   mass:  each chunk's kept mass (p = exp(z - max) >= min_p), from the row's max;
//   final: greedy rows reduce the chunks' pairs under the sampler's total order (larger first,
//          the lower id on a tie, NaN last: the host's result exactly); sampling rows scan the
//          chunks' masses for the one where u times the total is passed, then walk that chunk
//          as the mass launch summed it: each thread owns a run of PK_RUN ids, a block scan gives
//          the mass before each run, and the run holding the crossing walks its ids as the host.
// Sampling repeats the host's double arithmetic (z = logit / temperature, p = exp(z - max)); only
// the grouping of the sums differs from the host's one sequential sum (and the last bit of exp),
// so a choice can differ only when u * total lies within about 1e-16 of a boundary. The chunks
// depend on V alone, so a row's choice does not depend on its batch.
#include "sample.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

struct pk_part { /* one chunk of a row */
    pk_best best;    /* greedy: its best pair */
    double mx, mass; /* sampling: its largest z, its kept mass */
    int64_t last;    /* sampling: its last allowed id, -1 if none */
};

typedef cub::BlockReduce<pk_best, PK_THREADS> pk_best_reduce_t;
typedef cub::BlockReduce<double, PK_THREADS> pk_max_reduce_t;
typedef cub::BlockReduce<int64_t, PK_THREADS> pk_id_reduce_t;
typedef cub::BlockScan<double, PK_THREADS> pk_scan_t;

union pk_tmp {
    pk_best_reduce_t::TempStorage best;
    pk_max_reduce_t::TempStorage mx;
    pk_id_reduce_t::TempStorage id;
    pk_scan_t::TempStorage scan;
};

__device__ __forceinline__ double pk_p(float l, const pick_row_t &pr, double mx) { return exp(pk_z(l, pr.temperature) - mx); }
__device__ __forceinline__ bool pk_kept(const pick_row_t &pr, double p) { return pr.min_p <= 0 || p >= pr.min_p; }

// The row's largest z and last allowed id from its chunks' parts (every thread gets them).
__device__ void pk_row_max(pk_tmp &tmp, const pk_part *part, int nb, double *mx, int64_t *last) {
    __shared__ double sh_mx;
    __shared__ int64_t sh_last;
    double m = -INFINITY;
    int64_t l = -1;
    for (int b = threadIdx.x; b < nb; b += PK_THREADS) m = fmax(m, part[b].mx), l = max(l, part[b].last);
    m = pk_max_reduce_t(tmp.mx).Reduce(m, pk_max());
    __syncthreads();
    l = pk_id_reduce_t(tmp.id).Reduce(l, pk_max());
    if (threadIdx.x == 0) sh_mx = m, sh_last = l;
    __syncthreads();
    *mx = sh_mx, *last = sh_last;
}

// Thread t's kept mass over ids lo + t * PK_RUN .. + PK_RUN of the row, and the mass before it in
// the chunk (a block scan); the chunk's whole mass in *chunk. The final launch repeats this for
// the crossing chunk and gets the same bits.
__device__ double pk_run_mass(pk_tmp &tmp, const float *l, const uint32_t *mask, int64_t V, const pick_row_t &pr, double mx,
                              int64_t lo, double *before, double *chunk) {
    __shared__ double sh_chunk;
    double mass = 0;
    for (int64_t v = lo + threadIdx.x * PK_RUN, e = min(V, v + PK_RUN); v < e; v++)
        if (pk_allowed(mask, v)) {
            double p = pk_p(l[v], pr, mx);
            if (pk_kept(pr, p)) mass += p;
        }
    pk_scan_t(tmp.scan).ExclusiveSum(mass, *before);
    if (threadIdx.x == PK_THREADS - 1) sh_chunk = *before + mass;
    __syncthreads();
    *chunk = sh_chunk;
    return mass;
}

__global__ void __launch_bounds__(PK_THREADS) pick_scan_kernel(const float *logits, int64_t ld, int64_t V, const pick_row_t *rows,
                                                               const uint32_t *masks, pk_part *parts, int nb) {
    pdl_begin();
    __shared__ pk_tmp tmp;
    const pick_row_t pr = rows[blockIdx.x];
    const float *l = logits + pr.row * ld;
    const uint32_t *mask = pr.mask_off >= 0 ? masks + pr.mask_off : NULL;
    pk_part *part = parts + (int64_t)blockIdx.x * nb + blockIdx.y;
    int64_t lo = (int64_t)blockIdx.y * PK_CHUNK, hi = min(V, lo + PK_CHUNK);
    if (pr.greedy) {
        pk_best b = {0.0f, -1};
        for (int64_t v = lo + threadIdx.x; v < hi; v += PK_THREADS)
            if (pk_allowed(mask, v)) b = pk_best_op()(b, pk_best{l[v], v});
        b = pk_best_reduce_t(tmp.best).Reduce(b, pk_best_op());
        if (threadIdx.x == 0) part->best = b;
        return;
    }
    double mx = -INFINITY;
    int64_t last = -1;
    for (int64_t v = lo + threadIdx.x; v < hi; v += PK_THREADS)
        if (pk_allowed(mask, v)) mx = fmax(mx, pk_z(l[v], pr.temperature)), last = v;
    mx = pk_max_reduce_t(tmp.mx).Reduce(mx, pk_max());
    __syncthreads();
    last = pk_id_reduce_t(tmp.id).Reduce(last, pk_max());
    if (threadIdx.x == 0) part->mx = mx, part->last = last;
}

__global__ void __launch_bounds__(PK_THREADS) pick_mass_kernel(const float *logits, int64_t ld, int64_t V, const pick_row_t *rows,
                                                               const uint32_t *masks, pk_part *parts, int nb) {
    pdl_begin();
    __shared__ pk_tmp tmp;
    const pick_row_t pr = rows[blockIdx.x];
    if (pr.greedy) return;
    pk_part *part = parts + (int64_t)blockIdx.x * nb;
    double mx;
    int64_t last;
    pk_row_max(tmp, part, nb, &mx, &last);
    if (last < 0 || mx == -INFINITY) return; /* the final launch answers from mx and last alone */
    double before, chunk;
    pk_run_mass(tmp, logits + pr.row * ld, pr.mask_off >= 0 ? masks + pr.mask_off : NULL, V, pr, mx, (int64_t)blockIdx.y * PK_CHUNK,
                &before, &chunk);
    if (threadIdx.x == 0) part[blockIdx.y].mass = chunk;
}

__global__ void __launch_bounds__(PK_THREADS) pick_final_kernel(const float *logits, int64_t ld, int64_t V, const pick_row_t *rows,
                                                                const uint32_t *masks, const pk_part *parts, int nb, int32_t *out) {
    pdl_begin();
    __shared__ pk_tmp tmp;
    __shared__ int sh_run, sh_chunk;
    __shared__ double sh_total, sh_cum;
    const pick_row_t pr = rows[blockIdx.x];
    const pk_part *part = parts + (int64_t)blockIdx.x * nb;
    const float *l = logits + pr.row * ld;
    const uint32_t *mask = pr.mask_off >= 0 ? masks + pr.mask_off : NULL;
    int tid = threadIdx.x;
    if (pr.greedy) {
        pk_best b = {0.0f, -1};
        for (int c = tid; c < nb; c += PK_THREADS) b = pk_best_op()(b, part[c].best);
        b = pk_best_reduce_t(tmp.best).Reduce(b, pk_best_op());
        if (tid == 0) out[pr.slot] = b.id < 0 ? -1 : (int32_t)b.id;
        return;
    }
    double mx;
    int64_t last;
    pk_row_max(tmp, part, nb, &mx, &last);
    if (last < 0 || mx == -INFINITY) { /* nothing allowed, or no finite z: the host's NaN walk ends on the last */
        if (tid == 0) out[pr.slot] = last < 0 ? -1 : (int32_t)last;
        return;
    }
    // the chunks' masses: thread t a run of q chunks in order, the mass before it by a block scan
    int q = (nb + PK_THREADS - 1) / PK_THREADS, c0 = min(nb, tid * q), c1 = min(nb, c0 + q);
    double mass = 0, before;
    for (int c = c0; c < c1; c++) mass += part[c].mass;
    pk_scan_t(tmp.scan).ExclusiveSum(mass, before);
    if (tid == PK_THREADS - 1) sh_total = before + mass, sh_run = PK_THREADS;
    __syncthreads();
    double target = pr.u * sh_total;
    if (before + mass > target && mass > 0) atomicMin(&sh_run, tid);
    __syncthreads();
    int64_t kept = -1;
    if (sh_run == PK_THREADS) { /* the rounded sum never passed the target: the host takes its last kept token (its last allowed when none is kept: a +inf z) */
        for (int64_t v = tid; v < V; v += PK_THREADS)
            if (pk_allowed(mask, v) && pk_kept(pr, pk_p(l[v], pr, mx))) kept = v;
        kept = pk_id_reduce_t(tmp.id).Reduce(kept, pk_max());
        if (tid == 0) out[pr.slot] = (int32_t)(kept >= 0 ? kept : last);
        return;
    }
    if (tid == sh_run) { /* the crossing chunk: the first whose end passes the target (the run's last with mass if rounding says none) */
        double cum = before;
        int c = c0, pick = -1;
        for (; c < c1; c++) {
            if (part[c].mass > 0) pick = c;
            if (cum + part[c].mass > target && part[c].mass > 0) break;
            cum += part[c].mass;
        }
        if (c == c1) { /* none: the last chunk with mass, entered with the mass before it */
            c = pick, cum = before;
            for (int k = c0; k < c; k++) cum += part[k].mass;
        }
        sh_chunk = c, sh_cum = cum;
    }
    __syncthreads();
    int64_t lo = (int64_t)sh_chunk * PK_CHUNK;
    double cum_chunk = sh_cum, chunk, tb;
    double run = pk_run_mass(tmp, l, mask, V, pr, mx, lo, &tb, &chunk);
    if (tid == 0) sh_run = PK_THREADS;
    __syncthreads();
    double start = cum_chunk + tb;
    if (start + run > target && run > 0) atomicMin(&sh_run, tid);
    __syncthreads();
    int64_t v0 = lo + tid * PK_RUN, v1 = min(V, v0 + PK_RUN);
    if (sh_run == PK_THREADS) { /* rounding again: the chunk's last kept token with mass */
        for (int64_t v = v0; v < v1; v++) {
            double p = pk_p(l[v], pr, mx);
            if (pk_allowed(mask, v) && pk_kept(pr, p) && p > 0) kept = v;
        }
        kept = pk_id_reduce_t(tmp.id).Reduce(kept, pk_max());
        if (tid == 0) out[pr.slot] = (int32_t)kept;
        return;
    }
    if (tid != sh_run) return;
    double cum = start;
    int64_t pick = -1;
    for (int64_t v = v0; v < v1; v++)
        if (pk_allowed(mask, v)) {
            double p = pk_p(l[v], pr, mx);
            if (!pk_kept(pr, p)) continue;
            pick = v;
            cum += p;
            if (cum > target) break;
        }
    out[pr.slot] = (int32_t)pick;
}

extern "C" size_t k_pick_scratch(int64_t V, int n) { return (size_t)n * (size_t)pk_chunks(V) * sizeof(pk_part); }

extern "C" cudaError_t k_pick(int32_t *out, const float *logits, int64_t ld, int64_t V, const pick_row_t *rows, int n,
                              const uint32_t *masks, void *scratch, cudaStream_t s) {
    if (n <= 0 || V <= 0) return cudaSuccess;
    dim3 grid;
    int nb;
    pk_part *parts = (pk_part *)scratch;
    cudaError_t e = pk_chunk_grid(V, n, &grid, &nb);
    if (e == cudaSuccess) e = k_launch(pick_scan_kernel, grid, PK_THREADS, 0, s, logits, ld, V, rows, masks, parts, nb);
    if (e == cudaSuccess) e = k_launch(pick_mass_kernel, grid, PK_THREADS, 0, s, logits, ld, V, rows, masks, parts, nb);
    if (e == cudaSuccess) e = k_launch(pick_final_kernel, (unsigned)n, PK_THREADS, 0, s, logits, ld, V, rows, masks, (const pk_part *)parts, nb, out);
    return e;
}
