// Matmul on the tensor cores for few positions (decode batches): grouped (MoE, few positions
// per expert) or dense (one group of m positions, m < 33; the projections of a decode step). The
// weights are the 16-row side of mma.sync m16n8k16; the 8-column side holds (position, bf16
// piece) pairs, so one position's three pieces (bf16x3) share one instruction and a pass of np
// positions costs ceil(np * pieces / 8) instructions per 16 x 16 weights; a position's pieces
// are added after the reduction. A block of 16 warps takes 128 output rows of one expert: two
// warps per 16 rows, one for the even and one for the odd steps of the reduction, added in that
// order at the end (at one position 8 warps, 64 rows, two blocks an SM; experts at a few
// positions whose blocks fill less than one wave: 14 to 8 warps, 112 to 64 rows, so that more
// SMs stream; a row's sum does not depend on its block). A warp streams its rows 16 bytes per row and lane a step. At one
// position the kernel was bound by instruction issue (ncu, decode step: ~200 instructions per
// 1 KB a warp consumed, 56% of issue slots, DRAM 37%; now ~100 and 38%, and a third fewer
// no longer pays: docs/CUDA_NOTES.md run 67, its block's serial latency binds), so a step costs
// as few instructions as the format allows:
// - the loads of the warp's next U steps (TS_LANE_BYTES, 128 bytes a lane: 4 steps, 2 for the
//   pair) are in flight, each in its own ring slot: the loop takes U steps unrolled, slot u
//   always holding the steps u mod U (no moves), and each slot is refilled once consumed;
// - the weights are dequantized into bf16 fragments by integer placement and one bf16x2
//   multiply a pair: e4m3 bytes b0 b1 become a pair of value * 2^-120 by one byte permute
//   (b0, b0's sign replicated, b1 into the upper three bytes), an arithmetic shift and a mask;
//   e2m1 codes by a mask, a multiply and a mask (value * 2^-126 each); then times the block
//   scale times 2^120 or 2^126 as a bf16x2: exact, as the scales are powers of two, the same
//   bits as the fp32 route (the hardware e4m3 conversion or e2m1_f, the fp32 scale, a bf16
//   pack), which a pass takes with fp32 scales, or redone from its start when a UE8M0 scale of
//   the block's has no finite bf16 multiplier (the hot loop holds one route's code).
//   e4m3 NaN codes (0x7F, 0xFF; quantization never produces them from finite weights) read as
//   finite on the bf16 route;
// - the scale bytes come with the step's loads and are turned into the multiplier by a shift;
// - the weight loads ask L2 for the 256 bytes around them (longer DRAM bursts per row), and a
//   grouped block reads its expert in two rounds of loads (count and entry, then the position
//   range and the weights' addresses), not four.
// The reduction order inside a step is a permutation of k shared by both operands: lane (g, c)
// loads the contiguous bytes of chunk c of its rows g and g + 8, and its fragment slots for
// logical k 2c, 2c+1, 2c+8, 2c+9 of sub-step j take the chunk's physical k ts_pick lists. The
// staged activations are stored in that order (split into pieces once per block, as many
// columns at a time as shared memory takes, a multiple of the ring's span so that a chunk
// starts at slot 0), so that a lane's B fragment is one 8-byte read and the four lanes of a
// column read 32 bytes in a row. With wtab2 (the up projections w1 and w3) a warp streams the
// same rows of both, reading the activations once, and writes wpos * act(w1 x, w3 x).
// Dense matrices too short to fill the GPU cut the reduction in splits (blockIdx.y, the count
// from the shape alone): each writes its partial sums, and the last block of a row block adds
// them in split order (splitk_finish_with), then applies the pair's activation. A block-diagonal
// x (x_group_n, the grouped output projection wo_a) moves a block's activations to its group's
// columns.
// A position's columns depend on its own activations alone and the order of every sum is
// fixed, so neither the pass it shares nor its expert's count nor m changes its result.
#include "row_ops.cuh"

#define TS_WARPS 16
#define TS_ROWS K_TCS_ROWS // output rows per block (128): 8 groups of 16, each taken by two warps (experts: 4 to 8 groups)
#define TS_NP 8       // positions per pass, at most
#define TS_LANE_BYTES 128 // weight bytes a lane has in flight: U steps of 32 (64 for the pair)
#define TS_KQ 1024    // staged columns come in multiples of this (of the ring's 2 U steps: a chunk starts at slot 0)
#define TS_SMEM (200 << 10)

// 32-bit row offsets: a weight below 4 GB.
extern "C" int k_matmul_tcs_ok(const kw_t *w) {
    return (w->kind == KW_FP8 || w->kind == KW_FP4) && w->cols % 32 == 0 && w->block_cols == 32 &&
           (uintptr_t)w->data % 16 == 0 && w->rows * (w->kind == KW_FP8 ? w->cols : w->cols / 2) <= (int64_t)UINT32_MAX;
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

// Elements a lane takes per row and step (16 bytes), the sub-steps of 4 they make, the step's width.
template <int KIND> struct ts_fmt {
    static const int ept = KIND == KW_FP8 ? 16 : 32, subs = ept / 4, step = 4 * ept;
};

// Slot i of a sub-step's four activations (fragment slots 2c, 2c+1, 2c+8, 2c+9) is column
// ts_pick(i) of the 8 that feed two sub-steps; the second sub-step's are 4 (e4m3) or 2 (e2m1)
// further (e2m1 pairs codes 4 apart, e2m1_pair).
__device__ __forceinline__ int ts_pick(int kind, int i) { return kind == KW_FP8 ? i : (i & 1) * 4 + (i >> 1); }

// e2m1 codes i and i + 4 of word w (code i in bits 4i .. 4i+3) as a bf16 pair, value * 2^-126
// each: the multiply copies the isolated codes to shifts 12 (sign to bit 15) and 6 (exponent and
// mantissa to bits 8..6) of their halves without carries, the last mask keeps those fields.
template <int I> __device__ __forceinline__ uint32_t e2m1_pair(uint32_t w) {
    uint32_t v = I < 2 ? w : w >> 8;
    return (I & 1 ? (v & 0x00F000F0u) * 0x104u : (v & 0x000F000Fu) * 0x1040u) & 0x81C081C0u;
}

// e4m3 bytes 2H and 2H + 1 of word w as a bf16 pair, value * 2^-120 each: the permute puts byte
// 2H in bits 15..8, its sign replicated in 23..16 and byte 2H + 1 in 31..24; shifted right by 4
// (arithmetic) each byte's exponent and mantissa land in bits 10..4 of its half with the sign
// in bit 15; the mask clears the sign's copies.
template <int H> __device__ __forceinline__ uint32_t e4m3_pair(uint32_t w) {
    uint32_t y;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(y) : "r"(w), "r"(0), "n"(H ? 0x3A24 : 0x1804));
    return (uint32_t)((int32_t)y >> 4) & 0x87F087F0u;
}

// The bf16x2 multiplier of a UE8M0 block scale (its byte r): scale * 2^B twice, B = 120 (e4m3)
// or 126 (e2m1) undoing the placement's 2^-B (the bf16 exponent field r + B); slow turns true
// if that is not a finite bf16.
template <int KIND> __device__ __forceinline__ uint32_t ts_mult(uint32_t r, bool &slow) {
    const uint32_t B = KIND == KW_FP8 ? 120 : 126;
    slow |= r > 254 - B;
    return ((r + B) << 7) * 0x10001u;
}

// 16 weight bytes, read-only for the kernel's life; L2 fetches the 256 bytes around them from
// DRAM (a row's next steps: longer bursts per row, -2% at one position, -7% for the experts' w1 + w3).
// volatile: the callers load only inside the reduction (ok ? ts_ld(p) : 0), and a plain asm is a
// pure expression to the compiler, which then issued it unconditionally, past the weight's end
// (compute-sanitizer, device run 13 of this pass).
__device__ __forceinline__ uint4 ts_ld(const uint8_t *p) {
    uint4 v;
    asm volatile("ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t hmul2_bits(uint32_t p, uint32_t m) {
    __nv_bfloat162 r = __hmul2_rn(*(__nv_bfloat162 *)&p, *(__nv_bfloat162 *)&m);
    return *(uint32_t *)&r;
}

// The weights of one sub-step from a 32-bit word of a lane's chunk (e4m3: the word's four; e2m1:
// codes 2h, 2h+4 and 2h+1, 2h+5 of its eight): lo and hi the bf16 pairs for slots (2c, 2c+1)
// and (2c+8, 2c+9). FAST: m is the bf16x2 multiplier, else s the fp32 scale.
template <int KIND, int H, bool FAST>
__device__ __forceinline__ void ts_sub(uint32_t w, uint32_t m, float s, uint32_t &lo, uint32_t &hi) {
    if (FAST && KIND == KW_FP8) {
        lo = hmul2_bits(e4m3_pair<0>(w), m), hi = hmul2_bits(e4m3_pair<1>(w), m);
    } else if (FAST) {
        lo = hmul2_bits(e2m1_pair<2 * H>(w), m), hi = hmul2_bits(e2m1_pair<2 * H + 1>(w), m);
    } else if (KIND == KW_FP8) {
        __half2_raw h0 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xFFFF), __NV_E4M3);
        __half2_raw h1 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
        float2 f0 = __half22float2(__half2(h0)), f1 = __half22float2(__half2(h1));
        lo = pack2_bf16(f0.x * s, f0.y * s), hi = pack2_bf16(f1.x * s, f1.y * s);
    } else {
        lo = pack2_bf16(e2m1_f(w >> (8 * H)) * s, e2m1_f(w >> (8 * H + 16)) * s);
        hi = pack2_bf16(e2m1_f(w >> (8 * H + 4)) * s, e2m1_f(w >> (8 * H + 20)) * s);
    }
}

// Stages activations [kc, kc + kn) of positions p0 .. p0+np-1 (zeros from kn up to the
// step-rounded width kr) as TERMS bf16 pieces in the lanes' order, 8 columns an item; rows of
// ldx elements, piece p of position t in row p * npass + t.
template <int KIND, int TERMS>
__device__ __forceinline__ void ts_stage(__nv_bfloat16 *xs, int ldx, int npass, const mm_args_t &a, const int64_t *xoff, int np,
                                         int64_t kc, int kn, int kr) {
    const int EPT = ts_fmt<KIND>::ept, STEP = ts_fmt<KIND>::step;
    int per = kr >> 3, total = np * per;
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
        int t = i / per, e = (i - t * per) * 8;
        float r[8];
        if (e < kn) {
            const float *src = a.x + xoff[t] + kc + e;
            if (a.x_vec) {
                float4 v0 = __ldg((const float4 *)src), v1 = __ldg((const float4 *)src + 1);
                r[0] = v0.x, r[1] = v0.y, r[2] = v0.z, r[3] = v0.w, r[4] = v1.x, r[5] = v1.y, r[6] = v1.z, r[7] = v1.w;
            } else {
#pragma unroll
                for (int z = 0; z < 8; z++) r[z] = src[z];
            }
        } else {
#pragma unroll
            for (int z = 0; z < 8; z++) r[z] = 0.0f;
        }
        int s = e / STEP, in = e - s * STEP, c = in / EPT, j = (in - c * EPT) >> 2; /* the first of two sub-steps */
        __nv_bfloat16 *dst = xs + t * ldx + s * STEP + (j * 4 + c) * 4;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float v[4];
#pragma unroll
            for (int z = 0; z < 4; z++) v[z] = r[ts_pick(KIND, z) + (KIND == KW_FP8 ? 4 : 2) * h];
#pragma unroll
            for (int p = 0; p < TERMS; p++) { /* each piece the bf16 of what the earlier ones left */
                float b[4];
#pragma unroll
                for (int z = 0; z < 4; z++) b[z] = __bfloat162float(__float2bfloat16_rn(v[z])), v[z] -= b[z];
                *(uint2 *)(dst + h * 16 + p * npass * ldx) = make_uint2(pack2_bf16(b[0], b[1]), pack2_bf16(b[2], b[3]));
            }
        }
    }
}

// A warp's registers: its rows' loads and scale bits of its next U steps (slot u: the steps
// u mod U of the warp's), its accumulators (sets: even and odd sub-steps with one weight, two
// chains; NQM instructions per sub-step at most: fewer registers at one or two positions),
// where its loads and its B fragments are. F32: fp32 scales, else UE8M0 bytes.
template <int KIND, int TERMS, bool PAIR, bool F32, int NQM> struct ts_warp {
    typedef ts_fmt<KIND> F;
    static const int NM = PAIR ? 2 : 1, NA = 3 - NM, U = TS_LANE_BYTES / (32 * NM);
    static const int RB = 128, RS = 2 * F::step / 32 * (F32 ? 4 : 1); /* bytes of a row, of its scales, a warp's step apart */
    uint4 raw[U][NM][2];
    uint32_t sraw[U][NM][2]; /* the scales' bits (0 past the reduction, whose weights read as 0) */
    float acc[NA][NM][NQM][4];
    const uint8_t *wp[NM][2], *sp[NM][2]; /* the lane's bytes and scales of rows g, g + 8 for slot 0 a round ahead */
    int left;      /* the reduction's columns from there on (the lane's chunk): a slot's step is in it when > 0 */
    int rounds;    /* rounds wp moved since the prologue */
    int xq[TERMS]; /* column g of instruction q in xs: piece ci % TERMS of position ci / TERMS, ci = 8q + g */
    int c, kh;     /* the lane's chunk, the warp's steps (kh, kh + 2, ...) */
    bool slow;     /* a step's scale had no bf16 multiplier (the pass is redone on the fp32 route) */

    // Issues the loads of slot UI's step, UI warp steps past wp (zeros past the reduction).
    template <int UI> __device__ __forceinline__ void fetch() {
        bool ok = left > UI * 2 * F::step;
#pragma unroll
        for (int mi = 0; mi < NM; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                raw[UI][mi][h] = ok ? ts_ld(wp[mi][h] + UI * RB) : make_uint4(0, 0, 0, 0);
                sraw[UI][mi][h] = !ok ? 0u : F32 ? __ldg((const unsigned *)(sp[mi][h] + UI * RS)) : __ldg(sp[mi][h] + UI * RS);
            }
    }

    // Moves wp a round (U warp steps) ahead.
    __device__ __forceinline__ void advance() {
#pragma unroll
        for (int mi = 0; mi < NM; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) wp[mi][h] += U * RB, sp[mi][h] += U * RS;
        left -= U * 2 * F::step;
        rounds++;
    }

    // Back to the prologue's state (the ring refilled): a pass redone (few registers live, not the prologue's inputs).
    __device__ __forceinline__ void restart() {
#pragma unroll
        for (int mi = 0; mi < NM; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) wp[mi][h] -= rounds * U * RB, sp[mi][h] -= rounds * U * RS;
        left += rounds * U * 2 * F::step;
        rounds = 0;
        ring_fill();
        advance();
    }

    // The ring's first U steps from column k0 of rows r[h] of the weights whose bytes and scales
    // start at wd[mi], ws[mi] (layout: lay's; khi: the reduction's end), wp then a round ahead.
    __device__ __forceinline__ void prologue(const uint8_t *const (&wd)[NM], const uint8_t *const (&ws)[NM], const kw_t &lay,
                                             const int64_t (&r)[2], int64_t k0, int64_t khi) {
        int64_t kl = k0 + kh * F::step + c * F::ept, ncb = (lay.cols + 31) >> 5;
#pragma unroll
        for (int mi = 0; mi < NM; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                wp[mi][h] = wd[mi] + (r[h] * lay.cols + kl) / (KIND == KW_FP8 ? 1 : 2);
                sp[mi][h] = ws[mi] + (r[h] / lay.block_rows * ncb + (kl >> 5)) * (F32 ? 4 : 1);
            }
        left = (int)(khi - kl);
        rounds = 0;
        ring_fill();
        advance();
    }
    template <int UI = 0> __device__ __forceinline__ void ring_fill() {
        if constexpr (UI < U) {
            fetch<UI>();
            ring_fill<UI + 1>();
        }
    }

    // A step's weights wr with NQ instructions per sub-step, its staged activations at column ks of xs.
    template <int NQ, bool FAST>
    __device__ __forceinline__ void step(const uint4 (&wr)[NM][2], const __nv_bfloat16 *xs, int ks, const uint32_t (&m)[NM][2],
                                         const float (&sc)[NM][2]) {
        const int SW = F::subs / 4; /* sub-steps per 32-bit word */
#pragma unroll
        for (int j = 0; j < F::subs; j++) {
            uint32_t lo[NM][2], hi[NM][2];
#pragma unroll
            for (int mi = 0; mi < NM; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint4 &r = wr[mi][h];
                    const int q4 = j / SW;
                    uint32_t w = q4 == 0 ? r.x : q4 == 1 ? r.y : q4 == 2 ? r.z : r.w;
                    if (j % SW) ts_sub<KIND, 1, FAST>(w, m[mi][h], sc[mi][h], lo[mi][h], hi[mi][h]);
                    else ts_sub<KIND, 0, FAST>(w, m[mi][h], sc[mi][h], lo[mi][h], hi[mi][h]);
                }
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                uint2 b = *(const uint2 *)(xs + xq[q] + ks + j * 16);
#pragma unroll
                for (int mi = 0; mi < NM; mi++)
                    mma16816(acc[j % NA][mi][q], lo[mi][0], lo[mi][1], hi[mi][0], hi[mi][1], b.x, b.y);
            }
        }
    }

    // Computes a step from its weights and scale bits: FAST, the bf16 route (UE8M0 scales; slow
    // marks a scale without a bf16 multiplier, whose sums are then discarded), else the fp32 one.
    // Deciding per pass, not per step, keeps the fp32 route's code out of the hot loop (ncu: the
    // FP4 kernels stalled on instruction fetch with both routes in every ring slot).
    template <int NQ, bool FAST>
    __device__ __forceinline__ void consume(const uint4 (&wr)[NM][2], const uint32_t (&sr)[NM][2], const __nv_bfloat16 *xs, int ks) {
        uint32_t m[NM][2] = {};
        float sc[NM][2] = {};
#pragma unroll
        for (int mi = 0; mi < NM; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if constexpr (FAST) m[mi][h] = ts_mult<KIND>(sr[mi][h], slow);
                else sc[mi][h] = F32 ? __uint_as_float(sr[mi][h]) : e8m0_f((uint8_t)sr[mi][h]);
            }
        step<NQ, FAST>(wr, xs, ks, m, sc);
    }

    // The warp's steps at columns ks, ks + 2 step, ... of the staged chunk (slots UI.. onwards,
    // those before kr): each slot consumed, then refilled with the step a round further; then
    // wp a round ahead.
    template <int NQ, bool FAST, int UI = 0> __device__ __forceinline__ void ring(const __nv_bfloat16 *xs, int ks, int kr) {
        if constexpr (UI < U) {
            if (UI > 0 && ks >= kr) return;
            consume<NQ, FAST>(raw[UI], sraw[UI], xs, ks);
            fetch<UI>();
            ring<NQ, FAST, UI + 1>(xs, ks + 2 * F::step, kr);
        } else
            advance();
    }

    // One pass over the reduction [klo, khi): chunks of kcw columns staged, then the warp's steps streamed.
    template <int NQ, bool FAST>
    __device__ __forceinline__ void reduce(const mm_args_t &a, __nv_bfloat16 *xs, int kcw, int npass, const int64_t *xoff, int np,
                                           int64_t klo, int64_t khi) {
        for (int64_t kc = klo; kc < khi; kc += kcw) {
            int kn = (int)min((int64_t)kcw, khi - kc), kr = (kn + F::step - 1) / F::step * F::step;
            __syncthreads();
            ts_stage<KIND, TERMS>(xs, kcw + 16, npass, a, xoff, np, kc, kn, kr);
            __syncthreads();
#pragma unroll 1
            for (int ks = kh * F::step; ks < kr; ks += 2 * U * F::step) ring<NQ, FAST>(xs, ks, kr);
        }
    }

    // The pass with nq instructions per sub-step on one route; true if a step's scale wanted the fp32 route.
    template <bool FAST>
    __device__ __forceinline__ bool pass(const mm_args_t &a, __nv_bfloat16 *xs, int kcw, int npass, const int64_t *xoff, int np,
                                         int nq, int64_t klo, int64_t khi) {
        slow = false;
#pragma unroll
        for (int i = 0; i < NA * NM * NQM * 4; i++) (&acc[0][0][0][0])[i] = 0.0f;
        if (nq == 1 || NQM == 1) reduce<1, FAST>(a, xs, kcw, npass, xoff, np, klo, khi);
        else if (nq == 2 || NQM == 2) reduce<NQM < 2 ? 1 : 2, FAST>(a, xs, kcw, npass, xoff, np, klo, khi);
        else reduce<NQM, FAST>(a, xs, kcw, npass, xoff, np, klo, khi);
        return slow;
    }
};

// Output (p, o) from its sums (the pair's: w1 and w3).
template <bool PAIR> __device__ __forceinline__ void ts_emit(const mm_args_t &a, int64_t p, int64_t o, const float *v) {
    if constexpr (PAIR) {
        float h = moe_act_dev(v[0], v[1], a.limit);
        a.out[p * a.ldo + o] = a.wpos ? a.wpos[p] * h : h;
    } else {
        a.out[p * a.ldo + o] = v[0];
        if (a.ex_X) hc_expand_cols<4, 1>(a.ex_X + p * a.ex_ldx, a.n, o, {v[0]}, a.ex_coef + p * a.ex_ldc, 4);
    }
}

// kcw: staged columns per chunk (a multiple of TS_KQ); rows of kcw + 16 elements (four rows'
// 32-byte words in distinct banks). ng: the block's groups of 16 rows (8, dense; 2 ng warps).
// NQM: instructions per sub-step at most (1, or TERMS: npass TERMS > 8).
template <int KIND, int TERMS, bool PAIR, bool F32, int NQM>
__global__ void __launch_bounds__(TS_WARPS * 32, 1) mm_tcs_kernel(mm_args_t a, int npass, int kcw, int ng) {
    extern __shared__ __align__(16) __nv_bfloat16 xs[]; // [TERMS][npass][kcw + 16]; the epilogue's sums after a pass
    __shared__ int64_t xoff[TS_NP];
    typedef ts_warp<KIND, TERMS, PAIR, F32, NQM> W;
    const int NM = W::NM, NA = W::NA;
    int split = blockIdx.y;
    int64_t pb = 0, pe = a.m;
    const uint8_t *wd[NM], *ws[NM]; /* the weights' bytes and scales */
#pragma unroll
    for (int mi = 0; mi < NM; mi++) wd[mi] = mi ? a.w_pair.data : a.w.data, ws[mi] = mi ? a.w_pair.scale : a.w.scale;
    if (a.wtab) { /* active has max_active entries (those past the count unset: read, not used) */
        pdl_wait(); /* the expert lists (or the slots' experts) come from the kernel before */
        int grp;
        if (a.slot_idx) {
            int64_t p = blockIdx.z, r = p / a.slots;
            grp = a.slot_idx[r * a.ld_slot + p - r * a.slots];
            if (grp < 0 || grp >= a.n_groups) return;
            pb = p, pe = p + 1;
        } else {
            grp = a.active[blockIdx.z];
            if ((int)blockIdx.z >= a.counts[0]) return;
            pb = a.offsets[grp], pe = a.offsets[grp + 1];
        }
#pragma unroll
        for (int mi = 0; mi < NM; mi++) {
            const kw_t *e = &(mi ? a.wtab2 : a.wtab)[grp];
            wd[mi] = e->data, ws[mi] = e->scale;
        }
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, ldx = kcw + 16, rows = 16 * ng;
    int64_t o0 = (int64_t)blockIdx.x * rows + (warp % ng) * 16;
    int64_t klo = (int64_t)split * a.split_k, xg = a.x_group_n ? (int64_t)blockIdx.x * rows / a.x_group_n * a.k : 0;
    int64_t khi = a.splits > 1 ? min(a.k, klo + a.split_k) : a.k, r[2];
    W st;
    st.c = lane & 3, st.kh = warp / ng;
#pragma unroll
    for (int h = 0; h < 2; h++) r[h] = a.row0 + min(o0 + g + 8 * h, a.n - 1);
    for (int64_t p0 = pb; p0 < pe; p0 += npass) {
        int np = (int)min((int64_t)npass, pe - p0), nq = (np * TERMS + 7) >> 3;
        st.prologue(wd, ws, a.w, r, klo, khi); /* the ring: the warp's first U steps */
        pdl_begin(); /* dense: the ring's first fetches (weights only) went before it; later passes: no-ops */
        __syncthreads(); /* the previous pass is done with xoff and xs */
        if (threadIdx.x < TS_NP) {
            int64_t p = p0 + threadIdx.x; /* x row: gathered or the slot's row (up projections), or the position itself (down) */
            xoff[threadIdx.x] = threadIdx.x >= np ? 0 : (a.x_rows ? a.x_rows[p] : a.slot_x_row ? p / a.slots : p) * a.ldx + xg;
        }
#pragma unroll
        for (int q = 0; q < TERMS; q++) {
            int ci = 8 * q + g, p = min(ci / TERMS, npass - 1);
            st.xq[q] = ((ci % TERMS) * npass + p) * ldx + st.c * 4;
        }
        /* UE8M0 scales: the bf16 route, redone on the fp32 one (the same bits) if a scale of the
         * block's has no bf16 multiplier (scales past 2^7 for e4m3, 2^1 for e2m1); fp32 scales:
         * the fp32 route */
        bool slow = F32;
        if constexpr (!F32) slow = st.template pass<true>(a, xs, kcw, npass, xoff, np, nq, klo, khi);
        if (__syncthreads_or(slow)) {
            if (!F32) st.restart();
            st.template pass<false>(a, xs, kcw, npass, xoff, np, nq, klo, khi);
        }
        /* acc[set][mi][q]: rows g and g + 8 of the warp's group, columns 2c and 2c + 1 of
         * instruction q. Through shared memory the two halves of the steps are added, then the
         * pieces of a position in piece order. */
        int npt = np * TERMS;
        float *red = (float *)xs; /* [kh][group][mi][16][npt] */
        __syncthreads(); /* every warp is done with xs */
#pragma unroll
        for (int mi = 0; mi < NM; mi++)
#pragma unroll
            for (int q = 0; q < NQM; q++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int ci = 8 * q + 2 * st.c + (i & 1);
                    float v = NA == 2 ? st.acc[0][mi][q][i] + st.acc[NA - 1][mi][q][i] : st.acc[0][mi][q][i];
                    if (ci < npt) red[((warp * NM + mi) * 16 + g + (i >> 1) * 8) * npt + ci] = v;
                }
        __syncthreads();
        for (int i = threadIdx.x; i < ng * 16 * np; i += blockDim.x) {
            int r = i & 15, p = (i >> 4) % np, grp16 = (i >> 4) / np;
            float v[NM];
#pragma unroll
            for (int mi = 0; mi < NM; mi++) {
                const float *s0 = red + ((grp16 * NM + mi) * 16 + r) * npt + p * TERMS, *s1 = s0 + ng * NM * 16 * npt;
                v[mi] = s0[0] + s1[0];
#pragma unroll
                for (int t = 1; t < TERMS; t++) v[mi] += s0[t] + s1[t];
            }
            int64_t o = (int64_t)blockIdx.x * rows + grp16 * 16 + r;
            if (o >= a.n) continue;
            if (a.partial) /* split: this split's sums, added by the row block's last block */
#pragma unroll
                for (int mi = 0; mi < NM; mi++) a.partial[((mi * a.splits + split) * a.positions + p0 + p) * a.n + o] = v[mi];
            else
                ts_emit<PAIR>(a, p0 + p, o, v);
        }
    }
    if (a.partial) {
        int64_t ob = (int64_t)blockIdx.x * rows;
        splitk_finish_with<NM>(a, blockIdx.x, 0, a.m, ob, min(a.n, ob + rows),
                               [&](int64_t p, int64_t o, const float *v) { ts_emit<PAIR>(a, p, o, v); });
    }
}

// The staged width: as many columns as TS_SMEM holds (all of a decode step's reduction at one
// position a pass), at least TS_KQ. The epilogue's sums (16 warps x 2 weights x 16 rows x 24
// columns of 4 bytes at most) fit too.
static int ts_chunk(int64_t k, int terms, int npass) {
    int64_t most = (TS_SMEM / (2 * terms * npass) - 16) / TS_KQ * TS_KQ, need = (k + TS_KQ - 1) / TS_KQ * TS_KQ;
    return (int)(need < most ? need : most > TS_KQ ? most : TS_KQ);
}

// Groups of 16 rows a block takes: at one position 4, two blocks an SM, so that one block's
// staging and epilogue overlap the other's stream (dense: -0.035 ms a batch-1 step, device run 58;
// the experts' w1 + w3 and w2: -0.02 ms, run 89 of docs/CUDA_NOTES.md); dense at more positions 8
// (4 is slower at 8); experts at a few positions whose blocks fill less than one wave (a block
// per SM) the fewest down to 4 that still fit one.
static int ts_groups(const mm_args_t *a) {
    if (a->m == 1) return 4;
    if (!a->wtab) return 8;
    int ng = 8;
    while (ng > 4 && ceil_div(a->n, 16 * (ng - 1)) * a->max_active <= a->sms) ng--;
    return ng;
}

template <int KIND, int TERMS, bool PAIR, bool F32, int NQM>
static cudaError_t ts_launch_nqm(const mm_args_t *a, int npass, cudaStream_t s) {
    int kcw = ts_chunk(a->splits > 1 ? a->split_k : a->k, TERMS, npass), nm = PAIR ? 2 : 1;
    size_t stage = (size_t)TERMS * npass * (kcw + 16) * 2, red = (size_t)TS_WARPS * nm * 16 * TERMS * npass * 4;
    static bool raised;
    if (!raised) {
        cudaError_t e =
            cudaFuncSetAttribute(mm_tcs_kernel<KIND, TERMS, PAIR, F32, NQM>, cudaFuncAttributeMaxDynamicSharedMemorySize, TS_SMEM);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    int ng = ts_groups(a);
    dim3 grid((unsigned)ceil_div(a->n, 16 * ng), (unsigned)a->splits, a->wtab ? (unsigned)a->max_active : 1);
    return k_launch(mm_tcs_kernel<KIND, TERMS, PAIR, F32, NQM>, grid, 64 * ng, stage > red ? stage : red, s, *a, npass, kcw, ng);
}

// A pass's instructions per sub-step at most: one (fewer registers: decode at one or two
// positions) or TERMS.
template <int KIND, int TERMS, bool PAIR, bool F32>
static cudaError_t ts_launch(const mm_args_t *a, cudaStream_t s) {
    int npass = (int)(a->m < TS_NP ? a->m : TS_NP); /* a position per token and expert at most */
    return npass * TERMS <= 8 ? ts_launch_nqm<KIND, TERMS, PAIR, F32, 1>(a, npass, s)
                              : ts_launch_nqm<KIND, TERMS, PAIR, F32, TERMS>(a, npass, s);
}

template <int KIND, bool PAIR, bool F32>
static cudaError_t ts_launch_terms(const mm_args_t *a, cudaStream_t s) {
    if (a->act_terms >= 3) return ts_launch<KIND, 3, PAIR, F32>(a, s);
    if (a->act_terms == 2) return ts_launch<KIND, 2, PAIR, F32>(a, s);
    return ts_launch<KIND, 1, PAIR, F32>(a, s);
}

template <int KIND, bool PAIR>
static cudaError_t ts_launch_scales(const mm_args_t *a, cudaStream_t s) {
    return a->w.scale_f32 ? ts_launch_terms<KIND, PAIR, true>(a, s) : ts_launch_terms<KIND, PAIR, false>(a, s);
}

template <int KIND>
static cudaError_t ts_launch_kind(const mm_args_t *a, bool pair, cudaStream_t s) {
    return pair ? ts_launch_scales<KIND, true>(a, s) : ts_launch_scales<KIND, false>(a, s);
}

// The pair's second weight reads as the first (one format, shape and scale layout).
static bool ts_same_layout(const kw_t *a, const kw_t *b) {
    return k_matmul_tcs_ok(b) && a->kind == b->kind && a->rows == b->rows && a->cols == b->cols &&
           a->block_rows == b->block_rows && a->block_cols == b->block_cols && a->scale_f32 == b->scale_f32;
}

extern "C" cudaError_t k_matmul_tcs(const mm_args_t *a, cudaStream_t s) {
    bool pair = a->wtab ? a->wtab2 != NULL : a->w_pair.data != NULL;
    bool layout = a->wtab ? a->splits <= 1 && !a->x_group_n && (!a->slot_idx || (a->slots > 0 && a->max_active == a->positions))
                          : (a->splits <= 1 || (a->split_k % 256 == 0 && a->partial && a->counters)) &&
                                a->x_group_n % TS_ROWS == 0 && a->row0 + a->n <= a->w.rows &&
                                (!pair || ts_same_layout(&a->w, &a->w_pair));
    bool expand = !a->ex_X || (!a->wtab && !pair && a->row0 == 0 && (uintptr_t)a->ex_X % 16 == 0);
    if (!k_matmul_tcs_ok(&a->w) || !layout || !expand) return cudaErrorInvalidValue;
    if (a->n <= 0 || a->m <= 0 || (a->wtab && a->max_active <= 0)) return cudaSuccess;
    return a->w.kind == KW_FP8 ? ts_launch_kind<KW_FP8>(a, pair, s) : ts_launch_kind<KW_FP4>(a, pair, s);
}
