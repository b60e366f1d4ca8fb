// Matmul on the tensor cores for few positions (decode batches): grouped (MoE, few positions
// per expert) or dense (one group of m positions, m < 33; the projections of a decode step). The
// weights are the 16-row side of mma.sync m16n8k16; the 8-column side holds (position, bf16
// piece) pairs, so one position's three pieces (bf16x3) share one instruction and a pass of np
// positions costs ceil(np * pieces / 8) instructions per 16 x 16 weights; a position's pieces
// are added after the reduction. A block of 16 warps takes 128 output rows of one expert: two
// warps per 16 rows, one for the even and one for the odd steps of the reduction, added in that
// order at the end. A warp streams its rows 16 bytes per row and lane a step, each step's loads
// issued TS_U of its steps ahead (loads and scale bytes alike: nothing waits for them before
// the step is consumed), and dequantizes them into bf16 fragments in registers:
// - e2m1: a word of eight codes becomes four bf16 pairs by a mask, a multiply and a mask that
//   put each code's sign, exponent and mantissa bits in a bf16's (the value times 2^-126), then
//   one bf16x2 multiply by the block scale times 2^126: exact, as the scales are powers of two
//   (a step whose scales are not, or would overflow, takes the fp32 route, the same bits).
// - e4m3: the hardware conversion to half, the fp32 scale, a bf16 pack.
// The reduction order inside a step is a permutation of k shared by both operands: lane (g, c)
// loads the contiguous bytes of chunk c of its rows g and g + 8, and its fragment slots for
// logical k 2c, 2c+1, 2c+8, 2c+9 of sub-step j take the chunk's physical k ts_pick lists. The
// staged activations are stored in that order (split into pieces once per block, as many
// columns at a time as shared memory takes), so that a lane's B fragment is one 8-byte read and
// the four lanes of a column read 32 bytes in a row. With wtab2 (the up projections w1 and w3)
// a warp streams the same rows of both, reading the activations once, and writes
// wpos * act(w1 x, w3 x). The loop over a warp's steps holds one step's code (the ring of loads
// moves down a slot instead of being unrolled): these launches are short, and their code is
// fetched cold.
// Dense matrices too short to fill the GPU cut the reduction in splits (blockIdx.y, the count
// from the shape alone): each writes its partial sums, and the last block of a row block adds
// them in split order (splitk_finish_with), then applies the pair's activation. A block-diagonal
// x (x_group_n, the grouped output projection wo_a) moves a block's activations to its group's
// columns.
// A position's columns depend on its own activations alone and the order of every sum is
// fixed, so neither the pass it shares nor its expert's count nor m changes its result.
#include "common.cuh"

#define TS_WARPS 16
#define TS_ROWS K_TCS_ROWS // output rows per block (128): 8 groups of 16, each taken by two warps
#define TS_NP 8       // positions per pass, at most
#define TS_U 2        // a warp's steps in flight (the prologue fetches both)
#define TS_KQ 512     // staged columns come in multiples of this (of two steps, so a warp keeps its parity)
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

// The weights of one sub-step from a 32-bit word of a lane's chunk (e4m3: the word's four; e2m1:
// codes 2h, 2h+4 and 2h+1, 2h+5 of its eight): lo and hi the bf16 pairs for slots (2c, 2c+1)
// and (2c+8, 2c+9). FAST (e2m1): m is the bf16x2 multiplier, else s the fp32 scale.
template <int KIND, int H, bool FAST>
__device__ __forceinline__ void ts_sub(uint32_t w, uint32_t m, float s, uint32_t &lo, uint32_t &hi) {
    if (KIND == KW_FP8) {
        __half2_raw h0 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xFFFF), __NV_E4M3);
        __half2_raw h1 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
        float2 f0 = __half22float2(__half2(h0)), f1 = __half22float2(__half2(h1));
        lo = pack2_bf16(f0.x * s, f0.y * s), hi = pack2_bf16(f1.x * s, f1.y * s);
    } else if (FAST) {
        __nv_bfloat162 mm = *(__nv_bfloat162 *)&m;
        uint32_t p0 = e2m1_pair<2 * H>(w), p1 = e2m1_pair<2 * H + 1>(w);
        __nv_bfloat162 r0 = __hmul2_rn(*(__nv_bfloat162 *)&p0, mm), r1 = __hmul2_rn(*(__nv_bfloat162 *)&p1, mm);
        lo = *(uint32_t *)&r0, hi = *(uint32_t *)&r1;
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

// A warp's registers: its rows' loads and scale bits of its TS_U next steps (slot 0 the next
// to consume), its accumulators (sets: even and odd sub-steps with one weight, two chains),
// where its rows and its B fragments are.
template <int KIND, int TERMS, bool PAIR> struct ts_warp {
    typedef ts_fmt<KIND> F;
    static const int NM = PAIR ? 2 : 1, NA = 3 - NM;
    uint4 raw[TS_U][NM][2];
    uint32_t sraw[TS_U][NM][2]; /* the scales' bits: fp32, or the UE8M0 byte (0x100: past the reduction) */
    float acc[NA][NM][TERMS][4];
    const uint8_t *data[NM], *scale[NM]; /* the rows' bytes at data[mi] + doff[h], scales at scale[mi] + soff[h] */
    uint32_t doff[2], soff[2];
    int xq[TERMS]; /* column g of instruction q in xs: piece ci % TERMS of position ci / TERMS, ci = 8q + g */
    int c, kh;     /* the lane's chunk, the warp's steps (kh, kh + 2, ...) */
    int64_t khi;   /* the end of the block's reduction range (its split) */

    // Issues the loads of the step at column k into ring slot UI (zeros past the reduction).
    template <int UI> __device__ __forceinline__ void fetch(const mm_args_t &a, int64_t k) {
        int64_t kl = k + c * F::ept;
        bool ok = kl < khi;
        uint32_t off = KIND == KW_FP8 ? (uint32_t)kl : (uint32_t)kl / 2;
#pragma unroll
        for (int mi = 0; mi < NM; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint8_t *sp = scale[mi] + soff[h];
                raw[UI][mi][h] = ok ? __ldg((const uint4 *)(data[mi] + doff[h] + off)) : make_uint4(0, 0, 0, 0);
                sraw[UI][mi][h] = !ok ? (a.w.scale_f32 ? 0u : 0x100u)
                                      : a.w.scale_f32 ? __ldg((const unsigned *)sp + (kl >> 5)) : __ldg(sp + (kl >> 5));
            }
    }

    // Slot 0 with NQ instructions per sub-step, its staged activations at column ks of xs.
    template <int NQ, bool FAST>
    __device__ __forceinline__ void step(const __nv_bfloat16 *xs, int ks, const uint32_t (&m)[NM][2], const float (&sc)[NM][2]) {
        const int SW = F::subs / 4; /* sub-steps per 32-bit word */
#pragma unroll
        for (int j = 0; j < F::subs; j++) {
            uint32_t lo[NM][2], hi[NM][2];
#pragma unroll
            for (int mi = 0; mi < NM; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint4 &r = raw[0][mi][h];
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

    // Consumes slot 0 (e2m1: the bf16 route when every scale of the warp's step allows it), moves
    // the ring down and fetches the warp's step TS_U further.
    template <int NQ> __device__ __forceinline__ void next(const mm_args_t &a, const __nv_bfloat16 *xs, int ks, int64_t kc) {
        uint32_t m[NM][2];
        float sc[NM][2];
        bool fast = true;
#pragma unroll
        for (int mi = 0; mi < NM; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) { /* bf16 of scale * 2^126, exact and finite */
                uint32_t r = sraw[0][mi][h];
                sc[mi][h] = a.w.scale_f32 ? __uint_as_float(r) : r > 255 ? 0.0f : e8m0_f((uint8_t)r);
                uint32_t b = __float_as_uint(sc[mi][h] * 0x1p126f);
                fast &= (b & 0xFFFFu) == 0 && (b & 0x7F800000u) != 0x7F800000u;
                m[mi][h] = (b >> 16) * 0x10001u;
            }
        if (KIND == KW_FP8) step<NQ, false>(xs, ks, m, sc);
        else if (__builtin_expect(__all_sync(0xFFFFFFFFu, fast), 1)) step<NQ, true>(xs, ks, m, sc);
        else step<NQ, false>(xs, ks, m, sc);
#pragma unroll
        for (int u = 0; u + 1 < TS_U; u++)
#pragma unroll
            for (int mi = 0; mi < NM; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) raw[u][mi][h] = raw[u + 1][mi][h], sraw[u][mi][h] = sraw[u + 1][mi][h];
        fetch<TS_U - 1>(a, kc + ks + 2 * TS_U * F::step);
    }

    // One pass over the reduction [klo, khi): chunks of kcw columns staged, then the warp's steps streamed.
    template <int NQ>
    __device__ __forceinline__ void reduce(const mm_args_t &a, __nv_bfloat16 *xs, int kcw, int npass, const int64_t *xoff, int np,
                                           int64_t klo) {
        for (int64_t kc = klo; kc < khi; kc += kcw) {
            int kn = (int)min((int64_t)kcw, khi - kc), kr = (kn + F::step - 1) / F::step * F::step;
            __syncthreads();
            ts_stage<KIND, TERMS>(xs, kcw + 16, npass, a, xoff, np, kc, kn, kr);
            __syncthreads();
#pragma unroll 1
            for (int ks = kh * F::step; ks < kr; ks += 2 * F::step) next<NQ>(a, xs, ks, kc);
        }
    }
};

// Output (p, o) from its sums (the pair's: w1 and w3).
template <bool PAIR> __device__ __forceinline__ void ts_emit(const mm_args_t &a, int64_t p, int64_t o, const float *v) {
    if constexpr (PAIR) {
        float h = moe_act_dev(v[0], v[1], a.limit);
        a.out[p * a.ldo + o] = a.wpos ? a.wpos[p] * h : h;
    } else
        a.out[p * a.ldo + o] = v[0];
}

// kcw: staged columns per chunk (a multiple of TS_KQ); rows of kcw + 16 elements (four rows'
// 32-byte words in distinct banks).
template <int KIND, int TERMS, bool PAIR>
__global__ void __launch_bounds__(TS_WARPS * 32, 1) mm_tcs_kernel(mm_args_t a, int npass, int kcw) {
    extern __shared__ __align__(16) __nv_bfloat16 xs[]; // [TERMS][npass][kcw + 16]; the epilogue's sums after a pass
    __shared__ int64_t xoff[TS_NP];
    typedef ts_warp<KIND, TERMS, PAIR> W;
    const int NM = W::NM, NA = W::NA;
    int grp = 0, split = blockIdx.y;
    int64_t pb = 0, pe = a.m;
    if (a.wtab) {
        pdl_wait(); /* the expert lists come from the kernel before */
        if ((int)blockIdx.z >= a.counts[0]) return;
        grp = a.active[blockIdx.z];
        pb = a.offsets[grp], pe = a.offsets[grp + 1];
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, ldx = kcw + 16;
    int64_t o0 = (int64_t)blockIdx.x * TS_ROWS + (warp & 7) * 16;
    int64_t klo = (int64_t)split * a.split_k, xg = a.x_group_n ? (int64_t)blockIdx.x * TS_ROWS / a.x_group_n * a.k : 0;
    W st;
    st.c = lane & 3, st.kh = warp >> 3, st.khi = a.splits > 1 ? min(a.k, klo + a.split_k) : a.k;
#pragma unroll
    for (int h = 0; h < 2; h++) { /* an expert's weight is far below 4 GB: 32-bit row offsets, the same in both */
        int64_t r = a.row0 + min(o0 + g + 8 * h, a.n - 1);
        st.doff[h] = (uint32_t)(r * (KIND == KW_FP8 ? a.w.cols : a.w.cols / 2));
        st.soff[h] = (uint32_t)(r / a.w.block_rows * ((a.w.cols + 31) >> 5) * (a.w.scale_f32 ? 4 : 1)); /* row_scales' */
    }
#pragma unroll
    for (int mi = 0; mi < NM; mi++) {
        const kw_t *wm = a.wtab ? &(mi ? a.wtab2 : a.wtab)[grp] : mi ? &a.w_pair : &a.w;
        st.data[mi] = wm->data, st.scale[mi] = wm->scale;
    }
    for (int64_t p0 = pb; p0 < pe; p0 += npass) {
        int np = (int)min((int64_t)npass, pe - p0), nq = (np * TERMS + 7) >> 3;
        st.template fetch<0>(a, klo + st.kh * W::F::step); /* the ring: the warp's first two steps */
        st.template fetch<1>(a, klo + (2 + st.kh) * W::F::step);
        pdl_begin(); /* dense: the ring's first fetches (weights only) went before it; later passes: no-ops */
        __syncthreads(); /* the previous pass is done with xoff and xs */
        if (threadIdx.x < TS_NP) {
            int64_t p = p0 + threadIdx.x; /* x row: gathered (up projections) or the position itself (down) */
            xoff[threadIdx.x] = threadIdx.x < np ? (a.x_rows ? a.x_rows[p] : p) * a.ldx + xg : 0;
        }
#pragma unroll
        for (int q = 0; q < TERMS; q++) {
            int ci = 8 * q + g, p = min(ci / TERMS, npass - 1);
            st.xq[q] = ((ci % TERMS) * npass + p) * ldx + st.c * 4;
        }
#pragma unroll
        for (int i = 0; i < NA * NM * TERMS * 4; i++) (&st.acc[0][0][0][0])[i] = 0.0f;
        if (nq == 1 || TERMS == 1) st.template reduce<1>(a, xs, kcw, npass, xoff, np, klo);
        else if (nq == 2 || TERMS == 2) st.template reduce<TERMS < 2 ? 1 : 2>(a, xs, kcw, npass, xoff, np, klo);
        else st.template reduce<TERMS>(a, xs, kcw, npass, xoff, np, klo);
        /* acc[set][mi][q]: rows g and g + 8 of the warp's group, columns 2c and 2c + 1 of
         * instruction q. Through shared memory the two halves of the steps are added, then the
         * pieces of a position in piece order. */
        int npt = np * TERMS;
        float *red = (float *)xs; /* [kh][group][mi][16][npt] */
        __syncthreads(); /* every warp is done with xs */
#pragma unroll
        for (int mi = 0; mi < NM; mi++)
#pragma unroll
            for (int q = 0; q < TERMS; q++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int ci = 8 * q + 2 * st.c + (i & 1);
                    float v = NA == 2 ? st.acc[0][mi][q][i] + st.acc[NA - 1][mi][q][i] : st.acc[0][mi][q][i];
                    if (ci < npt) red[((warp * NM + mi) * 16 + g + (i >> 1) * 8) * npt + ci] = v;
                }
        __syncthreads();
        for (int i = threadIdx.x; i < 8 * 16 * np; i += blockDim.x) {
            int r = i & 15, p = (i >> 4) % np, grp16 = (i >> 4) / np;
            float v[NM];
#pragma unroll
            for (int mi = 0; mi < NM; mi++) {
                const float *s0 = red + ((grp16 * NM + mi) * 16 + r) * npt + p * TERMS, *s1 = s0 + 8 * NM * 16 * npt;
                v[mi] = s0[0] + s1[0];
#pragma unroll
                for (int t = 1; t < TERMS; t++) v[mi] += s0[t] + s1[t];
            }
            int64_t o = (int64_t)blockIdx.x * TS_ROWS + grp16 * 16 + r;
            if (o >= a.n) continue;
            if (a.partial) /* split: this split's sums, added by the row block's last block */
#pragma unroll
                for (int mi = 0; mi < NM; mi++) a.partial[((mi * a.splits + split) * a.positions + p0 + p) * a.n + o] = v[mi];
            else
                ts_emit<PAIR>(a, p0 + p, o, v);
        }
    }
    if (a.partial) {
        int64_t ob = (int64_t)blockIdx.x * TS_ROWS;
        splitk_finish_with<NM>(a, blockIdx.x, 0, a.m, ob, min(a.n, ob + TS_ROWS),
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

template <int KIND, int TERMS, bool PAIR>
static cudaError_t ts_launch(const mm_args_t *a, cudaStream_t s) {
    int npass = (int)(a->m < TS_NP ? a->m : TS_NP); /* a position per token and expert at most */
    int kcw = ts_chunk(a->splits > 1 ? a->split_k : a->k, TERMS, npass), nm = PAIR ? 2 : 1;
    size_t stage = (size_t)TERMS * npass * (kcw + 16) * 2, red = (size_t)TS_WARPS * nm * 16 * TERMS * npass * 4;
    static bool raised;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(mm_tcs_kernel<KIND, TERMS, PAIR>, cudaFuncAttributeMaxDynamicSharedMemorySize, TS_SMEM);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    dim3 grid((unsigned)ceil_div(a->n, TS_ROWS), (unsigned)a->splits, a->wtab ? (unsigned)a->max_active : 1);
    return k_launch(mm_tcs_kernel<KIND, TERMS, PAIR>, grid, TS_WARPS * 32, stage > red ? stage : red, s, *a, npass, kcw);
}

template <int KIND, bool PAIR>
static cudaError_t ts_launch_terms(const mm_args_t *a, cudaStream_t s) {
    if (a->act_terms >= 3) return ts_launch<KIND, 3, PAIR>(a, s);
    if (a->act_terms == 2) return ts_launch<KIND, 2, PAIR>(a, s);
    return ts_launch<KIND, 1, PAIR>(a, s);
}

template <int KIND>
static cudaError_t ts_launch_kind(const mm_args_t *a, bool pair, cudaStream_t s) {
    return pair ? ts_launch_terms<KIND, true>(a, s) : ts_launch_terms<KIND, false>(a, s);
}

// The pair's second weight reads as the first (one format, shape and scale layout).
static bool ts_same_layout(const kw_t *a, const kw_t *b) {
    return k_matmul_tcs_ok(b) && a->kind == b->kind && a->rows == b->rows && a->cols == b->cols &&
           a->block_rows == b->block_rows && a->block_cols == b->block_cols && a->scale_f32 == b->scale_f32;
}

extern "C" cudaError_t k_matmul_tcs(const mm_args_t *a, cudaStream_t s) {
    bool pair = a->wtab ? a->wtab2 != NULL : a->w_pair.data != NULL;
    bool layout = a->wtab ? a->splits <= 1 && !a->x_group_n
                          : (a->splits <= 1 || (a->split_k % 256 == 0 && a->partial && a->counters)) &&
                                a->x_group_n % TS_ROWS == 0 && a->row0 + a->n <= a->w.rows &&
                                (!pair || ts_same_layout(&a->w, &a->w_pair));
    if (!k_matmul_tcs_ok(&a->w) || !layout) return cudaErrorInvalidValue;
    if (a->n <= 0 || a->m <= 0 || (a->wtab && a->max_active <= 0)) return cudaSuccess;
    return a->w.kind == KW_FP8 ? ts_launch_kind<KW_FP8>(a, pair, s) : ts_launch_kind<KW_FP4>(a, pair, s);
}
