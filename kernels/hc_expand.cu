// Hyper-connection expand in place: X_b <- post[b] * y + sum_a C[a][b] X_a. Each thread owns
// V channels (4: 16-byte loads, where the rows allow) of every stream, so reading the old
// streams before writing is race-free. For the usual stream counts (HC 2-4, a template) the
// streams, y and the coefficients are all loaded before any is used (one round of loads); other
// counts (HC 0: hc at run time) read the coefficients as they go.
#include "common.cuh"

#define HC_MAX 16
#define HE_THREADS 128

template <int HC, int V>
__global__ void __launch_bounds__(HE_THREADS) hc_expand_kernel(float *X, int64_t ldx, const float *y, int64_t ldy,
                                                               const float *coef, int64_t ldc, int64_t D, int hc_run) {
    pdl_begin();
    const int hc = HC ? HC : hc_run, N = HC ? HC : HC_MAX;
    int64_t r = blockIdx.y, d = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * V;
    if (d >= D) return;
    float *x = X + r * ldx;
    const float *post = coef + r * ldc + hc, *C = post + hc;
    float old[N][V], yv[V], pb[HC ? HC : 1], cm[HC ? HC * HC : 1];
#pragma unroll
    for (int a = 0; a < N; a++)
        if (a < hc) load_v<V>(x + a * D + d, old[a]);
    load_v<V>(y + r * ldy + d, yv);
    if constexpr (HC > 0) {
#pragma unroll
        for (int b = 0; b < HC; b++) pb[b] = post[b];
#pragma unroll
        for (int i = 0; i < HC * HC; i++) cm[i] = C[i];
    }
    auto post_of = [&](int b) {
        if constexpr (HC > 0) return pb[b];
        else return post[b];
    };
    auto c_of = [&](int a, int b) {
        if constexpr (HC > 0) return cm[a * HC + b];
        else return C[a * hc + b];
    };
#pragma unroll
    for (int b = 0; b < N; b++) {
        if (b >= hc) break;
        float o[V];
#pragma unroll
        for (int c = 0; c < V; c++) {
            float s = 0.0f;
#pragma unroll
            for (int a = 0; a < N; a++)
                if (a < hc) s += c_of(a, b) * old[a][c];
            o[c] = post_of(b) * yv[c] + s;
        }
        if constexpr (V == 4) *(float4 *)(x + b * D + d) = make_float4(o[0], o[1], o[2], o[3]);
        else x[b * D + d] = o[0];
    }
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
