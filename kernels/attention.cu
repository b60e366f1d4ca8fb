// Sparse attention with sink (MODEL_V41 §5.9), K = V, in fp32. A block takes one query row and
// 16 heads; the row's keys (its window rows, then the selected pool rows) pass through shared
// memory 16 at a time and are shared by the 16 heads: logits (one dot per thread), an online
// softmax per head whose running maximum starts at the sink (its e^(sink - m) in the
// denominator), and the weighted sum (each thread two channels of every head). For few query
// rows (decode) the key list is cut into ranges done by separate blocks whose partial results
// are merged by a second kernel, so the GPU is busy at batch 1. With a row table, one launch
// serves the rows of many sequences (each row its own ring, pool and position).
#include "common.cuh"

#define AT_HG 16 // heads per block
#define AT_KT 16 // keys per tile
#define AT_CH 2  // channels per thread: head_dim <= 512

// Shared rows of q and keys are d + 4 floats apart: 16-byte aligned (d a multiple of 4) and a
// quarter-warp's 16-byte reads of 8 rows fall in distinct banks.
#define AT_PAD 4

extern "C" size_t k_attention_smem(int d) {
    return (AT_KT + AT_HG) * sizeof(float *) + sizeof(float) * ((size_t)(AT_HG + AT_KT) * (d + AT_PAD) + AT_HG * AT_KT + 3 * AT_HG);
}

// Row b's sequence: from the table, or row b of the one sequence of the scalar fields.
__device__ __forceinline__ attn_row_t attn_row(const attn_args_t &a, int64_t b) {
    if (a.rows) return a.rows[b];
    return attn_row_t{a.ring, a.ld_ring, a.ring_rows, a.kv_new, a.pos0, a.win_lo, a.pool, a.ld_pool, a.pool_rows, b, a.pos0 + b};
}

__global__ void __launch_bounds__(256) attn_kernel(attn_args_t a, int64_t per_split, int vec) {
    extern __shared__ __align__(16) unsigned char smem[];
    const float **rowp = (const float **)smem, **qrow = rowp + AT_KT;
    int d = a.d, ldd = d + AT_PAD, tid = threadIdx.x;
    float *qs = (float *)(qrow + AT_HG), *ks = qs + AT_HG * ldd, *lp = ks + AT_KT * ldd;
    float *mh = lp + AT_HG * AT_KT, *zh = mh + AT_HG, *al = zh + AT_HG;
    int64_t b = blockIdx.x;
    const attn_row_t rd = attn_row(a, b);
    int64_t r = rd.row, i = rd.pos;
    int h0 = blockIdx.y * AT_HG, split = blockIdx.z;
    int64_t lo = max(rd.win_lo, i - a.window + 1), nwin = i - lo + 1;
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
                    p = pos < rd.pos0 ? rd.ring + (pos % rd.ring_rows) * rd.ld_ring : rd.kv + (pos - rd.pos0) * a.ld_kv;
                }
            } else if (u < u_end && a.sel) {
                int32_t j = a.sel[r * a.ld_sel + (u - a.window)];
                if (j >= 0 && j < rd.pool_rows) p = rd.pool + (int64_t)j * rd.ld_pool;
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
                if ((d & 3) == 0) { /* 16-byte reads, four partial sums */
                    float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
                    for (int c = 0; c < d; c += 4) {
                        float4 x = *(const float4 *)(qv + c), y = *(const float4 *)(kv + c);
                        s4[0] += x.x * y.x, s4[1] += x.y * y.y, s4[2] += x.z * y.z, s4[3] += x.w * y.w;
                    }
                    s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
                } else {
                    for (int c = 0; c < d; c++) s += qv[c] * kv[c];
                }
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
            else a.part_o[((split * a.m + b) * a.heads + h) * (int64_t)d + c] = acc[hh][j];
        }
        if (a.splits > 1 && tid == 0) {
            float *ml = a.part_ml + ((split * a.m + b) * a.heads + h) * 2;
            ml[0] = mh[hh], ml[1] = zh[hh];
        }
    }
}

// Merges the key ranges: out = sum_s acc_s e^(m_s - M) / sum_s z_s e^(m_s - M). The ranges'
// (m, z) are read once into shared memory, each range's factor computed once, and a thread's
// loads of every range's channels are independent of one another (all in flight, 16 bytes
// each where d allows), added in range order.
#define AT_MAX_SPLITS 256

__global__ void attn_merge_kernel(attn_args_t a) {
    __shared__ float f[AT_MAX_SPLITS], z[AT_MAX_SPLITS], red[2];
    int64_t r = blockIdx.x, row = a.rows ? a.rows[r].row : r;
    int h = blockIdx.y, S = a.splits, d = a.d;
    const float *ml = a.part_ml + (r * a.heads + h) * 2;
    int64_t mstride = a.m * a.heads * 2, ostride = a.m * a.heads * (int64_t)d;
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        float2 v = __ldcg((const float2 *)(ml + s * mstride));
        f[s] = v.x, z[s] = v.y;
    }
    __syncthreads();
    if (threadIdx.x < 32) { /* M and Z in the first warp, in split order per lane, then across lanes */
        float M = -INFINITY;
        for (int s = threadIdx.x; s < S; s += 32) M = fmaxf(M, f[s]);
        M = warp_max(M);
        float Z = 0.0f;
        for (int s = threadIdx.x; s < S; s += 32) Z += f[s] == -INFINITY ? 0.0f : z[s] * expf(f[s] - M);
        Z = warp_sum(Z);
        if (threadIdx.x == 0) red[0] = M, red[1] = Z;
    }
    __syncthreads();
    float M = red[0], Z = red[1];
    for (int s = threadIdx.x; s < S; s += blockDim.x) f[s] = f[s] > -INFINITY ? expf(f[s] - M) : 0.0f;
    __syncthreads();
    const float *po = a.part_o + (r * a.heads + h) * (int64_t)d;
    float *out = a.out + row * a.ldo + (int64_t)h * d;
    if (d % 4 == 0) { /* a range without keys has factor 0 and zero partial sums: adds nothing */
        for (int c4 = threadIdx.x; c4 < d / 4; c4 += blockDim.x) {
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
            for (int s = 0; s < S; s++) {
                float4 p = __ldcg((const float4 *)(po + s * ostride) + c4);
                float fs = f[s];
                v.x += p.x * fs, v.y += p.y * fs, v.z += p.z * fs, v.w += p.w * fs;
            }
            out[4 * c4] = v.x / Z, out[4 * c4 + 1] = v.y / Z, out[4 * c4 + 2] = v.z / Z, out[4 * c4 + 3] = v.w / Z;
        }
        return;
    }
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float v = 0.0f;
#pragma unroll 8
        for (int s = 0; s < S; s++) v += __ldcg(po + s * ostride + c) * f[s];
        out[c] = v / Z;
    }
}

extern "C" cudaError_t k_attention(const attn_args_t *a, cudaStream_t s) {
    if (a->m <= 0) return cudaSuccess;
    if (a->d > 256 * AT_CH || a->d <= 0 || a->m > 0x7FFFFFFF || a->splits > AT_MAX_SPLITS) return cudaErrorInvalidValue;
    size_t smem = k_attention_smem(a->d);
    static size_t raised;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    int64_t nv = a->window + a->n_sel, per = ceil_div(ceil_div(nv, a->splits), AT_KT) * AT_KT;
    dim3 grid((unsigned)a->m, (unsigned)ceil_div(a->heads, AT_HG), (unsigned)a->splits);
    attn_kernel<<<grid, 256, smem, s>>>(*a, per, a->vec);
    cudaError_t e = DI_LAUNCHED();
    if (e != cudaSuccess || a->splits == 1) return e;
    attn_merge_kernel<<<dim3((unsigned)a->m, (unsigned)a->heads), 128, 0, s>>>(*a);
    return DI_LAUNCHED();
}
