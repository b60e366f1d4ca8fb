// Indexer scores (MODEL_V41 §5.7) in fp32: I_j = sum_h relu(q_h . k_j) * q_scale * w_h * w_scale
// for the entries a query row can see, -inf for the others. A block holds one query row and
// 128 keys in shared memory; each thread scores one key against every head. With a row table,
// one launch serves the rows of many sequences (each row its own keys and position).
#include "common.cuh"

#define IX_KT 64

// Shared key rows: di + 4 floats apart for 16-byte reads (eight lanes' rows in distinct
// banks), di + 1 otherwise.
static int ix_ldk(int di, int vec) { return vec ? di + 4 : di + 1; }

static size_t ix_smem(int heads, int di, int vec) {
    return (IX_KT + 2) * sizeof(float *) + sizeof(float) * ((size_t)heads * di + heads + (size_t)IX_KT * ix_ldk(di, vec));
}

__global__ void __launch_bounds__(IX_KT) indexer_score_kernel(ix_args_t a) {
    pdl_begin();
    extern __shared__ __align__(16) unsigned char smem[];
    const float **rows = (const float **)smem;
    int heads = a.heads, di = a.di, lk = a.vec ? di + 4 : di + 1;
    float *qs = (float *)(rows + IX_KT + 2), *ks = qs + heads * di, *ws = ks + IX_KT * lk; /* qs 16-byte aligned */
    int64_t b = blockIdx.y, j0 = (int64_t)blockIdx.x * IX_KT, j = j0 + threadIdx.x;
    const ix_row_t rd = ix_row(a, b);
    int64_t r = rd.row, nvis = min(rd.nk, (rd.pos + 1) / a.ratio);
    float *out = a.scores + b * a.nk_max;
    if (j0 >= nvis) {
        if (j < a.nk_max) out[j] = -INFINITY;
        return;
    }
    rows[threadIdx.x] = j < nvis ? rd.keys + j * rd.ldk : NULL;
    if (threadIdx.x == 0) rows[IX_KT] = a.q + r * a.ldq;
    for (int x = threadIdx.x; x < heads; x += blockDim.x) ws[x] = a.w[r * a.ldw + x] * a.w_scale;
    __syncthreads();
    load_rows(qs, heads * di, rows + IX_KT, 1, heads * di, a.vec);
    load_rows(ks, lk, rows, IX_KT, di, a.vec);
    __syncthreads();
    if (j >= a.nk_max) return;
    if (j >= nvis) {
        out[j] = -INFINITY;
        return;
    }
    const float *kv = ks + threadIdx.x * lk;
    float s = 0.0f;
    for (int h = 0; h < heads; h++) {
        const float *qv = qs + h * di;
        float dot = 0.0f;
        if (a.vec) { /* 16-byte reads, four partial sums */
            float d4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int c = 0; c < di; c += 4) {
                float4 x = *(const float4 *)(qv + c), y = *(const float4 *)(kv + c);
                d4[0] += x.x * y.x, d4[1] += x.y * y.y, d4[2] += x.z * y.z, d4[3] += x.w * y.w;
            }
            dot = (d4[0] + d4[1]) + (d4[2] + d4[3]);
        } else {
            for (int c = 0; c < di; c++) dot += qv[c] * kv[c];
        }
        s += (dot > 0.0f ? dot : 0.0f) * a.q_scale * ws[h];
    }
    out[j] = s;
}

extern "C" cudaError_t k_indexer_score(const ix_args_t *a, cudaStream_t s) {
    if (a->m <= 0 || a->nk_max <= 0) return cudaSuccess;
    if (a->m > 65535) return cudaErrorInvalidValue;
    size_t smem = ix_smem(a->heads, a->di, a->vec);
    static size_t raised;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(indexer_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    dim3 grid((unsigned)ceil_div(a->nk_max, IX_KT), (unsigned)a->m);
    return k_launch(indexer_score_kernel, grid, IX_KT, smem, s, *a);
}

// Level 1 of the two-level top-k: the max score of each candidate block, the newest pinned.
__global__ void block_scores_kernel(float *bs, int64_t nb_max, ix_args_t a, int block_size) {
    pdl_begin();
    int64_t r = blockIdx.y, b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (b >= nb_max) return;
    const ix_row_t rd = ix_row(a, r);
    int64_t nvis = min(rd.nk, (rd.pos + 1) / a.ratio), nb = (nvis + block_size - 1) / block_size;
    float m = -INFINITY;
    for (int64_t e = b * block_size; e < nvis && e < (b + 1) * block_size; e++) m = fmaxf(m, a.scores[r * a.nk_max + e]);
    if (b == nb - 1) m = INFINITY;
    bs[r * nb_max + b] = m;
}

extern "C" cudaError_t k_block_scores(float *bs, int64_t nb_max, const ix_args_t *a, int block_size, cudaStream_t s) {
    if (a->m <= 0 || nb_max <= 0) return cudaSuccess;
    return k_launch(block_scores_kernel, dim3((unsigned)ceil_div(nb_max, 256), (unsigned)a->m), 256, 0, s, bs, nb_max, *a,
                    block_size);
}

// Level 2: entries outside the row's candidate blocks (ascending ids, -1 padded) stop competing.
__global__ void mask_blocks_kernel(ix_args_t a, const int32_t *blocks, int64_t ldb, int64_t nblocks, int block_size) {
    pdl_begin();
    int64_t r = blockIdx.y, j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= a.nk_max) return;
    const int32_t *list = blocks + ix_row(a, r).row * ldb;
    int32_t b = (int32_t)(j / block_size);
    int64_t lo = 0, hi = nblocks; // first entry >= b, with -1 (padding) counted as +inf
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        int32_t v = list[mid];
        if (v >= 0 && v < b) lo = mid + 1;
        else hi = mid;
    }
    if (!(lo < nblocks && list[lo] == b)) a.scores[r * a.nk_max + j] = -INFINITY;
}

extern "C" cudaError_t k_mask_blocks(const ix_args_t *a, const int32_t *blocks, int64_t ldb, int64_t nblocks, int block_size,
                                     cudaStream_t s) {
    if (a->m <= 0 || a->nk_max <= 0) return cudaSuccess;
    return k_launch(mask_blocks_kernel, dim3((unsigned)ceil_div(a->nk_max, 256), (unsigned)a->m), 256, 0, s, *a, blocks, ldb,
                    nblocks, block_size);
}
