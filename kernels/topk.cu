// Top-k per row by radix select: the k-th largest finite score is found byte by byte (256-bin
// histograms over the order-preserving integer keys, each bin picked by one warp's scan; done
// early once a bin holds exactly the entries still needed), then one pass in index order keeps
// every entry above it and the lowest-indexed entries equal to it, so ties go to the lower
// index and the output comes out ascending (-1 padded), as the CPU heap gives it. That pass
// gives each thread a contiguous run of entries and one block scan of its (above, equal)
// counts says where its picks go. The two-level top-k's steps run in the same launch: the
// block scores of level 1, the candidate-block mask of level 2 (the candidates as a bit set in
// shared memory: one lookup an entry, not a binary search of the list). A row of up to TK_KEYS
// entries is read once, into shared memory as its keys, and every pass reads them there (the
// batch-1 step at context 32,000: 2.07 -> 2.00 ms, device run 92 of docs/CUDA_NOTES.md).
#include "common.cuh"

#include <cub/block/block_scan.cuh>

#define TK_THREADS 1024
#define TK_KEYS 32768      // entries of a row kept in shared memory as keys (128 KB)
#define TK_MASK_WORDS 8192 // candidate-block bits in shared memory (32 KB: 256K blocks)

// Level 1: bs[blk] = max of the row's visible scores in blk, the newest block pinned (+inf).
__device__ void block_scores_row(float *bs, int64_t nb, const float *scores, int64_t nvis, int block_size) {
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
        float m = -INFINITY;
        for (int64_t e = b * block_size; e < nvis && e < (b + 1) * block_size; e++) m = fmaxf(m, scores[e]);
        bs[b] = b == nb - 1 ? INFINITY : m;
    }
}

// Level 2: entries outside the candidate blocks (the list's ids; -1 padding) stop competing.
// bits: one per block of the row, (n / block_size) / 32 + 1 words of shared memory.
__device__ void mask_row(float *row, int64_t n, const int32_t *list, int64_t nblocks, int block_size, uint32_t *bits) {
    int64_t nb = (n + block_size - 1) / block_size;
    for (int64_t w = threadIdx.x; w < (nb + 31) / 32; w += blockDim.x) bits[w] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < nblocks; i += blockDim.x) {
        int32_t b = list[i];
        if (b >= 0 && b < nb) atomicOr(&bits[b >> 5], 1u << (b & 31));
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        uint32_t b = (uint32_t)j / (uint32_t)block_size; /* 32 bits: a 64-bit division is ~100 instructions (run 97) */
        if (!(bits[b >> 5] >> (b & 31) & 1)) row[j] = -INFINITY;
    }
}

// An entry's selection key: order_key of a finite (or +inf) score, 0 for -inf and NaN (no finite
// score has key 0), which never compete.
__device__ __forceinline__ uint32_t select_key(float v) { return v > -INFINITY ? order_key(v) : 0u; }

// R > 0: every row has at most R * TK_THREADS entries, and a thread keeps its R keys (entries
// tid, tid + TK_THREADS, ...) in registers for the byte passes (a shorter dependent path than
// indexing memory: run 97); 0: any length.
template <int R>
__global__ void __launch_bounds__(TK_THREADS) topk_kernel(int32_t *out, int64_t ldo, int K, float *sc, int64_t lds,
                                                          ix_args_t a, int block, const int32_t *blocks, int64_t ldb,
                                                          int64_t nblocks, int block_size, int mask_words, int key_cap) {
    pdl_begin();
    extern __shared__ uint32_t dyn[]; // [mask_words] the candidate bits, then key_cap keys
    uint32_t *keys = dyn + mask_words;
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
        mask_row(row, n, blocks + rd.row * ldb, nblocks, block_size, dyn);
    }
    /* each thread reads back the entries it wrote (the same j): no barrier before the keys */
    bool staged = R > 0 || n <= key_cap;
    uint32_t kr[R > 0 ? R : 1];
    if constexpr (R > 0) {
#pragma unroll
        for (int u = 0; u < R; u++) {
            int j = tid + u * TK_THREADS;
            kr[u] = j < n ? select_key(row[j]) : 0u;
            if (j < n) keys[j] = kr[u];
        }
    } else if (staged) {
        for (int64_t j = tid; j < n; j += TK_THREADS) keys[j] = select_key(row[j]);
    }
    auto key_at = [&](int64_t j) { return staged ? keys[j] : select_key(row[j]); };
    if (tid < 256) hist[tid] = 0;
    if (tid == 0) sh_count = 0, sh_prefix = 0, sh_mask = 0, sh_remaining = K, sh_done = 0;
    __syncthreads();

    // The finite entries are counted with the first byte's histogram. Whole warps take each
    // step (the same trips for every thread), so equal bins are added once per warp.
    int local = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint32_t prefix = sh_prefix, mask = sh_mask;
        auto count = [&](uint32_t k) {
            bool ok = k && (k & mask) == prefix;
            if (shift == 24) local += k != 0;
            int bin = ok ? (int)((k >> shift) & 255) : -1;
            unsigned same = __match_any_sync(0xffffffffu, bin);
            if (ok && lane == __ffs(same) - 1) atomicAdd(&hist[bin], __popc(same));
        };
        if constexpr (R > 0) {
#pragma unroll
            for (int u = 0; u < R; u++) count(kr[u]);
        } else {
            for (int64_t j0 = 0; j0 < n; j0 += TK_THREADS) count(j0 + tid < n ? key_at(j0 + tid) : 0u);
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
        uint32_t k = key_at(j);
        bool ok = k != 0;
        k &= M;
        gt += ok && (all || k > T), eq += ok && !all && k == T;
    }
    unsigned long long before;
    scan_t(tmp).ExclusiveSum((unsigned long long)gt << 32 | eq, before);
    unsigned g = (unsigned)(before >> 32), e = (unsigned)before;
    for (int64_t j = tid * per; j < j1; j++) {
        uint32_t k = key_at(j);
        if (!k) continue;
        k &= M;
        if (all || k > T) o[g++ + min(e, (unsigned)need_eq)] = (int32_t)j;
        else if (k == T && e++ < (unsigned)need_eq) o[g + e - 1] = (int32_t)j;
    }
    int taken = all ? sh_count : K;
    for (int64_t i = taken + tid; i < K; i += TK_THREADS) o[i] = -1;
}

extern "C" cudaError_t k_topk(int32_t *out, int64_t ldo, int k, float *sc, int64_t lds, const ix_args_t *a, int block,
                              const int32_t *blocks, int64_t ldb, int64_t nblocks, int block_size, cudaStream_t s) {
    if (a->m <= 0 || k <= 0) return cudaSuccess;
    int64_t n_max = block > 0 ? (a->nk_max + block - 1) / block : a->nk_max; /* a row's entries at most */
    int64_t mask_words = blocks ? (a->nk_max / block_size) / 32 + 1 : 0;
    if (mask_words > TK_MASK_WORDS) return cudaErrorInvalidValue;
    int key_cap = (int)(n_max < TK_KEYS ? n_max : TK_KEYS);
    size_t smem = (size_t)(mask_words + key_cap) * 4;
    auto launch = [&](auto kernel, bool &raised) {
        if (!raised) {
            cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (TK_MASK_WORDS + TK_KEYS) * 4);
            if (e != cudaSuccess) return e;
            raised = true;
        }
        return k_launch(kernel, (unsigned)a->m, TK_THREADS, smem, s, out, ldo, k, sc, lds, *a, block, blocks, ldb, nblocks,
                        block_size, (int)mask_words, key_cap);
    };
    static bool raised[4];
    if (n_max <= TK_THREADS) return launch(topk_kernel<1>, raised[0]);
    if (n_max <= 2 * TK_THREADS) return launch(topk_kernel<2>, raised[1]);
    if (n_max <= 4 * TK_THREADS) return launch(topk_kernel<4>, raised[2]);
    return launch(topk_kernel<0>, raised[3]);
}
