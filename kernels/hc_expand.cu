// Hyper-connection expand in place, X_b <- post[b] * y + sum_a C[a][b] X_a (row_ops.cuh's
// hc_expand_cols): each thread V channels (4: 16-byte loads, where the rows allow) of a row.
#include "row_ops.cuh"

#define HE_THREADS 128

template <int HC, int V>
__global__ void __launch_bounds__(HE_THREADS) hc_expand_kernel(float *X, int64_t ldx, const float *y, int64_t ldy,
                                                               const float *coef, int64_t ldc, int64_t D, int hc_run) {
    pdl_begin();
    int64_t r = blockIdx.y, d = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * V;
    if (d >= D) return;
    float yv[V];
    load_v<V>(y + r * ldy + d, yv);
    hc_expand_cols<HC, V>(X + r * ldx, D, d, yv, coef + r * ldc, hc_run);
}

template <int HC, int V>
static cudaError_t launch(float *X, int64_t ldx, const float *y, int64_t ldy, const float *coef, int64_t ldc, int64_t rows,
                          int64_t D, int hc, cudaStream_t s) {
    dim3 grid((unsigned)ceil_div(D, (int64_t)V * HE_THREADS), (unsigned)rows);
    return k_launch(hc_expand_kernel<HC, V>, grid, HE_THREADS, 0, s, X, ldx, y, ldy, coef, ldc, D, hc);
}

template <int V>
static cudaError_t launch_hc(float *X, int64_t ldx, const float *y, int64_t ldy, const float *coef, int64_t ldc, int64_t rows,
                             int64_t D, int hc, cudaStream_t s) {
    switch (hc) {
    case 2: return launch<2, V>(X, ldx, y, ldy, coef, ldc, rows, D, hc, s);
    case 3: return launch<3, V>(X, ldx, y, ldy, coef, ldc, rows, D, hc, s);
    case 4: return launch<4, V>(X, ldx, y, ldy, coef, ldc, rows, D, hc, s);
    default: return launch<0, V>(X, ldx, y, ldy, coef, ldc, rows, D, hc, s);
    }
}

extern "C" cudaError_t k_hc_expand(float *X, int64_t ldx, const float *y, int64_t ldy, const float *coef, int64_t ldc,
                                   int64_t rows, int64_t D, int hc, cudaStream_t s) {
    if (rows <= 0 || D <= 0) return cudaSuccess;
    if (hc > HC_MAX) return cudaErrorInvalidValue;
    bool vec = D % 4 == 0 && ldx % 4 == 0 && ldy % 4 == 0 && (uintptr_t)X % 16 == 0 && (uintptr_t)y % 16 == 0;
    if (vec) return launch_hc<4>(X, ldx, y, ldy, coef, ldc, rows, D, hc, s);
    return launch_hc<1>(X, ldx, y, ldy, coef, ldc, rows, D, hc, s);
}
