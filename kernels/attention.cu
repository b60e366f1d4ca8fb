// Sparse attention with sink (MODEL_V41 §5.9), K = V, in fp32. A block takes one query row and
// 16 heads; the row's keys (its window rows, then the selected pool rows) pass through shared
// memory 16 at a time and are shared by the 16 heads: logits (one dot per thread), an online
// softmax per head whose running maximum starts at the sink (its e^(sink - m) in the
// denominator), and the weighted sum (each thread two channels of every head). For few query
// rows (decode) the key list is cut into ranges done by separate blocks whose partial results
// are merged by a second kernel, so the GPU is busy at batch 1.
#include "common.cuh"

#define AT_HG 16 // heads per block
#define AT_KT 16 // keys per tile
#define AT_CH 2  // channels per thread: head_dim <= 512

extern "C" size_t k_attention_smem(int d) {
    return (AT_KT + AT_HG) * sizeof(float *) + sizeof(float) * ((size_t)(AT_HG + AT_KT) * (d + 1) + AT_HG * AT_KT + 3 * AT_HG);
}

__global__ void __launch_bounds__(256) attn_kernel(attn_args_t a, int64_t per_split, int vec) {
    extern __shared__ __align__(16) unsigned char smem[];
    const float **rowp = (const float **)smem, **qrow = rowp + AT_KT;
    int d = a.d, ldd = d + 1, tid = threadIdx.x;
    float *qs = (float *)(qrow + AT_HG), *ks = qs + AT_HG * ldd, *lp = ks + AT_KT * ldd;
    float *mh = lp + AT_HG * AT_KT, *zh = mh + AT_HG, *al = zh + AT_HG;
    int64_t r = blockIdx.x, i = a.pos0 + r;
    int h0 = blockIdx.y * AT_HG, split = blockIdx.z;
    int64_t lo = max(a.win_lo, i - a.window + 1), nwin = i - lo + 1;
    int64_t nv = a.window + a.n_sel, u_begin = split * per_split, u_end = min(nv, u_begin + per_split);

    if (tid < AT_HG) qrow[tid] = h0 + tid < a.heads ? a.q + r * a.ldq + (int64_t)(h0 + tid) * d : NULL;
    __syncthreads();
    load_rows(qs, ldd, qrow, AT_HG, d, vec);
    if (tid < AT_HG) {
        mh[tid] = split == 0 && h0 + tid < a.heads ? a.sink[h0 + tid] : -INFINITY;
        zh[tid] = split == 0 ? 1.0f : 0.0f;
    }
    float acc[AT_HG][AT_CH];
#pragma unroll
    for (int hh = 0; hh < AT_HG; hh++)
#pragma unroll
        for (int j = 0; j < AT_CH; j++) acc[hh][j] = 0.0f;

    for (int64_t u0 = u_begin; u0 < u_end; u0 += AT_KT) {
        __syncthreads();
        if (tid < AT_KT) {
            int64_t u = u0 + tid;
            const float *p = NULL;
            if (u < u_end && u < a.window) {
                if (u < nwin) {
                    int64_t pos = i - u;
                    p = pos < a.pos0 ? a.ring + (pos % a.ring_rows) * a.ld_ring : a.kv_new + (pos - a.pos0) * a.ld_kv;
                }
            } else if (u < u_end && a.sel) {
                int32_t j = a.sel[r * a.ld_sel + (u - a.window)];
                if (j >= 0 && j < a.pool_rows) p = a.pool + (int64_t)j * a.ld_pool;
            }
            rowp[tid] = p;
        }
        __syncthreads();
        load_rows(ks, ldd, rowp, AT_KT, d, vec);
        __syncthreads();
        {
            int hh = tid / AT_KT, kk = tid % AT_KT;
            float l = -INFINITY;
            if (rowp[kk] && h0 + hh < a.heads) {
                const float *qv = qs + hh * ldd, *kv = ks + kk * ldd;
                float s = 0.0f;
                for (int c = 0; c < d; c++) s += qv[c] * kv[c];
                l = s * a.scale;
            }
            lp[hh * AT_KT + kk] = l;
        }
        __syncthreads();
        if (tid < AT_HG) {
            float mo = mh[tid], mx = mo;
            for (int kk = 0; kk < AT_KT; kk++) mx = fmaxf(mx, lp[tid * AT_KT + kk]);
            float alpha = mx == -INFINITY ? 1.0f : expf(mo - mx), zs = 0.0f;
            for (int kk = 0; kk < AT_KT; kk++) {
                float l = lp[tid * AT_KT + kk], pv = l == -INFINITY ? 0.0f : expf(l - mx);
                lp[tid * AT_KT + kk] = pv;
                zs += pv;
            }
            zh[tid] = zh[tid] * alpha + zs;
            mh[tid] = mx;
            al[tid] = alpha;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < AT_CH; j++) {
            int c = tid + j * 256;
            if (c >= d) continue;
            float kc[AT_KT];
#pragma unroll
            for (int kk = 0; kk < AT_KT; kk++) kc[kk] = ks[kk * ldd + c];
#pragma unroll
            for (int hh = 0; hh < AT_HG; hh++) {
                float s = acc[hh][j] * al[hh];
#pragma unroll
                for (int kk = 0; kk < AT_KT; kk++) s += lp[hh * AT_KT + kk] * kc[kk];
                acc[hh][j] = s;
            }
        }
    }
    __syncthreads();
#pragma unroll
    for (int hh = 0; hh < AT_HG; hh++) {
        int h = h0 + hh;
        if (h >= a.heads) continue;
#pragma unroll
        for (int j = 0; j < AT_CH; j++) {
            int c = tid + j * 256;
            if (c >= d) continue;
            if (a.splits == 1) a.out[r * a.ldo + (int64_t)h * d + c] = acc[hh][j] / zh[hh];
            else a.part_o[((split * a.m + r) * a.heads + h) * (int64_t)d + c] = acc[hh][j];
        }
        if (a.splits > 1 && tid == 0) {
            float *ml = a.part_ml + ((split * a.m + r) * a.heads + h) * 2;
            ml[0] = mh[hh], ml[1] = zh[hh];
        }
    }
}

// Merges the key ranges: out = sum_s acc_s e^(m_s - M) / sum_s z_s e^(m_s - M).
__global__ void attn_merge_kernel(attn_args_t a) {
    int64_t r = blockIdx.x;
    int h = blockIdx.y;
    float M = -INFINITY, Z = 0.0f;
    for (int s = 0; s < a.splits; s++) M = fmaxf(M, a.part_ml[((s * a.m + r) * a.heads + h) * 2]);
    for (int s = 0; s < a.splits; s++) {
        const float *ml = a.part_ml + ((s * a.m + r) * a.heads + h) * 2;
        Z += ml[0] == -INFINITY ? 0.0f : ml[1] * expf(ml[0] - M);
    }
    for (int c = threadIdx.x; c < a.d; c += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < a.splits; s++) {
            float m = a.part_ml[((s * a.m + r) * a.heads + h) * 2];
            if (m > -INFINITY) v += a.part_o[((s * a.m + r) * a.heads + h) * (int64_t)a.d + c] * expf(m - M);
        }
        a.out[r * a.ldo + (int64_t)h * a.d + c] = v / Z;
    }
}

extern "C" cudaError_t k_attention(const attn_args_t *a, cudaStream_t s) {
    if (a->m <= 0) return cudaSuccess;
    if (a->d > 256 * AT_CH || a->d <= 0 || a->m > 0x7FFFFFFF) return cudaErrorInvalidValue;
    size_t smem = k_attention_smem(a->d);
    static size_t raised;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    int64_t nv = a->window + a->n_sel, per = ceil_div(ceil_div(nv, a->splits), AT_KT) * AT_KT;
    dim3 grid((unsigned)a->m, (unsigned)ceil_div(a->heads, AT_HG), (unsigned)a->splits);
    int vec = a->d % 4 == 0;
    const void *ptrs[] = {a->q, a->ring, a->kv_new, a->pool};
    int64_t lds[] = {a->ldq, a->ld_ring, a->ld_kv, a->ld_pool};
    for (int i = 0; i < 4; i++) vec &= (uintptr_t)ptrs[i] % 16 == 0 && lds[i] % 4 == 0;
    attn_kernel<<<grid, 256, smem, s>>>(*a, per, vec);
    cudaError_t e = DI_LAUNCHED();
    if (e != cudaSuccess || a->splits == 1) return e;
    attn_merge_kernel<<<dim3((unsigned)a->m, (unsigned)a->heads), 128, 0, s>>>(*a);
    return DI_LAUNCHED();
}
