// MoE dispatch on the device (no host round trip): counts per expert, their prefix sums (each
// expert's positions), the list of experts with work, the list of K_TC_POSITIONS-position tiles
// for the tensor-core matmul, and each (row, slot)'s position. One block; positions inside an expert
// come in arrival order, which changes no result (every position is computed on its own).
#include "common.cuh"

#include <cub/block/block_scan.cuh>

#define MD_THREADS 1024
#define MD_IPT 4 // experts per thread: E <= 4096
#define MD_TILE K_TC_POSITIONS

__global__ void __launch_bounds__(MD_THREADS) moe_dispatch_kernel(const int32_t *idx, int64_t ldi, const float *wt,
                                                                  int64_t ldw, int64_t m, int k, int E, int32_t *offsets,
                                                                  int32_t *pos_of, int32_t *x_rows, float *wpos,
                                                                  int32_t *active, int32_t *tiles, int32_t *counts) {
    pdl_begin();
    typedef cub::BlockScan<int, MD_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    __shared__ int cnt[MD_THREADS * MD_IPT], cur[MD_THREADS * MD_IPT];
    int tid = threadIdx.x;
    for (int e = tid; e < E; e += MD_THREADS) cnt[e] = 0;
    __syncthreads();
    int64_t total = m * k;
    for (int64_t i = tid; i < total; i += MD_THREADS) {
        int32_t e = idx[(i / k) * ldi + i % k];
        if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    int c[MD_IPT], a[MD_IPT], t[MD_IPT], co[MD_IPT], ao[MD_IPT], to[MD_IPT];
    for (int j = 0; j < MD_IPT; j++) {
        int e = tid * MD_IPT + j;
        c[j] = e < E ? cnt[e] : 0;
        a[j] = c[j] > 0;
        t[j] = (c[j] + MD_TILE - 1) / MD_TILE;
    }
    int n_pos, n_active, n_tiles;
    scan_t(tmp).ExclusiveSum(c, co, n_pos);
    __syncthreads();
    scan_t(tmp).ExclusiveSum(a, ao, n_active);
    __syncthreads();
    scan_t(tmp).ExclusiveSum(t, to, n_tiles);
    for (int j = 0; j < MD_IPT; j++) {
        int e = tid * MD_IPT + j;
        if (e >= E) break;
        offsets[e] = co[j];
        cur[e] = co[j];
        if (a[j]) active[ao[j]] = e;
        for (int q = 0; q < t[j]; q++) tiles[2 * (to[j] + q)] = e, tiles[2 * (to[j] + q) + 1] = co[j] + q * MD_TILE;
    }
    if (tid == 0) {
        offsets[E] = n_pos;
        counts[0] = n_active;
        counts[1] = n_tiles;
    }
    __syncthreads();
    for (int64_t i = tid; i < total; i += MD_THREADS) {
        int64_t r = i / k, s = i % k;
        int32_t e = idx[r * ldi + s];
        int32_t p = -1;
        if (e >= 0 && e < E) {
            p = atomicAdd(&cur[e], 1);
            x_rows[p] = (int32_t)r;
            wpos[p] = wt[r * ldw + s];
        }
        pos_of[i] = p;
    }
}

extern "C" cudaError_t k_moe_dispatch(const int32_t *idx, int64_t ldi, const float *wt, int64_t ldw, int64_t m, int k, int E,
                                      int32_t *offsets, int32_t *pos_of, int32_t *x_rows, float *wpos, int32_t *active,
                                      int32_t *tiles, int32_t *counts, cudaStream_t s) {
    if (E > MD_THREADS * MD_IPT || E <= 0) return cudaErrorInvalidValue;
    return k_launch(moe_dispatch_kernel, 1, MD_THREADS, 0, s, idx, ldi, wt, ldw, m, k, E, offsets, pos_of, x_rows, wpos,
                    active, tiles, counts);
}
