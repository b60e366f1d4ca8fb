// Hyper-connection fill: every stream k of X becomes e, and the first site's collapse weights
// pre become (1, 0, .., 0) (block x 0 of each row writes them).
#include "common.cuh"

__global__ void hc_fill_kernel(float *X, int64_t ldx, float *pre, int64_t ldp, const float *e, int64_t lde, int64_t D, int hc) {
    pdl_begin();
    int64_t r = blockIdx.y, d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (blockIdx.x == 0 && threadIdx.x < hc) pre[r * ldp + threadIdx.x] = threadIdx.x == 0 ? 1.0f : 0.0f;
    if (d >= D) return;
    float v = e[r * lde + d];
    for (int k = 0; k < hc; k++) X[r * ldx + k * D + d] = v;
}

extern "C" cudaError_t k_hc_fill(float *X, int64_t ldx, float *pre, int64_t ldp, const float *e, int64_t lde, int64_t rows, int64_t D,
                                 int hc, cudaStream_t s) {
    if (rows <= 0 || D <= 0) return cudaSuccess;
    if (hc < 1 || hc > 256) return cudaErrorInvalidValue; /* pre's columns by threads of block 0 */
    return k_launch(hc_fill_kernel, dim3((unsigned)ceil_div(D, 256), (unsigned)rows), 256, 0, s, X, ldx, pre, ldp, e, lde, D, hc);
}
