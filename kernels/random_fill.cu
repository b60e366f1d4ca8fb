// Benchmark-only synthesis on the device: uniform fp32 tensors and random weights in any
// storage format (values uniform in +-amp, encoded with the format's block scales), from a
// counter-based hash so that no host memory or copy is involved.
#include "common.cuh"

__device__ __forceinline__ float hash_unit(uint64_t seed, uint64_t i) { // [0, 1)
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * 0x1p-24f;
}

__global__ void fill_uniform_kernel(float *x, int64_t ld, int64_t rows, int64_t cols, float lo, float hi, uint64_t seed) {
    pdl_begin();
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    x[(i / cols) * ld + i % cols] = lo + (hi - lo) * hash_unit(seed, (uint64_t)i);
}

extern "C" cudaError_t k_fill_uniform(float *x, int64_t ld, int64_t rows, int64_t cols, float lo, float hi, uint64_t seed,
                                      cudaStream_t s) {
    if (rows * cols <= 0) return cudaSuccess;
    return k_launch(fill_uniform_kernel, (unsigned)ceil_div(rows * cols, 256), 256, 0, s, x, ld, rows, cols, lo, hi, seed);
}

// One thread per stored byte (FP4: two elements) or element; every block gets the scale
// 2^ceil(log2(amp / max code)), so codes stay in range.
__global__ void random_weight_kernel(uint8_t *data, int kind, int64_t n_units, float amp, float inv_scale, uint64_t seed) {
    pdl_begin();
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_units) return;
    float v = (2.0f * hash_unit(seed, (uint64_t)i) - 1.0f) * amp;
    switch (kind) {
    case KW_F32: ((float *)data)[i] = v; break;
    case KW_BF16: ((__nv_bfloat16 *)data)[i] = __float2bfloat16_rn(v); break;
    case KW_FP8: data[i] = f32_to_e4m3_dev(v * inv_scale); break;
    default: {
        float v2 = (2.0f * hash_unit(seed ^ 0x5555, (uint64_t)i) - 1.0f) * amp;
        data[i] = f32_to_e2m1_dev(v * inv_scale) | f32_to_e2m1_dev(v2 * inv_scale) << 4;
    }
    }
}

extern "C" cudaError_t k_random_weight(uint8_t *data, uint8_t *scale, int kind, int64_t rows, int64_t cols, int block_rows,
                                       int block_cols, float amp, uint64_t seed, cudaStream_t s) {
    int64_t units = kind == KW_FP4 ? rows * ((cols + 1) / 2) : rows * cols;
    float inv_scale = 1.0f;
    if (kind == KW_FP8 || kind == KW_FP4) {
        int e = (int)ceilf(log2f(amp / (kind == KW_FP8 ? 448.0f : 6.0f)));
        inv_scale = ldexpf(1.0f, -e);
        size_t ns = (size_t)ceil_div(rows, block_rows) * (size_t)ceil_div(cols, block_cols);
        cudaError_t err = cudaMemsetAsync(scale, 127 + e, ns, s);
        if (err != cudaSuccess) return err;
    }
    if (units <= 0) return cudaSuccess;
    return k_launch(random_weight_kernel, (unsigned)ceil_div(units, 256), 256, 0, s, data, kind, units, amp, inv_scale, seed);
}
