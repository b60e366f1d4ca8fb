// Matmul on the CUDA cores for few positions (decode) and for the F32/BF16 weights that the
// model computes in fp32, in fp32: each warp streams two weight rows in their storage format
// (16-byte loads, two steps in flight, dequantized in registers), against up to MT positions
// of activations staged in shared memory. Memory-bound by design: every weight byte is read
// once per MT positions. A plain one-thread-per-output kernel covers shapes the fast one
// cannot read.
#include "common.cuh"

#define MM_WARPS 8
#define MM_RW 2          // weight rows per warp
#define MM_STAGE 8192    // staged activations: MT positions x (8192 / MT) columns
#define MM_LANE 16       // columns per lane per step
#define MM_STEP (32 * MM_LANE)

extern "C" int k_matmul_fast_ok(const kw_t *w) {
    bool blocks = w->kind == KW_F32 || w->kind == KW_BF16 || w->block_cols == 32;
    return w->cols % 16 == 0 && blocks && (uintptr_t)w->data % 16 == 0;
}

// The raw bytes of 16 consecutive elements (r, c..c+15) of w; c a multiple of 16.
template <int KIND> struct raw16 {
    uint4 q[KIND == KW_F32 ? 4 : KIND == KW_BF16 ? 2 : 1];
};

template <int KIND>
__device__ __forceinline__ void load16(raw16<KIND> &v, const kw_t &w, const uint8_t *data, int64_t r, int64_t c) {
    if (KIND == KW_F32 || KIND == KW_BF16 || KIND == KW_FP8) {
        const uint4 *p = (const uint4 *)(data + (size_t)(r * w.cols + c) * (KIND == KW_F32 ? 4 : KIND == KW_BF16 ? 2 : 1));
#pragma unroll
        for (int i = 0; i < (int)(sizeof v.q / sizeof v.q[0]); i++) v.q[i] = __ldg(p + i);
    } else {
        uint2 q = __ldg((const uint2 *)(data + (size_t)r * (w.cols / 2) + c / 2));
        v.q[0] = make_uint4(q.x, q.y, 0, 0);
    }
}

// The 16 values, times the block scale s.
template <int KIND>
__device__ __forceinline__ void decode16(const raw16<KIND> &v, float s, float out[16]) {
    if (KIND == KW_F32) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            out[4 * i] = __uint_as_float(v.q[i].x), out[4 * i + 1] = __uint_as_float(v.q[i].y);
            out[4 * i + 2] = __uint_as_float(v.q[i].z), out[4 * i + 3] = __uint_as_float(v.q[i].w);
        }
    } else if (KIND == KW_BF16) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint32_t u[4] = {v.q[i].x, v.q[i].y, v.q[i].z, v.q[i].w};
#pragma unroll
            for (int j = 0; j < 4; j++) out[8 * i + 2 * j] = bits_f(u[j] << 16), out[8 * i + 2 * j + 1] = bits_f(u[j] & 0xFFFF0000u);
        }
    } else if (KIND == KW_FP8) {
        uint32_t u[4] = {v.q[0].x, v.q[0].y, v.q[0].z, v.q[0].w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[i] >> (16 * j)), __NV_E4M3);
                float2 f = __half22float2(__half2(h));
                out[4 * i + 2 * j] = f.x * s, out[4 * i + 2 * j + 1] = f.y * s;
            }
    } else {
        uint32_t u[2] = {v.q[0].x, v.q[0].y};
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) out[8 * i + j] = e2m1_f(u[i] >> (4 * j)) * s;
    }
}

// Positions [*p0, *p1) and the weight this block works on; false when the block has no group.
__device__ __forceinline__ bool block_group(const mm_args_t &a, int gi, int64_t *p0, int64_t *p1, kw_t *w) {
    *w = a.w;
    if (!a.wtab) {
        *p0 = 0, *p1 = a.m;
        return true;
    }
    if (gi >= a.counts[0]) return false;
    int g = a.active[gi];
    *p0 = a.offsets[g], *p1 = a.offsets[g + 1];
    w->data = a.wtab[g].data, w->scale = a.wtab[g].scale;
    return true;
}

// Shared-memory slot of staged column e: four planes of kc / 4, so that a lane's 16 columns are
// four conflict-free 16-byte reads.
__device__ __forceinline__ int plane_slot(int e, int kc) { return ((e & 15) >> 2) * (kc / 4) + (e >> 4) * 4 + (e & 3); }

// Block b handles the groups of MM_WARPS * MM_RW outputs b, b + gridDim.x, ... (one group when
// the reduction is split), so that the staged activations serve many weight rows.
template <int KIND, int MT>
__global__ void __launch_bounds__(MM_WARPS * 32) mm_simt_kernel(mm_args_t a) {
    extern __shared__ __align__(16) float xs[]; // [MT][KC]
    const int KC = MM_STAGE / MT, GROUP = MM_WARPS * MM_RW;
    int64_t pb, pe;
    kw_t w;
    if (!block_group(a, blockIdx.z, &pb, &pe, &w)) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int split = a.pos_chunk ? 0 : blockIdx.y;
    if (a.pos_chunk) pb = (int64_t)blockIdx.y * a.pos_chunk, pe = min(pe, pb + a.pos_chunk);
    int64_t k_lo = (int64_t)split * a.split_k, k_hi = min(a.k, k_lo + a.split_k);
    const bool quant = KIND == KW_FP8 || KIND == KW_FP4;
    for (int64_t p0 = pb; p0 < pe; p0 += MT) {
        int np = (int)min((int64_t)MT, pe - p0);
        int64_t staged = -1; /* the chunk in shared memory */
        for (int64_t g = blockIdx.x; g * GROUP < a.n; g += gridDim.x) {
            int64_t o0 = g * GROUP + warp * MM_RW;
            const uint8_t *rs[MM_RW];
            int64_t wr[MM_RW];
#pragma unroll
            for (int j = 0; j < MM_RW; j++) {
                wr[j] = a.row0 + min(o0 + j, a.n - 1);
                rs[j] = quant ? row_scales(w, w.scale, wr[j]) : NULL;
            }
            float acc[MM_RW][MT];
#pragma unroll
            for (int j = 0; j < MM_RW; j++)
#pragma unroll
                for (int t = 0; t < MT; t++) acc[j][t] = 0.0f;
            for (int64_t kc = k_lo; kc < k_hi; kc += KC) {
                int kn = (int)min((int64_t)KC, k_hi - kc);
                if (kc != staged) {
                    __syncthreads();
                    for (int t = 0; t < MT; t++) {
                        int64_t p = p0 + t, xr = t < np ? (a.x_rows ? a.x_rows[p] : p) : 0;
                        for (int e = threadIdx.x; e < kn; e += blockDim.x)
                            xs[t * KC + plane_slot(e, KC)] = t < np ? a.x[xr * a.ldx + kc + e] : 0.0f;
                    }
                    __syncthreads();
                    staged = kc;
                }
                for (int kk = lane * MM_LANE; kk < kn; kk += 2 * MM_STEP) {
                    bool two = kk + MM_STEP < kn;
                    raw16<KIND> raw[2][MM_RW];
#pragma unroll
                    for (int j = 0; j < MM_RW; j++) {
                        load16<KIND>(raw[0][j], w, w.data, wr[j], kc + kk);
                        if (two) load16<KIND>(raw[1][j], w, w.data, wr[j], kc + kk + MM_STEP);
                    }
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        if (u && !two) break;
                        int e = kk + u * MM_STEP;
                        float wv[MM_RW][16];
#pragma unroll
                        for (int j = 0; j < MM_RW; j++)
                            decode16<KIND>(raw[u][j], quant ? scale_of(rs[j], w.scale_f32, kc + e) : 1.0f, wv[j]);
#pragma unroll
                        for (int t = 0; t < MT; t++) {
                            float xv[16];
#pragma unroll
                            for (int q = 0; q < 4; q++) {
                                float4 f = *(const float4 *)(xs + t * KC + q * (KC / 4) + (e >> 4) * 4);
                                xv[4 * q] = f.x, xv[4 * q + 1] = f.y, xv[4 * q + 2] = f.z, xv[4 * q + 3] = f.w;
                            }
#pragma unroll
                            for (int j = 0; j < MM_RW; j++) {
                                float s = 0.0f;
#pragma unroll
                                for (int i = 0; i < 16; i++) s += wv[j][i] * xv[i];
                                acc[j][t] += s;
                            }
                        }
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < MM_RW; j++)
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    float v = warp_sum(acc[j][t]);
                    int64_t o = o0 + j, p = p0 + t;
                    if (lane == 0 && o < a.n && t < np) {
                        if (a.partial) a.partial[((int64_t)split * a.positions + p) * a.n + o] = v;
                        else a.out[p * a.ldo + o] = v;
                    }
                }
        }
    }
    if (a.partial) { /* split: one group per block */
        int64_t ob = (int64_t)blockIdx.x * GROUP;
        splitk_finish(a, blockIdx.x, pb, pe, ob, min(a.n, ob + GROUP));
    }
}

// One thread per output: any shape and block layout.
__global__ void mm_plain_kernel(mm_args_t a) {
    int64_t pb, pe;
    kw_t w;
    if (!block_group(a, blockIdx.z, &pb, &pe, &w)) return;
    int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (o >= a.n) return;
    for (int64_t p = pb + blockIdx.y; p < pe; p += gridDim.y) {
        int64_t xr = a.x_rows ? a.x_rows[p] : p;
        const float *x = a.x + xr * a.ldx;
        float s = 0.0f;
        for (int64_t i = 0; i < a.k; i++) s += x[i] * kw_at(w, w.data, w.scale, a.row0 + o, i);
        a.out[p * a.ldo + o] = s;
    }
}

template <int KIND, int MT>
static cudaError_t launch(const mm_args_t *a, dim3 grid, cudaStream_t s) {
    mm_simt_kernel<KIND, MT><<<grid, MM_WARPS * 32, MM_STAGE * sizeof(float), s>>>(*a);
    return DI_LAUNCHED();
}

template <int KIND>
static cudaError_t launch_mt(const mm_args_t *a, int64_t most, dim3 grid, cudaStream_t s) {
    if (most <= 1) return launch<KIND, 1>(a, grid, s);
    if (most <= 2) return launch<KIND, 2>(a, grid, s);
    if (most <= 4) return launch<KIND, 4>(a, grid, s);
    return launch<KIND, 8>(a, grid, s);
}

extern "C" cudaError_t k_matmul_simt(const mm_args_t *a, cudaStream_t s) {
    if (a->n <= 0 || (a->wtab ? a->max_active : a->m) <= 0) return cudaSuccess;
    unsigned groups = a->wtab ? (unsigned)a->max_active : 1;
    if (!k_matmul_fast_ok(&a->w)) {
        if (a->splits > 1) return cudaErrorInvalidValue;
        dim3 grid((unsigned)ceil_div(a->n, 128), a->wtab ? 16 : (unsigned)min(a->m, (int64_t)65535), groups);
        mm_plain_kernel<<<grid, 128, 0, s>>>(*a);
        return DI_LAUNCHED();
    }
    unsigned ys = a->pos_chunk ? (unsigned)ceil_div(a->m, a->pos_chunk) : (unsigned)a->splits;
    int64_t ngroups = ceil_div(a->n, MM_WARPS * MM_RW), most_blocks = a->splits > 1 ? ngroups : a->blocks_cap;
    dim3 grid((unsigned)min(ngroups, most_blocks > 0 ? most_blocks : ngroups), ys, groups);
    /* positions a block takes per pass: what it can have, or for experts what one has on average */
    int64_t most = a->pos_chunk ? a->pos_chunk : a->wtab ? ceil_div(a->positions, a->max_active) : a->m;
    switch (a->w.kind) {
    case KW_F32: return launch_mt<KW_F32>(a, most, grid, s);
    case KW_BF16: return launch_mt<KW_BF16>(a, most, grid, s);
    case KW_FP8: return launch_mt<KW_FP8>(a, most, grid, s);
    default: return launch_mt<KW_FP4>(a, most, grid, s);
    }
}
