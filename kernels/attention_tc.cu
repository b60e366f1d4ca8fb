// Sparse attention with sink (MODEL_V41 §5.9, K = V) on the tensor cores for prefill: one block
// of 8 warps per query row, whose heads (padded to a multiple of 16, at most 64) are the
// 16-row side of mma.sync m16n8k16 and share the row's key list (its window rows, then its
// selected pool rows). Keys come from a store of bf16 pieces (bf16_pieces.cu) in tiles of 32,
// copied asynchronously into shared memory one tile ahead. Per tile:
//   S = Q K^T     warp w: heads 16 (w % 4).., keys 16 (w / 4)..; Q stays in shared memory as
//                 fp32 and is split into `NP` bf16 pieces as its fragments are loaded;
//   softmax       online, in fp32, per head; the running maximum starts at the sink with
//                 e^(sink - m) in the denominator (backend.h);
//   O += P V      warp w: heads 32 (w % 2).., channels 128 (w / 2)..; the 64 x 512 fp32
//                 accumulators of the row live in registers (128 per thread).
// Precision: Q and P are split into NP pieces (1 = bf16, 2 = bf16x2; bf16x3 stays on the CUDA
// cores, backend_cuda_tc.c says why). Keys whose store row has non-zero pieces past the first
// (not exact in bf16: QAT off) take extra passes over the tile with those pieces (products of
// pieces i, j with i + j < NP); with exact keys (QAT on) the skipped products are exactly zero.
// Nothing depends on the other rows of the launch.
#include "attention_keys.cuh"
#include "tc_frag.cuh"

#define AT_LDP 40     // floats per row of the logit / probability tile: 32 + 8, conflict-free fragments
#define AT_MAXH 64    // heads per block
#define AT_THREADS 256

static int heads_padded(int heads) { return (heads + 15) & ~15; }

static size_t at_smem(int heads, int d) {
    size_t q = (size_t)heads_padded(heads) * (d + 8) * 4, k = 2 * (size_t)AT_KT * (d + 8) * 2;
    return q + k + (size_t)AT_MAXH * AT_LDP * 4 + 3 * AT_MAXH * 4 + 4 * 4;
}

extern "C" int k_attention_tc_ok(int heads, int d) {
    return heads >= 1 && heads <= AT_MAXH && d >= 16 && d <= 512 && d % 16 == 0;
}

// Piece `piece` of the keys of tile `tile` into key buffer `buf` (one commit group).
__device__ __forceinline__ void at_issue(const attn_tc_args_t &a, const at_keys_t &ks, __nv_bfloat16 *kbuf, int ldk, int tile,
                                         int piece) {
    int cpr = a.d / 8; /* 16-byte chunks per key row */
    const uint16_t *ps = a.store + (int64_t)piece * a.store_rows * a.d;
    for (int c = threadIdx.x; c < AT_KT * cpr; c += AT_THREADS) {
        int kk = c / cpr, part = c - kk * cpr;
        int64_t row = ks.row((int64_t)tile * AT_KT + kk);
        tc_cp16(kbuf + kk * ldk + part * 8, row >= 0 ? ps + row * a.d + part * 8 : a.store, row >= 0);
    }
    tc_cp_commit();
}

template <int NP>
__global__ void __launch_bounds__(AT_THREADS, 1) attn_tc_kernel(attn_tc_args_t a) {
    pdl_begin();
    extern __shared__ __align__(16) unsigned char smem[];
    const int d = a.d, ldq = d + 8, ldk = d + 8, MP = (a.heads + 15) & ~15;
    float *qs = (float *)smem;
    __nv_bfloat16 *kb = (__nv_bfloat16 *)(qs + MP * ldq);
    float *ps = (float *)(kb + 2 * AT_KT * ldk), *mrun = ps + AT_MAXH * AT_LDP, *zrun = mrun + AT_MAXH, *alpha = zrun + AT_MAXH;
    unsigned *meta = (unsigned *)(alpha + AT_MAXH); /* [buffer][valid keys, more pieces] */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;

    // this block's query row and its keys
    int64_t r;
    const at_keys_t keys = at_keys_of(a, blockIdx.x, r);
    int ntiles = (int)((keys.nwin + keys.n_sel + AT_KT - 1) / AT_KT);

    // Q (padded heads zero), the running maxima at the sinks, the first tile
    const float *qrow = a.q + r * a.ldq;
    if (a.vec) {
        int cpr = d / 4;
        for (int c = tid; c < MP * cpr; c += AT_THREADS) {
            int h = c / cpr, part = c - h * cpr;
            tc_cp16(qs + h * ldq + part * 4, h < a.heads ? qrow + h * d + part * 4 : a.q, h < a.heads);
        }
        tc_cp_commit();
    } else {
        for (int c = tid; c < MP * d; c += AT_THREADS) {
            int h = c / d, col = c - h * d;
            qs[h * ldq + col] = h < a.heads ? qrow[h * d + col] : 0.0f;
        }
    }
    if (tid < AT_MAXH) mrun[tid] = tid < a.heads ? a.sink[tid] : 0.0f, zrun[tid] = 1.0f;
    if (ntiles > 0) {
        if (warp == 0) at_meta(a, keys, meta, 0);
        at_issue(a, keys, kb, ldk, 0, 0);
    }

    const int smt = warp & 3, skh = warp >> 2; /* S: heads 16 smt.., keys 16 skh.. */
    const bool s_on = smt * 16 < MP;
    const int ohh = warp & 1, ocq = warp >> 1; /* PV: heads 32 ohh.., channels 128 ocq.. */
    float o[2][16][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[mi][nt][e] = 0.0f;

    for (int t = 0; t < ntiles; t++) {
        const int buf = t & 1;
        __nv_bfloat16 *kt = kb + buf * AT_KT * ldk;
        tc_cp_wait();
        __syncthreads(); /* tile t has landed; every warp is done with tile t - 1 */
        if (t + 1 < ntiles) {
            if (warp == 0) at_meta(a, keys, meta + 2 * (buf ^ 1), t + 1);
            at_issue(a, keys, kb + (buf ^ 1) * AT_KT * ldk, ldk, t + 1, 0);
        }
        const unsigned valid = meta[2 * buf];
        if (!valid) continue; /* no key: nothing changes (block-uniform) */
        const int passes = meta[2 * buf + 1] ? NP : 1;

        // ---- S = Q K^T, pass j with key piece j and query pieces 0 .. NP - 1 - j
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        for (int j = 0; j < passes; j++) {
            if (j) {
                __syncthreads();
                at_issue(a, keys, kt, ldk, t, j);
                tc_cp_wait();
                __syncthreads();
            }
            if (s_on) {
                const float *qa = qs + (smt * 16 + g) * ldq + 2 * t4;
                const __nv_bfloat16 *kp = kt + (skh * 16 + (lane & 7) + (lane >> 4) * 8) * ldk + ((lane >> 3) & 1) * 8;
                for (int k0 = 0; k0 < d; k0 += 16) {
                    uint32_t bf[4], af[NP][4];
                    tc_ldsm(kp + k0, bf);
                    tc_frag_a<NP>(qa + k0, ldq, af);
                    tc_mma_pieces<NP>(s[0], af, bf[0], bf[1], NP - j);
                    tc_mma_pieces<NP>(s[1], af, bf[2], bf[3], NP - j);
                }
            }
        }
        if (s_on) {
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                int kk = skh * 16 + nt * 8 + 2 * t4;
                bool v0 = valid >> kk & 1, v1 = valid >> (kk + 1) & 1;
                float *p0 = ps + (smt * 16 + g) * AT_LDP + kk, *p1 = p0 + 8 * AT_LDP;
                *(float2 *)p0 = make_float2(v0 ? s[nt][0] * a.scale : -INFINITY, v1 ? s[nt][1] * a.scale : -INFINITY);
                *(float2 *)p1 = make_float2(v0 ? s[nt][2] * a.scale : -INFINITY, v1 ? s[nt][3] * a.scale : -INFINITY);
            }
        }
        __syncthreads();

        // ---- online softmax: 4 threads per head, 8 keys each
        {
            int h = tid >> 2, qq = tid & 3;
            if (h < MP) { /* whole warps: MP is a multiple of 16 */
                float *pr = ps + h * AT_LDP + qq * 8, l[8];
                float4 x = *(float4 *)pr, y = *(float4 *)(pr + 4);
                l[0] = x.x, l[1] = x.y, l[2] = x.z, l[3] = x.w, l[4] = y.x, l[5] = y.y, l[6] = y.z, l[7] = y.w;
                float mo = mrun[h], mx = mo;
#pragma unroll
                for (int e = 0; e < 8; e++) mx = fmaxf(mx, l[e]);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                float zs = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    l[e] = l[e] == -INFINITY ? 0.0f : expf(l[e] - mx);
                    zs += l[e];
                }
                *(float4 *)pr = make_float4(l[0], l[1], l[2], l[3]);
                *(float4 *)(pr + 4) = make_float4(l[4], l[5], l[6], l[7]);
                zs += __shfl_xor_sync(0xffffffffu, zs, 1);
                zs += __shfl_xor_sync(0xffffffffu, zs, 2);
                __syncwarp();
                if (qq == 0) {
                    float al = expf(mo - mx);
                    zrun[h] = zrun[h] * al + zs, mrun[h] = mx, alpha[h] = al;
                }
            }
        }
        __syncthreads();

        // ---- O = O * alpha + P V, pass j with value piece j (the S passes left piece
        // passes - 1 in the buffer, so they run backwards) and probability pieces 0 .. NP - 1 - j
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            int h0 = ohh * 32 + mi * 16;
            if (h0 < MP) {
                float a0 = alpha[h0 + g], a1 = alpha[h0 + g + 8];
#pragma unroll
                for (int nt = 0; nt < 16; nt++) o[mi][nt][0] *= a0, o[mi][nt][1] *= a0, o[mi][nt][2] *= a1, o[mi][nt][3] *= a1;
            }
        }
        for (int j = passes - 1; j >= 0; j--) {
            if (j != passes - 1) {
                __syncthreads();
                at_issue(a, keys, kt, ldk, t, j);
                tc_cp_wait();
                __syncthreads();
            }
#pragma unroll
            for (int ks = 0; ks < AT_KT; ks += 16) {
                uint32_t af[2][NP][4];
#pragma unroll
                for (int mi = 0; mi < 2; mi++)
                    if (ohh * 32 + mi * 16 < MP) tc_frag_a<NP>(ps + (ohh * 32 + mi * 16 + g) * AT_LDP + ks + 2 * t4, AT_LDP, af[mi]);
#pragma unroll
                for (int np2 = 0; np2 < 8; np2++) {
                    int c0 = ocq * 128 + np2 * 16;
                    if (c0 >= d) continue;
                    uint32_t bf[4];
                    tc_ldsm_t(kt + (ks + (lane & 7) + ((lane >> 3) & 1) * 8) * ldk + c0 + (lane >> 4) * 8, bf);
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) {
                        if (ohh * 32 + mi * 16 >= MP) continue;
                        tc_mma_pieces<NP>(o[mi][2 * np2], af[mi], bf[0], bf[1], NP - j);
                        tc_mma_pieces<NP>(o[mi][2 * np2 + 1], af[mi], bf[2], bf[3], NP - j);
                    }
                }
            }
        }
    }
    tc_cp_wait();
    __syncthreads(); /* zrun: the prologue's values when no tile ran */

    // out = O / z
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int h = ohh * 32 + mi * 16 + g + half * 8;
            if (h >= a.heads) continue;
            float iz = 1.0f / zrun[h];
            float *orow = a.out + r * a.ldo + (int64_t)h * d;
#pragma unroll
            for (int nt = 0; nt < 16; nt++) {
                int c = ocq * 128 + nt * 8 + 2 * t4;
                if (c >= d) continue;
                float v0 = o[mi][nt][2 * half] * iz, v1 = o[mi][nt][2 * half + 1] * iz;
                if (a.vec) *(float2 *)(orow + c) = make_float2(v0, v1);
                else orow[c] = v0, orow[c + 1] = v1;
            }
        }
}

template <int NP>
static cudaError_t launch(const attn_tc_args_t *a, size_t smem, cudaStream_t s) {
    static size_t raised;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(attn_tc_kernel<NP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    return k_launch(attn_tc_kernel<NP>, (unsigned)a->m, AT_THREADS, smem, s, *a);
}

extern "C" cudaError_t k_attention_tc(const attn_tc_args_t *a, cudaStream_t s) {
    if (a->m <= 0) return cudaSuccess;
    if (!k_attention_tc_ok(a->heads, a->d) || a->m > 0x7FFFFFFF || a->n_spans <= 0) return cudaErrorInvalidValue;
    if (k_hopper && a->pieces == 1 && k_attention_wg_ok(a->heads, a->d) && a->ldo % 2 == 0) return k_attention_wg(a, s);
    size_t smem = at_smem(a->heads, a->d);
    switch (a->pieces) {
    case 1: return launch<1>(a, smem, s);
    case 2: return launch<2>(a, smem, s);
    default: return cudaErrorInvalidValue;
    }
}
