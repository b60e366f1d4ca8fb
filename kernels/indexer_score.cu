// Indexer scores (MODEL_V41 §5.7) in fp32: I_j = sum_h relu(q_h . k_j) * q_scale * w_h * w_scale
// for the entries a query row can see, -inf for the others. A block of 256 threads holds one
// query row and kt keys (64 down to 8: a block for every SM at one query row) in
// shared memory; each thread takes a key against every (256 / kt)-th head, then a thread per key
// adds its heads' terms in head order, so a score's bits do not depend on kt or the batch. With
// a row table, one launch serves the rows of many sequences (each row its own keys and position).
#include "common.cuh"

#define IX_THREADS 256
#define IX_KT_MAX 64

// Shared key rows: di + 4 floats apart for 16-byte reads (eight lanes' rows in distinct
// banks), di + 1 otherwise.
static int ix_ldk(int di, int vec) { return vec ? di + 4 : di + 1; }

static size_t ix_smem(int kt, int heads, int di, int vec) {
    return (kt + 2) * sizeof(float *) +
           sizeof(float) * ((size_t)heads * di + heads + (size_t)kt * ix_ldk(di, vec) + (size_t)kt * (heads + 1));
}

__global__ void __launch_bounds__(IX_THREADS) indexer_score_kernel(ix_args_t a, int kt) {
    int64_t b = blockIdx.y, j0 = (int64_t)blockIdx.x * kt;
    const ix_row_t rd = ix_row(a, b); /* the row table came by a copy, complete before this launch */
    if (j0 < rd.nk) /* this block's page-table entries, asked of L2 while the kernel before drains */
        prefetch_pages(rd.keys, j0 >> K_PAGE_SHIFT, ((min(rd.nk, j0 + kt) - 1) >> K_PAGE_SHIFT) + 1, threadIdx.x, blockDim.x);
    pdl_begin();
    extern __shared__ __align__(16) unsigned char smem[];
    const float **rows = (const float **)smem;
    int heads = a.heads, di = a.di, lk = a.vec ? di + 4 : di + 1, tid = threadIdx.x;
    float *qs = (float *)(rows + kt + 2), *ks = qs + heads * di; /* qs, ks 16-byte aligned */
    float *terms = ks + kt * lk, *ws = terms + kt * (heads + 1);   /* terms[key][head] */
    int64_t r = rd.row, nvis = min(rd.nk, (rd.pos + 1) / a.ratio);
    float *out = a.scores + b * a.nk_max;
    if (j0 >= nvis) {
        for (int x = tid; x < kt && j0 + x < a.nk_max; x += blockDim.x) out[j0 + x] = -INFINITY;
        return;
    }
    for (int x = tid; x < kt; x += blockDim.x) rows[x] = j0 + x < nvis ? paged_row(rd.keys, rd.ldk, j0 + x) : NULL;
    if (tid == 0) rows[kt] = a.q + r * a.ldq;
    for (int x = tid; x < heads; x += blockDim.x) ws[x] = a.w[r * a.ldw + x] * a.w_scale;
    __syncthreads();
    load_rows(qs, heads * di, rows + kt, 1, heads * di, a.vec);
    load_rows(ks, lk, rows, kt, di, a.vec);
    __syncthreads();
    int key = tid % kt;
    const float *kv = ks + key * lk;
    for (int h = tid / kt; h < heads; h += IX_THREADS / kt) {
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
        terms[key * (heads + 1) + h] = (dot > 0.0f ? dot : 0.0f) * a.q_scale;
    }
    __syncthreads();
    int64_t j = j0 + tid;
    if (tid >= kt || j >= a.nk_max) return;
    if (j >= nvis) {
        out[j] = -INFINITY;
        return;
    }
    float s = 0.0f;
    for (int h = 0; h < heads; h++) s += terms[tid * (heads + 1) + h] * ws[h];
    out[j] = s;
}

extern "C" cudaError_t k_indexer_score(const ix_args_t *a, cudaStream_t s) {
    if (a->m <= 0 || a->nk_max <= 0) return cudaSuccess;
    if (a->m > 65535) return cudaErrorInvalidValue;
    static int sms;
    if (!sms) {
        int dev;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return e;
    }
    int kt = IX_KT_MAX; /* the widest tile that still gives every SM a block */
    while (kt > 8 && a->m * ceil_div(a->nk_max, kt) < sms) kt /= 2;
    size_t smem = ix_smem(kt, a->heads, a->di, a->vec);
    static size_t raised;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(indexer_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    dim3 grid((unsigned)ceil_div(a->nk_max, kt), (unsigned)a->m);
    return k_launch(indexer_score_kernel, grid, IX_THREADS, smem, s, *a, kt);
}
