// MoE dispatch on the device (no host round trip): counts per expert, their prefix sums (each
// expert's positions), the list of experts with work, the list of K_TC_POSITIONS-position tiles
// for the tensor-core matmul, and each (row, slot)'s position. One block; positions inside an expert
// come in arrival order, which changes no result (every position is computed on its own). Few
// (row, slot) entries (decode): each entry counts the entries before it instead (no atomics,
// scans or passes over every expert), its position then in (row, slot) order.
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

#define MD_FEW 64 // entries (m * k) up to which the light kernel runs

__global__ void __launch_bounds__(256) moe_dispatch_few_kernel(const int32_t *idx, int64_t ldi, const float *wt,
                                                              int64_t ldw, int k, int E, int P, int32_t *offsets,
                                                              int32_t *pos_of, int32_t *x_rows, float *wpos,
                                                              int32_t *active, int32_t *tiles, int32_t *counts) {
    pdl_begin();
    // entry i: its expert (-1: invalid); the experts' first entries: their tile counts (else 0),
    // the experts in position order
    __shared__ int ex[MD_FEW], lead_tiles[MD_FEW], sorted[MD_FEW];
    int tid = threadIdx.x;
    int64_t row = tid / (k ? k : 1), slot = tid - row * k;
    float w = 0.0f;
    if (tid < P) {
        int32_t e = idx[row * ldi + slot];
        w = wt[row * ldw + slot];
        ex[tid] = e >= 0 && e < E ? e : -1;
    }
    __syncthreads();
    int e = tid < P ? ex[tid] : -1, below = 0, same = 0, rank = 0;
    if (e >= 0)
        for (int j = 0; j < P; j++) {
            int f = ex[j];
            below += f >= 0 && f < e, same += f == e, rank += f == e && j < tid;
        }
    if (tid < P) {
        lead_tiles[tid] = e >= 0 && rank == 0 ? (same + MD_TILE - 1) / MD_TILE : 0;
        if (e >= 0) sorted[below + rank] = e;
    }
    __syncthreads();
    int n_valid = 0, n_active = 0, n_tiles = 0, a = 0, t = 0; /* a, t: experts and tiles below e */
    for (int j = 0; j < P; j++) {
        int f = ex[j], lt = lead_tiles[j];
        n_valid += f >= 0, n_active += lt > 0, n_tiles += lt;
        if (f >= 0 && f < e) a += lt > 0, t += lt;
    }
    if (tid < P) {
        int p = e >= 0 ? below + rank : -1;
        if (p >= 0) x_rows[p] = (int32_t)row, wpos[p] = w;
        pos_of[tid] = p;
        if (e >= 0 && rank == 0) { /* the expert's first entry lists it and its tiles */
            active[a] = e;
            for (int q = 0; q * MD_TILE < same; q++) tiles[2 * (t + q)] = e, tiles[2 * (t + q) + 1] = below + q * MD_TILE;
        }
    }
    for (int x = tid; x <= E; x += blockDim.x) { /* every expert's offset: the entries below it */
        int lo = 0, hi = n_valid;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (sorted[mid] < x) lo = mid + 1;
            else hi = mid;
        }
        offsets[x] = lo;
    }
    if (tid == 0) counts[0] = n_active, counts[1] = n_tiles;
}

extern "C" cudaError_t k_moe_dispatch(const int32_t *idx, int64_t ldi, const float *wt, int64_t ldw, int64_t m, int k, int E,
                                      int32_t *offsets, int32_t *pos_of, int32_t *x_rows, float *wpos, int32_t *active,
                                      int32_t *tiles, int32_t *counts, cudaStream_t s) {
    if (E > MD_THREADS * MD_IPT || E <= 0) return cudaErrorInvalidValue;
    if (m * k <= MD_FEW)
        return k_launch(moe_dispatch_few_kernel, 1, 256, 0, s, idx, ldi, wt, ldw, k, E, (int)(m * k), offsets, pos_of, x_rows,
                        wpos, active, tiles, counts);
    return k_launch(moe_dispatch_kernel, 1, MD_THREADS, 0, s, idx, ldi, wt, ldw, m, k, E, offsets, pos_of, x_rows, wpos,
                    active, tiles, counts);
}
