// Per-row bodies of RMSNorm and of the hyper-connection mix and collapse, shared by their own
// kernels (rmsnorm.cu, hc_mix.cu, hc_collapse.cu) and the fused mHC pre step (hc_pre.cu): one
// body each, so that the fused kernel computes the separate kernels' bits.
#pragma once

#include "common.cuh"

#define HC_MAX 16
#define HC_THREADS 1024 // hc_mix's block: the grouping of its sum of squares
#define HC_VEC 8        // 16-byte loads per thread in flight: 128 KB per pass of the block
#define RN_VEC 4        // RMSNorm: float4s per thread held in registers, 512 threads x 16 columns

static_assert(HC_THREADS >= (2 + HC_MAX) * HC_MAX, "a thread per mix");

__host__ __device__ __forceinline__ float rms_scale(float ss, int64_t n, float eps) { return 1.0f / sqrtf(ss / (float)n + eps); }

// ---- RMSNorm -------------------------------------------------------------------------------------
// The vectorized RMSNorm's threads for a row of cols floats (they fix the grouping of its sum),
// and whether a row can take it (cols % 4 == 0, at most 4 * RN_VEC * 512, 16-byte rows).
__host__ __device__ __forceinline__ int rmsnorm_vec_threads(int64_t cols) {
    return cols >= 4 * RN_VEC * 256 ? 512 : cols >= 4 * RN_VEC * 128 ? 256 : 128;
}
static inline bool rmsnorm_vec_ok(const float *out, int64_t ldo, const float *x, int64_t ldx, const float *w, int64_t cols) {
    return cols % 4 == 0 && cols <= 4 * RN_VEC * 512 && (uintptr_t)x % 16 == 0 && (uintptr_t)out % 16 == 0 &&
           (!w || (uintptr_t)w % 16 == 0) && ldx % 4 == 0 && ldo % 4 == 0;
}

// Thread t's float4s t + u * threads (u < RN_VEC) of the norm weights w (w NULL: ones), fetched
// before the kernel's wait: they are weights, so their load overlaps the kernel before.
__device__ __forceinline__ void rmsnorm_vec_weights(float4 (&g)[RN_VEC], const float *w, int cols, int threads) {
    int n4 = cols >> 2, t = threadIdx.x;
#pragma unroll
    for (int u = 0; u < RN_VEC; u++) {
        int i = t + u * threads;
        g[u] = w && t < threads && i < n4 ? __ldg((const float4 *)w + i) : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    }
}

// out = g * (v / sqrt(mean(v^2) + eps)) for a row of cols floats whose float4 i is load(i), g
// from rmsnorm_vec_weights (a weight of 1 multiplies exactly): thread t < threads holds float4s
// t + u * threads (u < RN_VEC) in registers, the block's other threads add nothing to the sum
// (the grouping is that of `threads` threads).
template <class Load>
__device__ __forceinline__ void rmsnorm_vec_row(float4 *o, const float4 (&g)[RN_VEC], int cols, float eps, int threads,
                                                float *red, Load load) {
    int n4 = cols >> 2, t = threadIdx.x;
    float4 v[RN_VEC];
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < RN_VEC; u++) {
        int i = t + u * threads;
        v[u] = t < threads && i < n4 ? load(i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < RN_VEC; u++) ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
    ss = block_sum(ss, red);
    float inv = rms_scale(ss, cols, eps);
    if (t >= threads) return;
#pragma unroll
    for (int u = 0; u < RN_VEC; u++) {
        int i = t + u * threads;
        if (i >= n4) break;
        float4 r;
        r.x = g[u].x * (v[u].x * inv), r.y = g[u].y * (v[u].y * inv);
        r.z = g[u].z * (v[u].z * inv), r.w = g[u].w * (v[u].w * inv);
        o[i] = r;
    }
}

// ---- hyper-connections (MODEL_V41 §5.3) ------------------------------------------------------------
// Collapse of element d of a row: sum_k pre[k] * X_k[d] in stream order. HC: hc at compile time
// (its loads all in flight at once), or 0 for any hc up to HC_MAX.
template <int HC>
__device__ __forceinline__ float hc_collapse_at(const float *x, const float *pre, int64_t D, int hc, int64_t d) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < (HC ? HC : HC_MAX); k++) {
        if (!HC && k >= hc) break;
        s += pre[k] * x[k * D + d];
    }
    return s;
}

// Hyper-connection expand of channels d .. d + V - 1 of one row, in place: X_b <- post[b] * y +
// sum_a C[a][b] X_a (x: the row's hc streams of D; coef: its coefficients, post at hc, C after;
// yv: y's channels, however the caller has them). A thread owns its channels of every stream,
// so reading the old streams before writing is race-free. HC 2-4 (a template): the streams and
// the coefficients are all loaded before any is used; HC 0: hc at run time, the coefficients
// read as they go. k_hc_expand and moe's combine share it (the same bits either way).
template <int HC, int V>
__device__ __forceinline__ void hc_expand_cols(float *x, int64_t D, int64_t d, const float (&yv)[V], const float *coef, int hc_run) {
    const int hc = HC ? HC : hc_run, N = HC ? HC : HC_MAX;
    const float *post = coef + hc, *C = post + hc;
    float old[N][V], pb[HC ? HC : 1], cm[HC ? HC * HC : 1];
#pragma unroll
    for (int a = 0; a < N; a++)
        if (a < hc) load_v<V>(x + a * D + d, old[a]);
    if constexpr (HC > 0) {
#pragma unroll
        for (int b = 0; b < HC; b++) pb[b] = post[b];
#pragma unroll
        for (int i = 0; i < HC * HC; i++) cm[i] = C[i];
    }
    auto post_of = [&](int b) {
        if constexpr (HC > 0) return pb[b];
        else return post[b];
    };
    auto c_of = [&](int a, int b) {
        if constexpr (HC > 0) return cm[a * HC + b];
        else return C[a * hc + b];
    };
#pragma unroll
    for (int b = 0; b < N; b++) {
        if (b >= hc) break;
        float o[V];
#pragma unroll
        for (int c = 0; c < V; c++) {
            float s = 0.0f;
#pragma unroll
            for (int a = 0; a < N; a++)
                if (a < hc) s += c_of(a, b) * old[a][c];
            o[c] = post_of(b) * yv[c] + s;
        }
        if constexpr (V == 4) *(float4 *)(x + b * D + d) = make_float4(o[0], o[1], o[2], o[3]);
        else x[b * D + d] = o[0];
    }
}

// The mixes' sum of squares of a row of n floats over a block of HC_THREADS threads, which issue
// every load of the row before they add any (one memory round trip for a decode row).
__device__ __forceinline__ float hc_row_ss(const float *x, int64_t n, float *red) {
    int t = threadIdx.x;
    float ss = 0.0f;
    if (n % 4 == 0 && (uintptr_t)x % 16 == 0) {
        const float4 *x4 = (const float4 *)x;
        int64_t n4 = n >> 2;
        for (int64_t i = t; i < n4; i += HC_VEC * blockDim.x) {
            float4 v[HC_VEC];
#pragma unroll
            for (int u = 0; u < HC_VEC; u++) v[u] = i + u * blockDim.x < n4 ? x4[i + u * blockDim.x] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int u = 0; u < HC_VEC; u++) ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
        }
    } else {
        for (int64_t i = t; i < n; i += blockDim.x) ss += x[i] * x[i];
    }
    return block_sum(ss, red);
}

// Sinkhorn on C (hc x hc in shared memory) by the calling warp: lane t owns entries t, t + 32, ...
// and sums their row or column in the CPU's order. HC: hc when known at compile time, else 0.
// Up to 32 entries (the model's hc of 4) each lane keeps its entry in a register and reads its
// row or column by shuffles: a pass is then a few shuffles and a division, not shared-memory
// round trips and two warp barriers (40 dependent passes: most of the mHC pre step's tail).
template <int HC> __device__ __forceinline__ void sinkhorn(float *C, int hc_rt, float hc_eps, int iters) {
    int t = threadIdx.x & 31;
    if constexpr (HC > 0 && HC * HC <= 32) {
        /* lanes past the matrix compute on ones, unused: a 0 / 0 would take the division's slow path */
        const int row0 = t / HC * HC, col = t % HC;
        float c = t < HC * HC ? C[t] : 1.0f;
        for (int it = 0; it < iters; it++)
            for (int pass = it ? 0 : 1; pass < 2; pass++) { /* 0: rows, 1: columns */
                float s = 0.0f;
#pragma unroll
                for (int b = 0; b < HC; b++) s += __shfl_sync(0xffffffffu, c, pass ? b * HC + col : row0 + b);
                c = c / (s + hc_eps);
            }
        if (t < HC * HC) C[t] = c;
        __syncwarp();
    } else {
        const int hc = HC ? HC : hc_rt, Q = HC ? (HC * HC + 31) / 32 : HC_MAX * HC_MAX / 32;
        int rows[Q], cols[Q];
#pragma unroll
        for (int q = 0; q < Q; q++) rows[q] = (t + 32 * q) / hc * hc, cols[q] = (t + 32 * q) % hc;
        for (int it = 0; it < iters; it++)
            for (int pass = it ? 0 : 1; pass < 2; pass++) { /* 0: rows, 1: columns */
                float v[Q];
#pragma unroll
                for (int q = 0; q < Q; q++) {
                    int e = t + 32 * q;
                    if (e >= hc * hc) break;
                    float s = 0.0f;
#pragma unroll
                    for (int b = 0; b < (HC ? HC : HC_MAX); b++) {
                        if (!HC && b >= hc) break;
                        s += pass ? C[b * hc + cols[q]] : C[rows[q] + b];
                    }
                    v[q] = C[e] / (s + hc_eps);
                }
                __syncwarp();
#pragma unroll
                for (int q = 0; q < Q; q++)
                    if (t + 32 * q < hc * hc) C[t + 32 * q] = v[q];
                __syncwarp();
            }
    }
}

// A row's coefficients by the calling warp from its scaled mixes m (shared memory, (2 + hc) * hc,
// the CPU backend's mix_row operation for operation): pre and post, and lane t < hc row t of C
// through its softmax, then the Sinkhorn projection (C: hc * hc floats of shared scratch); into o.
__device__ __forceinline__ void hc_coefs_warp(float *o, const float *m, float *C, const float *base, const float *sc, int hc,
                                              float hc_eps, int iters) {
    int t = threadIdx.x & 31;
    if (t < hc) {
        o[t] = sigmoid_dev(m[t] * sc[0] + base[t]) + hc_eps;
        o[hc + t] = 2.0f * sigmoid_dev(m[hc + t] * sc[1] + base[hc + t]);
        float *row = C + t * hc, mx = -INFINITY, s = 0.0f;
        for (int j = 0; j < hc; j++) {
            row[j] = m[2 * hc + t * hc + j] * sc[2] + base[2 * hc + t * hc + j];
            mx = fmaxf(mx, row[j]);
        }
        for (int j = 0; j < hc; j++) s += row[j] = expf(row[j] - mx);
        for (int j = 0; j < hc; j++) row[j] = row[j] / s + hc_eps;
    }
    __syncwarp();
    if (hc == 4) sinkhorn<4>(C, hc, hc_eps, iters); /* the model's hc_mult */
    else sinkhorn<0>(C, hc, hc_eps, iters);
    for (int e = t; e < hc * hc; e += 32) o[2 * hc + e] = C[e];
}
