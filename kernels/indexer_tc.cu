// Indexer scores (MODEL_V41 §5.7) on the tensor cores for prefill: I_j = sum_h relu(q_h . k_j) *
// q_scale * w_h * w_scale for the entries a query row can see, -inf for the others (as
// indexer_score.cu). A block of 8 warps takes 128 (row, head) pairs: 128 / HP query rows of
// one sequence, HP = heads padded to a multiple of 16; warp w holds pairs 16w.. (one query
// row's heads) as the 16-row side of mma.sync m16n8k16, its query fragments in registers as
// NP bf16 pieces (di <= 128). The sequence's keys (a store of bf16 pieces, bf16_pieces.cu) pass
// through shared memory 64 at a time, copied asynchronously one tile ahead; each warp
// multiplies, applies relu and the head weights, and sums its 16 heads across lanes; the warps
// of a query row add their sums in a fixed order. Keys with pieces past the first (not exact in
// bf16) get the products of pieces i, j with i + j < NP; with exact keys those are zero. A
// row's scores do not depend on the other rows of its block or launch.
#include "tc_frag.cuh"

#define IX_KT 64       // keys per tile
#define IX_THREADS 256 // 8 warps: 128 (row, head) pairs
#define IX_MAXDI 128

static size_t ix_tc_smem(int di, int np) {
    return 2 * (size_t)np * IX_KT * (di + 8) * 2 + 8 * IX_KT * 4 + 128 * 4 + 2 * 4;
}

extern "C" int k_indexer_tc_ok(int heads, int di) {
    return heads >= 1 && heads <= 128 && di >= 16 && di <= IX_MAXDI && di % 16 == 0;
}

template <int NP>
__global__ void __launch_bounds__(IX_THREADS) ix_tc_kernel(ix_tc_args_t a) {
    pdl_begin();
    extern __shared__ __align__(16) unsigned char smem[];
    const int di = a.di, ldk = di + 8, HP = (a.heads + 15) & ~15, RB = 128 / HP;
    __nv_bfloat16 *kb = (__nv_bfloat16 *)smem; /* [buffer][piece][key][ldk] */
    float *part = (float *)(kb + 2 * NP * IX_KT * ldk), *ws = part + 8 * IX_KT;
    unsigned *meta = (unsigned *)(ws + 128); /* [buffer]: some key needs more pieces */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;

    int64_t blk = blockIdx.x;
    int si = 0;
    while (si + 1 < a.n_spans && a.spans[si + 1].blk0 <= blk) si++;
    const ix_tc_span_t sp = a.spans[si];
    int64_t k0 = (blk - sp.blk0) * RB; /* first row of the block within the span */
    int nrows = (int)min((int64_t)RB, sp.n - k0);
    int64_t nvis_last = min(sp.nk, (sp.pos0 + k0 + nrows) / a.ratio);
    int ntiles = (int)((nvis_last + IX_KT - 1) / IX_KT);

    // this warp's pairs: query row qr of the block, heads hb + 0..15
    const int qr = 16 * warp / HP, hb = 16 * warp % HP;
    const bool w_on = qr < nrows;
    if (tid < 128) {
        int pr = tid / HP, h = tid % HP;
        ws[tid] = pr < nrows && h < a.heads ? a.w[(sp.r0 + k0 + pr) * a.ldw + h] * a.w_scale : 0.0f;
    }
    uint32_t af[IX_MAXDI / 16][NP][4];
#pragma unroll
    for (int ks = 0; ks < IX_MAXDI / 16; ks++)
#pragma unroll
        for (int p = 0; p < NP; p++)
#pragma unroll
            for (int e = 0; e < 4; e++) af[ks][p][e] = 0;
    if (w_on) {
        const float *qrow = a.q + (sp.r0 + k0 + qr) * a.ldq;
        int h0 = hb + g, h1 = hb + g + 8;
#pragma unroll
        for (int ks = 0; ks < IX_MAXDI / 16; ks++) {
            if (ks * 16 >= di) break;
            float2 x[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int h = e & 1 ? h1 : h0, c = ks * 16 + 2 * t4 + (e >> 1) * 8;
                x[e] = h < a.heads ? make_float2(qrow[h * di + c], qrow[h * di + c + 1]) : make_float2(0.0f, 0.0f);
            }
            uint32_t y[4][NP];
#pragma unroll
            for (int e = 0; e < 4; e++) tc_split<NP>(x[e], y[e]);
#pragma unroll
            for (int p = 0; p < NP; p++)
#pragma unroll
                for (int e = 0; e < 4; e++) af[ks][p][e] = y[e][p];
        }
    }

    // tile t's keys (every piece) into buffer buf; warp 0 notes whether any needs more pieces
    auto issue = [&](int t, int buf) {
        int cpr = di / 8;
        for (int c = tid; c < NP * IX_KT * cpr; c += IX_THREADS) {
            int p = c / (IX_KT * cpr), rest = c - p * IX_KT * cpr, kk = rest / cpr, q = rest - kk * cpr;
            int64_t j = (int64_t)t * IX_KT + kk;
            bool ok = j < sp.nk;
            const uint16_t *src = a.store + ((int64_t)p * a.store_rows + sp.base + j) * di + q * 8;
            tc_cp16(kb + ((buf * NP + p) * IX_KT + kk) * ldk + q * 8, ok ? src : a.store, ok);
        }
        tc_cp_commit();
        if (warp == 0) {
            bool more = false;
#pragma unroll
            for (int u = 0; u < 2; u++) {
                int64_t j = (int64_t)t * IX_KT + u * 32 + lane;
                more |= NP > 1 && j < sp.nk && a.inexact[sp.base + j];
            }
            more = __any_sync(0xffffffffu, more);
            if (lane == 0) meta[buf] = more;
        }
    };
    if (ntiles > 0) issue(0, 0);

    float *out0 = a.scores + (sp.b0 + k0) * a.nk_max;
    for (int t = 0; t < ntiles; t++) {
        const int buf = t & 1;
        tc_cp_wait();
        __syncthreads(); /* tile t has landed; every warp is done with tile t - 1 and its sums */
        if (t + 1 < ntiles) issue(t + 1, buf ^ 1);
        const int kp = meta[buf] ? NP : 1; /* key pieces to multiply */
        if (w_on) {
            float acc[8][4];
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[nt][e] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < IX_MAXDI / 16; ks++) {
                if (ks * 16 >= di) break;
                for (int j = 0; j < kp; j++) {
                    const __nv_bfloat16 *kt = kb + (buf * NP + j) * IX_KT * ldk + ks * 16 + ((lane >> 3) & 1) * 8;
#pragma unroll
                    for (int n2 = 0; n2 < 4; n2++) {
                        uint32_t bf[4];
                        tc_ldsm(kt + (n2 * 16 + (lane & 7) + (lane >> 4) * 8) * ldk, bf);
                        tc_mma_pieces<NP>(acc[2 * n2], af[ks], bf[0], bf[1], NP - j);
                        tc_mma_pieces<NP>(acc[2 * n2 + 1], af[ks], bf[2], bf[3], NP - j);
                    }
                }
            }
            // relu, head weights, the sum over this warp's 16 heads (rows g and g + 8, then lanes)
            float w0 = ws[16 * warp + g], w1 = ws[16 * warp + g + 8];
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float v = tc_head_sum(acc[nt], e, w0, w1, a.q_scale);
                    if (g == 0) part[warp * IX_KT + nt * 8 + 2 * t4 + e] = v;
                }
        }
        __syncthreads();
        // each row's score: its warps' sums in warp order; -inf past what the row sees
        for (int x = tid; x < RB * IX_KT; x += IX_THREADS) {
            int pr = x / IX_KT, kk = x - pr * IX_KT;
            int64_t j = (int64_t)t * IX_KT + kk;
            if (pr >= nrows || j >= a.nk_max) continue;
            int64_t nvis = min(sp.nk, (sp.pos0 + k0 + pr + 1) / a.ratio);
            float s = 0.0f;
            for (int w = pr * HP / 16; w < (pr + 1) * HP / 16; w++) s += part[w * IX_KT + kk];
            out0[pr * a.nk_max + j] = j < nvis ? s : -INFINITY;
        }
    }
    tc_cp_wait();
    for (int pr = 0; pr < nrows; pr++) /* past the last tile */
        for (int64_t j = (int64_t)ntiles * IX_KT + tid; j < a.nk_max; j += IX_THREADS) out0[pr * a.nk_max + j] = -INFINITY;
}

template <int NP>
static cudaError_t launch(const ix_tc_args_t *a, int64_t blocks, cudaStream_t s) {
    size_t smem = ix_tc_smem(a->di, NP);
    static size_t raised;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(ix_tc_kernel<NP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    return k_launch(ix_tc_kernel<NP>, (unsigned)blocks, IX_THREADS, smem, s, *a);
}

extern "C" int k_indexer_tc_rows_per_block(int heads) { return 128 / ((heads + 15) & ~15); }

extern "C" cudaError_t k_indexer_tc(const ix_tc_args_t *a, int64_t blocks, cudaStream_t s) {
    if (blocks <= 0) return cudaSuccess;
    if (!k_indexer_tc_ok(a->heads, a->di) || blocks > 0x7FFFFFFF || a->n_spans <= 0 || a->ratio <= 0) return cudaErrorInvalidValue;
    switch (a->pieces) {
    case 1: return launch<1>(a, blocks, s);
    case 2: return launch<2>(a, blocks, s);
    case 3: return launch<3>(a, blocks, s);
    default: return cudaErrorInvalidValue;
    }
}
