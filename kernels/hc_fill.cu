// Hyper-connection fill: every stream k of X becomes e.
#include "common.cuh"

__global__ void hc_fill_kernel(float *X, int64_t ldx, const float *e, int64_t lde, int64_t D, int hc) {
    pdl_begin();
    int64_t r = blockIdx.y, d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (d >= D) return;
    float v = e[r * lde + d];
    for (int k = 0; k < hc; k++) X[r * ldx + k * D + d] = v;
}

extern "C" cudaError_t k_hc_fill(float *X, int64_t ldx, const float *e, int64_t lde, int64_t rows, int64_t D, int hc,
                                 cudaStream_t s) {
    if (rows <= 0 || D <= 0) return cudaSuccess;
    return k_launch(hc_fill_kernel, dim3((unsigned)ceil_div(D, 256), (unsigned)rows), 256, 0, s, X, ldx, e, lde, D, hc);
}
