// RoPE in place: each head_dim-wide head of a row rotates its last 2*half channels in adjacent
// pairs by angle (pos0 + r*pos_step) * f_p, computed in fp32 as the CPU backend does.
#include "common.cuh"

__global__ void rope_kernel(float *x, int64_t ldx, int64_t heads, int head_dim, const float *f, int half, int64_t pos0,
                            int64_t step, int inverse) {
    int64_t r = blockIdx.y;
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (t >= heads * half) return;
    int64_t h = t / half;
    int p = (int)(t % half);
    float pos = (float)(pos0 + r * step);
    float ang = pos * f[p], c = cosf(ang), sn = sinf(ang);
    if (inverse) sn = -sn;
    float *v = x + r * ldx + h * head_dim + head_dim - 2 * half + 2 * p;
    float e = v[0], o = v[1];
    v[0] = e * c - o * sn;
    v[1] = e * sn + o * c;
}

extern "C" cudaError_t k_rope(float *x, int64_t ldx, int64_t rows, int64_t cols, int head_dim, const float *inv_freq,
                              int half, int64_t pos0, int64_t pos_step, int inverse, cudaStream_t s) {
    int64_t heads = cols / head_dim, n = heads * half;
    if (rows <= 0 || n <= 0) return cudaSuccess;
    dim3 grid((unsigned)ceil_div(n, 128), (unsigned)rows);
    rope_kernel<<<grid, 128, 0, s>>>(x, ldx, heads, head_dim, inv_freq, half, pos0, pos_step, inverse);
    return DI_LAUNCHED();
}
