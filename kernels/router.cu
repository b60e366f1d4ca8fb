// The router's own launch: one block per row (router.cuh); the bias, a weight, is fetched before
// the kernel's wait.
#include "router.cuh"

#define RT_THREADS 128

__global__ void __launch_bounds__(RT_THREADS) router_kernel(int32_t *idx, int64_t ldi, float *wt, int64_t ldw,
                                                            const float *logits, int64_t ldl, const float *bias, int E, int k,
                                                            float temp, int normalize, float scale) {
    extern __shared__ float sm[];
    float b[RT_PER];
    route_bias_first(bias, E, b);
    pdl_begin();
    int64_t r = blockIdx.x;
    route_row(idx + r * ldi, wt + r * ldw, logits + r * ldl, bias, b, E, k, temp, normalize, scale, sm);
}

extern "C" cudaError_t k_router(int32_t *idx, int64_t ldi, float *wt, int64_t ldw, const float *logits, int64_t ldl,
                                const float *bias, int64_t rows, int E, int k, float temp, int normalize, float scale,
                                cudaStream_t s) {
    if (rows <= 0) return cudaSuccess;
    return k_launch(router_kernel, (unsigned)rows, RT_THREADS, route_smem(E, k), s, idx, ldi, wt, ldw, logits, ldl, bias, E, k,
                    temp, normalize, scale);
}
