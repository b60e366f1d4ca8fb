// Next-token choice on the device for the rows that rank their tokens (top-k, top-p; lib/sampler.h).
//
// Ranked rows: every token of a row gets a 64-bit key, the row in the top bits, then the logit's
// bits in an order-preserving form (complemented: larger first; NaN as -inf, -0 as +0), then the
// id (the lower first), so one ascending radix sort of all the rows' keys lists each row's tokens
// in the host sampler's rank order (rows with a small top-k: their first ranks alone, below) (tokens outside the mask get the last logit code and sort after
// the allowed ones). z = logit / temperature is the same for equal logits and p = exp(z - max) never
// reorders finite ones, so this is also the order the host ranks probabilities in; only tokens whose
// p underflows to 0 (no mass) may be ordered differently. One block per row then walks its sorted
// tokens in chunks, each thread a contiguous run, a block scan giving the mass before each run: the
// k largest are kept, then the shortest prefix whose mass reaches top_p of theirs, then those with
// p >= min_p (a prefix too: p does not grow along the rank), and u times their mass picks the token
// where the cumulative sum passes it, as the host walks. Only the grouping of the sums differs from
// the host's sequential ones (about 1e-16). A row whose largest z is not finite (every allowed logit
// -inf or NaN, or +inf) goes back to the host (-2): its arithmetic is NaN there and the host's answer
// depends on its sort's handling of NaN.
//
#include "sample.cuh"

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#define RK_THREADS 1024
#define RK_ITEMS 8 /* sorted tokens a thread takes per chunk */

// Order-preserving code of a logit (larger logit, larger code; NaN as -inf, -0 as +0).
__device__ __forceinline__ uint32_t rk_code(float l) {
    if (isnan(l)) l = -INFINITY;
    return order_key(l == 0.0f ? 0.0f : l);
}

// Token v's key within its row: ~code (the larger logit first; outside the mask last), then the id.
__device__ __forceinline__ uint64_t rk_key(const float *l, const uint32_t *mask, int64_t v, int id_bits) {
    uint32_t code = pk_allowed(mask, v) ? ~rk_code(l[v]) : 0xFFFFFFFFu;
    return ((uint64_t)code << id_bits) | (uint64_t)v;
}

__global__ void __launch_bounds__(RK_THREADS) rank_keys_kernel(uint64_t *keys, const float *logits, int64_t ld, int64_t V,
                                                               const rank_row_t *rows, const uint32_t *masks, int id_bits) {
    pdl_begin();
    const rank_row_t pr = rows[blockIdx.y];
    const float *l = logits + pr.row * ld;
    const uint32_t *mask = pr.mask_off >= 0 ? masks + pr.mask_off : NULL;
    for (int64_t v = (int64_t)blockIdx.x * RK_THREADS + threadIdx.x; v < V; v += (int64_t)gridDim.x * RK_THREADS)
        keys[blockIdx.y * V + v] = ((uint64_t)blockIdx.y << (32 + id_bits)) | rk_key(l, mask, v, id_bits);
}

// Rows with 0 < top_k <= K_RANK_FIRST walk their first K_RANK_FIRST ranks only, found without
// sorting the row: each chunk of PK_CHUNK ids (sample.cuh) sorts its keys in shared memory and
// keeps its first K_RANK_FIRST (a token among the row's first is among its chunk's first), then
// one block per row sorts the chunks' lists (at most PK_CHUNK keys: k_pick_ranked_first_ok) and
// keeps the first K_RANK_FIRST: the row's, in rank order.
typedef cub::BlockRadixSort<uint64_t, PK_THREADS, PK_RUN> rk_block_sort_t;

// The block's PK_CHUNK keys (thread t: t * PK_RUN ..), sorted; the first K_RANK_FIRST to `to`.
__device__ void rk_sort_firsts(rk_block_sort_t::TempStorage &tmp, uint64_t (&key)[PK_RUN], int id_bits, uint64_t *to) {
    rk_block_sort_t(tmp).Sort(key, 0, 32 + id_bits); /* blocked: thread t holds ranks t * PK_RUN .. */
#pragma unroll
    for (int i = 0; i < PK_RUN; i++) {
        int r = threadIdx.x * PK_RUN + i;
        if (r < K_RANK_FIRST) to[r] = key[i];
    }
}

__global__ void __launch_bounds__(PK_THREADS) rank_chunk_kernel(uint64_t *firsts, const float *logits, int64_t ld, int64_t V,
                                                                const rank_row_t *rows, const uint32_t *masks, int id_bits, int nb) {
    pdl_begin();
    __shared__ rk_block_sort_t::TempStorage tmp;
    const rank_row_t pr = rows[blockIdx.x];
    const float *l = logits + pr.row * ld;
    const uint32_t *mask = pr.mask_off >= 0 ? masks + pr.mask_off : NULL;
    int64_t v0 = (int64_t)blockIdx.y * PK_CHUNK + threadIdx.x * PK_RUN;
    uint64_t key[PK_RUN];
#pragma unroll
    for (int i = 0; i < PK_RUN; i++) key[i] = v0 + i < V ? rk_key(l, mask, v0 + i, id_bits) : ~0ull; /* past V: after every token */
    rk_sort_firsts(tmp, key, id_bits, firsts + ((int64_t)blockIdx.x * nb + blockIdx.y) * K_RANK_FIRST);
}

__global__ void __launch_bounds__(PK_THREADS) rank_merge_kernel(uint64_t *sorted, const uint64_t *firsts, int id_bits, int nb) {
    pdl_begin();
    __shared__ rk_block_sort_t::TempStorage tmp;
    const uint64_t *f = firsts + (int64_t)blockIdx.x * nb * K_RANK_FIRST;
    int x0 = threadIdx.x * PK_RUN, total = nb * K_RANK_FIRST;
    uint64_t key[PK_RUN];
#pragma unroll
    for (int i = 0; i < PK_RUN; i++) key[i] = x0 + i < total ? f[x0 + i] : ~0ull;
    rk_sort_firsts(tmp, key, id_bits, sorted + (int64_t)blockIdx.x * K_RANK_FIRST);
}

typedef cub::BlockScan<double, RK_THREADS> rk_scan_t;
typedef cub::BlockReduce<int, RK_THREADS> rk_count_t;

struct rk_shared {
    union {
        rk_scan_t::TempStorage scan;
        rk_count_t::TempStorage count;
    } tmp;
    int64_t at;    /* the first crossing's rank */
    double cum;    /* the cumulative mass through it */
    double carry;  /* the mass before the current chunk */
};

// p of the token with sorted key k.
__device__ __forceinline__ double rk_p(uint64_t k, int id_bits, double temperature, double mx) {
    return exp(pk_z(float_of_order_key(~(uint32_t)(k >> id_bits)), temperature) - mx);
}

// Walks ranks [0, n) accumulating p in rank order; returns the first rank whose cumulative mass is
// >= want (strict: > want), its cumulative mass in *cum; n and the whole mass when none.
__device__ int64_t rk_cross(rk_shared &sh, const uint64_t *k, int64_t n, int id_bits, double temperature, double mx,
                            double want, bool strict, double *cum) {
    const int64_t CH = (int64_t)RK_THREADS * RK_ITEMS;
    __syncthreads(); /* the previous use of sh is over */
    if (threadIdx.x == 0) sh.at = n, sh.carry = 0;
    __syncthreads();
    for (int64_t c0 = 0; c0 < n; c0 += CH) {
        int64_t lo = c0 + (int64_t)threadIdx.x * RK_ITEMS;
        double p[RK_ITEMS], run = 0;
#pragma unroll
        for (int i = 0; i < RK_ITEMS; i++) p[i] = lo + i < n ? rk_p(k[lo + i], id_bits, temperature, mx) : 0.0, run += p[i];
        double before;
        rk_scan_t(sh.tmp.scan).ExclusiveSum(run, before);
        double c = sh.carry + before;
        int64_t hit = -1;
        double at_cum = 0;
#pragma unroll
        for (int i = 0; i < RK_ITEMS; i++) {
            if (lo + i >= n) break;
            c += p[i];
            if (strict ? c > want : c >= want) {
                hit = lo + i, at_cum = c;
                break;
            }
        }
        __syncthreads();
        if (hit >= 0) atomicMin((unsigned long long *)&sh.at, (unsigned long long)hit);
        __syncthreads();
        if (hit >= 0 && hit == sh.at) sh.cum = at_cum;
        if (threadIdx.x == RK_THREADS - 1) sh.carry = c; /* the last thread's run ends the chunk (no crossing: whole) */
        __syncthreads();
        if (sh.at < n) break;
    }
    int64_t at = sh.at;
    *cum = at < n ? sh.cum : sh.carry;
    __syncthreads(); /* everyone has read sh */
    return at;
}

// How many of ranks [0, n) have p >= min_p (a prefix: p does not grow along the rank).
__device__ int64_t rk_min_p(const uint64_t *k, int64_t n, int id_bits, double temperature, double mx, double min_p) {
    int64_t lo = 1, hi = n; /* rank 0 has p = 1 >= min_p */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (rk_p(k[mid], id_bits, temperature, mx) >= min_p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Top-p rows (n = allowed) from their first ranks too: each chunk's mass (p of its allowed
// tokens, the row's max from its first rank) gives the row's total, and when the first
// K_RANK_FIRST ranks reach top_p of it the nucleus is among them; otherwise the row answers -3
// and the caller sorts it whole. The total's grouping (chunks in id order) differs from the
// sorted walk's, as any grouping does from the host's (about 1e-16).
__global__ void __launch_bounds__(PK_THREADS) rank_mass_kernel(double *masses, const uint64_t *sorted, const float *logits, int64_t ld,
                                                               int64_t V, const rank_row_t *rows, const uint32_t *masks, int id_bits,
                                                               int nb) {
    pdl_begin();
    typedef cub::BlockReduce<double, PK_THREADS> sum_t;
    __shared__ sum_t::TempStorage tmp;
    const rank_row_t pr = rows[blockIdx.x];
    double mx = pk_z(float_of_order_key(~(uint32_t)(sorted[(int64_t)blockIdx.x * K_RANK_FIRST] >> id_bits)), pr.temperature);
    if (!isfinite(mx)) return; /* the pick hands the row back */
    const float *l = logits + pr.row * ld;
    const uint32_t *mask = pr.mask_off >= 0 ? masks + pr.mask_off : NULL;
    int64_t lo = (int64_t)blockIdx.y * PK_CHUNK, hi = min(V, lo + PK_CHUNK);
    double mass = 0;
    for (int64_t v = lo + threadIdx.x; v < hi; v += PK_THREADS)
        if (pk_allowed(mask, v)) mass += exp(pk_z(l[v], pr.temperature) - mx);
    mass = sum_t(tmp).Sum(mass);
    if (threadIdx.x == 0) masses[(int64_t)blockIdx.x * nb + blockIdx.y] = mass;
}

// keys: row i's sorted keys at keys + i * ldk, at least its min(top_k, allowed) first ranks, or
// (masses: its chunks' masses, nb a row) its first ldk ranks of a top-p row.
__global__ void __launch_bounds__(RK_THREADS) rank_pick_kernel(const uint64_t *keys, int64_t ldk, const rank_row_t *rows,
                                                               int id_bits, const double *masses, int nb, int32_t *out) {
    pdl_begin();
    __shared__ rk_shared sh;
    const rank_row_t pr = rows[blockIdx.x];
    const uint64_t *k = keys + blockIdx.x * ldk;
    int64_t n = pr.allowed;
    if (n <= 0) {
        if (threadIdx.x == 0) out[pr.slot] = -1;
        return;
    }
    double mx = pk_z(float_of_order_key(~(uint32_t)(k[0] >> id_bits)), pr.temperature);
    if (!isfinite(mx)) {
        if (threadIdx.x == 0) out[pr.slot] = -2;
        return;
    }
    if (pr.top_k > 0 && pr.top_k < n) n = pr.top_k;
    double total;
    if (masses) { /* a top-p row's first ldk ranks: the total from its chunks, the nucleus among them or -3 */
        __shared__ double sh_total;
        if (threadIdx.x == 0) {
            double t = 0;
            for (int c = 0; c < nb; c++) t += masses[(int64_t)blockIdx.x * nb + c];
            sh_total = t;
        }
        __syncthreads();
        int64_t avail = n < ldk ? n : ldk;
        int64_t at = rk_cross(sh, k, avail, id_bits, pr.temperature, mx, pr.top_p * sh_total, false, &total);
        if (at >= avail && avail < n) {
            if (threadIdx.x == 0) out[pr.slot] = -3;
            return;
        }
        n = at < avail ? at + 1 : avail;
    } else {
        rk_cross(sh, k, n, id_bits, pr.temperature, mx, INFINITY, false, &total);
        if (pr.top_p < 1.0) {
            int64_t at = rk_cross(sh, k, n, id_bits, pr.temperature, mx, pr.top_p * total, false, &total);
            n = at < n ? at + 1 : n;
        }
    }
    if (pr.min_p > 0) {
        if (threadIdx.x == 0) sh.at = rk_min_p(k, n, id_bits, pr.temperature, mx, pr.min_p);
        __syncthreads();
        int64_t kept = sh.at;
        if (kept < n) { /* fewer tokens: their mass again */
            n = kept;
            rk_cross(sh, k, n, id_bits, pr.temperature, mx, INFINITY, false, &total);
        }
    }
    double cum;
    int64_t at = rk_cross(sh, k, n, id_bits, pr.temperature, mx, pr.u * total, true, &cum);
    if (threadIdx.x == 0) out[pr.slot] = (int32_t)(k[at < n ? at : n - 1] & ((1ull << id_bits) - 1));
}

static int id_bits_of(int64_t V) {
    int b = 1;
    while ((1ll << b) < V) b++;
    return b;
}

extern "C" int k_pick_ranked_first_ok(int64_t V) { return V > 0 && pk_chunks(V) * K_RANK_FIRST <= PK_CHUNK && V < (1ll << 31); }

extern "C" size_t k_pick_ranked_first_scratch(int64_t V, int n) {
    return (size_t)n * ((size_t)(pk_chunks(V) + 1) * K_RANK_FIRST * sizeof(uint64_t) + (size_t)pk_chunks(V) * sizeof(double));
}

extern "C" cudaError_t k_pick_ranked_first(int32_t *out, const float *logits, int64_t ld, int64_t V, const rank_row_t *rows, int n,
                                           const uint32_t *masks, int top_p_rows, void *scratch, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    if (!k_pick_ranked_first_ok(V)) return cudaErrorInvalidValue;
    dim3 grid;
    int nb, id_bits = id_bits_of(V);
    cudaError_t e = pk_chunk_grid(V, n, &grid, &nb);
    uint64_t *firsts = (uint64_t *)scratch, *sorted = firsts + (int64_t)n * nb * K_RANK_FIRST;
    double *masses = top_p_rows ? (double *)(sorted + (int64_t)n * K_RANK_FIRST) : NULL;
    if (e == cudaSuccess) e = k_launch(rank_chunk_kernel, grid, PK_THREADS, 0, s, firsts, logits, ld, V, rows, masks, id_bits, nb);
    if (e == cudaSuccess) e = k_launch(rank_merge_kernel, (unsigned)n, PK_THREADS, 0, s, sorted, (const uint64_t *)firsts, id_bits, nb);
    if (e == cudaSuccess && masses)
        e = k_launch(rank_mass_kernel, grid, PK_THREADS, 0, s, masses, (const uint64_t *)sorted, logits, ld, V, rows, masks, id_bits, nb);
    if (e == cudaSuccess)
        e = k_launch(rank_pick_kernel, (unsigned)n, RK_THREADS, 0, s, (const uint64_t *)sorted, (int64_t)K_RANK_FIRST, rows, id_bits,
                     (const double *)masses, nb, out);
    return e;
}

extern "C" cudaError_t k_pick_ranked(int32_t *out, const float *logits, int64_t ld, int64_t V, const rank_row_t *rows, int n,
                                     const uint32_t *masks, uint64_t *keys, uint64_t *sorted, void *sort_tmp,
                                     size_t *sort_tmp_bytes, cudaStream_t s) {
    int id_bits = id_bits_of(V), row_bits = 1;
    while ((1 << row_bits) < n) row_bits++;
    int64_t items = (int64_t)n * V;
    if (!sort_tmp) /* the size query */
        return cub::DeviceRadixSort::SortKeys(NULL, *sort_tmp_bytes, keys, sorted, items, 0, 32 + id_bits + row_bits, s);
    if (n <= 0) return cudaSuccess;
    cudaError_t e = k_launch(rank_keys_kernel, dim3((unsigned)ceil_div(V, RK_THREADS * 8), (unsigned)n), dim3(RK_THREADS), 0, s, keys, logits, ld, V, rows, masks, id_bits);
    if (e == cudaSuccess) e = cub::DeviceRadixSort::SortKeys(sort_tmp, *sort_tmp_bytes, keys, sorted, items, 0, 32 + id_bits + row_bits, s);
    if (e == cudaSuccess)
        e = k_launch(rank_pick_kernel, dim3((unsigned)n), dim3(RK_THREADS), 0, s, (const uint64_t *)sorted, V, rows, id_bits, (const double *)NULL, 0, out);
    return e;
}
