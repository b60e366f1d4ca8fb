// Next-token choice on the device for the rows the host sampler would handle without ranking
// (lib/sampler.h): greedy, and temperature sampling with min-p, each within an optional token
// mask. One block per row. Greedy reduces (logit, id) pairs under the sampler's total order
// (larger first, the lower id on a tie, NaN last), so the result is the host's exactly. Sampling
// repeats the host's double arithmetic (z = logit / temperature, p = exp(z - max)) and walks the
// cumulative sum in id order: each thread owns a contiguous run of ids, a block scan gives the
// mass before each run, and the run holding the crossing walks its ids as the host does. Only the
// grouping of the sum differs from the host's one sequential sum (and the last bit of exp), so a
// choice can differ only when u * total lies within about 1e-16 of a boundary.
#include "sample.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#define PK_THREADS 1024

__global__ void __launch_bounds__(PK_THREADS) pick_kernel(const float *logits, int64_t ld, int64_t V, const pick_row_t *rows,
                                                          const uint32_t *masks, int32_t *out) {
    pdl_begin();
    typedef cub::BlockReduce<pk_best, PK_THREADS> best_reduce_t;
    typedef cub::BlockReduce<double, PK_THREADS> max_reduce_t;
    typedef cub::BlockReduce<int64_t, PK_THREADS> id_reduce_t;
    typedef cub::BlockScan<double, PK_THREADS> scan_t;
    __shared__ union {
        typename best_reduce_t::TempStorage best;
        typename max_reduce_t::TempStorage mx;
        typename id_reduce_t::TempStorage id;
        typename scan_t::TempStorage scan;
    } tmp;
    __shared__ double sh_mx, sh_total;
    __shared__ int64_t sh_last;
    __shared__ int sh_run;
    const pick_row_t pr = rows[blockIdx.x];
    const float *l = logits + pr.row * ld;
    const uint32_t *mask = pr.mask_off >= 0 ? masks + pr.mask_off : NULL;
    int tid = threadIdx.x;

    if (pr.greedy) {
        pk_best b = {0.0f, -1};
        for (int64_t v = tid; v < V; v += PK_THREADS)
            if (pk_allowed(mask, v)) b = pk_best_op()(b, pk_best{l[v], v});
        b = best_reduce_t(tmp.best).Reduce(b, pk_best_op());
        if (tid == 0) out[pr.slot] = b.id < 0 ? -1 : (int32_t)b.id;
        return;
    }

    // the largest z and the last allowed id (the host's pick when every z is -inf)
    double mx = -INFINITY;
    int64_t last = -1;
    for (int64_t v = tid; v < V; v += PK_THREADS)
        if (pk_allowed(mask, v)) mx = fmax(mx, pk_z(l[v], pr.temperature)), last = v;
    mx = max_reduce_t(tmp.mx).Reduce(mx, pk_max());
    if (tid == 0) sh_mx = mx;
    __syncthreads();
    last = id_reduce_t(tmp.id).Reduce(last, pk_max());
    if (tid == 0) sh_last = last, sh_run = PK_THREADS;
    __syncthreads();
    mx = sh_mx;
    if (sh_last < 0 || mx == -INFINITY) { // nothing allowed, or no finite z: the host's NaN walk ends on the last
        if (tid == 0) out[pr.slot] = sh_last < 0 ? -1 : (int32_t)sh_last;
        return;
    }

    // each thread's run of ids: its kept mass (min-p drops p < min_p; the top token has p = 1)
    int64_t per = (V + PK_THREADS - 1) / PK_THREADS, lo = tid * per, hi = min(V, lo + per);
    double mass = 0;
    for (int64_t v = lo; v < hi; v++)
        if (pk_allowed(mask, v)) {
            double p = exp(pk_z(l[v], pr.temperature) - mx);
            if (pr.min_p <= 0 || p >= pr.min_p) mass += p;
        }
    double before, total;
    scan_t(tmp.scan).ExclusiveSum(mass, before, total);
    if (tid == PK_THREADS - 1) sh_total = before + mass;
    __syncthreads();
    total = sh_total;
    double target = pr.u * total;
    if (before + mass > target && mass > 0) atomicMin(&sh_run, tid);
    __syncthreads();
    if (sh_run == PK_THREADS) { // the rounded sum never passed the target: the host takes its last kept token
        int64_t kept = -1;
        for (int64_t v = lo; v < hi; v++)
            if (pk_allowed(mask, v)) {
                double p = exp(pk_z(l[v], pr.temperature) - mx);
                if (pr.min_p <= 0 || p >= pr.min_p) kept = v;
            }
        kept = id_reduce_t(tmp.id).Reduce(kept, pk_max());
        if (tid == 0) out[pr.slot] = (int32_t)kept;
        return;
    }
    if (tid != sh_run) return;
    double cum = before;
    int64_t pick = -1;
    for (int64_t v = lo; v < hi; v++)
        if (pk_allowed(mask, v)) {
            double p = exp(pk_z(l[v], pr.temperature) - mx);
            if (pr.min_p > 0 && p < pr.min_p) continue;
            pick = v;
            cum += p;
            if (cum > target) break;
        }
    out[pr.slot] = (int32_t)pick;
}

extern "C" cudaError_t k_pick(int32_t *out, const float *logits, int64_t ld, int64_t V, const pick_row_t *rows, int n,
                              const uint32_t *masks, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    return k_launch(pick_kernel, n, PK_THREADS, 0, s, logits, ld, V, rows, masks, out);
}
