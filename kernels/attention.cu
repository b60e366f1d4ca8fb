// Sparse attention with sink (MODEL_V41 §5.9), K = V, in fp32. A block takes one query row and
// 16 heads; the row's keys (its window rows, then the selected pool rows) pass through shared
// memory 16 at a time and are shared by the 16 heads: logits (each thread a 4 x 4 block of
// heads and keys over a sixteenth of the channels, added across lanes in the CPU's order), an online
// softmax per head whose running maximum starts at the sink (its e^(sink - m) in the
// denominator), and the weighted sum (each thread four channels of eight heads). The next
// tile's key rows are copied in (asynchronous 16-byte copies) while the current one is used.
// For few query rows (decode) the key list is cut into ranges done by separate blocks whose
// partial results are merged by a second kernel, so the GPU is busy at batch 1. With a row
// table, one launch serves the rows of many sequences (each row its own ring, pool and
// position).
#include "common.cuh"

#define AT_HG 16 // heads per block
#define AT_KT 16 // keys per tile: AT_HG * AT_KT threads
#define AT_THREADS (AT_HG * AT_KT)

// Shared rows of q and keys: d rounded up to 4 (zeros beyond d), then 4 floats of padding, so
// that rows are 16-byte aligned and a quarter-warp's 16-byte reads of 8 rows fall in distinct
// banks; head_dim <= 512 (four channels a thread in the weighted sum).
static __host__ __device__ int at_ldd(int d) { return ((d + 3) & ~3) + 4; }

extern "C" size_t k_attention_smem(int d) {
    return (2 * AT_KT + AT_HG) * sizeof(float *) +
           sizeof(float) * ((size_t)(AT_HG + 2 * AT_KT) * at_ldd(d) + AT_HG * AT_KT + 3 * AT_HG);
}

// Row b's sequence: from the table, or row b of the one sequence of the scalar fields.
__device__ __forceinline__ attn_row_t attn_row(const attn_args_t &a, int64_t b) {
    if (a.rows) return a.rows[b];
    return attn_row_t{a.ring, a.ld_ring, a.ring_rows, a.kv_new, a.pos0, a.win_lo, a.pool, a.ld_pool, a.pool_rows, b, a.pos0 + b};
}

__device__ __forceinline__ void cp_async16(float *dst, const float *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
}

// Stages nrows rows of d floats (row i at rows[i]; NULL: zeros) into dst (row stride ldd, zeros
// up to d rounded to 4), the whole block cooperating: asynchronous 16-byte copies when vec
// (complete after cp.async.wait_all), else plain loads.
__device__ __forceinline__ void stage_rows(float *dst, int ldd, const float *const *rows, int nrows, int d, bool vec) {
    int dq = (d + 3) >> 2;
    if (vec) { /* d % 4 == 0, rows 16-byte aligned; (row, quad) stepped without a division per copy */
        int i = threadIdx.x / dq, q = threadIdx.x - i * dq, di = blockDim.x / dq, dr = blockDim.x - di * dq;
        for (; i < nrows; i += di, q += dr) {
            if (q >= dq) q -= dq, i++;
            if (i >= nrows) break;
            const float *p = rows[i];
            if (p) cp_async16(dst + i * ldd + 4 * q, p + 4 * q);
            else *(float4 *)(dst + i * ldd + 4 * q) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        return;
    }
    for (int x = threadIdx.x; x < nrows * 4 * dq; x += blockDim.x) {
        int i = x / (4 * dq), c = x - i * 4 * dq;
        const float *p = rows[i];
        dst[i * ldd + c] = p && c < d ? __ldg(p + c) : 0.0f;
    }
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// The row of virtual key u of query row (r, position i) (NULL: none): the window row of
// position i - u for u < window, else pool row sel[r][u - window].
__device__ __forceinline__ const float *key_row(const attn_args_t &a, const attn_row_t &rd, int64_t u, int64_t nwin) {
    if (u < a.window) {
        if (u >= nwin) return NULL;
        int64_t pos = rd.pos - u;
        return pos < rd.pos0 ? rd.ring + (pos % rd.ring_rows) * rd.ld_ring : rd.kv + (pos - rd.pos0) * a.ld_kv;
    }
    if (!a.sel) return NULL;
    int32_t j = a.sel[rd.row * a.ld_sel + (u - a.window)];
    return j >= 0 && j < rd.pool_rows ? paged_row(rd.pool, rd.ld_pool, j) : NULL;
}

__global__ void __launch_bounds__(AT_THREADS) attn_kernel(attn_args_t a, int64_t per_split, int vec) {
    extern __shared__ __align__(16) unsigned char smem[];
    const float **rowp = (const float **)smem, **qrow = rowp + 2 * AT_KT; /* rowp: two tiles' key rows */
    int d = a.d, ldd = at_ldd(d), dpad = (d + 3) & ~3, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float *qs = (float *)(qrow + AT_HG), *ks = qs + AT_HG * ldd, *lp = ks + 2 * AT_KT * ldd;
    float *mh = lp + AT_HG * AT_KT, *zh = mh + AT_HG, *al = zh + AT_HG;
    int64_t b = blockIdx.x;
    const attn_row_t rd = attn_row(a, b); /* the row table came by a copy, complete before this launch */
    int64_t r = rd.row, i = rd.pos;
    int h0 = blockIdx.y * AT_HG, split = blockIdx.z;
    int64_t lo = max(rd.win_lo, i - a.window + 1), nwin = i - lo + 1;
    int64_t nv = a.window + a.n_sel, u_begin = split * per_split, u_end = min(nv, u_begin + per_split);
    { /* the first tile's ring rows (positions before pos0: written by earlier steps) asked of L2 while
       * the kernel before drains; a prefetch hands nothing back, so nothing stale can be read */
        int lines = (d + 31) >> 5;
        for (int x = tid; x < AT_KT * lines; x += AT_THREADS) {
            int64_t u = u_begin + x / lines;
            if (u < u_end && u < a.window && u < nwin && i - u < rd.pos0)
                asm volatile("prefetch.global.L2 [%0];\n" ::"l"(rd.ring + ((i - u) % rd.ring_rows) * rd.ld_ring + 32 * (x % lines)));
        }
        if (a.sel && rd.pool) /* the pool's page table, its lines shared among the row's blocks: a step's
                               * weights have pushed it out of L2, and each selected key waits on it */
            prefetch_pages(rd.pool, 0, (rd.pool_rows + (1 << K_PAGE_SHIFT) - 1) >> K_PAGE_SHIFT,
                           (blockIdx.y * gridDim.z + blockIdx.z) * AT_THREADS + tid, gridDim.y * gridDim.z * AT_THREADS);
    }
    pdl_begin();

    if (tid < AT_HG) {
        qrow[tid] = h0 + tid < a.heads ? a.q + r * a.ldq + (int64_t)(h0 + tid) * d : NULL;
        mh[tid] = split == 0 && h0 + tid < a.heads ? a.sink[h0 + tid] : -INFINITY;
        zh[tid] = split == 0 ? 1.0f : 0.0f;
    } else if (tid < AT_HG + AT_KT) {
        int64_t u = u_begin + tid - AT_HG;
        rowp[tid - AT_HG] = u < u_end ? key_row(a, rd, u, nwin) : NULL;
    }
    __syncthreads();
    stage_rows(qs, ldd, qrow, AT_HG, d, vec);
    stage_rows(ks, ldd, rowp, AT_KT, d, vec);
    cp_async_wait_all();
    __syncthreads();

    /* weighted sum: heads ph .. ph + 7, channels pc .. pc + 3 */
    int ph = (tid >> 7) * 8, pc = 4 * (tid & 127);
    float4 o[8];
#pragma unroll
    for (int hh = 0; hh < 8; hh++) o[hh] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    for (int64_t u0 = u_begin, t = 0; u0 < u_end; u0 += AT_KT, t ^= 1) {
        const float **rows = rowp + t * AT_KT, **next = rowp + (t ^ 1) * AT_KT;
        const float *kt = ks + t * AT_KT * ldd;
        bool more = u0 + AT_KT < u_end;
        if (more && tid < AT_KT) { /* the next tile's rows, read while this one is used */
            int64_t u = u0 + AT_KT + tid;
            next[tid] = u < u_end ? key_row(a, rd, u, nwin) : NULL;
        }
        { /* logits: heads 4 hb .. + 3 against keys 4 kb .. + 3; lane s sums the channels s + 16 i
           * in order and the lanes are added as the CPU's cpu_dot adds its 16 partial sums (the
           * same bits: products and sums rounded apart, no fused multiply-add) */
            int s = lane & 15, hb = warp >> 1, kb = ((warp & 1) << 1) | (lane >> 4), full = d & ~15;
            float acc[4][4];
#pragma unroll
            for (int x = 0; x < 4; x++)
#pragma unroll
                for (int y = 0; y < 4; y++) acc[x][y] = 0.0f;
            const float *qb = qs + 4 * hb * ldd, *kb4 = kt + 4 * kb * ldd;
#pragma unroll 4
            for (int c = s; c < full; c += 16) {
                float qv[4], kv[4];
#pragma unroll
                for (int x = 0; x < 4; x++) qv[x] = qb[x * ldd + c], kv[x] = kb4[x * ldd + c];
#pragma unroll
                for (int x = 0; x < 4; x++)
#pragma unroll
                    for (int y = 0; y < 4; y++) acc[x][y] = __fadd_rn(acc[x][y], __fmul_rn(qv[x], kv[y]));
            }
            float mine = 0.0f; /* lane s keeps entry s of the block */
#pragma unroll
            for (int x = 0; x < 4; x++)
#pragma unroll
                for (int y = 0; y < 4; y++) {
                    float v = acc[x][y];
                    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 8)); /* residues l and l + 8 */
                    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4)); /* ((0 + 4) + (1 + 5)) + ((2 + 6) + (3 + 7)) */
                    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
                    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
                    if (4 * x + y == s) mine = v;
                }
            int hh = 4 * hb + (s >> 2), kk = 4 * kb + (s & 3);
            float tail = 0.0f; /* the columns past the last whole 16 */
            for (int c = full; c < d; c++) tail = __fadd_rn(tail, __fmul_rn(qs[hh * ldd + c], kt[kk * ldd + c]));
            lp[hh * AT_KT + kk] = rows[kk] && h0 + hh < a.heads ? __fadd_rn(mine, tail) * a.scale : -INFINITY;
        }
        __syncthreads(); /* logits and the next tile's rows are in; every thread is done with that buffer */
        if (more) stage_rows(ks + (t ^ 1) * AT_KT * ldd, ldd, next, AT_KT, d, vec);
        { /* online softmax: thread (head, key), 16 lanes a head */
            int hh = tid >> 4, kk = tid & 15;
            float l = lp[hh * AT_KT + kk], mo = mh[hh], mx = fmaxf(mo, l);
#pragma unroll
            for (int m = 8; m; m >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
            float pv = l == -INFINITY ? 0.0f : expf(l - mx), zs = 0.0f;
            lp[hh * AT_KT + kk] = pv;
            __syncwarp();
            if (kk == 0) { /* the tile's sum in key order */
                for (int j = 0; j < AT_KT; j++) zs += lp[hh * AT_KT + j];
                float alpha = mx == -INFINITY ? 1.0f : expf(mo - mx);
                zh[hh] = zh[hh] * alpha + zs;
                mh[hh] = mx;
                al[hh] = alpha;
            }
        }
        __syncthreads();
        if (pc < dpad) { /* weighted sum, keys in order */
#pragma unroll
            for (int hh = 0; hh < 8; hh++) {
                float f = al[ph + hh];
                o[hh].x *= f, o[hh].y *= f, o[hh].z *= f, o[hh].w *= f;
            }
#pragma unroll
            for (int k4 = 0; k4 < AT_KT; k4 += 4) {
                float4 kv[4];
#pragma unroll
                for (int y = 0; y < 4; y++) kv[y] = *(const float4 *)(kt + (k4 + y) * ldd + pc);
#pragma unroll
                for (int hh = 0; hh < 8; hh++) {
                    float4 p = *(const float4 *)(lp + (ph + hh) * AT_KT + k4);
                    float pk[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
                    for (int y = 0; y < 4; y++) {
                        o[hh].x += pk[y] * kv[y].x, o[hh].y += pk[y] * kv[y].y;
                        o[hh].z += pk[y] * kv[y].z, o[hh].w += pk[y] * kv[y].w;
                    }
                }
            }
        }
        cp_async_wait_all();
        __syncthreads(); /* the next tile is in; this one's probabilities are used */
    }
#pragma unroll
    for (int hh = 0; hh < 8; hh++) {
        int h = h0 + ph + hh;
        if (h >= a.heads || pc >= d) continue;
        float v[4] = {o[hh].x, o[hh].y, o[hh].z, o[hh].w};
        float *dst = a.splits == 1 ? a.out + r * a.ldo + (int64_t)h * d : a.part_o + ((split * a.m + b) * a.heads + h) * (int64_t)d;
        float z = a.splits == 1 ? zh[ph + hh] : 1.0f;
#pragma unroll
        for (int x = 0; x < 4; x++)
            if (pc + x < d) dst[pc + x] = a.splits == 1 ? v[x] / z : v[x];
    }
    if (a.splits > 1 && tid < AT_HG && h0 + tid < a.heads) {
        float *ml = a.part_ml + ((split * a.m + b) * a.heads + h0 + tid) * 2;
        ml[0] = mh[tid], ml[1] = zh[tid];
    }
}

// Merges the key ranges: out = sum_s acc_s e^(m_s - M) / sum_s z_s e^(m_s - M). The ranges'
// (m, z) are read once into shared memory, each range's factor computed once, and a thread's
// loads of every range's channels are independent of one another (all in flight, 16 bytes
// each where d allows; the first AT_MERGE_PRE ranges' issued together with the (m, z) loads,
// so that the merge waits for memory once), added in range order.
#define AT_MAX_SPLITS 256
#define AT_MERGE_PRE 20  /* ranges whose partial sums a thread loads before the factors are known */
#define AT_MERGE_THREADS 128 /* >= 512 / 4 channel quads */

__global__ void attn_merge_kernel(attn_args_t a) {
    pdl_begin();
    __shared__ float f[AT_MAX_SPLITS], z[AT_MAX_SPLITS], red[2];
    int64_t r = blockIdx.x, row = a.rows ? a.rows[r].row : r;
    int h = blockIdx.y, S = a.splits, d = a.d;
    const float *ml = a.part_ml + (r * a.heads + h) * 2;
    int64_t mstride = a.m * a.heads * 2, ostride = a.m * a.heads * (int64_t)d;
    const float *po = a.part_o + (r * a.heads + h) * (int64_t)d;
    int c4 = threadIdx.x; /* d % 4 == 0: thread c4 takes channels 4 c4 .. + 3 (d / 4 <= blockDim.x) */
    bool mine = d % 4 == 0 && c4 < d / 4;
    float4 pre[AT_MERGE_PRE]; /* the first ranges' partial sums, loaded with (m, z), not after them */
#pragma unroll
    for (int s = 0; s < AT_MERGE_PRE; s++)
        if (mine && s < S) pre[s] = __ldcg((const float4 *)(po + s * ostride) + c4);
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
    float *out = a.out + row * a.ldo + (int64_t)h * d;
    if (d % 4 == 0) { /* a range without keys has factor 0 and zero partial sums: adds nothing */
        if (!mine) return;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int s = 0; s < AT_MERGE_PRE; s++)
            if (s < S) {
                float4 p = pre[s];
                float fs = f[s];
                v.x += p.x * fs, v.y += p.y * fs, v.z += p.z * fs, v.w += p.w * fs;
            }
#pragma unroll 8
        for (int s = AT_MERGE_PRE; s < S; s++) {
            float4 p = __ldcg((const float4 *)(po + s * ostride) + c4);
            float fs = f[s];
            v.x += p.x * fs, v.y += p.y * fs, v.z += p.z * fs, v.w += p.w * fs;
        }
        float o[4] = {v.x / Z, v.y / Z, v.z / Z, v.w / Z};
        int r0 = d - 2 * a.unrope_half; /* the first turned channel */
        if (a.unrope && 4 * c4 >= r0) { /* two whole pairs: r0 is even */
            int64_t pos = a.rows ? a.rows[r].pos : a.pos0 + r;
#pragma unroll
            for (int q = 0; q < 2; q++) {
                float c, sn;
                rope_angle(pos, __ldg(a.unrope + (4 * c4 + 2 * q - r0) / 2), 1, c, sn);
                rope_turn(o[2 * q], o[2 * q + 1], c, sn);
            }
        }
        out[4 * c4] = o[0], out[4 * c4 + 1] = o[1], out[4 * c4 + 2] = o[2], out[4 * c4 + 3] = o[3];
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
    if (a->d > 512 || a->d <= 0 || a->m > 0x7FFFFFFF || a->splits > AT_MAX_SPLITS) return cudaErrorInvalidValue;
    if (a->unrope && (a->splits < 2 || a->d % 4 || a->unrope_half < 0 || 2 * a->unrope_half > a->d)) return cudaErrorInvalidValue;
    size_t smem = k_attention_smem(a->d);
    static size_t raised;
    if (smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    int64_t nv = a->window + a->n_sel, per = ceil_div(ceil_div(nv, a->splits), AT_KT) * AT_KT;
    dim3 grid((unsigned)a->m, (unsigned)ceil_div(a->heads, AT_HG), (unsigned)a->splits);
    cudaError_t e = k_launch(attn_kernel, grid, AT_THREADS, smem, s, *a, per, a->vec);
    if (e != cudaSuccess || a->splits == 1) return e;
    return k_launch(attn_merge_kernel, dim3((unsigned)a->m, (unsigned)a->heads), AT_MERGE_THREADS, 0, s, *a);
}
