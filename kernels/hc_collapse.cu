// Hyper-connection collapse: out[r][d] = sum_k pre[r][k] * X[r][k*D + d].
#include "row_ops.cuh"

__global__ void hc_collapse_kernel(float *out, int64_t ldo, const float *X, int64_t ldx, const float *pre, int64_t ldp,
                                   int64_t D, int hc) {
    pdl_begin();
    int64_t r = blockIdx.y, d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (d >= D) return;
    const float *x = X + r * ldx, *w = pre + r * ldp;
    out[r * ldo + d] = hc == 4 ? hc_collapse_at<4>(x, w, D, hc, d) : hc_collapse_at<0>(x, w, D, hc, d); /* 4: the model's */
}

extern "C" cudaError_t k_hc_collapse(float *out, int64_t ldo, const float *X, int64_t ldx, const float *pre, int64_t ldp,
                                     int64_t rows, int64_t D, int hc, cudaStream_t s) {
    if (rows <= 0 || D <= 0) return cudaSuccess;
    return k_launch(hc_collapse_kernel, dim3((unsigned)ceil_div(D, 256), (unsigned)rows), 256, 0, s, out, ldo, X, ldx, pre,
                    ldp, D, hc);
}
