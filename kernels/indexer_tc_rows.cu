// Indexer scores (MODEL_V41 §5.7) on the tensor cores for a few query rows a sequence (decode):
// I_j = sum_h relu(q_h . k_j) * q_scale * w_h * w_scale for the entries a row can see, -inf for
// the others (as indexer_score.cu, whose fp32 products on the CUDA cores bound it: ~7 cycles an
// instruction at 32k, 15-22 us a layer). No store of pieces (indexer_tc.cu's is made per launch,
// which costs a decode row more than its scores): a block takes one query row and one or two
// tiles of KT = 8 x NT x KG keys, copied from the pages in fp32 into shared memory, the second
// tile's copy in flight while the first is multiplied. The query is split once a block into NP
// bf16 pieces in shared memory, read as mma.sync m16n8k16's 16-row side (warp w of a key group
// holds heads 16w..; KG = 128 / HP groups of HP / 16 warps, HP the heads padded to 16); each
// warp reads its NT tiles of 8 keys as the 8-column side and splits them as it reads them.
// Pieces i, j are multiplied when i + j < NP (bf16x3 keeps fp32's 24 bits), and only those that
// can be nonzero: with the model's FP4-QAT queries and keys (exact in bf16) one product a step,
// the keys' pieces by a byte permute. Each
// warp applies relu and the head weights and sums its 16 heads across lanes; the warps of a group
// add their sums in warp order. A row's scores depend on its own query and keys alone.
#include "tc_frag.cuh"

#define IXR_THREADS 256 // 8 warps
#define IXR_MAXDI 128

__host__ __device__ static int ixr_hp(int heads) { return (heads + 15) & ~15; }
__host__ __device__ static int ixr_key_groups(int heads) { return 128 / ixr_hp(heads); }
__host__ __device__ static int ixr_ldk(int di) { return di + 8; } /* floats: 8 rows x 4 lanes' 8-byte reads in distinct banks */
__host__ __device__ static int ixr_ldq(int di) { return di + 8; } /* bf16: ldmatrix's 8 rows in distinct 16-byte columns */

// Two key tiles (fp32), the query's pieces (bf16), the warps' head sums [HP / 16][KT], the head weights.
static size_t ixr_smem(int kt, int heads, int di, int np) {
    int hp = ixr_hp(heads);
    return 4 * (2 * (size_t)kt * ixr_ldk(di)) + 2 * ((size_t)np * hp * ixr_ldq(di)) + 4 * ((size_t)(hp / 16) * kt + hp);
}

// The prefill kernel's shapes (indexer_tc.cu), 16-byte rows and at most IXR_MAXDI columns.
extern "C" int k_indexer_tc_rows_ok(const ix_args_t *a) {
    return a->vec && a->di <= IXR_MAXDI && k_indexer_tc_ok(a->heads, a->di);
}

// A lane's two key pairs (x0 the B fragment's first half, x1 its second) as NP bf16 pieces each:
// when every lane's four floats are exact in bf16 (their low 16 bits zero) piece 0 is their high
// halves and the call returns 1 (the other pieces are zero and not multiplied); else NP.
template <int NP>
__device__ __forceinline__ int ixr_split_keys(float2 x0, float2 x1, uint32_t b0[NP], uint32_t b1[NP]) {
    uint32_t u0 = __float_as_uint(x0.x), u1 = __float_as_uint(x0.y), u2 = __float_as_uint(x1.x), u3 = __float_as_uint(x1.y);
    if (!__any_sync(0xffffffffu, ((u0 | u1 | u2 | u3) & 0xFFFFu) != 0)) {
        b0[0] = __byte_perm(u0, u1, 0x7632), b1[0] = __byte_perm(u2, u3, 0x7632);
        return 1;
    }
    tc_split<NP>(x0, b0);
    tc_split<NP>(x1, b1);
    return NP;
}

template <int NP, int NT>
__global__ void __launch_bounds__(IXR_THREADS, 2) ix_tc_rows_kernel(ix_args_t a, int tiles_per_block) {
    const int heads = a.heads, hp = ixr_hp(heads), hw = hp / 16, KT = 8 * NT * ixr_key_groups(heads);
    const int64_t b = blockIdx.y, j_begin = (int64_t)blockIdx.x * tiles_per_block * KT;
    const int64_t j_end = min(a.nk_max, j_begin + (int64_t)tiles_per_block * KT);
    ix_row_t rd;
    int64_t nvis;
    float *out;
    if (!ix_block_begin(a, b, j_begin, j_end, rd, nvis, out)) return;
    const int tid = threadIdx.x;
    extern __shared__ __align__(16) unsigned char smem[];
    const int di = a.di, ldk = ixr_ldk(di), ldq = ixr_ldq(di);
    float *kf = (float *)smem; /* [2][KT][ldk] */
    __nv_bfloat16 *qp = (__nv_bfloat16 *)(kf + 2 * KT * ldk); /* [NP][hp][ldq] */
    float *part = (float *)(qp + NP * hp * ldq), *ws = part + hw * KT;
    __shared__ int q_more;
    __shared__ const float *krow[IXR_THREADS]; /* the block's key rows (2 tiles of at most 128) */

    // The rows' addresses first, one page-table read a thread all in flight at once (read inside
    // the copy loop, each waited for before its copy: the copies' memory clobber keeps them in order).
    const int64_t r = rd.row;
    const float *q = a.q + r * a.ldq;
    if (tid < tiles_per_block * KT) krow[tid] = j_begin + tid < nvis ? paged_row(rd.keys, rd.ldk, j_begin + tid) : NULL;
    if (tid == 0) q_more = 0;
    if (tid < hp) ws[tid] = tid < heads ? a.w[r * a.ldw + tid] * a.w_scale : 0.0f;
    __syncthreads();

    // tile t's keys (visible ones; zeros past them) into buffer t % 2: a warp a row, a lane 16 bytes
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    auto issue = [&](int t, int buf) {
        for (int row = warp; row < KT; row += IXR_THREADS / 32) {
            const float *src = krow[t * KT + row];
            for (int col = 4 * lane; col < di; col += 128)
                tc_cp16(kf + (buf * KT + row) * ldk + col, src ? src + col : a.w, src != NULL);
        }
        tc_cp_commit();
    };
    issue(0, 0);

    // the query's pieces (padding heads zero) and whether any is needed past the first: a warp a
    // head, a lane a column pair (two at di = 128), QR heads' loads in flight together
    constexpr int QR = 4;
    bool more = false;
    for (int h0 = warp; h0 < hp; h0 += QR * IXR_THREADS / 32) {
        float2 v[QR][2];
#pragma unroll
        for (int u = 0; u < QR; u++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int h = h0 + u * IXR_THREADS / 32, c = 2 * (lane + 32 * e);
                v[u][e] = h < heads && c < di ? *(const float2 *)(q + (int64_t)h * di + c) : make_float2(0.0f, 0.0f);
            }
#pragma unroll
        for (int u = 0; u < QR; u++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int h = h0 + u * IXR_THREADS / 32, c = 2 * (lane + 32 * e);
                if (h >= hp || c >= di) continue;
                uint32_t p[NP];
                tc_split<NP>(v[u][e], p);
#pragma unroll
                for (int t = 0; t < NP; t++) *(uint32_t *)(qp + (t * hp + h) * ldq + c) = p[t];
                more |= NP > 1 && p[1] != 0;
            }
    }
    if (more) q_more = 1;

    const int hb = 16 * (warp % hw), kb = 8 * NT * (warp / hw); /* this warp's heads and keys */
    const int tiles = (int)((j_end - j_begin + KT - 1) / KT);
    for (int t = 0; t < tiles; t++) {
        const int64_t j0 = j_begin + (int64_t)t * KT;
        const int buf = t & 1;
        if (j0 >= nvis) { /* a whole tile past the row's entries */
            for (int64_t j = j0 + tid; j < min(j_end, j0 + KT); j += IXR_THREADS) out[j] = -INFINITY;
            continue;
        }
        if (t + 1 < tiles && j0 + KT < nvis) {
            issue(t + 1, buf ^ 1);
            tc_cp_wait_newest<1>();
        } else {
            tc_cp_wait();
        }
        __syncthreads(); /* tile t has landed; the tile before is summed (and its buffer free) */
        const int an = q_more ? NP : 1;
        float acc[NT][4] = {};
#pragma unroll 2
        for (int c = 0; c < di; c += 16) {
            uint32_t af[NP][4];
#pragma unroll
            for (int p = 0; p < NP; p++)
                if (p < an) tc_ldsm(qp + (p * hp + hb + (lane & 15)) * ldq + c + (lane >> 4) * 8, af[p]);
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const float *kp = kf + (buf * KT + kb + 8 * n + g) * ldk + c + 2 * t4;
                uint32_t b0[NP], b1[NP];
                const int kn = ixr_split_keys<NP>(*(const float2 *)kp, *(const float2 *)(kp + 8), b0, b1);
#pragma unroll
                for (int p = 0; p < NP; p++)
                    if (p < kn) tc_mma_pieces<NP>(acc[n], af, b0[p], b1[p], min(NP - p, an));
            }
        }
        // relu, head weights, the sum over this warp's 16 heads (rows g and g + 8, then lanes)
        const float w0 = ws[hb + g], w1 = ws[hb + g + 8];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float v = tc_head_sum(acc[n], e, w0, w1, a.q_scale);
                if (g == 0) part[(warp % hw) * KT + kb + 8 * n + 2 * t4 + e] = v;
            }
        __syncthreads();
        for (int x = tid; x < KT; x += IXR_THREADS) {
            int64_t j = j0 + x;
            if (j >= j_end) break;
            float s = 0.0f;
            for (int w = 0; w < hw; w++) s += part[w * KT + x];
            out[j] = j < nvis ? s : -INFINITY;
        }
    }
    tc_cp_wait();
}

template <int NP, int NT> static cudaError_t ixr_launch(const ix_args_t *a, int64_t tiles, int per_block, cudaStream_t s) {
    size_t smem = ixr_smem(8 * NT * ixr_key_groups(a->heads), a->heads, a->di, NP);
    static size_t raised;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(ix_tc_rows_kernel<NP, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    dim3 grid((unsigned)ceil_div(tiles, per_block), (unsigned)a->m);
    return k_launch(ix_tc_rows_kernel<NP, NT>, grid, IXR_THREADS, smem, s, *a, per_block);
}

template <int NP> static cudaError_t ixr_pick(const ix_args_t *a, int sms, int smem_sm, cudaStream_t s) {
    /* The blocks the GPU holds at once (two a SM by registers, fewer where shared memory says;
       1 KB a block is the system's). Tiles of two key tiles a warp unless one gives fewer tiles
       than those blocks; two tiles a block once the tiles outnumber them (the query split half as
       often, a tile's copy under the other's products). */
    int groups = ixr_key_groups(a->heads), nt = 2;
    int64_t by_smem = smem_sm / (int64_t)(ixr_smem(8 * nt * groups, a->heads, a->di, NP) + 1024);
    int64_t slots = (int64_t)sms * (by_smem < 2 ? by_smem : 2);
    if (a->m * ceil_div(a->nk_max, 8 * nt * groups) < slots) nt = 1;
    int64_t tiles = ceil_div(a->nk_max, 8 * nt * groups);
    int per_block = a->m * tiles > slots ? 2 : 1;
    return nt == 2 ? ixr_launch<NP, 2>(a, tiles, per_block, s) : ixr_launch<NP, 1>(a, tiles, per_block, s);
}

extern "C" cudaError_t k_indexer_tc_rows(const ix_args_t *a, int pieces, cudaStream_t s) {
    if (a->m <= 0 || a->nk_max <= 0) return cudaSuccess;
    if (a->m > 65535 || !k_indexer_tc_rows_ok(a)) return cudaErrorInvalidValue;
    int sms, smem_sm;
    cudaError_t e = k_device_limits(&sms, &smem_sm);
    if (e != cudaSuccess) return e;
    switch (pieces) {
    case 1: return ixr_pick<1>(a, sms, smem_sm, s);
    case 2: return ixr_pick<2>(a, sms, smem_sm, s);
    case 3: return ixr_pick<3>(a, sms, smem_sm, s);
    default: return cudaErrorInvalidValue;
    }
}
