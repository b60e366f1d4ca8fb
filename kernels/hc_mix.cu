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

extern "C" cudaError_t k_hc_mix(float *coef, int64_t ldc, const float *mixes, int64_t ldm, const float *X, int64_t ldx,
                                int64_t rows, int64_t xcols, const float *base, const float *scale, int hc, float eps,
                                float hc_eps, int iters, cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    if (hc > HC_MAX) return cudaErrorInvalidValue;
    return k_launch(hc_mix_kernel, (unsigned)rows, HC_THREADS, 0, s, coef, ldc, mixes, ldm, X, ldx, xcols, base, scale, hc,
                    eps, hc_eps, iters);
}
