// Row gather from a stored table: out row t = the dequantized rows idx[t][0..k) side by side
// (zeros for an id outside the table). The table may live in mapped host memory (the Engram
// tables): each row is then read across the bus by the threads that need it.
#include "common.cuh"

#define GA_THREADS 256
#define GA_CHUNK 1024 // columns of a row per block: a decode step's one embedding row over several SMs

// Block (j * chunks + c, r): columns [c GA_CHUNK, (c + 1) GA_CHUNK) of row r's j-th table row.
__global__ void gather_kernel(float *out, int64_t ldo, kw_t w, const int32_t *idx, int64_t ldi, int chunks) {
    pdl_begin();
    int64_t r = blockIdx.y;
    int j = blockIdx.x / chunks;
    int64_t c0 = (int64_t)(blockIdx.x % chunks) * GA_CHUNK, c1 = c0 + GA_CHUNK < w.cols ? c0 + GA_CHUNK : w.cols;
    int32_t id = idx[r * ldi + j];
    float *dst = out + r * ldo + (int64_t)j * w.cols;
    bool ok = id >= 0 && id < w.rows;
    for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) dst[c] = ok ? kw_at(w, w.data, w.scale, id, c) : 0.0f;
}

extern "C" cudaError_t k_gather(float *out, int64_t ldo, const kw_t *table, const int32_t *idx, int64_t ldi, int64_t rows,
                                int64_t k, cudaStream_t s) {
    if (rows <= 0 || k <= 0) return cudaSuccess;
    int chunks = (int)ceil_div(table->cols, GA_CHUNK);
    return k_launch(gather_kernel, dim3((unsigned)(k * chunks), (unsigned)rows), GA_THREADS, 0, s, out, ldo, *table, idx, ldi,
                    chunks);
}
