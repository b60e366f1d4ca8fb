// Matmul on the CUDA cores for few positions (decode) and for the F32/BF16 weights that the
// model computes in fp32, in fp32: each warp streams two weight rows in their storage format
// (16-byte loads, 64 bytes per lane in flight, dequantized in registers), against up to MT
// positions of activations staged in shared memory (16-byte loads, four in flight per
// thread). Memory-bound by design: every weight byte is read once per MT positions, and a
// block keeps its staged activations for every output group it takes when the reduction fits
// the stage. A plain one-thread-per-output kernel covers shapes the fast one cannot read.
#include "router.cuh"

#define MM_WARPS 8
#define MM_RW 2          // weight rows per warp
#define MM_LANE 16       // columns per lane per step
#define MM_STEP (32 * MM_LANE)
#define MM_PREFETCH 2048 // bytes of each weight row asked into L2 before the kernel's wait (dense)

extern "C" int k_matmul_fast_ok(const kw_t *w) {
    bool blocks = w->kind == KW_F32 || w->kind == KW_BF16 || w->block_cols == 32;
    return w->cols % 16 == 0 && blocks && (uintptr_t)w->data % 16 == 0;
}

// Bytes of n consecutive elements of a row (n even for FP4).
template <int KIND> __device__ __forceinline__ int64_t row_bytes(int64_t n) {
    return KIND == KW_F32 ? 4 * n : KIND == KW_BF16 ? 2 * n : KIND == KW_FP8 ? n : n / 2;
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

// Stages activations [xcol, xcol + kn) of positions p0 .. p0+np-1 (zeros beyond np) into xs
// (MT rows of KC in plane order). vec: 16-byte loads, four per thread in flight.
template <int MT>
__device__ __forceinline__ void stage_x(float *xs, int KC, const mm_args_t &a, const int64_t *xoff, int np, int64_t xcol,
                                        int kn) {
    if (a.x_vec) {
        int per = kn >> 2, total = MT * per;
        for (int base = threadIdx.x; base < total; base += 4 * blockDim.x) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int i = base + u * blockDim.x, t = i / per;
                v[u] = i < total && t < np ? __ldg((const float4 *)(a.x + xoff[t] + xcol) + (i - t * per))
                                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int i = base + u * blockDim.x, t = i / per;
                if (i < total) *(float4 *)(xs + t * KC + plane_slot(4 * (i - t * per), KC)) = v[u];
            }
        }
        return;
    }
    for (int t = 0; t < MT; t++)
        for (int e = threadIdx.x; e < kn; e += blockDim.x) xs[t * KC + plane_slot(e, KC)] = t < np ? a.x[xoff[t] + xcol + e] : 0.0f;
}

// Weight steps in flight per warp (four for FP4 with few positions: 64 bytes per lane, as the
// other formats' two steps), and the blocks per SM the registers must allow (ptxas -v: no
// spills except at MT 8, a few dozen bytes).
template <int KIND, int MT> struct tune_of {
    static const int steps = MT <= 2 && KIND == KW_FP4 ? 4 : 2;
    static const int blocks = MT == 1 && (KIND == KW_FP8 || KIND == KW_FP4) ? 3 : 2;
};

// Block b handles the groups of MM_WARPS * MM_RW outputs b, b + gridDim.x, ... (one group when
// the reduction is split), so that the staged activations serve many weight rows. KC: staged
// columns per position (a multiple of 16).
template <int KIND, int MT>
__global__ void __launch_bounds__(MM_WARPS * 32, (tune_of<KIND, MT>::blocks)) mm_simt_kernel(mm_args_t a, int KC) {
    extern __shared__ __align__(16) float xs[]; // [MT][KC]
    __shared__ int64_t xoff[MT];                // element offset of each staged position's row
    const int GROUP = MM_WARPS * MM_RW, STEPS = tune_of<KIND, MT>::steps;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int split = a.pos_chunk ? 0 : blockIdx.y;
    int64_t k_lo = (int64_t)split * a.split_k, k_hi = min(a.k, k_lo + a.split_k);
    if (!a.wtab) /* dense: the start of the first group's rows into L2 while the kernel before finishes */
        for (int j = 0; j < MM_RW; j++) {
            int64_t r = a.row0 + min((int64_t)blockIdx.x * GROUP + warp * MM_RW + j, a.n - 1);
            prefetch_l2(a.w.data + row_bytes<KIND>(r * a.w.cols + k_lo), min(row_bytes<KIND>(k_hi - k_lo), (int64_t)MM_PREFETCH),
                        lane, 32);
        }
    pdl_begin();
    int64_t pb, pe;
    kw_t w;
    if (!block_group(a, blockIdx.z, &pb, &pe, &w)) return;
    if (a.pos_chunk) pb = (int64_t)blockIdx.y * a.pos_chunk, pe = min(pe, pb + a.pos_chunk);
    const bool quant = KIND == KW_FP8 || KIND == KW_FP4;
    for (int64_t p0 = pb; p0 < pe; p0 += MT) {
        int np = (int)min((int64_t)MT, pe - p0);
        __syncthreads(); /* the previous pass is done with xoff and xs */
        if (threadIdx.x < MT) {
            int64_t p = p0 + threadIdx.x;
            xoff[threadIdx.x] = threadIdx.x < np ? (a.x_rows ? a.x_rows[p] : p) * a.ldx : 0;
        }
        int64_t staged = -1; /* x column of the chunk in shared memory */
        for (int64_t g = blockIdx.x; g * GROUP < a.n; g += gridDim.x) {
            int64_t o0 = g * GROUP + warp * MM_RW;
            int64_t xg = a.x_group_n ? (g * GROUP / a.x_group_n) * a.k : 0; /* block-diagonal: this group's x columns */
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
                if (xg + kc != staged) {
                    __syncthreads();
                    stage_x<MT>(xs, KC, a, xoff, np, xg + kc, kn);
                    __syncthreads();
                    staged = xg + kc;
                }
                for (int kk = lane * MM_LANE; kk < kn; kk += STEPS * MM_STEP) {
                    raw16<KIND> raw[STEPS][MM_RW];
#pragma unroll
                    for (int u = 0; u < STEPS; u++)
                        if (kk + u * MM_STEP < kn)
#pragma unroll
                            for (int j = 0; j < MM_RW; j++) load16<KIND>(raw[u][j], w, w.data, wr[j], kc + kk + u * MM_STEP);
#pragma unroll
                    for (int u = 0; u < STEPS; u++) {
                        int e = kk + u * MM_STEP;
                        if (e >= kn) break;
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
                            for (int j = 0; j < MM_RW; j++) acc[j][t] += dot16(wv[j], xv);
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

// One position against a split reduction (decode's short outputs: the router gates, the
// compressors, the indexer's head weights): a block per MM_RW output rows and a warp per split
// (past MR_WARPS splits a warp takes every MR_WARPS-th), so that no partial sums leave the block
// (no split-K counter, fences or second pass). Each lane fetches its first weight steps
// into registers before the kernel's wait (weights do not depend on the kernel before) and reads
// the position's activations straight from memory (nothing to share: no staging). The bits are
// mm_simt_kernel's at any number of positions: a lane adds the same 16-column steps in the same
// order, the warp sums them alike, and the splits are added as splitk_sum_with adds them. ROUTE:
// the outputs are a router's logits, and the block that finishes last routes them (router.cuh),
// one dependent launch fewer a decode layer.
#define MR_WARPS 16 // most warps of a block
#define MR_SPLITS 64 // most splits

template <int KIND, bool ROUTE> __global__ void __launch_bounds__(32 * MR_WARPS) mm_rows_kernel(mm_args_t a) {
    __shared__ float part[MM_RW][MR_SPLITS];
    extern __shared__ float route_sm[]; // ROUTE: route_row's
    const int STEPS = tune_of<KIND, 1>::steps;
    const bool quant = KIND == KW_FP8 || KIND == KW_FP4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    int split = warp;
    int64_t o0 = (int64_t)blockIdx.x * MM_RW, k_lo = (int64_t)split * a.split_k;
    int kn = (int)min(a.split_k, a.k - k_lo);
    const uint8_t *rs[MM_RW];
    int64_t wr[MM_RW];
#pragma unroll
    for (int j = 0; j < MM_RW; j++) {
        wr[j] = a.row0 + min(o0 + j, a.n - 1);
        rs[j] = quant ? row_scales(a.w, a.w.scale, wr[j]) : NULL;
    }
    raw16<KIND> raw[STEPS][MM_RW];
    auto fetch = [&](int kk) {
#pragma unroll
        for (int u = 0; u < STEPS; u++)
            if (kk + u * MM_STEP < kn)
#pragma unroll
                for (int j = 0; j < MM_RW; j++) load16<KIND>(raw[u][j], a.w, a.w.data, wr[j], k_lo + kk + u * MM_STEP);
    };
    fetch(lane * MM_LANE);
    pdl_begin();
    for (; split < a.splits; split += warps) {
        if (split != warp) { /* this warp's next split */
            k_lo = (int64_t)split * a.split_k, kn = (int)min(a.split_k, a.k - k_lo);
            fetch(lane * MM_LANE);
        }
        const float *x = a.x + k_lo;
        float acc[MM_RW];
#pragma unroll
        for (int j = 0; j < MM_RW; j++) acc[j] = 0.0f;
        for (int kk = lane * MM_LANE; kk < kn; kk += STEPS * MM_STEP) {
            if (kk != lane * MM_LANE) fetch(kk);
            float xv[STEPS][16];
#pragma unroll
            for (int u = 0; u < STEPS; u++) {
                int e = kk + u * MM_STEP;
                if (e >= kn) break;
                if (a.x_vec)
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        float4 f = __ldg((const float4 *)(x + e) + q);
                        xv[u][4 * q] = f.x, xv[u][4 * q + 1] = f.y, xv[u][4 * q + 2] = f.z, xv[u][4 * q + 3] = f.w;
                    }
                else
#pragma unroll
                    for (int i = 0; i < 16; i++) xv[u][i] = __ldg(x + e + i);
            }
#pragma unroll
            for (int u = 0; u < STEPS; u++) {
                int e = kk + u * MM_STEP;
                if (e >= kn) break;
#pragma unroll
                for (int j = 0; j < MM_RW; j++) {
                    float wv[16];
                    decode16<KIND>(raw[u][j], quant ? scale_of(rs[j], a.w.scale_f32, k_lo + e) : 1.0f, wv);
                    acc[j] += dot16(wv, xv[u]);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < MM_RW; j++) {
            float v = warp_sum(acc[j]);
            if (lane == 0) part[j][split] = v;
        }
    }
    __syncthreads();
    if (warp < MM_RW && o0 + warp < a.n) { /* whole warps */
        int lanes = splitk_lanes(a.splits);
        float v = 0.0f;
        for (int sp = lane; sp < a.splits; sp += lanes) v += part[warp][sp];
        for (int l = 1; l < lanes; l <<= 1) v += __shfl_xor_sync(0xffffffffu, v, l);
        if (lane == 0) a.out[o0 + warp] = v;
    }
    if constexpr (ROUTE) /* the last block to finish routes the row (its own launch's bits) */
        if (splitk_last(a.counters, gridDim.x)) {
            float b[RT_PER];
            route_bias_first(a.route.bias, (int)a.n, b);
            route_row(a.route.idx, a.route.wt, a.out, a.route.bias, b, (int)a.n, a.route.k, a.route.temp, a.route.normalize,
                      a.route.scale, route_sm);
        }
}

// One thread per output: any shape and block layout.
__global__ void mm_plain_kernel(mm_args_t a) {
    pdl_begin();
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

// Staged columns per position: the whole reduction when it fits (so that a block's output
// groups share one staging), else the most that keeps two blocks per SM, a multiple of 512 (a
// warp's step): lane l then adds columns l * 16 + 512 j in ascending j however the reduction is
// chunked (the order matmul_narrow.cu reproduces).
static int stage_cols(int mt, int64_t k) {
    int most = mt == 1 ? 16384 : mt == 2 ? 8192 : mt == 4 ? 6144 : 3072;
    return (int)min((int64_t)most, ceil_div(k, 16) * 16);
}

// Blocks along the outputs when yz blocks go along the other grid dimensions and `slots`
// blocks fit the GPU at once: one full wave, or (more groups than slots) the count of at most
// four per group whose last wave is fullest.
static int64_t blocks_x(int64_t slots, int64_t yz, int64_t ngroups) {
    int64_t best = 1;
    if (slots >= yz) best = slots / yz;
    else {
        double eff = 0;
        for (int64_t c = 1; c <= 4; c++) {
            int64_t total = c * yz, waves = (total + slots - 1) / slots;
            double e = (double)total / (double)(waves * slots);
            if (e > eff + 1e-9) eff = e, best = c;
        }
    }
    return min(best, ngroups);
}

template <int KIND, int MT>
static cudaError_t launch(const mm_args_t *a, int64_t ngroups, unsigned ys, unsigned zs, cudaStream_t s) {
    int kc = stage_cols(MT, a->splits > 1 ? a->split_k : a->k);
    size_t smem = (size_t)MT * kc * sizeof(float);
    static size_t raised = 48 << 10, occ_smem = 0;
    static int occ = 1;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(mm_simt_kernel<KIND, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    if (occ_smem != smem + 1) { /* blocks per SM at this stage size */
        cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, mm_simt_kernel<KIND, MT>, MM_WARPS * 32, smem);
        if (e != cudaSuccess) return e;
        occ = max(occ, 1), occ_smem = smem + 1;
    }
    /* experts: the grid counts every possible group, fewer have positions; at least four blocks each */
    int64_t nx = a->splits > 1 ? ngroups : blocks_x((int64_t)occ * a->sms, (int64_t)ys * zs, ngroups);
    if (a->wtab) nx = max(nx, min((int64_t)4, ngroups));
    return k_launch(mm_simt_kernel<KIND, MT>, dim3((unsigned)nx, ys, zs), MM_WARPS * 32, smem, s, *a, kc);
}

template <int KIND>
static cudaError_t launch_mt(const mm_args_t *a, int64_t most, int64_t ngroups, unsigned ys, unsigned zs, cudaStream_t s) {
    if (most <= 1) return launch<KIND, 1>(a, ngroups, ys, zs, s);
    if (most <= 2) return launch<KIND, 2>(a, ngroups, ys, zs, s);
    if (most <= 4) return launch<KIND, 4>(a, ngroups, ys, zs, s);
    return launch<KIND, 8>(a, ngroups, ys, zs, s);
}

extern "C" int k_matmul_rows_ok(const mm_args_t *a) {
    return k_matmul_fast_ok(&a->w) && !a->wtab && !a->x_group_n && !a->pos_chunk && !a->x_rows && a->m == 1 && a->splits > 1 &&
           a->splits <= MR_SPLITS;
}

template <bool ROUTE> static cudaError_t rows_launch(const mm_args_t *a, dim3 grid, dim3 block, size_t smem, cudaStream_t s) {
    switch (a->w.kind) {
    case KW_F32: return k_launch(mm_rows_kernel<KW_F32, ROUTE>, grid, block, smem, s, *a);
    case KW_BF16: return k_launch(mm_rows_kernel<KW_BF16, ROUTE>, grid, block, smem, s, *a);
    case KW_FP8: return k_launch(mm_rows_kernel<KW_FP8, ROUTE>, grid, block, smem, s, *a);
    default: return k_launch(mm_rows_kernel<KW_FP4, ROUTE>, grid, block, smem, s, *a);
    }
}

extern "C" cudaError_t k_matmul_simt(const mm_args_t *a, cudaStream_t s) {
    if (a->route.idx && (!k_matmul_rows_ok(a) || !a->counters || a->n > 0x7FFFFFFF)) return cudaErrorInvalidValue;
    if (a->n <= 0 || (a->wtab ? a->max_active : a->m) <= 0) return cudaSuccess;
    if (a->pos_chunk && k_matmul_narrow_ok(a)) return k_matmul_narrow(a, s);
    unsigned groups = a->wtab ? (unsigned)a->max_active : 1;
    if (!k_matmul_fast_ok(&a->w)) {
        if (a->splits > 1 || a->x_group_n) return cudaErrorInvalidValue;
        dim3 grid((unsigned)ceil_div(a->n, 128), a->wtab ? 16 : (unsigned)min(a->m, (int64_t)65535), groups);
        return k_launch(mm_plain_kernel, grid, 128, 0, s, *a);
    }
    if (a->x_group_n % (MM_WARPS * MM_RW)) return cudaErrorInvalidValue; /* an output group within one x block */
    if (k_matmul_rows_ok(a)) {
        dim3 grid((unsigned)ceil_div(a->n, MM_RW)), block(32 * min(a->splits, MR_WARPS));
        if (!a->route.idx) return rows_launch<false>(a, grid, block, 0, s);
        size_t smem = route_smem((int)a->n, a->route.k);
        return smem > 48 * 1024 ? cudaErrorInvalidValue : rows_launch<true>(a, grid, block, smem, s);
    }
    unsigned ys = a->pos_chunk ? (unsigned)ceil_div(a->m, a->pos_chunk) : (unsigned)a->splits;
    int64_t ngroups = ceil_div(a->n, MM_WARPS * MM_RW);
    /* positions a block takes per pass: what it can have, or for experts what one has on average */
    int64_t most = a->pos_chunk ? a->pos_chunk : a->wtab ? ceil_div(a->positions, a->max_active) : a->m;
    switch (a->w.kind) {
    case KW_F32: return launch_mt<KW_F32>(a, most, ngroups, ys, groups, s);
    case KW_BF16: return launch_mt<KW_BF16>(a, most, ngroups, ys, groups, s);
    case KW_FP8: return launch_mt<KW_FP8>(a, most, ngroups, ys, groups, s);
    default: return launch_mt<KW_FP4>(a, most, ngroups, ys, groups, s);
    }
}
