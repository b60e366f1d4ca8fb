// Top-k per row by radix select: the k-th largest finite score is found byte by byte (four
// 256-bin histograms over the order-preserving integer keys), then one pass in index order
// keeps every entry above it and the lowest-indexed entries equal to it, so ties go to the
// lower index and the output comes out ascending (-1 padded), as the CPU heap gives it.
#include "common.cuh"

#include <cub/block/block_scan.cuh>

#define TK_THREADS 1024

__device__ __forceinline__ uint32_t order_key(float v) {
    uint32_t u = __float_as_uint(v);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

__global__ void __launch_bounds__(TK_THREADS) topk_kernel(int32_t *out, int64_t ldo, int K, const float *sc, int64_t lds,
                                                          ix_args_t a, int block) {
    pdl_begin();
    typedef cub::BlockScan<int, TK_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    __shared__ int hist[256];
    __shared__ uint32_t sh_prefix, sh_mask;
    __shared__ int sh_remaining, sh_count;
    int64_t r = blockIdx.x;
    const ix_row_t rd = ix_row(a, r);
    const float *row = sc + r * lds;
    int32_t *o = out + rd.row * ldo;
    int64_t n = min(rd.nk, (rd.pos + 1) / a.ratio);
    if (block > 0) n = (n + block - 1) / block;
    int tid = threadIdx.x;

    if (tid == 0) sh_count = 0;
    __syncthreads();
    int local = 0;
    for (int64_t j = tid; j < n; j += TK_THREADS) local += row[j] > -INFINITY;
    if (local) atomicAdd(&sh_count, local);
    __syncthreads();
    uint32_t T = 0;
    int need_eq = 0;
    if (sh_count > K) {
        if (tid == 0) sh_prefix = 0, sh_mask = 0, sh_remaining = K;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int b = tid; b < 256; b += TK_THREADS) hist[b] = 0;
            __syncthreads();
            uint32_t prefix = sh_prefix, mask = sh_mask;
            for (int64_t j = tid; j < n; j += TK_THREADS) {
                float v = row[j];
                uint32_t k = order_key(v);
                if (v > -INFINITY && (k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255], 1);
            }
            __syncthreads();
            if (tid == 0) {
                int rem = sh_remaining, cum = 0, b = 255;
                for (; b > 0 && cum + hist[b] < rem; b--) cum += hist[b];
                sh_remaining = rem - cum;
                sh_prefix = prefix | (uint32_t)b << shift;
                sh_mask = mask | 255u << shift;
            }
            __syncthreads();
        }
        T = sh_prefix;
        need_eq = sh_remaining;
    }
    int base = 0, eq_base = 0;
    for (int64_t j0 = 0; j0 < n && base < K; j0 += TK_THREADS) {
        int64_t j = j0 + tid;
        float v = j < n ? row[j] : -INFINITY;
        bool ok = v > -INFINITY;
        uint32_t k = order_key(v);
        int is_eq = ok && k == T, eq_rank, eq_total;
        scan_t(tmp).ExclusiveSum(is_eq, eq_rank, eq_total);
        __syncthreads();
        int take = ok && (k > T || (is_eq && eq_base + eq_rank < need_eq)), pos, total;
        scan_t(tmp).ExclusiveSum(take, pos, total);
        __syncthreads();
        if (take) o[base + pos] = (int32_t)j;
        base += total;
        eq_base += eq_total;
    }
    for (int64_t i = base + tid; i < K; i += TK_THREADS) o[i] = -1;
}

extern "C" cudaError_t k_topk(int32_t *out, int64_t ldo, int k, const float *sc, int64_t lds, const ix_args_t *a, int block,
                              cudaStream_t s) {
    if (a->m <= 0 || k <= 0) return cudaSuccess;
    return k_launch(topk_kernel, (unsigned)a->m, TK_THREADS, 0, s, out, ldo, k, sc, lds, *a, block);
}
