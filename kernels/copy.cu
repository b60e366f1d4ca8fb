// Strided 2-D copy on the device (the backend's copy op): a kernel rather than a 2-D memcpy,
// so that graph replays can update it in place (2-D memcpy nodes cannot be updated).
#include "common.cuh"

__global__ void copy_kernel(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t cols) {
    int64_t r = blockIdx.y, c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c < cols) dst[r * ldd + c] = src[r * lds + c];
}

extern "C" cudaError_t k_copy(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols,
                              cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    for (int64_t r0 = 0; r0 < rows; r0 += 65535) {
        int64_t n = rows - r0 < 65535 ? rows - r0 : 65535;
        copy_kernel<<<dim3((unsigned)ceil_div(cols, 256), (unsigned)n), 256, 0, s>>>(dst + r0 * ldd, ldd, src + r0 * lds, lds,
                                                                                    cols);
        cudaError_t e = DI_LAUNCHED();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
