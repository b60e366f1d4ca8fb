// Device forms of lib/sampler.c's rules, shared by the pick kernels (sample.cu, sample_rank.cu).
#pragma once
#include "common.cuh"

__device__ __forceinline__ bool pk_allowed(const uint32_t *mask, int64_t v) { return !mask || (mask[v >> 5] >> (v & 31) & 1); }

// sampler.c's before(): a ranks ahead of b (larger first, the lower id on a tie, NaN last).
__device__ __forceinline__ bool pk_before(float a, int64_t ia, float b, int64_t ib) {
    if (isnan(b)) return !isnan(a) || ia < ib;
    if (isnan(a)) return false;
    return a > b || (a == b && ia < ib);
}

struct pk_best {
    float v;
    int64_t id; // -1: none
};

struct pk_best_op {
    __device__ __forceinline__ pk_best operator()(const pk_best &a, const pk_best &b) const {
        if (a.id < 0) return b;
        if (b.id < 0) return a;
        return pk_before(a.v, a.id, b.v, b.id) ? a : b;
    }
};

// Rows are cut into chunks of PK_CHUNK ids, a block of PK_THREADS each (sample.cu, logprob.cu),
// so that one row reads its logits with the whole GPU; the cut depends on V alone.
#define PK_THREADS 256
#define PK_RUN 16                      /* ids a thread takes in a chunk */
#define PK_CHUNK (PK_THREADS * PK_RUN) /* ids a block takes */

__host__ __device__ __forceinline__ int64_t pk_chunks(int64_t V) { return (V + PK_CHUNK - 1) / PK_CHUNK; }

// The grid of a launch over every chunk of n rows: rows on x, chunks on y (V below 268M ids).
static inline cudaError_t pk_chunk_grid(int64_t V, int n, dim3 *grid, int *nb) {
    int64_t c = pk_chunks(V);
    if (c > 65535) return cudaErrorInvalidValue;
    *grid = dim3((unsigned)n, (unsigned)c), *nb = (int)c;
    return cudaSuccess;
}

struct pk_max {
    template <typename T> __device__ __forceinline__ T operator()(const T &a, const T &b) const { return a > b ? a : b; }
};

// The host's z: logit / temperature in double, NaN as -inf.
__device__ __forceinline__ double pk_z(float l, double temperature) {
    return isnan(l) ? -INFINITY : (double)l / temperature;
}
