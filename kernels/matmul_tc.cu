// Matmul on the tensor cores (Hopper wgmma, bf16 operands, fp32 accumulation) for FP8 (32x32
// tiles), FP4 (1x32 blocks) and BF16 weights, for many positions (prefill, MoE with 32+
// positions per expert on average, the head and router gates of large decode batches).
//
// Roles: the weights are wgmma's 64-row A side, taken from registers: each thread dequantizes
// its fragment straight from the raw bytes in shared memory (e4m3 through the hardware
// conversion and an fp32 multiply by the scale; e2m1 by placing the code in a bf16's fields
// and one bf16 multiply by 2^126 times the power-of-two scale; both exact in bf16; a BF16
// weight is its own operand, its bytes only reordered into the fragment). The
// positions are the N side, read by wgmma from shared memory in the canonical 128-byte
// swizzle. A block is two warpgroups: 128 weight rows by 256 positions (128 with three pieces,
// see SEP below), cut into sub-tiles of SW positions (skipped where a tile has fewer).
//
// Activations: a first pass (tc_split) converts the fp32 activations once into TERMS bf16
// pieces (x = x1 + x2 + x3 up to rounding: 1 is plain bf16, 2 keeps about 16 bits, 3 all 24
// of an fp32) in a scratch buffer, laid out per row as [group][64-block][piece][64] in the
// fragments' k order, so that the main loop is a plain cp.async pipeline over TERMS times the
// reduction in which each dequantized weight fragment serves its TERMS pieces in turn.
//
// Pipeline: STAGES shared-memory stages; the wgmma of one step runs while the next step's
// fragments are dequantized (two register sets). Two forms fill the stages:
// - the copying form (WS, unsplit reductions of whole 64-blocks): one warp copies, a TMA
//   tensor copy of each activation tile (the map lays the 128-byte swizzle and zero-fills rows
//   past the scratch) and one of each weight tile (a map per weight: per-row bulk copies cost
//   ~70 cycles each, three times the products' time, run 133), a stage's bytes landing on its
//   `full` barrier; the product warpgroups wait on that and free the stage on its `empty` barrier
//   once its products are done, so that neither waits for the other's (a block barrier a step
//   was 35% of the stalls, ncu run 116 of CUDA_NOTES) nor spends issue slots on addresses. The
//   copying warpgroup gives its registers to the product ones (setmaxnreg: a ninth warp alone
//   costs a whole warpgroup's share, so the block is three warpgroups);
// - otherwise every thread copies 16 bytes at a time (cp.async, zero-filled out of range), a
//   block barrier a step. Every output is one fixed-order sum over its own row and column, so a
// position's numbers do not depend on the other positions of the launch.
//
// The fp8 precision (act_terms 0; FP4 weights of a grouped launch, the copying form): the
// activations are e4m3 with a power-of-two scale per position and 128 k (tc_quant8: the model's
// own activation quantization, qat_apply's QAT_FP8_UE8M0 over blocks of 128), and each thread
// turns its FP4 weights into e4m3 relative to the largest of its row's four scales in that
// 128-block, by a table per scale distance (exact while the four lie within 2^8 of each other,
// which k_matmul_tc8_ok checks once per weight). A 128-block's products (wgmma e4m3, four k32
// steps, A from registers) land in a second accumulator, added to the first times the row's and
// the position's scales (the tensor cores keep fewer bits in a long FP8 sum, so each block is
// promoted to fp32 on its own). Thread q's k32 step j takes k 32q + 8j + {0..3} (fragment
// columns 4q..) and 32q + 8j + 4 + {0..3} (16 + 4q..): one word of its 16 bytes a step, all
// under one weight scale; tc_quant8 writes the activations in that order.
//
// The weights' k order inside a 64-block: thread (g, q) of a warp holds k 16q..16q+15 of its
// two rows (FP8 bytes 16q..16q+15, FP4 8q..8q+7, BF16 32q..32q+31); k16 step j takes k = 16q
// + 4j + {0, 1, 2, 3}, paired in the fragment as (0, 2) for columns 2q, 2q+1 and (1, 3) for
// 2q+8, 2q+9. So fragment column kk of step j is k = 16 ((kk & 7) >> 1) + 4 j + 2 (kk & 1) +
// (kk >> 3); tc_split writes the activations in that order.
#include "tma.cuh"
#include "wgmma.cuh"

#include <cudaTypedefs.h>
#include <type_traits>

#define TC_BW K_TC_ROWS      // weight rows per block: 64 per warpgroup
#define TC_BP K_TC_POSITIONS // positions per block
#define TC_BK 64             // reduction per stage: one 128-byte swizzle row of bf16
#define TC_WS_THREADS 384    // the copying form: two product warpgroups and the copying one (one warp copies)
#define TC_BK8 128           // the fp8 precision's reduction per stage: one 128-byte swizzle row of e4m3

extern "C" int k_matmul_tc_ok(const kw_t *w) {
    bool quant = (w->kind == KW_FP8 || (w->kind == KW_FP4 && !w->scale_f32)) && w->cols % 32 == 0 && w->block_cols == 32;
    bool bf16 = w->kind == KW_BF16 && w->cols % 8 == 0; // rows of whole 16-byte chunks
    return (quant || bf16) && (uintptr_t)w->data % 16 == 0;
}

// Bytes of n weights of a row.
__host__ __device__ constexpr int64_t tc_wbytes(int kind, int64_t n) {
    return kind == KW_FP8 ? n : kind == KW_FP4 ? n / 2 : 2 * n;
}

// PT positions per block (TC_BP, or half of it where a second accumulator takes the pieces past
// the first or a 128-block's fp8 products: then three more of the half-size stages, as many bytes
// in flight), as many stages as fit in a block's shared memory (BF16's 2-byte weights: 4, or 7 of
// the half size). A8 (fp8): stages of 128 k, with the positions' scales (sbytes) after the weights.
template <int KIND, int PT, bool A8 = false> struct tc_cfg {
    static constexpr int wrow = (int)tc_wbytes(KIND, A8 ? TC_BK8 : TC_BK); // bytes of a weight row per stage
    static constexpr int bbytes = PT * 128, wbytes = TC_BW * wrow, sbytes = A8 ? (PT + 4) * 4 : 0; /* + 16-byte alignment */
    static constexpr int want = (KIND == KW_FP4 ? 6 : 5) + (PT < TC_BP ? 3 : 0);
    static constexpr int fit = (227 * 1024 - 1024 - 256) / (bbytes + wbytes + sbytes); // Hopper's most for one block
    static constexpr int stages = want < fit ? want : fit;
    static constexpr int smem = stages * (bbytes + wbytes + sbytes) + 1024; // + room to align to the swizzle's 1024 bytes
    static_assert(stages >= 3, "the pipeline loads two stages ahead of the one in use");
};

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

// ---- activations as bf16 pieces ---------------------------------------------------------------
// One thread: 8 consecutive outputs (16 bytes of each piece) of one row's 64-block.
// Row r of the scratch is x's row x_rows[r] (NULL: r; outside x's x_m rows: zeros, a position
// that no tile reads).
template <int TERMS>
__global__ void tc_split_kernel(const float *x, int64_t ldx, const int32_t *x_rows, int64_t x_m, int64_t rows, int64_t k,
                                int groups, int64_t kbn, uint4 *xs) {
    pdl_begin();
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, blk = id >> 3;
    int c = (int)(id & 7);
    int64_t kb = blk % kbn, rg = blk / kbn, row = rg / groups;
    if (row >= rows) return;
    int64_t from = x_rows ? x_rows[row] : row, kend = from >= 0 && from < x_m ? k : 0;
    const float *src = x + (kend ? from : 0) * ldx + (rg % groups) * k;
    int64_t k0 = kb * TC_BK + 4 * (c >> 1) + (c & 1);
    uint32_t p[3][4];
#pragma unroll
    for (int i = 0; i < 4; i++) { // outputs 2i, 2i+1: k0 + 16 i and k0 + 16 i + 2
        int64_t ka = k0 + 16 * i, kc = ka + 2;
        float r0 = ka < kend ? __ldg(src + ka) : 0.0f, r1 = kc < kend ? __ldg(src + kc) : 0.0f;
#pragma unroll
        for (int t = 0; t < TERMS; t++) { /* each piece the bf16 of what the earlier ones left */
            float h0 = round_bf16(r0), h1 = round_bf16(r1);
            p[t][i] = pack_bf16(h0, h1);
            r0 -= h0, r1 -= h1;
        }
    }
#pragma unroll
    for (int t = 0; t < TERMS; t++) xs[(blk * TERMS + t) * 8 + c] = make_uint4(p[t][0], p[t][1], p[t][2], p[t][3]);
}

// fp8: one warp a (row, 128-block): the block's scale (fp8_scale_dev of its absolute maximum)
// into scales[kb][row] (rows_pad apart) and its e4m3 bytes, lane l's four (k 4l..4l+3) at byte
// 32 j + 16 h + 4 q of the block's 128 (k = 32 q + 8 j + 4 h + e, the fragments' order above).
// Row r of the scratch is x's row x_rows[r] (NULL: r; outside x's x_m rows: zeros).
__global__ void tc_quant8_kernel(const float *x, int64_t ldx, const int32_t *x_rows, int64_t x_m, int64_t rows, int64_t k,
                                 int64_t kbn, int64_t rows_pad, uint8_t *xq, float *scales) {
    pdl_begin();
    int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, row = wid / kbn, kb = wid - row * kbn;
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int64_t from = x_rows ? x_rows[row] : row, kend = from >= 0 && from < x_m ? k : 0, k0 = kb * TC_BK8 + 4 * lane;
    const float *src = x + (kend ? from : 0) * ldx;
    float v[4], amax = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; e++) v[e] = k0 + e < kend ? __ldg(src + k0 + e) : 0.0f, amax = fmaxf(amax, fabsf(v[e]));
#pragma unroll
    for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float sc = fp8_scale_dev(amax);
    /* the hardware's round to nearest even, saturating at 448: f32_to_e4m3_dev's bits, in two
     * instructions instead of ~30 an element (v / sc is exact: a power of two) */
    uint32_t b = (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(v[0] / sc, v[1] / sc), __NV_SATFINITE, __NV_E4M3) |
                 (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(v[2] / sc, v[3] / sc), __NV_SATFINITE, __NV_E4M3) << 16;
    int q = lane >> 3, j = (lane >> 1) & 3, h = lane & 1;
    *(uint32_t *)(xq + wid * TC_BK8 + 32 * j + 16 * h + 4 * q) = b;
    if (lane == 0) scales[kb * rows_pad + row] = sc;
}

// Whether every (row, 128-block) of an FP4 weight has UE8M0 scales within 2^8 of each other (and
// none is NaN): nothing at all to count in *bad.
__global__ void tc8_check_kernel(kw_t w, unsigned *bad) {
    int64_t ncb = w.cols / 32, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= w.rows * (ncb / 4)) return;
    const uint8_t *s = w.scale + (i / (ncb / 4)) * ncb + (i % (ncb / 4)) * 4;
    int lo = 255, hi = 0;
    for (int c = 0; c < 4; c++) lo = min(lo, (int)s[c]), hi = max(hi, (int)s[c]);
    if (hi == 255 || hi - lo > 8) atomicAdd(bad, 1u);
}

// ---- Hopper primitives -------------------------------------------------------------------------
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One reduction step (four k16; E4M3: four k32 of e4m3, acc overwritten) on the first N
// sub-tiles of SW positions, one commit group. The stage's descriptor d plus an offset / 16
// addresses a k16 slice of a sub-tile (shared addresses stay below 2^18, so the 14-bit field
// takes the sum). bf16: the sub-tiles lie one after another, so one wgmma N times as wide takes
// them all (its accumulators are theirs in order; fewer, wider instructions: run 183).
template <int N, bool E4M3, int NS, int R>
__device__ __forceinline__ void mma_run(float (&acc)[NS][R], const uint32_t (&a)[4][4], uint64_t d) {
    static_assert(E4M3 || N * R <= 128, "a wgmma is at most 256 positions wide");
    wg_fence();
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if constexpr (E4M3) {
#pragma unroll
            for (int sub = 0; sub < N; sub++) // fp8: k32 steps, acc overwritten
                wgmma_e4m3(acc[sub], a[j], d + ((sub * R * 2 * 128 + j * 32) >> 4), j > 0);
        } else {
            wgmma_rs<0>(*reinterpret_cast<float(*)[N * R]>(&acc[0][0]), a[j], d + ((j * 32) >> 4));
        }
    }
    wg_commit();
}
// The run for nsub sub-tiles (1 <= nsub <= N), most likely the full one first.
template <int N, bool E4M3 = false, int NS, int R>
__device__ __forceinline__ void mma_pick(int nsub, float (&acc)[NS][R], const uint32_t (&a)[4][4], uint64_t d) {
    if constexpr (N == 1) mma_run<1, E4M3>(acc, a, d);
    else if (nsub == N) mma_run<N, E4M3>(acc, a, d);
    else mma_pick<N - 1, E4M3>(nsub, acc, a, d);
}
#endif

// ---- weight fragments ---------------------------------------------------------------------------
// FP8: 16 bytes of one row (k16 steps 0..3, 4 bytes each) into fragment registers r (columns
// 2q..) and r + 2 (columns 2q+8..) of every step, times the block scale (exact: e4m3 times a
// power of two fits bf16).
__device__ __forceinline__ void deq_fp8(uint4 raw, float sc, uint32_t (&a)[4][4], int r) {
    uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t y = __byte_perm(w[j], 0, 0x3120); // bytes 0, 2 | 1, 3
#pragma unroll
        for (int h = 0; h < 2; h++) {
            __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(y >> (16 * h)), __NV_E4M3);
            float2 f = __half22float2(__half2(hr));
            a[j][r + 2 * h] = pack_bf16(f.x * sc, f.y * sc);
        }
    }
}

// FP4: 8 bytes of one row (two codes a byte, low first). A code's sign, exponent and mantissa
// placed in a bf16's fields are its value times 2^-126 (code 1, 0.5, lands on a subnormal), so
// one bf16 multiply by 2^126 * scale = 2^(s-1) is exact; scales of 2^2 and up (2^(s-1) past the
// bf16 range) take a second multiply. E8M0 255 is NaN.
__device__ __forceinline__ void deq_fp4(uint2 raw, uint32_t s, uint32_t (&a)[4][4], int r) {
    bool big = s > 128 && s < 255;
    uint32_t b1 = s == 255 ? 0x7FC0u : big ? 253u << 7 : (s + 126) << 7, b2 = s << 7; // bf16 bits of the factors
    b1 |= b1 << 16, b2 |= b2 << 16;
    __nv_bfloat162 f1 = *(__nv_bfloat162 *)&b1, f2 = *(__nv_bfloat162 *)&b2;
    uint32_t u[2] = {raw.x, raw.y};
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint32_t y = __byte_perm(u[h], 0, 0x3120); // bytes 0, 2 | 1, 3: steps 2h (bytes 0, 1), 2h+1 (bytes 2, 3)
        uint32_t v[4] = {((y & 0x00070007u) << 6) | ((y & 0x00080008u) << 12),  // step 2h, low codes
                         ((y & 0x00700070u) << 2) | ((y & 0x00800080u) << 8),   // step 2h, high codes
                         ((y & 0x07000700u) >> 2) | ((y & 0x08000800u) << 4),   // step 2h+1, low codes
                         ((y & 0x70007000u) >> 6) | (y & 0x80008000u)};         // step 2h+1, high codes
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __nv_bfloat162 b = __hmul2(*(__nv_bfloat162 *)&v[i], f1);
            if (big) b = __hmul2(b, f2);
            a[2 * h + (i >> 1)][r + 2 * (i & 1)] = *(uint32_t *)&b;
        }
    }
}

// BF16: k 16q..16q+15 of one row are its bytes 32q..32q+31; step j's k 16q + 4j + {0, 1, 2, 3}
// go (0, 2) into register r, (1, 3) into r + 2. A quarter warp's rows g, g+1 lie 128 bytes
// apart, two ways on the same banks: cheap next to the wgmma's own reads of the positions; the
// conflict-free forms tried (chunks XOR-swizzled by row, a chunk order per thread) made ptxas
// serialize or fence the wgmma (C7515, C7519).
__device__ __forceinline__ void frag_bf16(const uint8_t *row, int q, uint32_t (&a)[4][4], int r) {
    uint4 lo = *(const uint4 *)(row + 32 * q), hi = *(const uint4 *)(row + 32 * q + 16);
    uint32_t u[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w}; // two k a word, low first
#pragma unroll
    for (int j = 0; j < 4; j++) {
        a[j][r] = __byte_perm(u[2 * j], u[2 * j + 1], 0x5410);
        a[j][r + 2] = __byte_perm(u[2 * j], u[2 * j + 1], 0x7632);
    }
}

// fp8: 16 bytes of one row (k 32q..32q+31, one 32-block of scale distance d) into fragment
// registers r (k 32q + 8j + 0..3 of step j) and r + 2 (+ 4..7) as e4m3: each code's magnitude
// from the 8-byte table of e2m1 values times 2^-d (tab, one byte a code), its sign moved to bit 7.
__device__ __forceinline__ void frag_e4m3(uint4 raw, uint2 tab, uint32_t (&a)[4][4], int r) {
    uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t nib = u[j] >> (16 * h);
            a[j][r + 2 * h] = __byte_perm(tab.x, tab.y, nib & 0x7777u) | __byte_perm(0u, 0x80808080u, (nib & 0x8888u) >> 1);
        }
}

// ---- the matmul ------------------------------------------------------------------------------------
// fp8: the activations' scales after the e4m3 bytes of the scratch's rows (a grouped launch's
// positions), [128-block][rows rounded up to 4], and room for a tile's copy past the last row
// (k_matmul_tc_x_bytes); the row of 128-block u.
__host__ __device__ inline int64_t a8_rows_pad(int64_t rows) { return (rows + 3) & ~(int64_t)3; }
__host__ __device__ inline float *a8_scale_row(const mm_args_t &a, int64_t u) {
    int64_t kbn = (a.k + TC_BK8 - 1) / TC_BK8;
    return (float *)((uint8_t *)a.tc_x + a.positions * kbn * TC_BK8) + u * a8_rows_pad(a.positions);
}

// Three pieces (SEP): the products of the second and third go to a second accumulator (with
// half the positions a block, for the registers), added to the first at the end. The tensor
// cores round each k16 step's sum into its accumulator, not to nearest; adding the small
// pieces' products into the large running sum cost a rounding of the large sum each (max error
// 8.8e-7 of max |ref| at k = 2048 against 4.0e-7 apart, measured) and flipped a routing decision
// of a tiny test model (test_forward_cuda). Apart, the large sum takes one rounding a k16 step,
// as with one piece.
template <int TERMS> __host__ __device__ constexpr bool tc_sep() { return TERMS == 3; }
template <int TERMS> __host__ __device__ constexpr int tc_positions() { return tc_sep<TERMS>() || TERMS == 0 ? TC_BP / 2 : TC_BP; }

// The copying form's tensor maps: the activations' scratch and a dense launch's weight (a
// grouped one's are a.tc_wmaps, parallel to a.wtab).
struct tc_maps_t {
    CUtensorMap x, w;
};

template <int KIND, int TERMS, int SW, bool WS>
__global__ void __launch_bounds__(WS ? TC_WS_THREADS : 256, 1) mm_tc_kernel(mm_args_t a, const __grid_constant__ tc_maps_t maps) {
    pdl_begin();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool SEP = tc_sep<TERMS>(), A8 = TERMS == 0; // A8: the fp8 precision's e4m3 activations
    constexpr int PT = tc_positions<TERMS>(), BR = PT / 32; // positions a block, activation rows a thread
    constexpr int BK = A8 ? TC_BK8 : TC_BK, STEPS = A8 ? 1 : TERMS; // a stage's reduction, stages a BK-block
    using C = tc_cfg<KIND, PT, A8>;
    constexpr int S = C::stages, NS = PT / SW, WCH = C::wrow / 16, WPT = TC_BW * WCH / 256;
    extern __shared__ uint8_t tc_smem[];
    [[maybe_unused]] __shared__ uint64_t full_bar[S], empty_bar[S]; // the copying form's
    [[maybe_unused]] __shared__ uint2 e4m3_tab[16];                 // fp8: e2m1 codes times 2^-d as e4m3, d = 0..15
    uint32_t raw0 = (uint32_t)__cvta_generic_to_shared(tc_smem), base = (raw0 + 1023) & ~1023u;
    const uint8_t *wsm = tc_smem + (base - raw0) + S * C::bbytes; // weight stages (generic address)
    uint32_t bsm = base, wsm_s = base + S * C::bbytes, ssm_s = wsm_s + S * C::wbytes; // ssm: fp8 positions' scales
    [[maybe_unused]] const float *ssm = (const float *)(wsm + S * C::wbytes);

    kw_t w = a.w;
    [[maybe_unused]] const CUtensorMap *wmap = &maps.w;
    int64_t p0, pe;
    if (a.wtab) { /* block y: part y % (TC_BP / PT) of tile y / (TC_BP / PT) */
        int ti = blockIdx.y / (TC_BP / PT);
        if (ti >= a.counts[1]) return;
        int g = a.tiles[2 * ti];
        p0 = a.tiles[2 * ti + 1] + (int64_t)(blockIdx.y % (TC_BP / PT)) * PT, pe = a.offsets[g + 1];
        if (p0 >= pe) return;
        w.data = a.wtab[g].data, w.scale = a.wtab[g].scale;
        if (WS) wmap = (const CUtensorMap *)a.tc_wmaps + g;
    } else {
        p0 = (int64_t)blockIdx.y * PT, pe = a.m;
    }
    int np = (int)min((int64_t)PT, pe - p0), nsub = (np + SW - 1) / SW;
    int64_t n0 = (int64_t)blockIdx.x * TC_BW;
    int64_t k_lo = (int64_t)blockIdx.z * a.split_k, k_hi = min(a.k, k_lo + a.split_k);
    int nkb = (int)((k_hi - k_lo + BK - 1) / BK), nv = nkb * STEPS;
    int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, q = lane & 3;
    int lr = (tid >> 7) * 64 + ((tid >> 5) & 3) * 16 + g; // this thread's weight rows: lr, lr + 8 (tid < 256)

    // activation loads: 16-byte chunk bc of tile rows rb + 32 j; a piece row is a run of 128-byte
    // units (one per step), and unit u of the scratch lies at xb + u * 128
    int bc = tid & 7, rb = tid >> 3;
    int64_t kbn = (a.k + BK - 1) / BK, groups = a.x_group_n ? a.n / a.x_group_n : 1, row_units = groups * kbn * STEPS;
    int64_t unit0 = (a.x_group_n ? (n0 / a.x_group_n) * kbn * STEPS : 0) + (k_lo / BK) * STEPS;
    const uint8_t *xb = (const uint8_t *)a.tc_x + unit0 * 128 + bc * 16;
    uint32_t bunit[BR], bmask = 0; // first unit of each row; rows past the tile read row 0, zero-filled
#pragma unroll
    for (int j = 0; j < BR; j++) {
        int r = rb + 32 * j;
        bunit[j] = r < np ? (uint32_t)((a.x_rows ? a.x_rows[p0 + r] : p0 + r) * row_units) : 0;
        bmask |= (uint32_t)(r < np) << j;
    }
    uint32_t bdst = rb * 128 + ((bc ^ (rb & 7)) << 4);

    // weight loads: 16-byte chunks of the 128 rows' raw bytes
    int64_t wrow_bytes = tc_wbytes(KIND, a.k);
    const uint8_t *wsrc[WPT];
    uint32_t wdst[WPT];
    int wk[WPT];
    bool wok[WPT];
#pragma unroll
    for (int i = 0; i < WPT; i++) {
        int id = tid + 256 * i, r = id / WCH, cc = id % WCH;
        int64_t o = n0 + r;
        wok[i] = o < a.n;
        wsrc[i] = w.data + (a.row0 + (wok[i] ? o : 0)) * wrow_bytes + (k_lo / BK) * C::wrow + cc * 16;
        wdst[i] = r * C::wrow + cc * 16;
        wk[i] = cc * (16 * BK / C::wrow); // first k of the chunk
    }
    auto load_stage = [&](int v) {
        int s = v % S, kb = v / STEPS;
#pragma unroll
        for (int j = 0; j < BR; j++)
            cp_async16(bsm + s * C::bbytes + bdst + j * 32 * 128, xb + (uint64_t)(bunit[j] + v) * 128, (bmask >> j) & 1);
        if (v == kb * STEPS)
#pragma unroll
            for (int i = 0; i < WPT; i++)
                cp_async16(wsm_s + s * C::wbytes + wdst[i], wsrc[i] + kb * C::wrow,
                           wok[i] && k_lo + kb * BK + wk[i] < k_hi);
    };

    // the copying thread: stage v when the products of v - S are done; every tile is whole
    // (zeros past the tensors: weight rows past n give products that are dropped)
    [[maybe_unused]] auto copy_stages = [&]() {
        if (a.wtab) tensormap_acquire(wmap);
        int wc0 = (int)(k_lo / BK) * C::wrow, wc1 = (int)(a.row0 + n0);
        constexpr int WBOX = (int)tc_wbytes(KIND, TC_BK); // a weight map's box: 64 k of 128 rows
        for (int v = 0; v < nv; v++) {
            int s = v % S, kb = v / STEPS;
            bool with_w = v == kb * STEPS;
            if (v >= S) mbar_wait(&empty_bar[s], (uint32_t)(v / S - 1) & 1);
            /* fp8: the positions' scales from the 16 bytes holding p0 on, one bulk copy */
            uint32_t sbytes = A8 ? (uint32_t)(((p0 & 3) + nsub * SW + 3) & ~3) * 4 : 0;
            mbar_arrive_expect(&full_bar[s], nsub * SW * 128 + sbytes + (with_w ? C::wbytes : 0));
            for (int sub = 0; sub < nsub; sub++) /* the sub-tiles that hold positions */
                tma_load_3d(bsm + s * C::bbytes + sub * SW * 128, &maps.x, 0, (int)(unit0 + v), (int)(p0 + sub * SW), &full_bar[s]);
            if (A8) bulk_load(ssm_s + s * C::sbytes, a8_scale_row(a, unit0 + v) + (p0 & ~(int64_t)3), sbytes, &full_bar[s]);
            if (with_w)
                for (int b = 0; b < C::wrow / WBOX; b++)
                    tma_load_2d(wsm_s + s * C::wbytes + b * TC_BW * WBOX, wmap, wc0 + kb * C::wrow + b * WBOX, wc1, &full_bar[s]);
        }
    };

    // scales of this thread's two rows (the weight rows past n read row n-1's: their outputs are dropped)
    const uint8_t *rs[2] = {nullptr, nullptr};
    if constexpr (KIND != KW_BF16)
#pragma unroll
        for (int h = 0; h < 2; h++) rs[h] = row_scales(w, w.scale, a.row0 + min(n0 + lr + 8 * h, a.n - 1));
    int64_t ncb = (a.k + 31) / 32;
    auto scale_col = [&](int kb) { return k_lo + kb * TC_BK + q * 16; }; // a k of the thread's 32-block
    // the raw scale words (float bits or an E8M0 byte), converted where a 64-block uses them: a
    // conversion right after its load waited for it (ncu, run 116 of CUDA_NOTES: 13% of the stalls)
    uint32_t bsc[2] = {0, 0};
    auto load_scales = [&](int kb) {
        if constexpr (KIND == KW_BF16) return;
        int64_t c = scale_col(kb);
        bool ok = kb < nkb && (c >> 5) < ncb;
#pragma unroll
        for (int h = 0; h < 2; h++)
            bsc[h] = !ok ? 0u : KIND == KW_FP8 && w.scale_f32 ? __ldg((const uint32_t *)rs[h] + (c >> 5)) : __ldg(rs[h] + (c >> 5));
    };
    auto fp8_scale = [&](uint32_t raw) { return w.scale_f32 ? __uint_as_float(raw) : e8m0_f((uint8_t)raw); };

    float acc[NS][SW / 2], acc2[SEP ? NS : 1][SW / 2];
#pragma unroll
    for (int i = 0; i < NS; i++)
#pragma unroll
        for (int j = 0; j < SW / 2; j++) acc[i][j] = 0.0f, acc2[SEP ? i : 0][j] = 0.0f;
    // the fragments in SETS register sets: a step's are dequantized while the SETS - 1 before it
    // multiply; the copying form's FP4 three (its decode's dependent instructions outlast one
    // step's products at the experts' ~128 positions: +5%; the others lost 3-10%, run 148)
    constexpr int SETS = WS && KIND == KW_FP4 ? 3 : 2;
    uint32_t A[SETS][4][4];

    if constexpr (WS) {
        if (tid == 0) {
            for (int s = 0; s < S; s++) mbar_init(&full_bar[s], 1), mbar_init(&empty_bar[s], 8); // a warp of each warpgroup frees
            mbar_init_fence();
        }
        if (A8 && tid < 16) { /* row d: codes 0..7 (0, 0.5, 1, 1.5, 2, 3, 4, 6) times 2^-d, rounded to e4m3 */
            uint32_t b[2] = {0, 0};
            for (int c = 1; c < 8; c++) b[c >> 2] |= (uint32_t)f32_to_e4m3_dev(ldexpf(e2m1_f((uint32_t)c), -tid)) << (8 * (c & 3));
            e4m3_tab[tid] = make_uint2(b[0], b[1]);
        }
        __syncthreads();
    } else {
#pragma unroll
        for (int v = 0; v < S - 2; v++) {
            if (v < nv) load_stage(v);
            cp_async_commit();
        }
    }
    load_scales(0);

    // the step's stage and its full barrier's phase, and the stage SETS - 1 steps back, counted
    // step by step: S is not a power of two, and v % S, v / S cost a multiply-high chain a step
    // (ncu, run 188 of CUDA_NOTES: integer work ~30% of the warps' samples)
    int s = 0, s_back = S - (SETS - 1);
    uint32_t phase = 0;
    // one 64-block of the reduction: its TERMS steps, the fragments in register set SET
    auto kblock = [&](int kb, auto set) {
        constexpr int SET = decltype(set)::value;
#pragma unroll
        for (int t = 0; t < TERMS; t++) {
            int v = kb * TERMS + t;
            if constexpr (WS) {
                mbar_wait(&full_bar[s], phase);
            } else {
                cp_async_wait<S - 3>();
                fence_async_smem();
                __syncthreads();
                if (v + S - 2 < nv) load_stage(v + S - 2);
                cp_async_commit();
            }
            if (t == 0) {
                const uint8_t *ws = wsm + s * C::wbytes;
                [[maybe_unused]] uint32_t b0 = bsc[0], b1 = bsc[1];
                [[maybe_unused]] float f0 = KIND == KW_FP8 ? fp8_scale(b0) : 0.0f, f1 = KIND == KW_FP8 ? fp8_scale(b1) : 0.0f;
                load_scales(kb + 1);
                if constexpr (KIND == KW_FP8) {
                    deq_fp8(*(const uint4 *)(ws + lr * 64 + q * 16), f0, A[SET], 0);
                    deq_fp8(*(const uint4 *)(ws + (lr + 8) * 64 + q * 16), f1, A[SET], 1);
                } else if constexpr (KIND == KW_FP4) {
                    deq_fp4(*(const uint2 *)(ws + lr * 32 + q * 8), b0, A[SET], 0);
                    deq_fp4(*(const uint2 *)(ws + (lr + 8) * 32 + q * 8), b1, A[SET], 1);
                } else {
                    frag_bf16(ws + lr * 128, q, A[SET], 0);
                    frag_bf16(ws + (lr + 8) * 128, q, A[SET], 1);
                }
            }
            uint64_t bs = sw128_desc(bsm + s * C::bbytes);
            if (SEP && t > 0) mma_pick<NS>(nsub, acc2, A[SET], bs); // straight-line runs (a branch inside one serializes it)
            else mma_pick<NS>(nsub, acc, A[SET], bs);
            wg_wait<SETS - 1>();
            if (WS && v >= SETS - 1 && lane == 0) mbar_arrive(&empty_bar[s_back]); // that step's products are done
            s_back = s_back + 1 == S ? 0 : s_back + 1;
            if (++s == S) s = 0, phase ^= 1;
        }
    };
    // the copying warpgroup's registers to the product ones (fp8: its copies of the scales need
    // more than 40: past its share the copying thread met an illegal instruction, device run 152)
    constexpr int COPY_REGS = A8 ? 56 : 40;
    if (WS && tid >= 256) {
        regs_dec<COPY_REGS>();
        if (tid == 256) copy_stages();
        return;
    }
    if constexpr (WS) regs_inc<(65536 / 128 - COPY_REGS) / 2 / 8 * 8>(); // 232 or 224 a thread
    if constexpr (A8) {
        // a 128-block: its products into tmp while the next block's fragments are made, then
        // tmp added to acc times the scales (the row's reference, the position's)
        float tmp[NS][SW / 2], wref[2][2]; /* wref: the rows' reference scales, by register set */
        uint32_t sw[2] = {0, 0};           /* the rows' four scale bytes of the next block to make */
        auto scale_words = [&](int kb) {
#pragma unroll
            for (int h = 0; h < 2; h++) sw[h] = kb < nkb ? __ldg((const uint32_t *)(rs[h] + (k_lo >> 5)) + kb) : 0u;
        };
        auto make = [&](int kb, auto set) {
            constexpr int SET = decltype(set)::value;
            int s = kb % S;
            uint32_t w2[2] = {sw[0], sw[1]};
            scale_words(kb + 1);
            mbar_wait(&full_bar[s], (uint32_t)(kb / S) & 1);
            const uint8_t *ws = wsm + s * C::wbytes + (q >> 1) * (TC_BW * 32) + (q & 1) * 16;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t m = __vmaxu4(w2[h], w2[h] >> 8);
                m = __vmaxu4(m, m >> 16) & 0xFF;
                uint32_t d = min(m - ((w2[h] >> (8 * q)) & 0xFF), 15u);
                wref[SET][h] = e8m0_f((uint8_t)m);
                frag_e4m3(*(const uint4 *)(ws + (lr + 8 * h) * 32), e4m3_tab[d], A[SET], h);
            }
        };
        auto block8 = [&](int kb, auto set) {
            constexpr int SET = decltype(set)::value;
            int s = kb % S;
            mma_pick<NS, true>(nsub, tmp, A[SET], sw128_desc(bsm + s * C::bbytes));
            if (kb + 1 < nkb) make(kb + 1, std::integral_constant<int, SET ^ 1>{});
            wg_wait<0>();
            const float *as = ssm + s * (C::sbytes / 4) + (p0 & 3);
#pragma unroll
            for (int sub = 0; sub < NS; sub++) {
                fence_regs(tmp[sub]);
                if (sub < nsub)
#pragma unroll
                    for (int i = 0; i < SW / 8; i++) {
                        float p2[2] = {as[sub * SW + 8 * i + 2 * q], as[sub * SW + 8 * i + 2 * q + 1]};
#pragma unroll
                        for (int c = 0; c < 4; c++) acc[sub][4 * i + c] += tmp[sub][4 * i + c] * (wref[SET][c >> 1] * p2[c & 1]);
                    }
            }
            if (lane == 0) mbar_arrive(&empty_bar[s]); /* this warp is done with the stage */
        };
        scale_words(0);
        make(0, std::integral_constant<int, 0>{});
        for (int kb = 0; kb < nkb; kb += 2) {
            block8(kb, std::integral_constant<int, 0>{});
            if (kb + 1 < nkb) block8(kb + 1, std::integral_constant<int, 1>{});
        }
    } else {
        for (int kb = 0; kb < nkb; kb += SETS) {
            kblock(kb, std::integral_constant<int, 0>{});
            if (kb + 1 < nkb) kblock(kb + 1, std::integral_constant<int, 1>{});
            if constexpr (SETS > 2)
                if (kb + 2 < nkb) kblock(kb + 2, std::integral_constant<int, SETS - 1>{});
        }
    }
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < NS; i++) {
        fence_regs(acc[i]);
        if (SEP) fence_regs(acc2[i]);
        if (SEP)
#pragma unroll
            for (int j = 0; j < SW / 2; j++) acc[i][j] += acc2[SEP ? i : 0][j];
    }

#pragma unroll
    for (int sub = 0; sub < NS; sub++)
#pragma unroll
        for (int i = 0; i < SW / 8; i++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int64_t p = p0 + sub * SW + 8 * i + 2 * q + (c & 1), o = n0 + lr + 8 * (c >> 1);
                if (p < pe && o < a.n) {
                    if (a.partial) a.partial[((int64_t)blockIdx.z * a.positions + p) * a.n + o] = acc[sub][4 * i + c];
                    else a.out[p * a.ldo + o] = acc[sub][4 * i + c];
                }
            }
    if (!WS && a.partial)
        splitk_finish(a, (int64_t)blockIdx.y * gridDim.x + blockIdx.x, p0, p0 + np, n0, min(a.n, n0 + TC_BW));
#else
    __trap(); // built for sm_90a only (wgmma); the Makefile's sm_90a code is what an H100/H200 runs
#endif
}

// ---- launchers ------------------------------------------------------------------------------------

static bool ws_form(const mm_args_t *a) {
    return k_hopper && a->k % TC_BK == 0 && a->splits <= 1 && (a->wtab ? a->tc_wmaps != NULL : a->k == a->w.cols);
}

// The fp8 precision's form: a grouped launch of FP4 weights in the copying form, k a multiple of 128.
static bool a8_shape(const mm_args_t *a) {
    return a->wtab && a->tc8_ok && a->w.kind == KW_FP4 && a->k % TC_BK8 == 0 && !a->x_group_n && ws_form(a);
}
static bool a8_form(const mm_args_t *a) { return a->act_terms == 0 && a8_shape(a); }
extern "C" int k_matmul_tc8_form(const mm_args_t *a) { return a8_shape(a); }

// The scratch's rows: x's, or a grouped launch's positions (x's rows in position order where the
// copying form reads them: its tiles are whole boxes of consecutive rows).
static bool split_gathers(const mm_args_t *a) { return a->wtab && a->x_rows && ws_form(a); }
static int64_t split_rows(const mm_args_t *a) { return a->wtab && (!a->x_rows || ws_form(a)) ? a->positions : a->m; }
static int64_t split_groups(const mm_args_t *a) { return a->x_group_n ? a->n / a->x_group_n : 1; }

extern "C" size_t k_matmul_tc_x_bytes(const mm_args_t *a) {
    if (a->act_terms == 0) /* e4m3 bytes, then the scales (a8_scale_row) */
        return (size_t)((split_rows(a) * TC_BK8 + a8_rows_pad(split_rows(a)) * 4) * ceil_div(a->k, TC_BK8) + (TC_BP / 2 + 4) * 4);
    return (size_t)(split_rows(a) * split_groups(a) * ceil_div(a->k, TC_BK) * a->act_terms * TC_BK * 2);
}

static cudaError_t quant8(const mm_args_t *a, cudaStream_t s) {
    int64_t rows = split_rows(a), kbn = ceil_div(a->k, TC_BK8), threads = rows * kbn * 32;
    if (threads == 0) return cudaSuccess;
    bool gather = split_gathers(a);
    return k_launch(tc_quant8_kernel, (unsigned)ceil_div(threads, 256), 256, 0, s, a->x, a->ldx,
                    gather ? a->x_rows : (const int32_t *)NULL, gather ? a->m : rows, rows, a->k, kbn, a8_rows_pad(rows),
                    (uint8_t *)a->tc_x, a8_scale_row(*a, 0));
}

template <int TERMS> static cudaError_t split(const mm_args_t *a, cudaStream_t s) {
    int64_t rows = split_rows(a), groups = split_groups(a), kbn = ceil_div(a->k, TC_BK), threads = rows * groups * kbn * 8;
    if (threads == 0) return cudaSuccess;
    bool gather = split_gathers(a);
    return k_launch(tc_split_kernel<TERMS>, (unsigned)ceil_div(threads, 256), 256, 0, s, a->x, a->ldx,
                    gather ? a->x_rows : (const int32_t *)NULL, gather ? a->m : rows, rows, a->k, (int)groups, kbn, (uint4 *)a->tc_x);
}

static cudaError_t encode_map(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, const void *base, const cuuint64_t *dims,
                              const cuuint64_t *strides, const cuuint32_t *box, CUtensorMapSwizzle swizzle) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            return cudaErrorNotSupported;
    }
    cuuint32_t step[3] = {1, 1, 1};
    CUresult r = encode(map, type, rank, (void *)base, dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The scratch as a 3-D tensor (rows, 128-byte units of a row, 64 bf16 of a unit), read in boxes
// of one unit of a sub-tile's rows in the 128-byte swizzle.
static cudaError_t x_map(const mm_args_t *a, int sw, CUtensorMap *map) {
    cuuint64_t units = (cuuint64_t)(split_groups(a) * ceil_div(a->k, TC_BK) * a->act_terms);
    cuuint64_t dims[3] = {TC_BK, units, (cuuint64_t)split_rows(a)}, strides[2] = {128, units * 128};
    cuuint32_t box[3] = {TC_BK, 1, (cuuint32_t)sw};
    return encode_map(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, a->tc_x, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

// fp8: the e4m3 scratch in the same boxes (128 bytes of a 128-block).
static cudaError_t x8_map(const mm_args_t *a, int sw, CUtensorMap *map) {
    cuuint64_t units = (cuuint64_t)ceil_div(a->k, TC_BK8), dims[3] = {TC_BK8, units, (cuuint64_t)split_rows(a)};
    cuuint64_t strides[2] = {TC_BK8, units * TC_BK8};
    cuuint32_t box[3] = {TC_BK8, 1, (cuuint32_t)sw};
    return encode_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, a->tc_x, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

// A weight's raw bytes as a 2-D tensor (rows of its storage bytes), read in boxes of TC_BW rows
// by a stage's bytes (a 64-block of the reduction), laid out plainly.
static cudaError_t w_map(const kw_t *w, CUtensorMap *map) {
    cuuint64_t row = (cuuint64_t)tc_wbytes(w->kind, w->cols), dims[2] = {row, (cuuint64_t)w->rows}, strides[1] = {row};
    cuuint32_t box[2] = {(cuuint32_t)tc_wbytes(w->kind, TC_BK), TC_BW};
    return encode_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w->data, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE);
}

extern "C" size_t k_matmul_tc_wmaps_bytes(int n) { return (size_t)n * sizeof(CUtensorMap); }

extern "C" cudaError_t k_matmul_tc_wmaps(const kw_t *w, int n, void *dev) {
    CUtensorMap *m = (CUtensorMap *)aligned_alloc(alignof(CUtensorMap), k_matmul_tc_wmaps_bytes(n));
    if (!m) return cudaErrorMemoryAllocation;
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < n && e == cudaSuccess; i++)
        e = k_matmul_tc_ok(&w[i]) && w[i].cols % TC_BK == 0 ? w_map(&w[i], &m[i]) : cudaErrorInvalidValue;
    if (e == cudaSuccess) e = cudaMemcpy(dev, m, k_matmul_tc_wmaps_bytes(n), cudaMemcpyHostToDevice);
    free(m);
    return e;
}

template <int KIND, int TERMS, int SW, bool WS> static cudaError_t launch(const mm_args_t *a, cudaStream_t s) {
    constexpr int PT = tc_positions<TERMS>(), smem = tc_cfg<KIND, PT, TERMS == 0>::smem;
    static bool raised;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(mm_tc_kernel<KIND, TERMS, SW, WS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    tc_maps_t maps = {};
    if (WS) {
        cudaError_t e = TERMS == 0 ? x8_map(a, SW, &maps.x) : x_map(a, SW, &maps.x);
        if (e == cudaSuccess && !a->wtab) e = w_map(&a->w, &maps.w);
        if (e != cudaSuccess) return e;
    }
    unsigned ytiles = a->wtab ? (unsigned)a->max_tiles * (TC_BP / PT) : (unsigned)ceil_div(a->m, PT);
    dim3 grid((unsigned)ceil_div(a->n, TC_BW), ytiles, (unsigned)a->splits);
    return k_launch(mm_tc_kernel<KIND, TERMS, SW, WS>, grid, WS ? TC_WS_THREADS : 256, smem, s, *a, maps);
}

// Dense tiles in sub-tiles of 128 positions; grouped ones (about 128 positions per expert) in
// 64 (measured: 32 and 128 were 2-5% slower on the experts of an 8k-token prefill; 32 again 3%
// slower with one wide wgmma a step, run 184).
template <int KIND, int TERMS, bool WS> static cudaError_t launch_sw(const mm_args_t *a, cudaStream_t s) {
    return a->wtab ? launch<KIND, TERMS, 64, WS>(a, s) : launch<KIND, TERMS, 128, WS>(a, s);
}

template <int KIND, int TERMS> static cudaError_t launch_form(const mm_args_t *a, cudaStream_t s) {
    return ws_form(a) ? launch_sw<KIND, TERMS, true>(a, s) : launch_sw<KIND, TERMS, false>(a, s);
}

template <int KIND> static cudaError_t launch_terms(const mm_args_t *a, cudaStream_t s) {
    if (a->act_terms == 0) {
        if constexpr (KIND == KW_FP4) return a8_form(a) ? launch<KIND, 0, 64, true>(a, s) : cudaErrorInvalidValue;
        return cudaErrorInvalidValue;
    }
    if (a->act_terms >= 3) return launch_form<KIND, 3>(a, s);
    if (a->act_terms == 2) return launch_form<KIND, 2>(a, s);
    return launch_form<KIND, 1>(a, s);
}

extern "C" cudaError_t k_matmul_tc(const mm_args_t *a, cudaStream_t s) {
    if (!k_matmul_tc_ok(&a->w) || a->k % (a->w.kind == KW_BF16 ? 8 : 32) || (a->splits > 1 && a->split_k % TC_BK) ||
        a->x_group_n % TC_BW || !a->tc_x || a->act_terms < 0 || (a->act_terms == 0 && !a8_form(a)))
        return cudaErrorInvalidValue;
    if (a->n <= 0 || (a->wtab ? a->max_tiles : a->m) <= 0) return cudaSuccess;
    if (a->tc_x_fresh) {
        cudaError_t e = a->act_terms == 0   ? quant8(a, s)
                        : a->act_terms >= 3 ? split<3>(a, s)
                        : a->act_terms == 2 ? split<2>(a, s)
                                            : split<1>(a, s);
        if (e != cudaSuccess) return e;
    }
    return a->w.kind == KW_FP8 ? launch_terms<KW_FP8>(a, s)
           : a->w.kind == KW_FP4 ? launch_terms<KW_FP4>(a, s)
                                 : launch_terms<KW_BF16>(a, s);
}

extern "C" int k_matmul_tc8_ok(const kw_t *w, int n) {
    unsigned *bad;
    if (cudaMalloc(&bad, sizeof *bad) != cudaSuccess) return 0;
    unsigned h = 0;
    cudaError_t e = cudaMemset(bad, 0, sizeof *bad);
    for (int i = 0; i < n && e == cudaSuccess; i++) {
        const kw_t *x = &w[i];
        if (x->kind != KW_FP4 || x->scale_f32 || x->block_rows != 1 || x->block_cols != 32 || x->cols % TC_BK8 ||
            (uintptr_t)x->scale % 4) {
            h = 1;
            break;
        }
        int64_t items = x->rows * (x->cols / TC_BK8);
        if (items > 0) tc8_check_kernel<<<(unsigned)ceil_div(items, 256), 256>>>(*x, bad);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess && !h) e = cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(bad);
    return e == cudaSuccess && h == 0;
}
