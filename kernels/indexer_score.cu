// Indexer scores (MODEL_V41 §5.7) in fp32: I_j = sum_h relu(q_h . k_j) * q_scale * w_h * w_scale
// for the entries a query row can see, -inf for the others. A block holds one query row and
// 128 keys in shared memory; each thread scores one key against every head.
#include "common.cuh"

#define IX_KT 128

static size_t ix_smem(int heads, int di) {
    return (IX_KT + 1) * sizeof(float *) + sizeof(float) * ((size_t)heads * di + heads + (size_t)IX_KT * (di + 1));
}

__global__ void __launch_bounds__(IX_KT) indexer_score_kernel(float *scores, const float *q, int64_t ldq, const float *w,
                                                              int64_t ldw, const float *keys, int64_t ldk, int64_t nk,
                                                              int heads, int di, int64_t pos0, int ratio, float q_scale,
                                                              float w_scale, int vec) {
    extern __shared__ __align__(16) unsigned char smem[];
    const float **rows = (const float **)smem;
    float *qs = (float *)(rows + IX_KT + 1), *ws = qs + heads * di, *ks = ws + heads;
    int64_t r = blockIdx.y, j0 = (int64_t)blockIdx.x * IX_KT, j = j0 + threadIdx.x;
    int64_t nvis = min(nk, (pos0 + r + 1) / ratio);
    float *out = scores + r * nk;
    if (j0 >= nvis) {
        if (j < nk) out[j] = -INFINITY;
        return;
    }
    rows[threadIdx.x] = j < nvis ? keys + j * ldk : NULL;
    if (threadIdx.x == 0) rows[IX_KT] = q + r * ldq;
    for (int x = threadIdx.x; x < heads; x += blockDim.x) ws[x] = w[r * ldw + x] * w_scale;
    __syncthreads();
    load_rows(qs, heads * di, rows + IX_KT, 1, heads * di, vec);
    load_rows(ks, di + 1, rows, IX_KT, di, vec);
    __syncthreads();
    if (j >= nk) return;
    if (j >= nvis) {
        out[j] = -INFINITY;
        return;
    }
    const float *kv = ks + threadIdx.x * (di + 1);
    float s = 0.0f;
    for (int h = 0; h < heads; h++) {
        const float *qv = qs + h * di;
        float dot = 0.0f;
        for (int c = 0; c < di; c++) dot += qv[c] * kv[c];
        s += (dot > 0.0f ? dot : 0.0f) * q_scale * ws[h];
    }
    out[j] = s;
}

extern "C" cudaError_t k_indexer_score(float *scores, const float *q, int64_t ldq, const float *w, int64_t ldw,
                                       const float *keys, int64_t ldk, int64_t nk, int64_t m, int heads, int di,
                                       int64_t pos0, int ratio, float q_scale, float w_scale, cudaStream_t s) {
    if (m <= 0 || nk <= 0) return cudaSuccess;
    size_t smem = ix_smem(heads, di);
    static size_t raised;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(indexer_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    dim3 grid((unsigned)ceil_div(nk, IX_KT), (unsigned)m);
    int vec = di % 4 == 0 && (uintptr_t)q % 16 == 0 && ldq % 4 == 0 && (uintptr_t)keys % 16 == 0 && ldk % 4 == 0;
    indexer_score_kernel<<<grid, IX_KT, smem, s>>>(scores, q, ldq, w, ldw, keys, ldk, nk, heads, di, pos0, ratio, q_scale,
                                                   w_scale, vec);
    return DI_LAUNCHED();
}

// Level 1 of the two-level top-k: the max score of each candidate block, the newest pinned.
__global__ void block_scores_kernel(float *bs, int64_t nb_max, const float *scores, int64_t nk, int64_t pos0, int ratio,
                                    int block_size) {
    int64_t r = blockIdx.y, b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (b >= nb_max) return;
    int64_t nvis = min(nk, (pos0 + r + 1) / ratio), nb = (nvis + block_size - 1) / block_size;
    float m = -INFINITY;
    for (int64_t e = b * block_size; e < nvis && e < (b + 1) * block_size; e++) m = fmaxf(m, scores[r * nk + e]);
    if (b == nb - 1) m = INFINITY;
    bs[r * nb_max + b] = m;
}

extern "C" cudaError_t k_block_scores(float *bs, int64_t nb_max, const float *scores, int64_t nk, int64_t m, int64_t pos0,
                                      int ratio, int block_size, cudaStream_t s) {
    if (m <= 0 || nb_max <= 0) return cudaSuccess;
    block_scores_kernel<<<dim3((unsigned)ceil_div(nb_max, 256), (unsigned)m), 256, 0, s>>>(bs, nb_max, scores, nk, pos0,
                                                                                          ratio, block_size);
    return DI_LAUNCHED();
}

// Level 2: entries outside the row's candidate blocks (ascending ids, -1 padded) stop competing.
__global__ void mask_blocks_kernel(float *scores, int64_t nk, const int32_t *blocks, int64_t ldb, int64_t nblocks,
                                   int block_size) {
    int64_t r = blockIdx.y, j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= nk) return;
    const int32_t *list = blocks + r * ldb;
    int32_t b = (int32_t)(j / block_size);
    int64_t lo = 0, hi = nblocks; // first entry >= b, with -1 (padding) counted as +inf
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        int32_t v = list[mid];
        if (v >= 0 && v < b) lo = mid + 1;
        else hi = mid;
    }
    if (!(lo < nblocks && list[lo] == b)) scores[r * nk + j] = -INFINITY;
}

extern "C" cudaError_t k_mask_blocks(float *scores, int64_t nk, int64_t m, const int32_t *blocks, int64_t ldb,
                                     int64_t nblocks, int block_size, cudaStream_t s) {
    if (m <= 0 || nk <= 0) return cudaSuccess;
    mask_blocks_kernel<<<dim3((unsigned)ceil_div(nk, 256), (unsigned)m), 256, 0, s>>>(scores, nk, blocks, ldb, nblocks,
                                                                                     block_size);
    return DI_LAUNCHED();
}
