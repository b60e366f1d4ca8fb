// Matmul on the tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulation) for FP8
// (32x32 tiles) and FP4 (1x32 blocks) weights: a 128x128 output tile per block of 8 warps,
// reduction in steps of 32 (one scale block). Each step's weights are read in their storage
// format, dequantized exactly into bf16 in shared memory (e4m3 or e2m1 times a power of two
// fits bf16). Activations: TERMS bf16 pieces (x = x1 + x2 + x3 up to rounding: 1 is plain
// bf16, 2 keeps about 16 bits, 3 all 24 of an fp32) each multiplied into the same
// accumulators, at TERMS times the tensor work. The next step's global loads are
// in flight while the current one multiplies (register prefetch, two shared buffers).
// Grouped mode walks a device-built list of (expert, 128 positions) tiles, so MoE needs no
// host round trip.
#include "common.cuh"

#define TC_BM 128
#define TC_BN 128
#define TC_BK 32
#define TC_LDS 40 // bf16 per shared row: 32 + 8 padding, conflict-free ldmatrix

extern "C" int k_matmul_tc_ok(const kw_t *w) {
    return (w->kind == KW_FP8 || w->kind == KW_FP4) && w->cols % 32 == 0 && w->block_cols == 32 &&
           (uintptr_t)w->data % 16 == 0;
}

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

__device__ __forceinline__ void ldsm_x4(const void *p, uint32_t r[4]) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// What one thread carries from global memory to shared memory for one reduction step: 16
// activations of one position and 16 weights of one row.
struct stage_t {
    float x[16];
    uint4 wq; // FP8: 16 bytes; FP4: 8 bytes in .x/.y
    float ws;
};

template <int KIND>
__device__ __forceinline__ void stage_load(stage_t &st, const mm_args_t &a, const kw_t &w, const uint8_t *rs, int64_t xbase,
                                           bool xok, int64_t wrow, bool wok, int64_t k, bool x_vec) {
    if (xok) {
        const float *xp = a.x + xbase + k;
        if (x_vec) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 v = __ldg((const float4 *)xp + i);
                st.x[4 * i] = v.x, st.x[4 * i + 1] = v.y, st.x[4 * i + 2] = v.z, st.x[4 * i + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++) st.x[i] = __ldg(xp + i);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 16; i++) st.x[i] = 0.0f;
    }
    if (wok) {
        if (KIND == KW_FP8) st.wq = __ldg((const uint4 *)(w.data + (size_t)(wrow * w.cols + k)));
        else {
            uint2 q = __ldg((const uint2 *)(w.data + (size_t)wrow * (w.cols / 2) + k / 2));
            st.wq = make_uint4(q.x, q.y, 0, 0);
        }
        st.ws = scale_of(rs, w.scale_f32, k);
    } else {
        st.wq = make_uint4(0, 0, 0, 0);
        st.ws = 0.0f;
    }
}

template <int KIND, int TERMS>
__device__ __forceinline__ void stage_store(const stage_t &st, __nv_bfloat16 *const as[3], __nv_bfloat16 *bs) {
    uint32_t ap[3][8], bp[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float r0 = st.x[2 * i], r1 = st.x[2 * i + 1];
#pragma unroll
        for (int t = 0; t < TERMS; t++) { /* each piece the bf16 of what the earlier ones left */
            float h0 = __bfloat162float(__float2bfloat16_rn(r0)), h1 = __bfloat162float(__float2bfloat16_rn(r1));
            ap[t][i] = pack_bf16(h0, h1);
            r0 -= h0, r1 -= h1;
        }
    }
    if (KIND == KW_FP8) {
        uint32_t u[4] = {st.wq.x, st.wq.y, st.wq.z, st.wq.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[i] >> (16 * j)), __NV_E4M3);
                float2 f = __half22float2(__half2(h));
                bp[2 * i + j] = pack_bf16(f.x * st.ws, f.y * st.ws);
            }
    } else {
        uint32_t u[2] = {st.wq.x, st.wq.y};
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint32_t b = u[i] >> (8 * j);
                bp[4 * i + j] = pack_bf16(e2m1_f(b) * st.ws, e2m1_f(b >> 4) * st.ws);
            }
    }
#pragma unroll
    for (int t = 0; t < TERMS; t++) {
        uint4 *ad = (uint4 *)as[t];
        ad[0] = make_uint4(ap[t][0], ap[t][1], ap[t][2], ap[t][3]);
        ad[1] = make_uint4(ap[t][4], ap[t][5], ap[t][6], ap[t][7]);
    }
    uint4 *bd = (uint4 *)bs;
    bd[0] = make_uint4(bp[0], bp[1], bp[2], bp[3]);
    bd[1] = make_uint4(bp[4], bp[5], bp[6], bp[7]);
}

#define TC_TILE (TC_BM * TC_LDS) // bf16 per shared tile

template <int KIND, int TERMS>
__global__ void __launch_bounds__(256) mm_tc_kernel(mm_args_t a, int x_vec) {
    extern __shared__ __align__(16) __nv_bfloat16 tc_smem[]; // B[2], then A[2] per activation piece
    __nv_bfloat16 (*Bs)[TC_TILE] = (__nv_bfloat16 (*)[TC_TILE])tc_smem, (*As)[TC_TILE] = Bs + 2;
    kw_t w = a.w;
    int64_t p0, pe;
    if (a.wtab) {
        int ti = blockIdx.y;
        if (ti >= a.counts[1]) return;
        int g = a.tiles[2 * ti];
        p0 = a.tiles[2 * ti + 1], pe = a.offsets[g + 1];
        w.data = a.wtab[g].data, w.scale = a.wtab[g].scale;
    } else {
        p0 = (int64_t)blockIdx.y * TC_BM, pe = a.m;
    }
    int64_t n0 = (int64_t)blockIdx.x * TC_BN;
    int64_t k_lo = (int64_t)blockIdx.z * a.split_k, k_hi = min(a.k, k_lo + a.split_k);
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    // this thread's load slot: one position row (activations) and one weight row, 16 columns
    int lr = tid >> 1, lh = (tid & 1) * 16;
    int64_t p = p0 + lr;
    bool xok = p < pe;
    int64_t xcol = a.x_group_n ? (n0 / a.x_group_n) * a.k : 0; /* block-diagonal: this tile's x columns */
    int64_t xbase = (xok ? (a.x_rows ? a.x_rows[p] : p) : 0) * a.ldx + xcol;
    int64_t o = n0 + lr;
    bool wok = o < a.n;
    int64_t wrow = a.row0 + (wok ? o : 0);
    const uint8_t *rs = row_scales(w, w.scale, wrow);

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[i][j][c] = 0.0f;

    int64_t nt = (k_hi - k_lo) / TC_BK;
    stage_t st;
    if (nt > 0) {
        stage_load<KIND>(st, a, w, rs, xbase, xok, wrow, wok, k_lo + lh, x_vec);
        __nv_bfloat16 *dst[3] = {&As[0][lr * TC_LDS + lh], &As[2][lr * TC_LDS + lh], &As[4][lr * TC_LDS + lh]};
        stage_store<KIND, TERMS>(st, dst, &Bs[0][lr * TC_LDS + lh]);
    }
    __syncthreads();
    int wm0 = (warp >> 2) * 64, wn0 = (warp & 3) * 32;
    for (int64_t t = 0; t < nt; t++) {
        int cur = t & 1;
        if (t + 1 < nt) stage_load<KIND>(st, a, w, rs, xbase, xok, wrow, wok, k_lo + (t + 1) * TC_BK + lh, x_vec);
#pragma unroll
        for (int ks = 0; ks < TC_BK; ks += 16) {
            uint32_t af[4][4], bf[2][4];
#pragma unroll
            for (int nj = 0; nj < 2; nj++)
                ldsm_x4(&Bs[cur][(wn0 + nj * 16 + (lane >> 4) * 8 + (lane & 7)) * TC_LDS + ks + ((lane >> 3) & 1) * 8], bf[nj]);
#pragma unroll
            for (int q = 0; q < TERMS; q++) {
#pragma unroll
                for (int mi = 0; mi < 4; mi++)
                    ldsm_x4(&As[2 * q + cur][(wm0 + mi * 16 + (lane & 15)) * TC_LDS + ks + (lane >> 4) * 8], af[mi]);
#pragma unroll
                for (int mi = 0; mi < 4; mi++)
#pragma unroll
                    for (int ni = 0; ni < 4; ni++)
                        mma_bf16(acc[mi][ni], af[mi], bf[ni >> 1][(ni & 1) * 2], bf[ni >> 1][(ni & 1) * 2 + 1]);
            }
        }
        if (t + 1 < nt) {
            __nv_bfloat16 *dst[3] = {&As[cur ^ 1][lr * TC_LDS + lh], &As[2 + (cur ^ 1)][lr * TC_LDS + lh],
                                     &As[4 + (cur ^ 1)][lr * TC_LDS + lh]};
            stage_store<KIND, TERMS>(st, dst, &Bs[cur ^ 1][lr * TC_LDS + lh]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int64_t pp = p0 + wm0 + mi * 16 + (lane >> 2) + (c >> 1) * 8;
                int64_t oo = n0 + wn0 + ni * 8 + (lane & 3) * 2 + (c & 1);
                if (pp < pe && oo < a.n) {
                    if (a.partial) a.partial[((int64_t)blockIdx.z * a.positions + pp) * a.n + oo] = acc[mi][ni][c];
                    else a.out[pp * a.ldo + oo] = acc[mi][ni][c];
                }
            }
    if (a.partial)
        splitk_finish(a, (int64_t)blockIdx.y * gridDim.x + blockIdx.x, p0, min(pe, p0 + TC_BM), n0, min(a.n, n0 + TC_BN));
}

template <int KIND, int TERMS>
static cudaError_t launch(const mm_args_t *a, dim3 grid, int x_vec, cudaStream_t s) {
    size_t smem = 2 * (TERMS + 1) * TC_TILE * sizeof(__nv_bfloat16);
    static bool raised;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(mm_tc_kernel<KIND, TERMS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    mm_tc_kernel<KIND, TERMS><<<grid, 256, smem, s>>>(*a, x_vec);
    return DI_LAUNCHED();
}

template <int KIND>
static cudaError_t launch_terms(const mm_args_t *a, dim3 grid, int x_vec, cudaStream_t s) {
    if (a->act_terms >= 3) return launch<KIND, 3>(a, grid, x_vec, s);
    if (a->act_terms == 2) return launch<KIND, 2>(a, grid, x_vec, s);
    return launch<KIND, 1>(a, grid, x_vec, s);
}

extern "C" cudaError_t k_matmul_tc(const mm_args_t *a, cudaStream_t s) {
    if (!k_matmul_tc_ok(&a->w) || a->k % TC_BK || a->split_k % TC_BK || a->x_group_n % TC_BN) return cudaErrorInvalidValue;
    unsigned ytiles = a->wtab ? (unsigned)a->max_tiles : (unsigned)ceil_div(a->m, TC_BM);
    if (a->n <= 0 || ytiles == 0) return cudaSuccess;
    dim3 grid((unsigned)ceil_div(a->n, TC_BN), ytiles, (unsigned)a->splits);
    return a->w.kind == KW_FP8 ? launch_terms<KW_FP8>(a, grid, a->x_vec, s) : launch_terms<KW_FP4>(a, grid, a->x_vec, s);
}
