// Hyper-connection coefficients (MODEL_V41 §5.3) per row in fp32: the row's RMS over all hc
// streams scales the fn mixes, then pre, post and the Sinkhorn-projected C (the CPU
// backend's mix_row, operation for operation; the Sinkhorn steps in one warp, a lane per
// entry). coef may alias mixes. A decode row is one block's work, so the block is wide and
// issues every load of the row (and its mixes) before it adds any: one memory round trip.
#include "row_ops.cuh"

__global__ void __launch_bounds__(HC_THREADS) hc_mix_kernel(float *coef, int64_t ldc, const float *mixes, int64_t ldm,
                                                            const float *X, int64_t ldx, int64_t xcols, const float *base,
                                                            const float *sc, int hc, float eps, float hc_eps, int iters) {
    pdl_begin();
    __shared__ float red[33];
    __shared__ float m[(2 + HC_MAX) * HC_MAX], C[HC_MAX * HC_MAX];
    int nm = (2 + hc) * hc, t = threadIdx.x;
    const float *x = X + blockIdx.x * ldx;
    float mix = t < nm ? mixes[blockIdx.x * ldm + t] : 0.0f; /* loaded with the row */
    float inv = rms_scale(hc_row_ss(x, xcols, red), xcols, eps);
    if (t < nm) m[t] = mix * inv;
    __syncthreads();
    if (t < 32) hc_coefs_warp(coef + blockIdx.x * ldc, m, C, base, sc, hc, hc_eps, iters);
}

// Many rows (prefill): a warp a row, the same bits. In hc_mix_kernel the Sinkhorn steps (one
// warp's ~40 dependent passes) held each row's 1,024-thread block: 1.1 ms an 8k-token call.
#define HC_WARP_ROWS 8 // rows a block, a warp each

// The sum of squares hc_row_ss takes of a row of n4 float4s in a block of HC_THREADS (thread t:
// float4s t, t + HC_THREADS, ... in order, then block_sum: each warp's butterfly, then warp 0's
// over those), by one warp: lane l stands for threads l + 32 w, w < 32.
__device__ __forceinline__ float hc_row_ss_warp(const float4 *x4, int64_t n4) {
    static_assert(HC_THREADS == 32 * 32, "a lane stands for one thread of each of 32 warps");
    int l = threadIdx.x & 31;
    float p[32];
#pragma unroll
    for (int w = 0; w < 32; w++) p[w] = 0.0f;
    for (int64_t j0 = 0; j0 < n4; j0 += HC_THREADS)
#pragma unroll
        for (int w = 0; w < 32; w++) {
            int64_t i = j0 + 32 * w + l;
            if (i < n4) {
                float4 v = x4[i];
                p[w] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; /* hc_row_ss's expression */
            }
        }
    float mine = 0.0f; /* lane l: warp l's sum, as warp 0 reads them in block_sum */
#pragma unroll
    for (int w = 0; w < 32; w++) {
        float q = warp_sum(p[w]);
        if (l == w) mine = q;
    }
    return warp_sum(mine);
}

__global__ void __launch_bounds__(32 * HC_WARP_ROWS) hc_mix_rows_kernel(float *coef, int64_t ldc, const float *mixes, int64_t ldm,
                                                                        const float *X, int64_t ldx, int64_t rows, int64_t xcols,
                                                                        const float *base, const float *sc, int hc, float eps,
                                                                        float hc_eps, int iters) {
    pdl_begin();
    __shared__ float m[HC_WARP_ROWS][(2 + HC_MAX) * HC_MAX], C[HC_WARP_ROWS][HC_MAX * HC_MAX];
    int w = threadIdx.x >> 5, t = threadIdx.x & 31, nm = (2 + hc) * hc;
    int64_t row = (int64_t)blockIdx.x * HC_WARP_ROWS + w;
    if (row >= rows) return;
    float inv = rms_scale(hc_row_ss_warp((const float4 *)(X + row * ldx), xcols >> 2), xcols, eps);
    for (int e = t; e < nm; e += 32) m[w][e] = mixes[row * ldm + e] * inv;
    __syncwarp();
    hc_coefs_warp(coef + row * ldc, m[w], C[w], base, sc, hc, hc_eps, iters);
}

extern "C" cudaError_t k_hc_mix(float *coef, int64_t ldc, const float *mixes, int64_t ldm, const float *X, int64_t ldx,
                                int64_t rows, int64_t xcols, const float *base, const float *scale, int hc, float eps,
                                float hc_eps, int iters, cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    if (hc > HC_MAX) return cudaErrorInvalidValue;
    bool vec = xcols % 4 == 0 && (uintptr_t)X % 16 == 0 && ldx % 4 == 0; /* hc_row_ss's 16-byte form */
    if (rows > K_HC_PRE_ROWS && vec)
        return k_launch(hc_mix_rows_kernel, (unsigned)ceil_div(rows, HC_WARP_ROWS), 32 * HC_WARP_ROWS, 0, s, coef, ldc, mixes, ldm,
                        X, ldx, rows, xcols, base, scale, hc, eps, hc_eps, iters);
    return k_launch(hc_mix_kernel, (unsigned)rows, HC_THREADS, 0, s, coef, ldc, mixes, ldm, X, ldx, xcols, base, scale, hc, eps,
                    hc_eps, iters); /* decode: a row's loads all in flight at once */
}
