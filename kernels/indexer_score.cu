// Indexer scores (MODEL_V41 §5.7) in fp32: I_j = sum_h relu(q_h . k_j) * q_scale * w_h * w_scale
// for the entries a query row can see, -inf for the others. A block holds one query row (its
// heads padded to a multiple of 16 with zero rows) in shared memory and takes one or two tiles
// of KT = 8 x KPT x KW keys: KW groups of warps, each of 8 x KPT keys and every head, so that a
// block has about 256 threads (KW = 128 / padded heads). Warp w of a group takes heads 16w.. and
// each thread KPT keys x 4 heads of dot products in registers (keys lane % 8 + 8i of the group's,
// heads 16w + lane / 8 + 4j), so that a 16-byte shared read feeds several products: with one
// product a read (the form before) the shared-memory reads bound the kernel. Long rows take 4
// keys a thread; short ones fewer, so that their blocks still give every SM a block (a short
// row waits for one block's chain of loads and products). With 16-byte reads a dot keeps four
// partial sums (columns c = u mod 4) added as (0 + 1) + (2 + 3), otherwise one in column order;
// then a thread per key adds its heads' terms in head order, so a score's bits do not depend on
// the tiling or the batch. With a row table, one launch serves the rows of many sequences (each
// row its own keys and position).
#include "common.cuh"

// K_IX_MAX_HEADS (kernels.h): two warps per 16 heads, 256 threads a key group.

__host__ __device__ static int ix_padded_heads(int heads) { return (heads + 15) & ~15; }

// Shared rows: di + 4 floats apart for 16-byte reads (the eight rows a warp reads at one
// column sit in distinct banks), di + 1 otherwise.
__host__ __device__ static int ix_ld(int di, int vec) { return vec ? di + 4 : di + 1; }

// Key groups a block: as many as keep it within 256 threads.
__host__ __device__ static int ix_key_groups(int heads) { return K_IX_MAX_HEADS / ix_padded_heads(heads); }

// Row pointers (keys, then heads), a key tile and the query after it (the first tile's keys
// and the query are loaded together), the terms [key][head], the head weights.
static size_t ix_smem(int kt, int heads, int di, int vec) {
    int hp = ix_padded_heads(heads);
    return (kt + hp) * sizeof(float *) + sizeof(float) * ((size_t)(kt + hp) * ix_ld(di, vec) + (size_t)kt * (hp + 1) + hp);
}

// Column c of a shared row as a float4 (vec) or in .x alone.
template <bool VEC> __device__ __forceinline__ float4 ix_at(const float *row, int c) {
    if (VEC) return *(const float4 *)(row + c);
    return make_float4(row[c], 0.0f, 0.0f, 0.0f);
}

// relu(q_h . k) * q_scale for the thread's KPT x 4 (key, head) pairs: keys ks + 8i rows, heads
// qs + 4j rows.
template <int KPT, bool VEC>
__device__ __forceinline__ void ix_dots(float out[KPT][4], const float *ks, const float *qs, int ld, int di, float q_scale) {
    float acc[KPT][4][4] = {};
#pragma unroll(KPT < 4 ? 2 : 1) /* 2 at 4 keys a thread spills */
    for (int c = 0; c < di; c += VEC ? 4 : 1) {
        float4 k[KPT], q[4];
#pragma unroll
        for (int i = 0; i < KPT; i++) k[i] = ix_at<VEC>(ks + 8 * i * ld, c);
#pragma unroll
        for (int j = 0; j < 4; j++) q[j] = ix_at<VEC>(qs + 4 * j * ld, c);
#pragma unroll
        for (int i = 0; i < KPT; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                acc[i][j][0] += q[j].x * k[i].x;
                if (VEC) acc[i][j][1] += q[j].y * k[i].y, acc[i][j][2] += q[j].z * k[i].z, acc[i][j][3] += q[j].w * k[i].w;
            }
    }
#pragma unroll
    for (int i = 0; i < KPT; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float dot = (acc[i][j][0] + acc[i][j][1]) + (acc[i][j][2] + acc[i][j][3]);
            out[i][j] = (dot > 0.0f ? dot : 0.0f) * q_scale;
        }
}

// (At most 128 registers a thread: none spill at 4 keys a thread.)
template <int KPT>
__global__ void __launch_bounds__(2 * K_IX_MAX_HEADS, 2) indexer_score_kernel(ix_args_t a, int tiles_per_block) {
    const int heads = a.heads, hp = ix_padded_heads(heads), KT = 8 * KPT * ix_key_groups(heads); /* keys a tile */
    int64_t b = blockIdx.y, j_begin = (int64_t)blockIdx.x * tiles_per_block * KT;
    int64_t j_end = min(a.nk_max, j_begin + (int64_t)tiles_per_block * KT);
    ix_row_t rd;
    int64_t nvis;
    float *out;
    if (!ix_block_begin(a, b, j_begin, j_end, rd, nvis, out)) return;
    const int tid = threadIdx.x, nt = blockDim.x;
    extern __shared__ __align__(16) unsigned char smem[];
    const int di = a.di, ld = ix_ld(di, a.vec);
    const float **rows = (const float **)smem; /* KT keys, then hp heads */
    float *ks = (float *)(rows + KT + hp), *qs = ks + KT * ld, *terms = qs + hp * ld, *ws = terms + KT * (hp + 1);
    const int64_t r = rd.row;
    for (int x = tid; x < hp; x += nt) rows[KT + x] = x < heads ? a.q + r * a.ldq + (int64_t)x * di : NULL;
    const int lane = tid & 31, warp = tid >> 5, groups = hp / 16;
    const int key0 = 8 * KPT * (warp / groups) + (lane & 7), h0 = 16 * (warp % groups) + (lane >> 3);
    for (int64_t j0 = j_begin; j0 < j_end; j0 += KT) {
        if (j0 >= nvis) { /* a whole tile past the row's entries */
            for (int64_t j = j0 + tid; j < min(j_end, j0 + KT); j += nt) out[j] = -INFINITY;
            continue;
        }
        if (j0 > j_begin) __syncthreads(); /* the tile before is summed */
        /* the head weights' load in flight with the page-table entries' */
        float wv = j0 == j_begin && tid < heads ? a.w[r * a.ldw + tid] * a.w_scale : 0.0f;
        for (int x = tid; x < KT; x += nt) rows[x] = j0 + x < nvis ? paged_row(rd.keys, rd.ldk, j0 + x) : NULL;
        if (j0 == j_begin && tid < heads) ws[tid] = wv;
        __syncthreads();
        load_rows(ks, ld, rows, j0 == j_begin ? KT + hp : KT, di, a.vec); /* the query with the first tile */
        __syncthreads();
        float d[KPT][4]; /* [key][head] */
        if (a.vec) ix_dots<KPT, true>(d, ks + key0 * ld, qs + h0 * ld, ld, di, a.q_scale);
        else ix_dots<KPT, false>(d, ks + key0 * ld, qs + h0 * ld, ld, di, a.q_scale);
#pragma unroll
        for (int i = 0; i < KPT; i++)
#pragma unroll
            for (int jh = 0; jh < 4; jh++) terms[(key0 + 8 * i) * (hp + 1) + h0 + 4 * jh] = d[i][jh];
        __syncthreads();
        int64_t j = j0 + tid;
        if (tid < KT && j < j_end) {
            float s = 0.0f;
            for (int h = 0; h < heads; h++) s += terms[tid * (hp + 1) + h] * ws[h];
            out[j] = j < nvis ? s : -INFINITY;
        }
    }
}

template <int KPT> static cudaError_t ix_launch(const ix_args_t *a, int64_t tiles, int per_block, cudaStream_t s) {
    size_t smem = ix_smem(8 * KPT * ix_key_groups(a->heads), a->heads, a->di, a->vec);
    static size_t raised;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(indexer_score_kernel<KPT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    dim3 grid((unsigned)ceil_div(tiles, per_block), (unsigned)a->m);
    return k_launch(indexer_score_kernel<KPT>, grid, 2 * ix_padded_heads(a->heads) * ix_key_groups(a->heads), smem, s, *a,
                    per_block);
}

extern "C" cudaError_t k_indexer_score(const ix_args_t *a, cudaStream_t s) {
    if (a->m <= 0 || a->nk_max <= 0) return cudaSuccess;
    if (a->m > 65535 || a->heads < 1 || a->heads > K_IX_MAX_HEADS) return cudaErrorInvalidValue;
    int sms, smem_sm;
    cudaError_t e = k_device_limits(&sms, &smem_sm);
    if (e != cudaSuccess) return e;
    /* The blocks the GPU holds at once (by shared memory and 128 registers a thread; 1 KB a
       block is the system's). Keys a thread: the most that still give each of those a tile. */
    int groups = ix_key_groups(a->heads), threads = 2 * ix_padded_heads(a->heads) * groups;
    int64_t by_smem = smem_sm / (int64_t)(ix_smem(8 * groups, a->heads, a->di, a->vec) + 1024), by_regs = 65536 / (threads * 128);
    int64_t slots = (int64_t)sms * (by_smem < by_regs ? by_smem : by_regs);
    int kpt = 4;
    while (kpt > 1 && a->m * ceil_div(a->nk_max, 8 * kpt * groups) < slots) kpt /= 2;
    /* two tiles a block once the tiles outnumber those blocks: the query is loaded half as often */
    int64_t tiles = ceil_div(a->nk_max, 8 * kpt * groups);
    int per_block = a->m * tiles > slots ? 2 : 1;
    switch (kpt) {
    case 4: return ix_launch<4>(a, tiles, per_block, s);
    case 2: return ix_launch<2>(a, tiles, per_block, s);
    default: return ix_launch<1>(a, tiles, per_block, s);
    }
}
