// RoPE in place: each head_dim-wide head of a row rotates its last 2*half channels in adjacent
// pairs by angle pos * f_p, computed in fp32 as the CPU backend does; pos = pos0 + r*pos_step,
// or from a list of (row, position) pairs (a batch's rows at their sequences' positions).
#include "common.cuh"

// The frequency is a weight and a single sequence's positions are arguments: both are taken,
// and the rotation computed, before the kernel's wait; a row table is read after it.
__global__ void rope_kernel(float *x, int64_t ldx, int64_t heads, int head_dim, const float *f, int half, int64_t pos0,
                            int64_t step, const int64_t *row_pos, int inverse) {
    int64_t r = blockIdx.y, t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    bool live = t < heads * half;
    int64_t h = t / half;
    int p = (int)(t % half);
    float fp = live ? f[p] : 0.0f, c = 0.0f, sn = 0.0f;
    if (!row_pos) rope_angle(pos0 + r * step, fp, inverse, c, sn);
    pdl_begin();
    if (!live) return;
    if (row_pos) r = row_pos[2 * blockIdx.y], rope_angle(row_pos[2 * blockIdx.y + 1], fp, inverse, c, sn);
    float *v = x + r * ldx + h * head_dim + head_dim - 2 * half + 2 * p;
    rope_turn(v[0], v[1], c, sn);
}

extern "C" cudaError_t k_rope(float *x, int64_t ldx, int64_t rows, int64_t cols, int head_dim, const float *inv_freq,
                              int half, int64_t pos0, int64_t pos_step, const int64_t *row_pos, int inverse, cudaStream_t s) {
    int64_t heads = cols / head_dim, n = heads * half;
    if (n <= 0) return cudaSuccess;
    for (int64_t r0 = 0; r0 < rows; r0 += 65535) { /* grid.y is at most 65535 */
        dim3 grid((unsigned)ceil_div(n, 128), (unsigned)(rows - r0 < 65535 ? rows - r0 : 65535));
        cudaError_t e = k_launch(rope_kernel, grid, 128, 0, s, row_pos ? x : x + r0 * ldx, ldx, heads, head_dim, inv_freq,
                                 half, pos0 + r0 * pos_step, pos_step, row_pos ? row_pos + 2 * r0 : NULL, inverse);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
