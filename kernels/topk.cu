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
// once: up to 16 keys a thread stay in registers, more are kept in shared memory (TK_KEYS a
// block) or read again. 512 threads a block: against 1,024 (which spill registers), 256 and
// 128, and 12-bit first digits, the indexer layers' top-k ended 2-4 us sooner after their scores
// in the batch-1 step (device runs 100-101 of docs/CUDA_NOTES.md).
//
// Long rows (32k context: 16,000-32,000 entries) take a cluster of TK_CLUSTER blocks a row, each
// a contiguous slice: a digit's histogram is the sum of the blocks' (read from one another's
// shared memory after one cluster barrier; every block adds them in the same order and so picks
// the same bin), and the final pass places a block's picks after the lower slices' counts. One
// block took 42-63 us after the scores of such a row (run 196), a cluster 11-15 (run 197). The
// selection is exact, so the cluster changes no output.
#include "common.cuh"

#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>
#include <type_traits>

namespace cg = cooperative_groups;

#define TK_THREADS 512 // threads a block
#define TK_BINS 256     // 8-bit digits
#define TK_KEYS 32768      // entries of a block's slice kept in shared memory as keys (128 KB)
#define TK_MASK_WORDS 8192 // candidate-block bits in shared memory (32 KB: 256K blocks)
#define TK_CLUSTER 8       // blocks a long row
#define TK_CLUSTER_MIN 4096 // rows longer than this take a cluster: at 4k context (rows of 4,000) clusters saved
                            // no device time and cost the host ~0.05 ms a step in launches (run 198)

// Level 1: bs[blk] = max of the row's visible scores in blk (blk in [lo, hi), thread t taking
// lo + t, lo + t + T, ...), the newest block (nb - 1) pinned (+inf). A wholly visible block of 8
// in a 16-byte aligned row is read as two independent 16-byte loads, not eight dependent trips
// of the entry loop. (Loads of several blocks issued ahead spill registers in topk_kernel<8>.)
__device__ void block_scores_row(float *bs, int64_t lo, int64_t hi, int64_t nb, const float *scores, int64_t nvis, int block_size) {
    const bool vec = block_size == 8 && ((uintptr_t)scores & 15) == 0;
    for (int64_t b = lo + threadIdx.x; b < hi; b += blockDim.x) {
        float m = -INFINITY;
        if (vec && (b + 1) * 8 <= nvis) {
            float4 x = reinterpret_cast<const float4 *>(scores)[2 * b], y = reinterpret_cast<const float4 *>(scores)[2 * b + 1];
            m = fmaxf(fmaxf(fmaxf(fmaxf(m, x.x), x.y), x.z), x.w);
            m = fmaxf(fmaxf(fmaxf(fmaxf(m, y.x), y.y), y.z), y.w);
        } else {
            for (int64_t e = b * block_size; e < nvis && e < (b + 1) * block_size; e++) m = fmaxf(m, scores[e]);
        }
        bs[b] = b == nb - 1 ? INFINITY : m;
    }
}

// Level 2: entries [lo, hi) of the row outside the candidate blocks (the list's ids; -1
// padding) stop competing (thread t taking lo + t, lo + t + T, ...). bits: one per block of
// the row's n entries, (n / block_size) / 32 + 1 words of shared memory.
__device__ void mask_row(float *row, int64_t lo, int64_t hi, int64_t n, const int32_t *list, int64_t nblocks, int block_size,
                         uint32_t *bits) {
    int64_t nb = (uint32_t)(n + block_size - 1) / (uint32_t)block_size;
    for (int64_t w = threadIdx.x; w < (nb + 31) / 32; w += blockDim.x) bits[w] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < nblocks; i += blockDim.x) {
        int32_t b = list[i];
        if (b >= 0 && b < nb) atomicOr(&bits[b >> 5], 1u << (b & 31));
    }
    __syncthreads();
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        uint32_t b = (uint32_t)j / (uint32_t)block_size; /* 32 bits: a 64-bit division is ~100 instructions (run 97) */
        if (!(bits[b >> 5] >> (b & 31) & 1)) row[j] = -INFINITY;
    }
}

// An entry's selection key: order_key of a finite (or +inf) score, 0 for -inf and NaN (no finite
// score has key 0), which never compete.
__device__ __forceinline__ uint32_t select_key(float v) { return v > -INFINITY ? order_key(v) : 0u; }

// The blocks of a row: a cluster of C, or one block (C = 1: barriers are the block's own and
// every shared array read is this block's).
template <int C> struct row_group {
    __device__ int rank() const {
        if constexpr (C > 1) return (int)cg::this_cluster().block_rank();
        return 0;
    }
    __device__ void sync() const {
        if constexpr (C > 1) cg::this_cluster().sync();
        else __syncthreads();
    }
    template <typename T> __device__ T *at(T *p, int r) const {
        if constexpr (C > 1) return cg::this_cluster().map_shared_rank(p, (unsigned)r);
        return p;
    }
};

// Shared state of a row's selection; in a cluster every block holds its own and reads the others'.
struct topk_shared {
    int hist[2][TK_BINS];
    uint32_t prefix, mask;
    int remaining, done;
    int count;                       /* finite entries of this block's slice */
    int total;                       /* of the row */
    unsigned long long picks;        /* this block's (above, equal) counts, above << 32 */
};

// R > 0: every slice has at most R * T entries, and a thread keeps its R keys (entries lo + tid,
// lo + tid + T, ...) in registers for the digit passes (a shorter dependent path than indexing
// memory: run 97); 0: any length. C: blocks a row (the grid's x).
template <int R, int C>
__device__ void topk_row(int32_t *out, int64_t ldo, int K, float *sc, int64_t lds, const ix_args_t &a, int block,
                         const int32_t *blocks, int64_t ldb, int64_t nblocks, int block_size, int mask_words, int key_cap) {
    constexpr int T = TK_THREADS;
    pdl_begin();
    extern __shared__ uint32_t dyn[]; // [mask_words] the candidate bits, then key_cap keys
    typedef cub::BlockScan<unsigned long long, T> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    __shared__ topk_shared S;
    const row_group<C> g;
    const int me = g.rank();
    int64_t r = blockIdx.x / C;
    const ix_row_t rd = ix_row(a, r);
    float *row = sc + r * lds;
    int32_t *o = out + rd.row * ldo;
    int64_t n = min(rd.nk, (int64_t)((uint32_t)(rd.pos + 1) / (uint32_t)a.ratio)); /* 32 bits: a 64-bit division is ~100 instructions a warp */
    int tid = threadIdx.x, lane = tid & 31;
    int64_t nvis = n;
    if (block > 0) n = (n + block - 1) / block;
    const int64_t per_block = (n + C - 1) / C, lo = min(n, me * per_block), hi = min(n, lo + per_block), len = hi - lo;
    uint32_t *mask_bits = dyn, *keys = dyn + mask_words;
    if (block > 0) block_scores_row(row, lo, hi, n, a.scores + r * a.nk_max, nvis, block);
    else if (blocks) mask_row(row, lo, hi, n, blocks + rd.row * ldb, nblocks, block_size, mask_bits);
    /* each thread reads back the entries it wrote (the same j): no barrier before the keys */
    bool staged = R > 0 || len <= key_cap;
    uint32_t kr[R > 0 ? R : 1];
    if constexpr (R > 0) {
#pragma unroll
        for (int u = 0; u < R; u++) {
            int64_t j = tid + u * T;
            kr[u] = j < len ? select_key(row[lo + j]) : 0u;
            if (j < len) keys[j] = kr[u];
        }
    } else if (staged) {
        for (int64_t j = tid; j < len; j += T) keys[j] = select_key(row[lo + j]);
    }
    auto key_at = [&](int64_t j) { return staged ? keys[j - lo] : select_key(row[j]); };
    for (int i = tid; i < TK_BINS; i += T) S.hist[0][i] = 0;
    if (tid == 0) S.count = 0, S.prefix = 0, S.mask = 0, S.remaining = K, S.done = 0;
    __syncthreads();

    // The finite entries are counted with the first digit's histogram. Whole warps take each
    // step (the same trips for every thread), so equal bins are added once per warp.
    int local = 0;
    for (int shift = 24, cur = 0;; shift -= 8, cur ^= 1) {
        uint32_t prefix = S.prefix, mask = S.mask, dm = TK_BINS - 1;
        int rem = S.remaining; /* read with the prefix: written only after the next barrier */
        bool first = shift == 24;
        int *h = S.hist[cur];
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
            for (int64_t j0 = lo; j0 < hi; j0 += T) count(j0 + tid < hi ? key_at(j0 + tid) : 0u);
        }
        if (first && local) atomicAdd(&S.count, local);
        /* every block's bins of this digit are counted; every block is done reading the last
         * digit's, which may be cleared now */
        g.sync();
        for (int i = tid; i < TK_BINS; i += T) S.hist[cur ^ 1][i] = 0;
        if (first && tid == 0) {
            int total = 0;
            for (int b = 0; b < C; b++) total += g.at(&S, b)->count;
            S.total = total;
        }
        __syncthreads();
        if (S.total <= K) break; /* every finite entry is taken */
        /* thread t sums bins top - t * per ... (from the top); the one whose run reaches `rem` picks */
        int top = TK_BINS - 1 - tid, sum = 0; /* TK_BINS <= T: a bin a thread at most */
        bool owns = top >= 0;
        if (owns)
            for (int b = 0; b < C; b++) sum += g.at(&S, b)->hist[cur][top];
        unsigned long long before;
        scan_t(tmp).ExclusiveSum((unsigned long long)sum, before);
        int cum = (int)before;
        if (owns && cum < rem && cum + sum >= rem) {
            S.remaining = rem - cum;
            S.prefix = prefix | (uint32_t)top << shift;
            S.mask = mask | dm << shift;
            S.done = sum == rem - cum; /* the bin is taken whole: no finer digit needed */
        }
        __syncthreads();
        if (S.done || shift == 0) break;
    }
    bool all = S.total <= K;
    uint32_t thr = S.prefix, M = S.mask;
    int need_eq = all ? 0 : S.remaining;

    // Thread t's run [lo + t * per, ...) of the slice: entries above thr (or every finite one) and
    // equal to it (32-bit indices for short slices: fewer registers).
    using index_t = std::conditional_t<(R > 0), int, int64_t>;
    index_t per = (index_t)((len + T - 1) / T), j0 = (index_t)(lo + min(len, (int64_t)tid * per)),
            j1 = (index_t)(lo + min(len, (int64_t)(tid + 1) * per));
    unsigned gt = 0, eq = 0;
    for (index_t j = j0; j < j1; j++) {
        uint32_t k = key_at(j);
        bool ok = k != 0;
        k &= M;
        gt += ok && (all || k > thr), eq += ok && !all && k == thr;
    }
    unsigned long long before, mine;
    scan_t(tmp).ExclusiveSum((unsigned long long)gt << 32 | eq, before, mine);
    if (tid == 0) S.picks = mine;
    g.sync(); /* every block's counts are out */
    for (int b = 0; b < me; b++) before += g.at(&S, b)->picks;
    unsigned gi = (unsigned)(before >> 32), e = (unsigned)before;
    for (index_t j = j0; j < j1; j++) {
        uint32_t k = key_at(j);
        if (!k) continue;
        k &= M;
        if (all || k > thr) o[gi++ + min(e, (unsigned)need_eq)] = (int32_t)j;
        else if (k == thr && e++ < (unsigned)need_eq) o[gi + e - 1] = (int32_t)j;
    }
    int taken = all ? S.total : K;
    if (me == 0)
        for (int64_t i = taken + tid; i < K; i += T) o[i] = -1;
    if constexpr (C > 1) g.sync(); /* no block leaves while another may read its counts */
}

template <int R>
__global__ void __launch_bounds__(TK_THREADS) topk_kernel(int32_t *out, int64_t ldo, int K, float *sc, int64_t lds, ix_args_t a,
                                                          int block, const int32_t *blocks, int64_t ldb, int64_t nblocks,
                                                          int block_size, int mask_words, int key_cap) {
    topk_row<R, 1>(out, ldo, K, sc, lds, a, block, blocks, ldb, nblocks, block_size, mask_words, key_cap);
}

template <int R>
__global__ void __cluster_dims__(TK_CLUSTER, 1, 1) __launch_bounds__(TK_THREADS)
    topk_cluster_kernel(int32_t *out, int64_t ldo, int K, float *sc, int64_t lds, ix_args_t a, int block, const int32_t *blocks,
                        int64_t ldb, int64_t nblocks, int block_size, int mask_words, int key_cap) {
    topk_row<R, TK_CLUSTER>(out, ldo, K, sc, lds, a, block, blocks, ldb, nblocks, block_size, mask_words, key_cap);
}

// The launch of one instantiation (its shared-memory limit raised once): a block a row, or a
// cluster of TK_CLUSTER.
template <int R, bool CLUSTER>
static cudaError_t topk_launch(const ix_args_t *a, size_t smem, cudaStream_t s, int32_t *out, int64_t ldo, int k, float *sc,
                               int64_t lds, int block, const int32_t *blocks, int64_t ldb, int64_t nblocks, int block_size,
                               int mask_words, int key_cap) {
    auto kernel = [] {
        if constexpr (CLUSTER) return topk_cluster_kernel<R>;
        else return topk_kernel<R>;
    }();
    static bool raised;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (TK_MASK_WORDS + TK_KEYS) * 4);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    return k_launch(kernel, (unsigned)(a->m * (CLUSTER ? TK_CLUSTER : 1)), TK_THREADS, smem, s, out, ldo, k, sc, lds, *a, block,
                    blocks, ldb, nblocks, block_size, mask_words, key_cap);
}

// The fewest keys a thread that fit a block's longest slice in registers (up to 16), else 0:
// one block a row takes rows of at most TK_CLUSTER_MIN entries (up to 8 keys a thread), a
// cluster's blocks slices of more than TK_CLUSTER_MIN / TK_CLUSTER (2 keys a thread or more; a
// level-1 cluster's may be shorter, which 2 keys a thread hold too).
template <bool CLUSTER>
static cudaError_t topk_pick(int64_t slice, const ix_args_t *a, size_t smem, cudaStream_t s, int32_t *out, int64_t ldo, int k,
                             float *sc, int64_t lds, int block, const int32_t *blocks, int64_t ldb, int64_t nblocks,
                             int block_size, int mask_words, int key_cap) {
#define TK_ARGS a, smem, s, out, ldo, k, sc, lds, block, blocks, ldb, nblocks, block_size, mask_words, key_cap
    const int64_t T = TK_THREADS;
    static_assert(TK_CLUSTER_MIN <= 8 * TK_THREADS && TK_CLUSTER_MIN / TK_CLUSTER >= TK_THREADS, "the R lists below");
    if constexpr (!CLUSTER) {
        if (slice <= T) return topk_launch<1, false>(TK_ARGS);
        if (slice <= 2 * T) return topk_launch<2, false>(TK_ARGS);
        if (slice <= 4 * T) return topk_launch<4, false>(TK_ARGS);
        return topk_launch<8, false>(TK_ARGS);
    } else {
        if (slice <= 2 * T) return topk_launch<2, true>(TK_ARGS);
        if (slice <= 4 * T) return topk_launch<4, true>(TK_ARGS);
        if (slice <= 8 * T) return topk_launch<8, true>(TK_ARGS);
        if (slice <= 16 * T) return topk_launch<16, true>(TK_ARGS);
        return topk_launch<0, true>(TK_ARGS);
    }
#undef TK_ARGS
}

extern "C" cudaError_t k_topk(int32_t *out, int64_t ldo, int k, float *sc, int64_t lds, const ix_args_t *a, int block,
                              const int32_t *blocks, int64_t ldb, int64_t nblocks, int block_size, cudaStream_t s) {
    if (a->m <= 0 || k <= 0) return cudaSuccess;
    if (a->m > 0x7FFFFFFF / TK_CLUSTER) return cudaErrorInvalidValue;
    int64_t n_max = block > 0 ? (a->nk_max + block - 1) / block : a->nk_max; /* a row's entries at most */
    int64_t mask_words = blocks ? (a->nk_max / block_size) / 32 + 1 : 0;
    if (mask_words > TK_MASK_WORDS) return cudaErrorInvalidValue;
    /* level 1 reads block x its entries' scores: a cluster shares that reading too (32k context:
       32,000 scores for 4,000 blocks took one block ~12 us, device run 208) */
    bool cluster = (block > 0 ? a->nk_max : n_max) > TK_CLUSTER_MIN;
    int64_t slice = cluster ? (n_max + TK_CLUSTER - 1) / TK_CLUSTER : n_max; /* a block's entries at most */
    int key_cap = (int)(slice < TK_KEYS ? slice : TK_KEYS);
    size_t smem = (size_t)(mask_words + key_cap) * 4;
    if (cluster)
        return topk_pick<true>(slice, a, smem, s, out, ldo, k, sc, lds, block, blocks, ldb, nblocks, block_size, (int)mask_words, key_cap);
    return topk_pick<false>(slice, a, smem, s, out, ldo, k, sc, lds, block, blocks, ldb, nblocks, block_size, (int)mask_words, key_cap);
}
