// The mHC pre step of a site (MODEL_V41 §5.3) for a few rows in one launch, all of it at once
// or either of its two independent parts (the coefficients; the normed input) alone:
// blocks that each take a split of the mixes' reduction (an F32 matmul: fn streamed, each block
// fetching its weights before it waits for the kernel before), a block per row for the row's sum
// of squares, and a block per row for its collapse with the earlier site's pre and the RMSNorm.
// The last of the split and sum blocks to finish adds the split partials in a fixed order and
// turns each row's mixes into its coefficients (a warp per row), while the norm blocks run.
// Every sum is grouped as in k_matmul_simt (its split-K, through dot16 and splitk_sum_with),
// k_hc_mix, k_hc_collapse and k_rmsnorm, through their shared bodies (row_ops.cuh): the fused
// step gives those kernels' bits, so a row's numbers depend neither on its batch nor on which
// path took it.
#include "row_ops.cuh"

#define HP_LANE 16             // reduction columns per lane per step: the CUDA-core matmul's
#define HP_STEP (32 * HP_LANE) // a warp's step
#define HP_MAX_SPLIT 3072      // the CUDA-core matmul adds a split this long in one staged chunk
#define HP_MAX_MIXES 32        // a warp per mix (hc <= 4)

// The 16 floats at p (16-byte aligned; read-only for the kernel).
__device__ __forceinline__ void load16f(float v[16], const float *p) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
        float4 f = __ldg((const float4 *)p + q);
        v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
    }
}

// Split b of the mixes: warp o < nm sums row o of fn against every row's x over columns
// [b * split_k, + split_k) as the CUDA-core matmul's warps do (lane l: columns l * 16 + j * 512,
// 16 added in order per step j, the steps in order, then across the warp), each step's x of every
// row staged in shared memory; the sums go to partial [split][row][mix].
__device__ __forceinline__ void hc_pre_split(const hc_pre_args_t &a, int nm, int m, float *xs) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, e = lane * HP_LANE;
    const int64_t k = a.fn.cols, k_lo = (int64_t)blockIdx.x * a.split_k, kn = min(a.split_k, k - k_lo);
    const float *W = (const float *)a.fn.data + (int64_t)warp * k + k_lo, *X = a.X + k_lo;
    float acc[K_HC_PRE_ROWS], w[16];
#pragma unroll
    for (int p = 0; p < K_HC_PRE_ROWS; p++) acc[p] = 0.0f;
    if (warp < nm && e < kn) load16f(w, W + e); /* weights: before the wait */
    pdl_begin();
    for (int64_t c0 = 0; c0 < kn; c0 += HP_STEP) {
        int cn = (int)min((int64_t)HP_STEP, kn - c0), n4 = cn >> 2;
        if (c0 && warp < nm && e < cn) load16f(w, W + c0 + e);
        __syncthreads(); /* the step before is done with xs */
        for (int i = threadIdx.x; i < m * n4; i += blockDim.x) {
            int p = i / n4, c = i - p * n4;
            ((float4 *)xs)[p * (HP_STEP / 4) + c] = __ldg((const float4 *)(X + p * a.ldx + c0) + c);
        }
        __syncthreads();
        if (warp >= nm || e >= cn) continue;
#pragma unroll
        for (int p = 0; p < K_HC_PRE_ROWS; p++) {
            if (p >= m) break;
            float x[16];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float4 f = ((const float4 *)xs)[(p * HP_STEP + e) / 4 + q];
                x[4 * q] = f.x, x[4 * q + 1] = f.y, x[4 * q + 2] = f.z, x[4 * q + 3] = f.w;
            }
            acc[p] += dot16(w, x);
        }
    }
    if (warp >= nm) return;
#pragma unroll
    for (int p = 0; p < K_HC_PRE_ROWS; p++) {
        if (p >= m) break;
        float v = warp_sum(acc[p]);
        if (lane == 0) a.partial[((int64_t)blockIdx.x * m + p) * nm + warp] = v;
    }
}

// Row p: out = rmsnorm(sum_k pre[k] * X_k) times norm, as k_hc_collapse then k_rmsnorm in place.
template <int HC>
__device__ __forceinline__ void hc_pre_norm(const hc_pre_args_t &a, int p, const float4 (&g)[RN_VEC], float *red) {
    const float *x = a.X + p * a.ldx, *pre = a.pre + p * a.ldp;
    const int D = (int)a.D, hc = a.hc;
    rmsnorm_vec_row((float4 *)(a.out + p * a.ldo), g, D, a.eps, rmsnorm_vec_threads(D), red, [&](int i) {
        int64_t d = 4 * (int64_t)i;
        return make_float4(hc_collapse_at<HC>(x, pre, D, hc, d), hc_collapse_at<HC>(x, pre, D, hc, d + 1),
                           hc_collapse_at<HC>(x, pre, D, hc, d + 2), hc_collapse_at<HC>(x, pre, D, hc, d + 3));
    });
}

// Blocks [0, splits): the splits of the mixes; splits + p: row p's sum of squares of X;
// splits + m + p: row p's normed collapse (the norm part's launch has those blocks alone).
__global__ void __launch_bounds__(HC_THREADS) hc_pre_kernel(hc_pre_args_t a, int splits) {
    __shared__ __align__(16) float xs[K_HC_PRE_ROWS * HP_STEP];
    __shared__ float red[33], mix[K_HC_PRE_ROWS * HP_MAX_MIXES], C[K_HC_PRE_ROWS * 16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nm = (2 + a.hc) * a.hc, m = (int)a.m;
    const int64_t k = a.fn.cols;
    float *ss_of = a.partial + (int64_t)splits * m * nm; /* each row's sum of squares of X, for its mixes */
    int b = blockIdx.x + (a.part == K_HC_PRE_NORM ? splits + m : 0);
    if (b < splits) hc_pre_split(a, nm, m, xs);
    else if (b < splits + m) {
        pdl_begin();
        float ss = hc_row_ss(a.X + (b - splits) * a.ldx, k, red);
        if (threadIdx.x == 0) ss_of[b - splits] = ss;
    } else {
        float4 g[RN_VEC];
        rmsnorm_vec_weights(g, a.norm, (int)a.D, rmsnorm_vec_threads(a.D));
        pdl_begin();
        if (a.hc == 4) hc_pre_norm<4>(a, b - splits - m, g, red); /* the model's hc_mult */
        else hc_pre_norm<0>(a, b - splits - m, g, red);
        return;
    }
    if (!splitk_last(a.counter, (unsigned)(splits + m))) return;
    float ss = warp < m ? __ldcg(&ss_of[warp]) : 0.0f; /* in flight with the partials */
    splitk_sum_with<1>(a.partial, splits, m, nm, 0, m, 0, nm,
                       [&](int64_t p, int64_t o, const float *v) { mix[p * nm + o] = v[0]; });
    __syncthreads();
    if (warp >= m) return;
    float inv = rms_scale(ss, k, a.eps), *mw = mix + warp * nm;
    if (lane < nm) mw[lane] = mw[lane] * inv;
    __syncwarp();
    hc_coefs_warp(a.coef + warp * a.ldc, mw, C + warp * 16, a.base, a.scale, a.hc, a.hc_eps, a.iters);
}

extern "C" int k_hc_pre_ok(const hc_pre_args_t *a) {
    int64_t nm = (int64_t)(2 + a->hc) * a->hc;
    return a->m >= 1 && a->m <= K_HC_PRE_ROWS && a->hc >= 1 && nm <= HP_MAX_MIXES && a->fn.kind == KW_F32 &&
           a->part >= K_HC_PRE_ALL && a->part <= K_HC_PRE_NORM &&
           k_matmul_fast_ok(&a->fn) && a->fn.cols == a->hc * a->D && a->fn.rows >= nm && a->split_k > 0 &&
           a->split_k % 16 == 0 && a->split_k <= HP_MAX_SPLIT && (uintptr_t)a->X % 16 == 0 && a->ldx % 4 == 0 &&
           rmsnorm_vec_ok(a->out, a->ldo, a->out, a->ldo, a->norm, a->D);
}

extern "C" size_t k_hc_pre_partial_floats(const hc_pre_args_t *a) {
    return (size_t)(ceil_div(a->fn.cols, a->split_k) * a->m * (2 + a->hc) * a->hc + a->m);
}

extern "C" cudaError_t k_hc_pre(const hc_pre_args_t *a, cudaStream_t s) {
    if (!k_hc_pre_ok(a)) return cudaErrorInvalidValue;
    int splits = (int)ceil_div(a->fn.cols, a->split_k), m = (int)a->m;
    int blocks = a->part == K_HC_PRE_NORM ? m : a->part == K_HC_PRE_MIXES ? splits + m : splits + 2 * m;
    return k_launch(hc_pre_kernel, (unsigned)blocks, HC_THREADS, 0, s, *a, splits);
}
