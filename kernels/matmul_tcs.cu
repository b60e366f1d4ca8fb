// Grouped (MoE) matmul on the tensor cores for few positions per expert (decode batches): the
// weights are the 16-row side of mma.sync m16n8k16 and eight positions the 8-column side, so
// a pass wastes at most seven positions where a 128-position tile would waste 120. A block
// of 8 warps takes 128 output rows of one expert; each warp streams 16 rows (16 bytes per
// row and lane, eight steps in flight) and dequantizes them into bf16 fragments in registers.
// The reduction order inside a step is a permutation of k shared by both operands: lane
// (g, c) loads the contiguous bytes of chunk c of its rows g and g + 8, and its fragment
// slots for logical k 2c, 2c+1, 2c+8, 2c+9 of sub-step j take physical k 4j .. 4j+3 of that
// chunk. The staged activations are stored in that order as TERMS bf16 pieces (as in
// matmul_tc.cu), split once per block, so that a lane's B fragment is one 8-byte read per
// piece and the four lanes of a row read consecutive words. A position's result depends on
// its own activations alone (not on the positions sharing its pass), so batching does not
// change it.
#include "common.cuh"

#define TS_WARPS 8
#define TS_ROWS (16 * TS_WARPS) // output rows per block
#define TS_NP 8                 // positions per pass
#define TS_U 8                  // steps in flight (128 bytes per lane)
#define TS_KC 2048              // staged columns per position (a multiple of every step width)
#define TS_LDX (TS_KC + 16)     // staged row stride in bf16: four rows' 32-byte words in distinct banks

extern "C" int k_matmul_tcs_ok(const kw_t *w) {
    return (w->kind == KW_FP8 || w->kind == KW_FP4) && w->cols % 32 == 0 && w->block_cols == 32 &&
           (uintptr_t)w->data % 16 == 0;
}

__device__ __forceinline__ uint32_t pack2_bf16(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

__device__ __forceinline__ void mma16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Elements a lane takes per row and step (16 bytes), and the sub-steps of 4 they make.
template <int KIND> struct ts_fmt {
    static const int ept = KIND == KW_FP8 ? 16 : 32, subs = ept / 4, step = 4 * ept;
};

// Physical k 4j .. 4j+3 of a lane's chunk, times the block scale, as two bf16 pairs.
template <int KIND>
__device__ __forceinline__ void decode4(const uint4 &raw, int j, float s, uint32_t &lo, uint32_t &hi) {
    if (KIND == KW_FP8) {
        uint32_t w = j == 0 ? raw.x : j == 1 ? raw.y : j == 2 ? raw.z : raw.w;
        __half2_raw h0 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xFFFF), __NV_E4M3);
        __half2_raw h1 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
        float2 f0 = __half22float2(__half2(h0)), f1 = __half22float2(__half2(h1));
        lo = pack2_bf16(f0.x * s, f0.y * s), hi = pack2_bf16(f1.x * s, f1.y * s);
    } else {
        uint32_t w = (j >> 1) == 0 ? raw.x : (j >> 1) == 1 ? raw.y : (j >> 1) == 2 ? raw.z : raw.w;
        uint32_t b = w >> (16 * (j & 1));
        lo = pack2_bf16(e2m1_f(b) * s, e2m1_f(b >> 4) * s), hi = pack2_bf16(e2m1_f(b >> 8) * s, e2m1_f(b >> 12) * s);
    }
}

// Stages activations [kc, kc + kn) of positions p0 .. p0+np-1 (zeros beyond np and up to the
// step-rounded width kr) as TERMS bf16 pieces in the lanes' order: float4 q = c * subs + j of a
// step goes to 8-byte word j * 4 + c.
template <int KIND, int TERMS>
__device__ __forceinline__ void ts_stage(__nv_bfloat16 *xs, const mm_args_t &a, const int64_t *xoff, int np, int64_t kc,
                                         int kn, int kr) {
    const int subs = ts_fmt<KIND>::subs, step = ts_fmt<KIND>::step;
    int per = kr >> 2, total = TS_NP * per;
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
        int t = i / per, q4 = i - t * per, e = 4 * q4;
        float r[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (t < np && e < kn) {
            const float *src = a.x + xoff[t] + kc + e;
            if (a.x_vec) {
                float4 v = __ldg((const float4 *)src);
                r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
            } else {
#pragma unroll
                for (int z = 0; z < 4; z++) r[z] = src[z];
            }
        }
        int in = q4 % (step / 4), c = in / subs, j = in - c * subs;
        __nv_bfloat16 *dst = xs + t * TS_LDX + (q4 - in) * 4 + (j * 4 + c) * 4;
#pragma unroll
        for (int p = 0; p < TERMS; p++) { /* each piece the bf16 of what the earlier ones left */
            float h[4];
#pragma unroll
            for (int z = 0; z < 4; z++) h[z] = __bfloat162float(__float2bfloat16_rn(r[z])), r[z] -= h[z];
            *(uint2 *)(dst + p * TS_NP * TS_LDX) = make_uint2(pack2_bf16(h[0], h[1]), pack2_bf16(h[2], h[3]));
        }
    }
}

template <int KIND, int TERMS>
__global__ void __launch_bounds__(TS_WARPS * 32, 2) mm_tcs_kernel(mm_args_t a) {
    extern __shared__ __align__(16) __nv_bfloat16 xs[]; // [TERMS][TS_NP][TS_LDX]
    __shared__ int64_t xoff[TS_NP];
    const int EPT = ts_fmt<KIND>::ept, SUBS = ts_fmt<KIND>::subs, STEP = ts_fmt<KIND>::step;
    int gi = blockIdx.z;
    if (gi >= a.counts[0]) return;
    int grp = a.active[gi];
    int64_t pb = a.offsets[grp], pe = a.offsets[grp + 1];
    kw_t w = a.w;
    w.data = a.wtab[grp].data, w.scale = a.wtab[grp].scale;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    int64_t o0 = (int64_t)blockIdx.x * TS_ROWS + warp * 16;
    int64_t r0 = a.row0 + min(o0 + g, a.n - 1), r1 = a.row0 + min(o0 + g + 8, a.n - 1);
    size_t rowb = KIND == KW_FP8 ? (size_t)w.cols : (size_t)w.cols / 2;
    const uint8_t *d0 = w.data + (size_t)r0 * rowb, *d1 = w.data + (size_t)r1 * rowb;
    const uint8_t *s0 = row_scales(w, w.scale, r0), *s1 = row_scales(w, w.scale, r1);
    for (int64_t p0 = pb; p0 < pe; p0 += TS_NP) {
        int np = (int)min((int64_t)TS_NP, pe - p0);
        __syncthreads(); /* the previous pass is done with xoff and xs */
        if (threadIdx.x < TS_NP) {
            int64_t p = p0 + threadIdx.x; /* x row: gathered (up projections) or the position itself (down) */
            xoff[threadIdx.x] = threadIdx.x < np ? (a.x_rows ? a.x_rows[p] : p) * a.ldx : 0;
        }
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t kc = 0; kc < a.k; kc += TS_KC) {
            int kn = (int)min((int64_t)TS_KC, a.k - kc), kr = (kn + STEP - 1) / STEP * STEP;
            __syncthreads();
            ts_stage<KIND, TERMS>(xs, a, xoff, np, kc, kn, kr);
            __syncthreads();
            const __nv_bfloat16 *xg = xs + g * TS_LDX;
            for (int kb = 0; kb < kr; kb += TS_U * STEP) {
                uint4 raw[TS_U][2];
#pragma unroll
                for (int u = 0; u < TS_U; u++) {
                    int64_t k = kc + kb + u * STEP + c * EPT;
                    bool ok = kb + u * STEP < kr && k < kc + kn;
                    size_t off = KIND == KW_FP8 ? (size_t)k : (size_t)k / 2;
                    raw[u][0] = ok ? __ldg((const uint4 *)(d0 + off)) : make_uint4(0, 0, 0, 0);
                    raw[u][1] = ok ? __ldg((const uint4 *)(d1 + off)) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < TS_U; u++) {
                    int ks = kb + u * STEP;
                    if (ks >= kr) break;
                    int64_t k = kc + ks + c * EPT;
                    float sc0 = k < a.k ? scale_of(s0, w.scale_f32, k) : 0.0f, sc1 = k < a.k ? scale_of(s1, w.scale_f32, k) : 0.0f;
#pragma unroll
                    for (int j = 0; j < SUBS; j++) {
                        uint32_t a0, a1, a2, a3;
                        decode4<KIND>(raw[u][0], j, sc0, a0, a2);
                        decode4<KIND>(raw[u][1], j, sc1, a1, a3);
#pragma unroll
                        for (int t = 0; t < TERMS; t++) {
                            uint2 b = *(const uint2 *)(xg + t * TS_NP * TS_LDX + ks + (j * 4 + c) * 4);
                            mma16816(acc, a0, a1, a2, a3, b.x, b.y);
                        }
                    }
                }
            }
        }
        /* acc: rows g and g + 8 of the warp, positions 2c and 2c + 1 */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int64_t o = o0 + g + (i >> 1) * 8, p = 2 * c + (i & 1);
            if (o < a.n && p < np) a.out[(p0 + p) * a.ldo + o] = acc[i];
        }
    }
}

template <int KIND, int TERMS>
static cudaError_t ts_launch(const mm_args_t *a, cudaStream_t s) {
    size_t smem = (size_t)TERMS * TS_NP * TS_LDX * sizeof(__nv_bfloat16);
    static bool raised;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(mm_tcs_kernel<KIND, TERMS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    dim3 grid((unsigned)ceil_div(a->n, TS_ROWS), 1, (unsigned)a->max_active);
    mm_tcs_kernel<KIND, TERMS><<<grid, TS_WARPS * 32, smem, s>>>(*a);
    return DI_LAUNCHED();
}

template <int KIND>
static cudaError_t ts_launch_terms(const mm_args_t *a, cudaStream_t s) {
    if (a->act_terms >= 3) return ts_launch<KIND, 3>(a, s);
    if (a->act_terms == 2) return ts_launch<KIND, 2>(a, s);
    return ts_launch<KIND, 1>(a, s);
}

extern "C" cudaError_t k_matmul_tcs(const mm_args_t *a, cudaStream_t s) {
    if (!k_matmul_tcs_ok(&a->w) || !a->wtab || a->splits > 1 || a->x_group_n) return cudaErrorInvalidValue;
    if (a->n <= 0 || a->max_active <= 0) return cudaSuccess;
    return a->w.kind == KW_FP8 ? ts_launch_terms<KW_FP8>(a, s) : ts_launch_terms<KW_FP4>(a, s);
}
