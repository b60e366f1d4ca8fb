// Hyper-connection expand in place: X_b <- post[b] * y + sum_a C[a][b] X_a. Each thread owns
// one channel of every stream, so reading the old streams before writing is race-free.
#include "common.cuh"

#define HC_MAX 16

__global__ void hc_expand_kernel(float *X, int64_t ldx, const float *y, int64_t ldy, const float *coef, int64_t ldc,
                                 int64_t D, int hc) {
    pdl_begin();
    int64_t r = blockIdx.y, d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (d >= D) return;
    float *x = X + r * ldx;
    const float *post = coef + r * ldc + hc, *C = post + hc;
    float old[HC_MAX];
    for (int a = 0; a < hc; a++) old[a] = x[a * D + d];
    float yv = y[r * ldy + d];
    for (int b = 0; b < hc; b++) {
        float s = 0.0f;
        for (int a = 0; a < hc; a++) s += C[a * hc + b] * old[a];
        x[b * D + d] = post[b] * yv + s;
    }
}

extern "C" cudaError_t k_hc_expand(float *X, int64_t ldx, const float *y, int64_t ldy, const float *coef, int64_t ldc,
                                   int64_t rows, int64_t D, int hc, cudaStream_t s) {
    if (rows <= 0 || D <= 0) return cudaSuccess;
    if (hc > HC_MAX) return cudaErrorInvalidValue;
    return k_launch(hc_expand_kernel, dim3((unsigned)ceil_div(D, 256), (unsigned)rows), 256, 0, s, X, ldx, y, ldy, coef, ldc,
                    D, hc);
}
