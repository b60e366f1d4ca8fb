// Top-k per row by radix select: the k-th largest finite score is found byte by byte (256-bin
// histograms over the order-preserving integer keys, each bin picked by one warp's scan; done
// early once a bin holds exactly the entries still needed), then one pass in index order keeps
// every entry above it and the lowest-indexed entries equal to it, so ties go to the lower
// index and the output comes out ascending (-1 padded), as the CPU heap gives it. That pass
// gives each thread a contiguous run of entries and one block scan of its (above, equal)
// counts says where its picks go. The two-level top-k's steps run in the same launch: the
// block scores of level 1, the candidate-block mask of level 2.
#include "common.cuh"

#include <cub/block/block_scan.cuh>

#define TK_THREADS 1024

// Level 1: bs[blk] = max of the row's visible scores in blk, the newest block pinned (+inf).
__device__ void block_scores_row(float *bs, int64_t nb, const float *scores, int64_t nvis, int block_size) {
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
        float m = -INFINITY;
        for (int64_t e = b * block_size; e < nvis && e < (b + 1) * block_size; e++) m = fmaxf(m, scores[e]);
        bs[b] = b == nb - 1 ? INFINITY : m;
    }
}

// Level 2: entries outside the candidate blocks (ascending ids, -1 padded) stop competing.
__device__ void mask_row(float *row, int64_t n, const int32_t *list, int64_t nblocks, int block_size) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        int32_t b = (int32_t)(j / block_size);
        int64_t lo = 0, hi = nblocks; // first entry >= b, with -1 (padding) counted as +inf
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            int32_t v = list[mid];
            if (v >= 0 && v < b) lo = mid + 1;
            else hi = mid;
        }
        if (!(lo < nblocks && list[lo] == b)) row[j] = -INFINITY;
    }
}

__global__ void __launch_bounds__(TK_THREADS) topk_kernel(int32_t *out, int64_t ldo, int K, float *sc, int64_t lds,
                                                          ix_args_t a, int block, const int32_t *blocks, int64_t ldb,
                                                          int64_t nblocks, int block_size) {
    pdl_begin();
    typedef cub::BlockScan<unsigned long long, TK_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    __shared__ int hist[256];
    __shared__ uint32_t sh_prefix, sh_mask;
    __shared__ int sh_remaining, sh_count, sh_done;
    int64_t r = blockIdx.x;
    const ix_row_t rd = ix_row(a, r);
    float *row = sc + r * lds;
    int32_t *o = out + rd.row * ldo;
    int64_t n = min(rd.nk, (rd.pos + 1) / a.ratio);
    int tid = threadIdx.x, lane = tid & 31;
    if (block > 0) {
        int64_t nvis = n;
        n = (n + block - 1) / block;
        block_scores_row(row, n, a.scores + r * a.nk_max, nvis, block);
    } else if (blocks) {
        mask_row(row, n, blocks + rd.row * ldb, nblocks, block_size);
    }
    if (tid < 256) hist[tid] = 0;
    if (tid == 0) sh_count = 0, sh_prefix = 0, sh_mask = 0, sh_remaining = K, sh_done = 0;
    __syncthreads();

    // The finite entries are counted with the first byte's histogram. Whole warps take each
    // step (the same trips for every thread), so equal bins are added once per warp.
    int local = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint32_t prefix = sh_prefix, mask = sh_mask;
        for (int64_t j0 = 0; j0 < n; j0 += TK_THREADS) {
            int64_t j = j0 + tid;
            float v = j < n ? row[j] : -INFINITY;
            uint32_t k = order_key(v);
            bool ok = v > -INFINITY && (k & mask) == prefix;
            if (shift == 24) local += v > -INFINITY;
            int bin = ok ? (int)((k >> shift) & 255) : -1;
            unsigned same = __match_any_sync(0xffffffffu, bin);
            if (ok && lane == __ffs(same) - 1) atomicAdd(&hist[bin], __popc(same));
        }
        if (shift == 24 && local) atomicAdd(&sh_count, local);
        __syncthreads();
        if (sh_count <= K) break; /* every finite entry is taken */
        if (tid < 32) { /* lane l holds bins 255 - 8l .. 248 - 8l; the first from the top reaching `rem` */
            int rem = sh_remaining, h[8], sum = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) h[i] = hist[255 - 8 * lane - i], sum += h[i];
            int incl = sum;
            for (int d = 1; d < 32; d <<= 1) {
                int t = __shfl_up_sync(0xffffffffu, incl, d);
                if (lane >= d) incl += t;
            }
            unsigned reach = __ballot_sync(0xffffffffu, incl >= rem);
            int L = reach ? __ffs(reach) - 1 : 31;
            if (lane == L) {
                int cum = incl - sum, i = 0;
                for (; i < 7 && 255 - 8 * lane - i > 0 && cum + h[i] < rem; i++) cum += h[i];
                int b = 255 - 8 * lane - i;
                sh_remaining = rem - cum;
                sh_prefix = prefix | (uint32_t)b << shift;
                sh_mask = mask | 255u << shift;
                sh_done = h[i] == rem - cum; /* the bin is taken whole: no finer byte needed */
            }
        }
        __syncthreads();
        if (sh_done) break;
        if (tid < 256) hist[tid] = 0;
        __syncthreads();
    }
    bool all = sh_count <= K;
    uint32_t T = sh_prefix, M = sh_mask;
    int need_eq = all ? 0 : sh_remaining;

    // Thread t's run [t * per, ...): entries above T (or every finite one) and equal to it.
    int64_t per = (n + TK_THREADS - 1) / TK_THREADS, j1 = min(n, (tid + 1) * per);
    unsigned gt = 0, eq = 0;
    for (int64_t j = tid * per; j < j1; j++) {
        float v = row[j];
        uint32_t k = order_key(v) & M;
        bool ok = v > -INFINITY;
        gt += ok && (all || k > T), eq += ok && !all && k == T;
    }
    unsigned long long before;
    scan_t(tmp).ExclusiveSum((unsigned long long)gt << 32 | eq, before);
    unsigned g = (unsigned)(before >> 32), e = (unsigned)before;
    for (int64_t j = tid * per; j < j1; j++) {
        float v = row[j];
        uint32_t k = order_key(v) & M;
        if (!(v > -INFINITY)) continue;
        if (all || k > T) o[g++ + min(e, (unsigned)need_eq)] = (int32_t)j;
        else if (k == T && e++ < (unsigned)need_eq) o[g + e - 1] = (int32_t)j;
    }
    int taken = all ? sh_count : K;
    for (int64_t i = taken + tid; i < K; i += TK_THREADS) o[i] = -1;
}

extern "C" cudaError_t k_topk(int32_t *out, int64_t ldo, int k, float *sc, int64_t lds, const ix_args_t *a, int block,
                              const int32_t *blocks, int64_t ldb, int64_t nblocks, int block_size, cudaStream_t s) {
    if (a->m <= 0 || k <= 0) return cudaSuccess;
    return k_launch(topk_kernel, (unsigned)a->m, TK_THREADS, 0, s, out, ldo, k, sc, lds, *a, block, blocks, ldb, nblocks,
                    block_size);
}
