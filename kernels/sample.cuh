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

struct pk_max {
    template <typename T> __device__ __forceinline__ T operator()(const T &a, const T &b) const { return a > b ? a : b; }
};

// The host's z: logit / temperature in double, NaN as -inf.
__device__ __forceinline__ double pk_z(float l, double temperature) {
    return isnan(l) ? -INFINITY : (double)l / temperature;
}
