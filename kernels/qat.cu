// QAT fake quantization in place (lib/qat.h) with the same fp32 operations as qat_apply, so
// the device decides every rounding as the CPU does. Blocks of 16 or 32 (any divisor of 32).
#include "qat.cuh"

// One thread per element; the `block` threads of a block (aligned within a warp) share its
// absolute maximum by shuffles.
__global__ void qat_kernel(float *x, int64_t ldx, int64_t rows, int64_t nblocks, int kind, int block) {
    pdl_begin();
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, b = t / block, n = rows * nblocks;
    int l = (int)(t % block);
    float *v = b < n ? x + (b / nblocks) * ldx + (b % nblocks) * block + l : NULL;
    float val = v ? *v : 0.0f, amax = fabsf(val);
    for (int o = block / 2; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o, block));
    if (v) *v = qat_value(kind, val, qat_scale_dev(kind, amax));
}

extern "C" cudaError_t k_qat(float *x, int64_t ldx, int64_t rows, int64_t cols, int kind, int block, cudaStream_t s) {
    int64_t nb = cols / block, n = rows * nb * block; // a partial trailing block is left alone, as qat_apply does
    if (block <= 0 || block > 32 || 32 % block) return cudaErrorInvalidValue;
    if (n <= 0) return cudaSuccess;
    return k_launch(qat_kernel, (unsigned)ceil_div(n, 256), 256, 0, s, x, ldx, rows, nb, kind, block);
}
