// Strided 2-D copies on the device (the backend's copy ops): kernels rather than 2-D memcpys,
// so that graph replays can update them in place (2-D memcpy nodes cannot be updated). Many
// copies (a batch's window and pool writes) go in one launch.
#include "common.cuh"

#include <string.h>

__global__ void copy_kernel(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t cols) {
    pdl_begin();
    int64_t r = blockIdx.y, c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c < cols) dst[r * ldd + c] = src[r * lds + c];
}

extern "C" cudaError_t k_copy(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols,
                              cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    for (int64_t r0 = 0; r0 < rows; r0 += 65535) {
        int64_t n = rows - r0 < 65535 ? rows - r0 : 65535;
        cudaError_t e = k_launch(copy_kernel, dim3((unsigned)ceil_div(cols, 256), (unsigned)n), 256, 0, s, dst + r0 * ldd,
                                 ldd, src + r0 * lds, lds, cols);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

// A decode step's few copies ride in the launch's arguments: a table uploaded for them was a
// memcpy node in the captured step that cost 2-16 us before the kernel could start (kernel
// timeline, docs/CUDA_NOTES.md run 42).
typedef struct {
    copy_desc_t d[K_COPY_INLINE];
} copy_list_t;

// Block (x, y) copies every gridDim.x-th element of copy y, from element x * blockDim.x.
__global__ void copy_many_kernel(const copy_desc_t *table, const __grid_constant__ copy_list_t list) {
    pdl_begin();
    copy_desc_t c = table ? table[blockIdx.y] : list.d[blockIdx.y];
    int64_t n = c.rows * c.cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / c.cols, k = i % c.cols;
        c.dst[r * c.ldd + k] = c.src[r * c.lds + k];
    }
}

extern "C" cudaError_t k_copy_many(const copy_desc_t *host, const copy_desc_t *dev, int n, int64_t most, cudaStream_t s) {
    if (n <= 0 || most <= 0) return cudaSuccess;
    unsigned nx = (unsigned)min(ceil_div(most, 256), (int64_t)64);
    copy_list_t list;
    memset(&list, 0, sizeof list);
    if (n <= K_COPY_INLINE) {
        memcpy(list.d, host, (size_t)n * sizeof *host);
        return k_launch(copy_many_kernel, dim3(nx, (unsigned)n), 256, 0, s, (const copy_desc_t *)NULL, list);
    }
    for (int i = 0; i < n; i += 65535) {
        unsigned ny = (unsigned)(n - i < 65535 ? n - i : 65535);
        cudaError_t e = k_launch(copy_many_kernel, dim3(nx, ny), 256, 0, s, dev + i, list);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
