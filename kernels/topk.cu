// Top-k per row by radix select: the k-th largest finite score is found one 8-bit digit at a
// time over the order-preserving integer keys (a 256-bin histogram a digit; the bin that holds
// the k-th entry found by one block scan of per-thread bin sums; done early once a bin holds
// exactly the entries still needed; the next digit's bins cleared while this one counts), then
// one pass in index order keeps every entry above it and the lowest-indexed entries equal to
// it, so ties go to the lower index and the output comes out ascending (-1 padded), as the CPU
// heap gives it. That pass gives each thread a contiguous run of entries and one block scan of
// its (above, equal) counts says where its picks go. The two-level top-k's steps run in the same
// launch: the block scores of level 1, the candidate-block mask of level 2 (the candidates as a
// bit set in shared memory: one lookup an entry, not a binary search of the list). A row is read
// once: up to 16 keys a thread stay in registers (rows of up to 8,192 entries), longer rows of up
// to TK_KEYS entries are kept in shared memory. 512 threads a row: against 1,024 (which spill
// registers), 256 and 128, and 12-bit first digits, the indexer layers' top-k ended 2-4 us
// sooner after their scores in the batch-1 step (device runs 100-101 of docs/CUDA_NOTES.md).
#include "common.cuh"

#include <cub/block/block_scan.cuh>
#include <type_traits>

#define TK_THREADS 512 // threads a row
#define TK_BINS 256     // 8-bit digits
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
    int64_t nb = (uint32_t)(n + block_size - 1) / (uint32_t)block_size;
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

// R > 0: every row has at most R * T entries, and a thread keeps its R keys (entries tid,
// tid + T, ...) in registers for the digit passes (a shorter dependent path than indexing
// memory: run 97); 0: any length.
template <int R>
__global__ void __launch_bounds__(TK_THREADS) topk_kernel(int32_t *out, int64_t ldo, int K, float *sc, int64_t lds, ix_args_t a,
                                                          int block, const int32_t *blocks, int64_t ldb, int64_t nblocks,
                                                          int block_size, int mask_words, int key_cap) {
    constexpr int T = TK_THREADS;
    pdl_begin();
    extern __shared__ uint32_t dyn[]; // [mask_words] the candidate bits, then key_cap keys
    uint32_t *keys = dyn + mask_words;
    typedef cub::BlockScan<unsigned long long, T> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    __shared__ int hist[2][TK_BINS];
    __shared__ uint32_t sh_prefix, sh_mask;
    __shared__ int sh_remaining, sh_count, sh_done;
    int64_t r = blockIdx.x;
    const ix_row_t rd = ix_row(a, r);
    float *row = sc + r * lds;
    int32_t *o = out + rd.row * ldo;
    int64_t n = min(rd.nk, (int64_t)((uint32_t)(rd.pos + 1) / (uint32_t)a.ratio)); /* 32 bits: a 64-bit division is ~100 instructions a warp */
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
            int j = tid + u * T;
            kr[u] = j < n ? select_key(row[j]) : 0u;
            if (j < n) keys[j] = kr[u];
        }
    } else if (staged) {
        for (int64_t j = tid; j < n; j += T) keys[j] = select_key(row[j]);
    }
    auto key_at = [&](int64_t j) { return staged ? keys[j] : select_key(row[j]); };
    for (int i = tid; i < TK_BINS; i += T) hist[0][i] = 0;
    if (tid == 0) sh_count = 0, sh_prefix = 0, sh_mask = 0, sh_remaining = K, sh_done = 0;
    __syncthreads();

    // The finite entries are counted with the first digit's histogram. Whole warps take each
    // step (the same trips for every thread), so equal bins are added once per warp.
    int local = 0;
    for (int shift = 24, cur = 0;; shift -= 8, cur ^= 1) {
        uint32_t prefix = sh_prefix, mask = sh_mask, dm = TK_BINS - 1;
        int rem = sh_remaining; /* read with the prefix: written only after the next barrier */
        bool first = shift == 24;
        int *h = hist[cur];
        auto count = [&](uint32_t k) {
            bool ok = k && (k & mask) == prefix;
            if (first) local += k != 0;
            int bin = ok ? (int)((k >> shift) & dm) : -1;
            unsigned same = __match_any_sync(0xffffffffu, bin);
            if (ok && lane == __ffs(same) - 1) atomicAdd(&h[bin], __popc(same));
        };
        if constexpr (R > 0) {
#pragma unroll
            for (int u = 0; u < R; u++) count(kr[u]);
        } else {
            for (int64_t j0 = 0; j0 < n; j0 += T) count(j0 + tid < n ? key_at(j0 + tid) : 0u);
        }
        for (int i = tid; i < TK_BINS; i += T) hist[cur ^ 1][i] = 0;
        if (first && local) atomicAdd(&sh_count, local);
        __syncthreads();
        if (sh_count <= K) break; /* every finite entry is taken */
        /* thread t sums bins top - t * per ... (from the top); the one whose run reaches `rem` picks */
        int top = TK_BINS - 1 - tid, sum = 0; /* TK_BINS <= T: a bin a thread at most */
        bool owns = top >= 0;
        if (owns) sum = h[top];
        unsigned long long before;
        scan_t(tmp).ExclusiveSum((unsigned long long)sum, before);
        int cum = (int)before;
        if (owns && cum < rem && cum + sum >= rem) {
            int b = top;
            for (; cum + h[b] < rem; b--) cum += h[b];
            sh_remaining = rem - cum;
            sh_prefix = prefix | (uint32_t)b << shift;
            sh_mask = mask | dm << shift;
            sh_done = h[b] == rem - cum; /* the bin is taken whole: no finer digit needed */
        }
        __syncthreads();
        if (sh_done || shift == 0) break;
    }
    bool all = sh_count <= K;
    uint32_t thr = sh_prefix, M = sh_mask;
    int need_eq = all ? 0 : sh_remaining;

    // Thread t's run [t * per, ...): entries above thr (or every finite one) and equal to it
    // (32-bit indices for short rows: fewer registers under the 1,024-thread limit of 64).
    using index_t = std::conditional_t<(R > 0), int, int64_t>;
    index_t per = (index_t)((n + T - 1) / T), j1 = (index_t)min(n, (int64_t)(tid + 1) * per);
    unsigned gt = 0, eq = 0;
    for (index_t j = tid * per; j < j1; j++) {
        uint32_t k = key_at(j);
        bool ok = k != 0;
        k &= M;
        gt += ok && (all || k > thr), eq += ok && !all && k == thr;
    }
    unsigned long long before;
    scan_t(tmp).ExclusiveSum((unsigned long long)gt << 32 | eq, before);
    unsigned g = (unsigned)(before >> 32), e = (unsigned)before;
    for (index_t j = tid * per; j < j1; j++) {
        uint32_t k = key_at(j);
        if (!k) continue;
        k &= M;
        if (all || k > thr) o[g++ + min(e, (unsigned)need_eq)] = (int32_t)j;
        else if (k == thr && e++ < (unsigned)need_eq) o[g + e - 1] = (int32_t)j;
    }
    int taken = all ? sh_count : K;
    for (int64_t i = taken + tid; i < K; i += T) o[i] = -1;
}

// The launch of one instantiation (its shared-memory limit raised once).
template <int R>
static cudaError_t topk_launch(const ix_args_t *a, size_t smem, cudaStream_t s, int32_t *out, int64_t ldo, int k, float *sc,
                               int64_t lds, int block, const int32_t *blocks, int64_t ldb, int64_t nblocks, int block_size,
                               int mask_words, int key_cap) {
    static bool raised;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(topk_kernel<R>, cudaFuncAttributeMaxDynamicSharedMemorySize, (TK_MASK_WORDS + TK_KEYS) * 4);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    return k_launch(topk_kernel<R>, (unsigned)a->m, TK_THREADS, smem, s, out, ldo, k, sc, lds, *a, block, blocks, ldb, nblocks,
                    block_size, mask_words, key_cap);
}

extern "C" cudaError_t k_topk(int32_t *out, int64_t ldo, int k, float *sc, int64_t lds, const ix_args_t *a, int block,
                              const int32_t *blocks, int64_t ldb, int64_t nblocks, int block_size, cudaStream_t s) {
    if (a->m <= 0 || k <= 0) return cudaSuccess;
    int64_t n_max = block > 0 ? (a->nk_max + block - 1) / block : a->nk_max; /* a row's entries at most */
    int64_t mask_words = blocks ? (a->nk_max / block_size) / 32 + 1 : 0;
    if (mask_words > TK_MASK_WORDS) return cudaErrorInvalidValue;
    int key_cap = (int)(n_max < TK_KEYS ? n_max : TK_KEYS);
    size_t smem = (size_t)(mask_words + key_cap) * 4;
    /* the fewest keys a thread that fit the longest row in registers (up to 16) */
#define TK_ARGS a, smem, s, out, ldo, k, sc, lds, block, blocks, ldb, nblocks, block_size, (int)mask_words, key_cap
    const int64_t T = TK_THREADS;
    if (n_max <= T) return topk_launch<1>(TK_ARGS);
    if (n_max <= 2 * T) return topk_launch<2>(TK_ARGS);
    if (n_max <= 4 * T) return topk_launch<4>(TK_ARGS);
    if (n_max <= 8 * T) return topk_launch<8>(TK_ARGS);
    if (n_max <= 16 * T) return topk_launch<16>(TK_ARGS);
    return topk_launch<0>(TK_ARGS);
#undef TK_ARGS
}
